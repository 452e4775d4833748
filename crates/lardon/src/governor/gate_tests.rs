//! The gates of docs/DESIGN.md §4 step 7 and the pressure rules of §5: a load
//! gate that counts only foreign load, CPU PSI as a gate, pressure that
//! halves and regrows batches, invalid snapshots, defaults that fit.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::{
    DecisionKind, Estimate, HostProfile, Pressure, PressureLevel, Probe, ReasonCode, Snapshot, SwapCounters,
};

use super::tests::Rig;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

impl Rig {
    fn after(&self, step: Duration, edit: impl FnOnce(&mut Snapshot)) -> Snapshot {
        self.clock.advance(step);
        let mut s = self.probe.snapshot().unwrap();
        edit(&mut s);
        s
    }
}

fn one_cpu() -> Estimate {
    Estimate::builder().memory(100 * MIB).cpus(1).cpus_exact().build()
}

/// 16 GiB and 4 logical CPUs with 2 reserved: a 2-CPU compute pool.
fn two_cpu_pool() -> Rig {
    Rig::with(HostProfile::new(16 * GIB, 4), |p| p.cpu_reserve = 2)
}

// ---- Load gate: foreign load only ----------------------------------------

#[test]
fn lardons_own_running_tasks_are_never_the_load_gates_reason() {
    let r = two_cpu_pool();
    let a = r.gov.reserve(&one_cpu(), &r.snap_with(|_| {})).unwrap();
    let b = r.gov.reserve(&one_cpu(), &r.snap_with(|_| {})).unwrap();
    // Load 2.0 is exactly our two running 1-CPU tasks.
    let d = r.gov.decide(&one_cpu(), &r.snap_with(|s| s.load.one = 2.0));
    assert_eq!((d.kind(), d.reason()), (DecisionKind::Wait, ReasonCode::Cpu), "{d}");
    let reducible = Estimate::builder().memory(100 * MIB).cpu_millis(250).build();
    drop(b);
    // One CPU free: 2.0 − 1 granted = 1.0 foreign, below 0.9 × 2.
    let d = r.gov.decide(&reducible, &r.snap_with(|s| s.load.one = 2.0));
    assert!(d.is_granted(), "{d}");
    drop(a);
}

#[test]
fn two_foreign_busy_cpus_hold_the_next_task_on_cpu_load() {
    let r = two_cpu_pool();
    let d = r.gov.decide(&one_cpu(), &r.snap_with(|s| s.load.one = 2.0));
    assert_eq!((d.kind(), d.reason()), (DecisionKind::Wait, ReasonCode::CpuLoad), "{d}");
    for figure in [
        "foreign load 2.00",
        "− 0.00 CPUs of Lardon's own: its tasks and itself",
        "≥ 1.80",
        "0.9 × 2-CPU pool",
    ] {
        assert!(d.message().contains(figure), "{figure:?} not in {:?}", d.message());
    }
    // With one task of ours running, load 3.0 still has 2.0 foreign.
    let _a = r.gov.reserve(&one_cpu(), &r.snap_with(|_| {})).unwrap();
    let d = r.gov.decide(&one_cpu(), &r.snap_with(|s| s.load.one = 3.0));
    assert_eq!(d.reason(), ReasonCode::CpuLoad, "{d}");
    assert!(d.message().contains("− 1.00 CPUs of Lardon's own: its tasks and itself"), "{}", d.message());
}

#[test]
fn load_gate_threshold_is_the_ratio_times_the_pool_above_one_or_off() {
    let r = Rig::with(HostProfile::new(16 * GIB, 8), |p| p.max_load_ratio = Some(1.5));
    // Pool 4 (8 CPUs, 4 reserved): 1.5 × 4 = 6.
    assert!(r.gov.decide(&one_cpu(), &r.snap_with(|s| s.load.one = 5.99)).is_granted());
    assert_eq!(r.gov.decide(&one_cpu(), &r.snap_with(|s| s.load.one = 6.0)).reason(), ReasonCode::CpuLoad);
    let off = Rig::with(HostProfile::new(16 * GIB, 8), |p| p.max_load_ratio = None);
    assert!(off.gov.decide(&one_cpu(), &off.snap_with(|s| s.load.one = 1000.0)).is_granted());
}

#[test]
fn load_left_behind_by_our_finished_tasks_is_not_foreign() {
    let r = two_cpu_pool();
    let a = r.gov.reserve(&one_cpu(), &r.snap_with(|_| {})).unwrap();
    let b = r.gov.reserve(&one_cpu(), &r.snap_with(|_| {})).unwrap();
    // Five minutes of samples with both running: the kernel's load is 2.
    for _ in 0..300 {
        r.gov.observe(&r.after(Duration::from_secs(1), |s| s.load.one = 2.0));
    }
    drop((a, b));
    // Just after they end the 1-minute load still carries them.
    let d = r.gov.decide(&one_cpu(), &r.after(Duration::from_secs(1), |s| s.load.one = 1.97));
    assert!(d.is_granted(), "{d}");
    // A minute later, what is left is somebody else's.
    for _ in 0..600 {
        r.gov.observe(&r.after(Duration::from_secs(1), |s| s.load.one = 2.0));
    }
    let d = r.gov.decide(&one_cpu(), &r.after(Duration::from_secs(1), |s| s.load.one = 2.0));
    assert_eq!(d.reason(), ReasonCode::CpuLoad, "{d}");
}

#[test]
fn short_tasks_and_lardon_itself_are_not_foreign_load() {
    // A thousand one-millisecond tasks a second: no grant lives long, yet
    // they and the process starting them keep 1.7 CPUs busy, and the
    // kernel's load says 1.9. Five minutes of 10 ms samples.
    let r = two_cpu_pool();
    let mut cpu = Duration::ZERO;
    for _ in 0..30_000 {
        cpu += Duration::from_millis(17);
        r.gov.observe(&r.after(Duration::from_millis(10), |s| {
            s.load.one = 1.9;
            s.own_cpu = Some(cpu);
        }));
    }
    let d = r.gov.decide(
        &one_cpu(),
        &r.after(Duration::from_millis(10), |s| {
            s.load.one = 1.9;
            s.own_cpu = Some(cpu);
        }),
    );
    assert!(d.is_granted(), "{d}");
    // `resources` shows the share the gate left out.
    let own = r.gov.availability().own_load;
    assert!((own - 1.7).abs() < 0.05, "own load {own}");
    // The same load with no measured CPU of ours is somebody else's.
    let blind = two_cpu_pool();
    for _ in 0..30_000 {
        blind.gov.observe(&blind.after(Duration::from_millis(10), |s| s.load.one = 1.9));
    }
    let d = blind.gov.decide(&one_cpu(), &blind.after(Duration::from_millis(10), |s| s.load.one = 1.9));
    assert_eq!(d.reason(), ReasonCode::CpuLoad, "{d}");
}

// ---- CPU PSI is a gate, not a pressure signal ------------------------------

#[test]
fn cpu_psi_waits_with_its_figure_and_never_moves_pressure() {
    let r = Rig::with(HostProfile::new(16 * GIB, 8), |_| {});
    let e = Estimate::builder().memory(GIB).memory_per_item(100 * MIB).batch(1, 8).build();
    for _ in 0..10 {
        let d = r.gov.decide(&e, &r.snap_with(|s| s.pressure.cpu = Some(34.1)));
        assert_eq!((d.kind(), d.reason()), (DecisionKind::Wait, ReasonCode::CpuPressure), "{d}");
        assert_eq!(d.message(), "CPU PSI 34.1 ≥ 20");
    }
    assert_eq!(r.gov.pressure().0, PressureLevel::Green, "ten CPU-PSI samples are no signal");
    let d = r.gov.decide(&e, &r.snap_with(|_| {}));
    assert_eq!(d.contract().unwrap().batch, 8, "and no slow start afterwards");
}

#[test]
fn memory_psi_names_its_figure_in_the_wait_and_the_pressure_reason() {
    let r = Rig::with(HostProfile::new(16 * GIB, 8), |_| {});
    let d = r.gov.decide(&one_cpu(), &r.snap_with(|s| s.pressure.memory = Some(3.2)));
    assert_eq!(d.reason(), ReasonCode::MemoryPressure);
    assert_eq!(d.message(), "memory PSI 3.2 ≥ 1");
    assert_eq!(r.gov.pressure(), (PressureLevel::Yellow, "memory PSI 3.2 ≥ 1".to_owned()));
}

// ---- Pressure that means something ------------------------------------------

#[test]
fn batch_8_yellow_4_red_waits_green_1_2_4_8() {
    let r = Rig::with(HostProfile::new(64 * GIB, 8), |p| p.memory_caution = None);
    let e = Estimate::builder().memory_per_item(100 * MIB).batch(1, 8).build();
    let mut swapped = 0;
    let mut sample = |r: &Rig, swap: bool| {
        swapped += u64::from(swap);
        let out = swapped;
        r.snap_with(|s| s.swap = Some(SwapCounters { pages_in: 0, pages_out: out }))
    };
    // Each step: one host sample and one reservation (released at once).
    let run = |r: &Rig, s: Snapshot| match r.gov.reserve(&e, &s) {
        Ok(res) => format!("{}", res.contract().batch),
        Err(d) => d.reason().to_string(),
    };
    let mut seen = vec![run(&r, sample(&r, false))];
    seen.push(run(&r, sample(&r, true)));
    seen.push(run(&r, sample(&r, true)));
    // RED → YELLOW → GREEN takes 3 + 3 healthy samples; admission waits
    // on RED, and batches stay at 1 while YELLOW recovers.
    for _ in 0..6 {
        let _ = r.gov.decide(&e, &sample(&r, false));
    }
    assert_eq!(r.gov.pressure().0, PressureLevel::Green);
    // Then every 3rd healthy GREEN sample doubles the target.
    for _ in 0..4 {
        seen.push(run(&r, sample(&r, false)));
        let _ = r.gov.decide(&e, &sample(&r, false));
        let _ = r.gov.decide(&e, &sample(&r, false));
    }
    assert_eq!(seen, ["8", "4", "pressure_red", "1", "2", "4", "8"]);
    assert_eq!(r.gov.availability().slow_start, None, "8 no longer limits");
}

#[test]
fn yellow_never_halves_below_batch_min() {
    let r = Rig::with(HostProfile::new(64 * GIB, 8), |p| p.memory_caution = None);
    let e = Estimate::builder().memory_per_item(100 * MIB).batch(6, 8).build();
    let _a = r.gov.reserve(&e, &r.snap_with(|s| s.swap = Some(SwapCounters::default()))).unwrap();
    let d = r.gov.decide(&e, &r.snap_with(|s| s.swap = Some(SwapCounters { pages_in: 0, pages_out: 1 })));
    assert_eq!(r.gov.pressure().0, PressureLevel::Yellow);
    assert_eq!((d.kind(), d.contract().unwrap().batch), (DecisionKind::Admit, 6), "4 is below batch_min");
}

// ---- Invalid snapshots ----------------------------------------------------

#[test]
fn negative_or_non_finite_load_or_psi_waits_without_touching_pressure() {
    type Edit = fn(&mut Snapshot);
    let cases: [(&str, Edit); 8] = [
        ("load.one", |s| s.load.one = -1.0),
        ("load.one", |s| s.load.one = f64::NAN),
        ("load.five", |s| s.load.five = f64::INFINITY),
        ("load.fifteen", |s| s.load.fifteen = -0.5),
        ("pressure.cpu", |s| s.pressure.cpu = Some(f64::NAN)),
        ("pressure.memory", |s| s.pressure.memory = Some(-3.0)),
        ("pressure.memory", |s| s.pressure.memory = Some(f64::INFINITY)),
        ("pressure.io", |s| s.pressure.io = Some(f64::NEG_INFINITY)),
    ];
    for (field, edit) in cases {
        let r = Rig::with(HostProfile::new(16 * GIB, 8), |p| p.memory_caution = None);
        let _ = r.gov.decide(&one_cpu(), &r.snap_with(|_| {}));
        let generation = r.gov.generation();
        // Invalid *and* signalled (swap-out, emergency floor): still no observation.
        let bad = r.snap_with(|s| {
            edit(s);
            s.swap = Some(SwapCounters { pages_in: 0, pages_out: 50 });
            s.memory_available = MIB;
        });
        let d = r.gov.decide(&one_cpu(), &bad);
        assert_eq!((d.kind(), d.reason()), (DecisionKind::Wait, ReasonCode::InvalidSnapshot), "{field}: {d}");
        assert!(d.message().contains(field), "{field} not named in {:?}", d.message());
        assert_eq!(r.gov.pressure(), (PressureLevel::Green, String::new()), "{field}");
        assert_eq!(r.gov.generation(), generation, "{field}");
        assert_eq!(r.gov.reserve(&one_cpu(), &bad).unwrap_err().reason(), ReasonCode::InvalidSnapshot);
        // The next valid sample is the first to count.
        assert!(r.gov.decide(&one_cpu(), &r.snap_with(|_| {})).is_granted(), "{field}");
    }
    // Zero and unknown PSI are valid.
    let r = Rig::with(HostProfile::new(16 * GIB, 8), |_| {});
    let s = r.snap_with(|s| s.pressure = Pressure { cpu: None, memory: Some(0.0), io: None });
    assert!(r.gov.decide(&one_cpu(), &s).is_granted());
    // −0.0 and the largest finite figures are valid too (the fast check
    // compares bits, and −0.0's sign bit must send it to the exact check,
    // not to a WAIT). Gates off, so only validity decides.
    let r = Rig::with(HostProfile::new(16 * GIB, 8), |p| {
        p.max_load_ratio = None;
        (p.psi_cpu, p.psi_memory, p.psi_io) = (0.0, 0.0, 0.0);
    });
    for value in [-0.0, f64::MIN_POSITIVE / 2.0, f64::MAX] {
        let s = r.snap_with(|s| {
            (s.load.one, s.load.five, s.load.fifteen) = (value, value, value);
            s.pressure = Pressure { cpu: Some(value), memory: Some(value), io: Some(value) };
        });
        let d = r.gov.decide(&one_cpu(), &s);
        assert!(d.is_granted(), "{value:e} is a valid figure: {d}");
    }
}

proptest::proptest! {
    /// Any load and PSI figure: admitted exactly when every figure is
    /// finite and ≥ 0; otherwise `invalid_snapshot`, pressure untouched.
    #[test]
    fn only_finite_non_negative_load_and_psi_are_governed_on(
        load in proptest::num::f64::ANY,
        psi in proptest::option::of(proptest::num::f64::ANY),
    ) {
        // Gates off, so a valid snapshot always admits.
        let r = Rig::with(HostProfile::new(16 * GIB, 8), |p| {
            p.max_load_ratio = None;
            (p.psi_cpu, p.psi_memory, p.psi_io) = (0.0, 0.0, 0.0);
        });
        let s = r.snap_with(|s| {
            s.load.one = load;
            s.pressure.memory = psi;
        });
        let valid = load.is_finite() && load >= 0.0 && psi.is_none_or(|p| p.is_finite() && p >= 0.0);
        let d = r.gov.decide(&one_cpu(), &s);
        proptest::prop_assert_eq!(d.is_granted(), valid, "{}", d);
        if !valid {
            proptest::prop_assert_eq!(d.reason(), ReasonCode::InvalidSnapshot);
        }
        proptest::prop_assert_eq!(r.gov.pressure().0, PressureLevel::Green);
    }
}

// ---- Defaults that fit the machine --------------------------------------------

#[test]
fn an_8_gib_laptop_with_3_5_gib_available_runs_a_1_gib_task_under_the_default_policy() {
    let r = Rig::with(HostProfile::new(8 * GIB, 4), |_| {});
    let task = Estimate::builder().memory(GIB).build();
    for _ in 0..5 {
        let d = r.gov.decide(&task, &r.snap_with(|s| s.memory_available = 3 * GIB + GIB / 2));
        assert_eq!((d.kind(), d.reason()), (DecisionKind::Admit, ReasonCode::Admitted), "{d}");
    }
    assert_eq!(r.gov.pressure().0, PressureLevel::Green);
}

#[test]
fn a_512_gib_server_does_not_keep_a_quarter_of_its_ram_idle() {
    let r = Rig::with(HostProfile::new(512 * GIB, 64), |_| {});
    assert_eq!(r.gov.availability().memory_reserve, 4 * GIB);
    let d = r.gov.decide(
        &Estimate::builder().memory(500 * GIB).build(),
        &r.snap_with(|s| s.memory_available = 506 * GIB),
    );
    assert_eq!(d.kind(), DecisionKind::Admit, "{d}");
    assert_eq!(r.gov.pressure().0, PressureLevel::Green);
}

#[test]
fn the_default_cpu_reserve_is_no_cage_on_a_small_host_and_others_load_holds_admission() {
    use crate::{FakeClock, FakeProbe, Governor, HostPolicy, MonoTime};
    use std::sync::Arc;
    // A quiet 2-CPU host under the default policy (docs/DESIGN.md §3): the
    // compute pool is both CPUs, so eight tasks of a quarter CPU each run
    // at once (the old default kept one CPU back and pinned them all to
    // the other).
    let profile = HostProfile::new(16 * GIB, 2);
    let policy = HostPolicy::default_for(&profile);
    assert_eq!((policy.cpu_reserve, policy.compute_cpus(&profile)), (0, 2));
    let clock = Arc::new(FakeClock::new(MonoTime(1_000_000_000)));
    let probe = Arc::new(FakeProbe::new(profile).stamped_by(clock.clone()));
    let gov = Governor::with_clock(policy, probe.clone(), clock.clone()).unwrap();
    let quarter = Estimate::builder().memory(100 * MIB).cpu_millis(250).cpus_exact().build();
    let snap = |load: f64| {
        clock.advance(Duration::from_millis(1));
        let mut s = probe.snapshot().unwrap();
        s.load.one = load;
        s
    };
    // Others' load appears (1.8 of the 2 CPUs, none of it Lardon's):
    // nothing new starts until it falls.
    let d = gov.decide(&quarter, &snap(1.8));
    assert_eq!((d.kind(), d.reason()), (DecisionKind::Wait, ReasonCode::CpuLoad), "{d}");
    // Quiet again: eight quarter-CPU tasks at once, over both CPUs.
    let held: Vec<_> =
        (0..8).map(|i| gov.reserve(&quarter, &snap(0.0)).unwrap_or_else(|d| panic!("{i}: {d}"))).collect();
    assert_eq!(gov.availability().cpu_pool_millis, 2000);
    assert_eq!(gov.availability().cpu_reserved_millis, 2000);
    drop(held);
}
