//! Admission rules of docs/DESIGN.md §4–§6, one test per rule, driven by the
//! fake probe and the fake clock.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use crate::{
    Alternative, CgroupSample, Class, Clock, DecisionKind, Envelope, Estimate, FakeClock, FakeProbe,
    Governor, GpuSample, HostPolicy, HostProfile, MonoTime, PolicyError, PressureLevel, ReasonCode,
    ReleaseError, Snapshot, SwapCounters,
};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// A Governor on a fake probe and clock (shared with the gate tests).
pub(super) struct Rig {
    pub(super) clock: Arc<FakeClock>,
    pub(super) probe: Arc<FakeProbe>,
    pub(super) gov: Governor,
}

impl Rig {
    pub(super) fn with(profile: HostProfile, policy: impl FnOnce(&mut HostPolicy)) -> Rig {
        let clock = Arc::new(FakeClock::new(MonoTime(1_000_000_000)));
        let probe = Arc::new(FakeProbe::new(profile.clone()).stamped_by(clock.clone()));
        let mut p = HostPolicy::default_for(&profile);
        // The pools these tests are written against (4 of 8 CPUs, n − 1 on
        // 4 or fewer), whatever the default reserve.
        p.cpu_reserve = profile.logical_cpus.saturating_sub(1).min(4);
        policy(&mut p);
        let gov = Governor::with_clock(p, probe.clone(), clock.clone()).unwrap();
        Rig { clock, probe, gov }
    }

    /// 16 GiB, 8 CPUs (pool 4), a custom policy: reserve 2 GiB, floor 1 GiB.
    fn new() -> Rig {
        Rig::with(HostProfile::new(16 * GIB, 8), |p| {
            p.memory_reserve = 2 * GIB;
            p.emergency_floor = GIB;
            p.memory_caution = None;
        })
    }

    /// A fresh healthy sample, one tick later.
    fn snap(&self) -> Snapshot {
        self.clock.advance(Duration::from_millis(1));
        self.probe.snapshot_now()
    }

    pub(super) fn snap_with(&self, edit: impl FnOnce(&mut Snapshot)) -> Snapshot {
        let mut s = self.snap();
        edit(&mut s);
        s
    }
}

trait SnapshotNow {
    fn snapshot_now(&self) -> Snapshot;
}

impl SnapshotNow for FakeProbe {
    fn snapshot_now(&self) -> Snapshot {
        crate::Probe::snapshot(self).unwrap()
    }
}

fn est(mem: u64, per_item: u64, min: u64, max: u64) -> Estimate {
    Estimate::builder().memory(mem).memory_per_item(per_item).batch(min, max).build()
}

// ---- Step 1: invalid estimate ------------------------------------------

#[test]
fn invalid_estimate_is_rejected_with_the_field() {
    let r = Rig::new();
    let d = r.gov.decide(&Estimate::builder().batch(0, 1).build(), &r.snap());
    assert_eq!((d.kind(), d.reason()), (DecisionKind::Reject, ReasonCode::InvalidEstimate));
    assert!(d.message().contains("batch_min"), "{}", d.message());
    let d = r.gov.decide(&Estimate::builder().gpu_memory(1).build(), &r.snap());
    assert_eq!(d.reason(), ReasonCode::InvalidEstimate);
}

// ---- Step 2: freshness ---------------------------------------------------

#[test]
fn snapshot_exactly_1000ms_old_admits_and_one_ns_more_waits_without_touching_pressure() {
    // To see it fail: feed a stale sample to the pressure state (in
    // `admission::observe`, call `ledger.observe_sample(snap)` before the
    // stale WAIT returns), or skip observing a sample exactly at the limit
    // (`&& age < MAX_SNAPSHOT_AGE` beside `is_new_sample`): the swap
    // baseline check at the end then sees no swap activity.
    let r = Rig::new();
    let s = r.snap_with(|s| s.swap = Some(SwapCounters { pages_in: 0, pages_out: 0 }));
    r.clock.advance(Duration::from_millis(1000));
    let d = r.gov.decide(&est(GIB, 0, 1, 1), &s);
    assert_eq!(d.kind(), DecisionKind::Admit, "{d}");

    // A signalled snapshot that is stale must not be fed to the pressure state.
    let mut stale = r.snap();
    stale.swap = Some(SwapCounters { pages_in: 0, pages_out: 999 });
    stale.pressure.memory = Some(50.0);
    r.clock.advance(Duration::from_millis(1000) + Duration::from_nanos(1));
    let g1 = r.gov.generation();
    let d = r.gov.decide(&est(GIB, 0, 1, 1), &stale);
    assert_eq!((d.kind(), d.reason()), (DecisionKind::Wait, ReasonCode::StaleSnapshot));
    assert_eq!(r.gov.pressure().0, PressureLevel::Green);
    assert_eq!(r.gov.generation(), g1);
    // The rule, through the swap baseline: the sample exactly 1000 ms old
    // was observed (its counters are the baseline), the stale one was not
    // (else its 999 pages out would be the baseline and this fresh sample
    // with the same counters would show no swap activity).
    let fresh = r.snap_with(|s| s.swap = Some(SwapCounters { pages_in: 0, pages_out: 999 }));
    r.gov.decide(&est(GIB, 0, 1, 1), &fresh);
    let (level, why) = r.gov.pressure();
    assert_eq!(level, PressureLevel::Yellow, "swap since the 1000 ms old sample: {why}");
    assert!(why.contains("swap"), "{why}");
}

#[test]
fn snapshot_from_the_future_waits() {
    let r = Rig::new();
    let mut s = r.snap();
    s.captured_at = r.clock.now() + Duration::from_nanos(1);
    let d = r.gov.decide(&est(GIB, 0, 1, 1), &s);
    assert_eq!(d.reason(), ReasonCode::StaleSnapshot);
    assert!(d.message().contains("future"));
}

// ---- Step 3: pressure ----------------------------------------------------

#[test]
fn red_pressure_waits_and_is_counted_per_sample_not_per_attempt() {
    let r = Rig::new();
    r.gov.decide(&est(GIB, 0, 1, 1), &r.snap()); // swap baseline
    let s1 = r.snap_with(|s| s.swap = Some(SwapCounters { pages_in: 0, pages_out: 1 }));
    for _ in 0..10 {
        // Ten attempts against one sample: still one observation.
        r.gov.decide(&est(GIB, 0, 1, 1), &s1);
    }
    assert_eq!(r.gov.pressure().0, PressureLevel::Yellow);
    let s2 = r.snap_with(|s| s.swap = Some(SwapCounters { pages_in: 0, pages_out: 2 }));
    let d = r.gov.decide(&est(GIB, 0, 1, 1), &s2);
    assert_eq!((d.kind(), d.reason()), (DecisionKind::Wait, ReasonCode::PressureRed));
}

#[test]
fn emergency_floor_is_red_at_once() {
    let r = Rig::new();
    let d = r.gov.decide(&est(MIB, 0, 1, 1), &r.snap_with(|s| s.memory_available = GIB));
    assert_eq!(d.reason(), ReasonCode::PressureRed);
}

#[test]
fn yellow_halves_the_batch_and_slow_start_ramps_back() {
    let r = Rig::new();
    let e = est(0, 100 * MIB, 1, 8);
    // A batch of 8 granted (and ended): entering YELLOW halves what was
    // granted since GREEN.
    assert_eq!(r.gov.reserve(&e, &r.snap()).unwrap().contract().batch, 8, "cold start is not slow");
    let mut out = 0;
    let mut swap = |r: &Rig, bump: bool| {
        if bump {
            out += 1;
        }
        let o = out;
        r.snap_with(|s| s.swap = Some(SwapCounters { pages_in: 0, pages_out: o }))
    };
    let d = r.gov.decide(&e, &swap(&r, true));
    assert_eq!(r.gov.pressure().0, PressureLevel::Yellow);
    // Entering YELLOW halves the target (docs/DESIGN.md §5).
    assert_eq!(d.contract().unwrap().batch, 4);
    assert_eq!(d.kind(), DecisionKind::Admit, "a lowered target is the new normal");
    assert_eq!(r.gov.decide(&e, &swap(&r, true)).reason(), ReasonCode::PressureRed);
    for _ in 0..6 {
        r.gov.decide(&e, &swap(&r, false));
    }
    assert_eq!(r.gov.pressure().0, PressureLevel::Green);
    let mut batches = Vec::new();
    for _ in 0..9 {
        batches.push(r.gov.decide(&e, &swap(&r, false)).contract().unwrap().batch);
    }
    assert_eq!(batches, vec![1, 1, 2, 2, 2, 4, 4, 4, 8]);
}

// ---- Step 4–6: GPU, unified memory, impossible ---------------------------

#[test]
fn gpu_on_a_host_without_one_is_rejected() {
    let r = Rig::new();
    let d = r.gov.decide(&Estimate::builder().gpu_slots(1).build(), &r.snap());
    assert_eq!((d.kind(), d.reason()), (DecisionKind::Reject, ReasonCode::NoGpu));
}

#[test]
fn unified_gpu_bytes_are_charged_to_host_ram() {
    let r = Rig::with(HostProfile::new(16 * GIB, 8).with_gpu(None, true), |p| {
        p.memory_reserve = 2 * GIB;
        p.emergency_floor = GIB;
        p.memory_caution = None;
    });
    let e = Estimate::builder().memory(GIB).gpu_memory(4 * GIB).gpu_slots(1).build();
    let res = r.gov.reserve(&e, &r.snap()).unwrap();
    assert_eq!(res.contract().gpu_devices, vec![0]);
    assert_eq!(r.gov.availability().memory_reserved, 5 * GIB);
    // 16 − 2 − 5 = 9 GiB left: a 10 GiB unified request waits on memory.
    let big = Estimate::builder().gpu_memory(10 * GIB).gpu_slots(1).build();
    let d = r.gov.decide(&big, &r.snap());
    assert!(d.reason() == ReasonCode::Memory || d.reason() == ReasonCode::GpuSlot, "{d}");
}

#[test]
fn impossible_on_the_idle_host_is_rejected() {
    let r = Rig::new();
    // 16 GiB − 2 GiB reserve = 14 GiB: 15 GiB can never fit.
    let d = r.gov.decide(&est(15 * GIB, 0, 1, 1), &r.snap());
    assert_eq!((d.kind(), d.reason()), (DecisionKind::Reject, ReasonCode::Impossible));
    let d = r.gov.decide(&est(GIB, GIB, 14, 20), &r.snap());
    assert_eq!(d.reason(), ReasonCode::Impossible, "batch_min of 14 × 1 GiB + 1 GiB cannot fit");
    let d = r.gov.decide(&est(GIB, GIB, 13, 20), &r.snap());
    assert!(d.is_granted());
    let exact = Estimate::builder().cpus(5).cpus_exact().build();
    assert_eq!(r.gov.decide(&exact, &r.snap()).reason(), ReasonCode::Impossible, "pool is 4 CPUs");
    let reducible = Estimate::builder().cpus(5).build();
    let d = r.gov.decide(&reducible, &r.snap());
    assert_eq!((d.kind(), d.reason()), (DecisionKind::ReduceBatch, ReasonCode::ResourcesReduced));
    assert_eq!(d.contract().unwrap().cpu_millis, 4000);
}

#[test]
fn gpu_too_small_for_batch_min_is_impossible() {
    let r = Rig::with(HostProfile::new(64 * GIB, 8).with_gpu(Some(8 * GIB), false), |_| {});
    let d = r.gov.decide(&Estimate::builder().gpu_memory(8 * GIB).gpu_slots(1).build(), &r.snap());
    assert_eq!(d.reason(), ReasonCode::Impossible, "8 GiB − 1 GiB reserve < 8 GiB");
}

// ---- Step 7: load and PSI ------------------------------------------------

#[test]
fn load_and_psi_gates_wait() {
    let r = Rig::new();
    let e = est(GIB, 0, 1, 1);
    // 0.9 × the 4-CPU pool (not the 8 logical CPUs), nothing of ours running.
    let d = r.gov.decide(&e, &r.snap_with(|s| s.load.one = 0.9 * 4.0));
    assert_eq!(d.reason(), ReasonCode::CpuLoad);
    assert!(r.gov.decide(&e, &r.snap_with(|s| s.load.one = 3.59)).is_granted());
    assert_eq!(
        r.gov.decide(&e, &r.snap_with(|s| s.pressure.cpu = Some(20.0))).reason(),
        ReasonCode::CpuPressure
    );
    let r = Rig::new();
    assert_eq!(
        r.gov.decide(&e, &r.snap_with(|s| s.pressure.memory = Some(1.0))).reason(),
        ReasonCode::MemoryPressure
    );
    let r = Rig::new();
    let io_psi = |s: &mut Snapshot| s.pressure.io = Some(80.0);
    assert!(r.gov.decide(&e, &r.snap_with(io_psi)).is_granted(), "IO PSI only gates IO-slot work");
    assert!(r.gov.decide(&e, &r.snap_with(io_psi)).is_granted(), "and is no pressure signal");
    assert_eq!(r.gov.pressure().0, PressureLevel::Green);
    let io = Estimate::builder().io_slots(1).build();
    assert_eq!(r.gov.decide(&io, &r.snap_with(io_psi)).reason(), ReasonCode::IoPressure);
}

#[test]
fn unknown_psi_is_not_a_gate() {
    let r = Rig::new();
    let s = r.snap_with(|s| s.pressure = Default::default());
    assert!(r.gov.decide(&est(GIB, 0, 1, 1), &s).is_granted());
}

// ---- Step 8: memory available -------------------------------------------

#[test]
fn memory_is_the_smaller_of_static_and_host_figures() {
    let r = Rig::new();
    // Static: 14 GiB free. Host: MemAvailable 6 GiB − 2 GiB reserve = 4 GiB.
    let d = r.gov.decide(&est(0, GIB, 1, 100), &r.snap_with(|s| s.memory_available = 6 * GIB));
    assert_eq!(d.contract().unwrap().batch, 4);
    assert_eq!(d.kind(), DecisionKind::ReduceBatch);
    assert_eq!(d.reason(), ReasonCode::BatchReduced);
}

#[test]
fn reported_usage_is_not_subtracted_twice() {
    let r = Rig::new();
    let a = r.gov.reserve(&est(4 * GIB, 0, 1, 1), &r.snap()).unwrap();
    // The task has materialised 3 of its 4 GiB: MemAvailable dropped by 3.
    let after = |r: &Rig| r.snap_with(|s| s.memory_available = 13 * GIB);
    let d = r.gov.decide(&est(0, GIB, 1, 100), &after(&r));
    assert_eq!(d.contract().unwrap().batch, 7, "13 − 2 reserve − 4 unmaterialised");
    a.report_usage(3 * GIB).unwrap();
    let d = r.gov.decide(&est(0, GIB, 1, 100), &after(&r));
    assert_eq!(d.contract().unwrap().batch, 10, "13 − 2 reserve − 1 unmaterialised");
    // The static side still bounds it: 14 − 4 reserved = 10.
    a.report_usage(4 * GIB).unwrap();
    let d = r.gov.decide(&est(0, GIB, 1, 100), &r.snap_with(|s| s.memory_available = 16 * GIB));
    assert_eq!(d.contract().unwrap().batch, 10);
}

#[test]
fn cgroup_limit_lowers_available_memory() {
    let r = Rig::new();
    let s = r.snap_with(|s| {
        s.cgroup = Some(CgroupSample {
            memory_limit: Some(8 * GIB),
            memory_usage: Some(GIB),
            cpu_quota_millis: Some(2000),
            cpuset_cpus: None,
        })
    });
    let d = r.gov.decide(&Estimate::builder().memory_per_item(GIB).batch(1, 100).cpus(4).build(), &s);
    let c = d.contract().unwrap();
    assert_eq!(c.batch, 5, "min(16, 8 − 1) − 2 reserve");
    assert_eq!(c.cpu_millis, 2000, "cpu.max quota of 2 CPUs");
}

#[test]
fn gpu_memory_unknown_waits_and_devices_are_separate_budgets() {
    let profile =
        HostProfile::new(64 * GIB, 16).with_gpu(Some(16 * GIB), false).with_gpu(Some(16 * GIB), false);
    let r = Rig::with(profile, |_| {});
    let e = Estimate::builder().gpu_memory(GIB).gpu_memory_per_item(GIB).batch(1, 100).gpu_slots(1).build();
    let unknown = r
        .snap_with(|s| s.gpus = vec![GpuSample { index: 0, free: None }, GpuSample { index: 1, free: None }]);
    assert_eq!(r.gov.decide(&e, &unknown).reason(), ReasonCode::GpuMemoryUnknown);
    let s = r.snap_with(|s| {
        s.gpus =
            vec![GpuSample { index: 0, free: Some(10 * GIB) }, GpuSample { index: 1, free: Some(16 * GIB) }]
    });
    let a = r.gov.reserve(&e, &s).unwrap();
    // Device 1 has the most room: 16 − 2 reserve = 14 GiB → 13 items.
    assert_eq!((a.contract().gpu_devices.clone(), a.contract().batch), (vec![1], 13));
    let b = r.gov.reserve(&e, &r.snap_with(|x| x.gpus = s.gpus.clone())).unwrap();
    assert_eq!(b.contract().gpu_devices, vec![0], "device 1's only slot is taken");
    assert_eq!(b.contract().batch, 7, "10 − 2 reserve = 8 GiB → 7 items");
    let d = r.gov.decide(&e, &r.snap_with(|x| x.gpus = s.gpus.clone()));
    assert_eq!((d.kind(), d.reason()), (DecisionKind::Wait, ReasonCode::GpuMemory));
    drop(a);
    let two = Estimate::builder().gpu_memory(GIB).batch(1, 1).gpu_slots(2).build();
    let c = r.gov.reserve(&two, &r.snap_with(|x| x.gpus = s.gpus.clone())).unwrap();
    assert_eq!(c.contract().gpu_devices, vec![1]);
    assert_eq!(c.kind(), DecisionKind::ReduceBatch, "one GPU of two");
}

// ---- Step 9: adaptive target --------------------------------------------

#[test]
fn history_lowers_the_target_and_still_admits() {
    let r = Rig::new();
    let e = Estimate::builder().memory_per_item(100 * MIB).batch(1, 8).class("import").build();
    r.gov.record_batch(&Class::new("import"), 8, Duration::from_secs(1), Some(1600 * MIB));
    let d = r.gov.decide(&e, &r.snap());
    assert_eq!((d.kind(), d.contract().unwrap().batch), (DecisionKind::Admit, 4));
    r.gov.record_batch(&Class::new("other"), 8, Duration::from_secs(1), Some(16000 * MIB));
    assert_eq!(r.gov.decide(&e, &r.snap()).contract().unwrap().batch, 4, "classes are independent");
}

#[test]
fn below_batch_min_waits_on_memory() {
    let r = Rig::new();
    let _a = r.gov.reserve(&est(12 * GIB, 0, 1, 1), &r.snap()).unwrap();
    let d = r.gov.decide(&est(0, GIB, 3, 8), &r.snap());
    assert_eq!((d.kind(), d.reason()), (DecisionKind::Wait, ReasonCode::Memory));
    assert!(d.message().contains("available"), "{}", d.message());
}

// ---- Step 10–11: CPUs, slots, grant ---------------------------------------

#[test]
fn cpus_and_slots() {
    let r = Rig::new();
    let a = r.gov.reserve(&Estimate::builder().cpus(3).build(), &r.snap()).unwrap();
    let d = r.gov.decide(&Estimate::builder().cpus(2).build(), &r.snap());
    assert_eq!((d.kind(), d.contract().unwrap().cpu_millis), (DecisionKind::ReduceBatch, 1000));
    let exact = Estimate::builder().cpus(2).cpus_exact().build();
    assert_eq!(r.gov.decide(&exact, &r.snap()).reason(), ReasonCode::Cpu);
    let quarter = Estimate::builder().cpu_millis(250).build();
    let q = r.gov.reserve(&quarter, &r.snap()).unwrap();
    assert_eq!(q.kind(), DecisionKind::Admit);
    // 3.25 CPUs held: 0.75 free is not a whole CPU for a 1-CPU task...
    assert_eq!(r.gov.decide(&Estimate::builder().cpus(1).build(), &r.snap()).reason(), ReasonCode::Cpu);
    // ...but a quarter-CPU task still fits.
    assert!(r.gov.decide(&quarter, &r.snap()).is_granted(), "750 m still free");
    drop((a, q));
    let io = Estimate::builder().io_slots(1).build();
    let i = r.gov.reserve(&io, &r.snap()).unwrap();
    assert_eq!(r.gov.decide(&io, &r.snap()).reason(), ReasonCode::IoSlot);
    drop(i);
    assert_eq!(
        r.gov.decide(&Estimate::builder().scratch(MIB).build(), &r.snap()).reason(),
        ReasonCode::Scratch
    );
}

#[test]
fn max_running_caps_reservations() {
    let r = Rig::with(HostProfile::new(16 * GIB, 8), |p| p.max_running = Some(1));
    let a = r.gov.reserve(&est(MIB, 0, 1, 1), &r.snap()).unwrap();
    assert_eq!(r.gov.decide(&est(MIB, 0, 1, 1), &r.snap()).reason(), ReasonCode::MaxRunning);
    drop(a);
    assert!(r.gov.decide(&est(MIB, 0, 1, 1), &r.snap()).is_granted());
}

// ---- Generation, release, policy -----------------------------------------

#[test]
fn wait_and_reject_leave_the_generation_while_reserve_release_record_bump_it() {
    let r = Rig::new();
    let s = r.snap();
    r.gov.observe(&s);
    let g = r.gov.generation();
    assert_eq!(r.gov.decide(&est(15 * GIB, 0, 1, 1), &s).kind(), DecisionKind::Reject);
    assert_eq!(r.gov.generation(), g);
    let _hold = r.gov.reserve(&est(13 * GIB, 0, 1, 1), &s).unwrap();
    let g = r.gov.generation();
    assert_eq!(r.gov.reserve(&est(2 * GIB, 0, 1, 1), &s).unwrap_err().kind(), DecisionKind::Wait);
    assert_eq!(r.gov.generation(), g, "WAIT does not move the generation");
    let a = r.gov.reserve(&est(GIB / 2, 0, 1, 1), &s).unwrap();
    assert_eq!(r.gov.generation(), g + 1);
    a.release().unwrap();
    assert_eq!(r.gov.generation(), g + 2);
    assert!(!r.gov.record_batch(&Class::default(), 1, Duration::from_secs(1), None));
    assert_eq!(r.gov.generation(), g + 2, "a record that carries nothing leaves the generation");
    assert!(r.gov.record_batch(&Class::default(), 1, Duration::from_secs(1), Some(MIB)));
    assert_eq!(r.gov.generation(), g + 3);
}

#[test]
fn double_release_is_refused_and_changes_nothing() {
    let r = Rig::new();
    let a = r.gov.reserve(&est(GIB, 0, 1, 1), &r.snap()).unwrap();
    let id = a.id();
    r.gov.release_id(id).unwrap();
    let g = r.gov.generation();
    let before = r.gov.availability();
    assert!(!a.is_valid());
    assert!(matches!(a.release(), Err(ReleaseError::NotActive(_))));
    assert!(matches!(r.gov.release_id(id), Err(ReleaseError::NotActive(_))));
    assert_eq!(r.gov.generation(), g);
    assert_eq!(r.gov.availability(), before);
}

#[test]
fn foreign_reservations_are_handed_back() {
    let r1 = Rig::new();
    let r2 = Rig::new();
    let a = r1.gov.reserve(&est(GIB, 0, 1, 1), &r1.snap()).unwrap();
    let Err(ReleaseError::Foreign(a)) = r2.gov.release(a) else { panic!("must refuse") };
    assert!(a.is_valid());
    assert!(matches!(r2.gov.release_id(a.id()), Err(ReleaseError::NotActive(_))));
    assert!(a.is_valid());
    r1.gov.release(*a).unwrap();
    assert_eq!(r1.gov.availability().reservations, 0);
}

#[test]
fn drop_releases_and_released_reservations_do_not_accumulate() {
    let r = Rig::new();
    for _ in 0..1000 {
        let a = r.gov.reserve(&est(GIB, 0, 1, 1), &r.snap()).unwrap();
        assert!(a.is_valid());
    }
    let av = r.gov.availability();
    assert_eq!((av.reservations, av.memory_reserved, av.cpu_reserved_millis), (0, 0, 0));
}

/// Spins (yielding) until `cond` holds; fails at a deadline. A bound on
/// a condition, never a sleep that orders events.
fn eventually(what: &str, cond: impl Fn() -> bool) {
    let start = std::time::Instant::now();
    while !cond() {
        assert!(start.elapsed() < Duration::from_secs(20), "timed out: {what}");
        std::thread::yield_now();
    }
}

/// The waiter is seen asleep (counted under the Governor's lock) and still
/// not returned before the release; the release then wakes it.
///
/// To see it fail, drop the `self.changed.notify_all()` call from
/// `Shared::publish`: the waiter stays asleep and the bounded wait for its
/// answer fails.
#[test]
fn a_waiter_is_woken_by_a_release() {
    let r = Rig::new();
    let a = r.gov.reserve(&est(GIB, 0, 1, 1), &r.snap()).unwrap();
    let seen = r.gov.generation();
    let gov = r.gov.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || tx.send(gov.wait_for_change(seen, None)));
    eventually("the waiter blocks", || r.gov.blocked_waiters() == 1);
    assert!(rx.try_recv().is_err(), "the waiter returned with nothing changed");
    a.release().unwrap();
    let woke = rx.recv_timeout(Duration::from_secs(20)).expect("the release woke the waiter");
    assert_eq!(woke, seen + 1);
    waiter.join().unwrap().unwrap();
    assert_eq!(r.gov.blocked_waiters(), 0);
    assert_eq!(
        r.gov.wait_for_change(seen, Some(Duration::ZERO)),
        seen + 1,
        "already changed: returns at once"
    );
    let now = r.gov.generation();
    assert_eq!(r.gov.wait_for_change(now, Some(Duration::from_millis(1))), now, "times out unchanged");
}

#[test]
fn set_policy_refuses_what_no_longer_covers_reservations() {
    let r = Rig::new();
    let a = r.gov.reserve(&est(10 * GIB, 0, 1, 1), &r.snap()).unwrap();
    let g = r.gov.generation();
    let mut p = r.gov.policy();
    p.memory_reserve = 8 * GIB;
    assert!(matches!(r.gov.set_policy(p.clone()), Err(PolicyError::DoesNotCover(_))));
    assert_eq!(r.gov.generation(), g);
    let mut bad = r.gov.policy();
    bad.io_slots = 0;
    assert_eq!(r.gov.set_policy(bad), Err(PolicyError::IoSlots));
    drop(a);
    let g = r.gov.generation();
    r.gov.set_policy(p).unwrap();
    assert_eq!(r.gov.generation(), g + 1);
    assert_eq!(r.gov.policy().memory_reserve, 8 * GIB);
}

#[test]
fn new_samples_bump_the_generation_only_when_budgets_change() {
    let r = Rig::new();
    r.gov.observe(&r.snap());
    let g = r.gov.generation();
    r.gov.observe(&r.snap());
    assert_eq!(r.gov.generation(), g, "same figures: no change");
    r.gov.observe(&r.snap_with(|s| s.memory_available = 10 * GIB));
    assert_eq!(r.gov.generation(), g + 1);
}

#[test]
fn probe_failure_is_a_wait_not_a_crash() {
    let r = Rig::new();
    r.probe.fail_with(crate::ProbeError::Unreadable {
        source_name: "/proc/meminfo".into(),
        message: "gone".into(),
    });
    let d = r.gov.reserve_available(&est(GIB, 0, 1, 1)).unwrap_err();
    assert_eq!((d.kind(), d.reason()), (DecisionKind::Wait, ReasonCode::ProbeFailed));
    assert!(d.message().contains("/proc/meminfo"));
}

// ---- Envelopes -------------------------------------------------------------

#[test]
fn envelope_ramps_cpus_on_a_28_cpu_pool() {
    let r = Rig::with(HostProfile::new(64 * GIB, 32), |_| {});
    let alt = Alternative::new("cpu", Estimate::builder().cpus(28).class("sift").build()).ramp_cpus();
    let env = Envelope::new(vec![alt]).unwrap();
    let mut seen = Vec::new();
    for _ in 0..14 {
        let res = r.gov.reserve_envelope(&env, &r.snap()).unwrap();
        let cpus = res.contract().whole_cpus();
        seen.push(cpus);
        // Throughput proportional to CPUs: 100 items per CPU-second.
        r.gov.record_sequence(res.contract(), 100 * u64::from(cpus), Duration::from_secs(1));
    }
    assert_eq!(seen, vec![1, 1, 2, 2, 4, 4, 8, 8, 16, 16, 28, 28, 28, 28]);
}

#[test]
fn envelope_prefers_the_first_alternative_and_falls_back() {
    let profile = HostProfile::new(32 * GIB, 8).with_gpu(Some(8 * GIB), false);
    let r = Rig::with(profile, |_| {});
    let gpu =
        Alternative::new("gpu", Estimate::builder().gpu_memory(2 * GIB).gpu_slots(1).class("match").build());
    let cpu = Alternative::new("cpu", Estimate::builder().cpus(2).class("match").build());
    let env = Envelope::new(vec![gpu, cpu]).unwrap();
    let a = r.gov.reserve_envelope(&env, &r.snap()).unwrap();
    assert_eq!(a.contract().alternative, Some(0));
    let b = r.gov.reserve_envelope(&env, &r.snap()).unwrap();
    assert_eq!(b.contract().alternative, Some(1), "GPU slot taken: CPU fallback");
    let _c = r.gov.reserve_envelope(&env, &r.snap()).unwrap();
    let d = r.gov.decide_envelope(&env, &r.snap());
    assert_eq!((d.kind(), d.reason()), (DecisionKind::Wait, ReasonCode::AllAlternativesWait));
    assert!(d.message().contains("gpu:") && d.message().contains("cpu:"), "{}", d.message());
}

#[test]
fn envelope_under_pressure_starts_at_minimum_and_resets_the_ramp() {
    let r = Rig::new();
    let alt = Alternative::new("cpu", Estimate::builder().cpus(4).class("x").build()).ramp_cpus();
    let env = Envelope::new(vec![alt]).unwrap();
    for _ in 0..4 {
        let res = r.gov.reserve_envelope(&env, &r.snap()).unwrap();
        let cpus = res.contract().whole_cpus();
        r.gov.record_sequence(res.contract(), u64::from(cpus) * 100, Duration::from_secs(1));
    }
    assert_eq!(r.gov.ramp_limits(&Class::new("x"), 0).unwrap().cpus, 4);
    let d = r.gov.decide_envelope(&env, &r.snap_with(|s| s.pressure.memory = Some(5.0)));
    assert_eq!(d.kind(), DecisionKind::Wait, "memory PSI gates admission");
    // YELLOW remains after the signal; admission now starts at the minimum.
    let res = r.gov.reserve_envelope(&env, &r.snap()).unwrap();
    assert_eq!((res.kind(), res.reason()), (DecisionKind::ReduceBatch, ReasonCode::PressureDecrease));
    assert_eq!(res.contract().whole_cpus(), 1);
    assert!(
        !r.gov.record_sequence(res.contract(), 100, Duration::from_secs(1)),
        "evidence under pressure ignored"
    );
}

#[test]
fn availability_reports_budgets() {
    let r = Rig::new();
    let _a = r.gov.reserve(&Estimate::builder().memory(GIB).cpus(2).io_slots(1).build(), &r.snap()).unwrap();
    let av = r.gov.availability();
    assert_eq!(av.memory_total, 16 * GIB);
    assert_eq!(av.memory_reserve, 2 * GIB);
    assert_eq!(av.memory_reserved, GIB);
    assert_eq!(av.memory_available, 13 * GIB);
    assert_eq!((av.cpu_pool_millis, av.cpu_reserved_millis, av.cpu_available_millis), (4000, 2000, 2000));
    assert_eq!((av.io_slots, av.io_reserved), (1, 1));
    assert_eq!(av.pressure, PressureLevel::Green);
}
