//! The gates of DESIGN.md §4 step 7 and the pressure rules of §5: a load
//! gate that counts only foreign load, CPU PSI as a gate, pressure that
//! halves and regrows batches, invalid snapshots, defaults that fit.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use crate::{
    DecisionKind, Estimate, FakeClock, FakeProbe, Governor, HostPolicy, HostProfile, MonoTime, Probe,
    ReasonCode, Snapshot,
};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

struct Rig {
    clock: Arc<FakeClock>,
    probe: Arc<FakeProbe>,
    gov: Governor,
}

impl Rig {
    fn with(profile: HostProfile, policy: impl FnOnce(&mut HostPolicy)) -> Rig {
        let clock = Arc::new(FakeClock::new(MonoTime(1_000_000_000)));
        let probe = Arc::new(FakeProbe::new(profile.clone()).stamped_by(clock.clone()));
        let mut p = HostPolicy::default_for(&profile);
        policy(&mut p);
        let gov = Governor::with_clock(p, probe.clone(), clock.clone()).unwrap();
        Rig { clock, probe, gov }
    }

    /// A fresh sample `step` later, edited.
    fn after(&self, step: Duration, edit: impl FnOnce(&mut Snapshot)) -> Snapshot {
        self.clock.advance(step);
        let mut s = self.probe.snapshot().unwrap();
        edit(&mut s);
        s
    }

    fn snap_with(&self, edit: impl FnOnce(&mut Snapshot)) -> Snapshot {
        self.after(Duration::from_millis(1), edit)
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
    assert_eq!((d.kind, d.reason), (DecisionKind::Wait, ReasonCode::Cpu), "{d}");
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
    assert_eq!((d.kind, d.reason), (DecisionKind::Wait, ReasonCode::CpuLoad), "{d}");
    for figure in ["foreign load 2.00", "− 0.00 CPUs of Lardon's own tasks", "≥ 1.80", "0.9 × 2-CPU pool"]
    {
        assert!(d.message.contains(figure), "{figure:?} not in {:?}", d.message);
    }
    // With one task of ours running, load 3.0 still has 2.0 foreign.
    let _a = r.gov.reserve(&one_cpu(), &r.snap_with(|_| {})).unwrap();
    let d = r.gov.decide(&one_cpu(), &r.snap_with(|s| s.load.one = 3.0));
    assert_eq!(d.reason, ReasonCode::CpuLoad, "{d}");
    assert!(d.message.contains("− 1.00 CPUs of Lardon's own tasks"), "{}", d.message);
}

#[test]
fn load_gate_threshold_is_the_ratio_times_the_pool_above_one_or_off() {
    let r = Rig::with(HostProfile::new(16 * GIB, 8), |p| p.max_load_ratio = Some(1.5));
    // Pool 4 (8 CPUs, 4 reserved): 1.5 × 4 = 6.
    assert!(r.gov.decide(&one_cpu(), &r.snap_with(|s| s.load.one = 5.99)).is_granted());
    assert_eq!(r.gov.decide(&one_cpu(), &r.snap_with(|s| s.load.one = 6.0)).reason, ReasonCode::CpuLoad);
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
    assert_eq!(d.reason, ReasonCode::CpuLoad, "{d}");
}
