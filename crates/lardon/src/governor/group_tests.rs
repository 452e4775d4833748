//! Group limits (docs/DESIGN.md §4, "Group limits"): sub-budgets the
//! ledger accounts with every reservation of a group, checked by the full
//! order (`admission::group_room`) and the fast path alike.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::admission::evaluate_in_order;
use super::fast;
use super::tests::Rig;
use crate::{DecisionKind, Estimate, GroupLimits, GroupName, HostProfile, ReasonCode};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

fn rig() -> Rig {
    Rig::with(HostProfile::new(16 * GIB, 8), |p| {
        p.memory_reserve = 2 * GIB;
        p.emergency_floor = GIB;
        p.memory_caution = None;
    })
}

fn render() -> GroupName {
    GroupName::new("render").unwrap()
}

fn in_group(mem: u64, group: &GroupName) -> Estimate {
    Estimate::builder().memory(mem).group(group.clone()).build()
}

/// What the fast path and the full order say for `est` now, on the last
/// observed sample.
fn both(r: &Rig, est: &Estimate) -> (bool, crate::Decision) {
    let snap = crate::Probe::snapshot(&*r.probe).unwrap();
    r.gov.observe(&snap);
    let now = crate::Clock::now(&*r.clock);
    let mut ledger = r.gov.shared.lock();
    let running = ledger.reservations();
    let fast = fast::check(&ledger, est, &snap, now, running, None).is_some();
    let full = evaluate_in_order(&mut ledger, est, &snap, now, running, None);
    (fast, full)
}

#[test]
fn a_group_at_its_running_limit_waits_in_both_paths_with_the_figures() {
    let r = rig();
    let g = render();
    r.gov.set_group_limits(&g, GroupLimits { max_running: Some(2), ..GroupLimits::default() });
    let a = r.gov.reserve_available(&in_group(MIB, &g)).unwrap();
    let _b = r.gov.reserve_available(&in_group(MIB, &g)).unwrap();
    let (fast, full) = both(&r, &in_group(MIB, &g));
    assert!(!fast, "the fast path granted a task of a group at its limit");
    assert_eq!((full.kind(), full.reason()), (DecisionKind::Wait, ReasonCode::GroupLimit));
    assert_eq!(full.message(), "group render holds 2 of its 2 running tasks");
    assert_eq!(r.gov.reserve_available(&in_group(MIB, &g)).unwrap_err().reason(), ReasonCode::GroupLimit);
    // Other groups and ungrouped tasks are not held by it.
    let other = GroupName::new("other").unwrap();
    assert!(both(&r, &in_group(MIB, &other)).0);
    assert!(both(&r, &Estimate::builder().memory(MIB).build()).0);
    // A release gives the group's share back: the fast path grants again.
    drop(a);
    let (fast, full) = both(&r, &in_group(MIB, &g));
    assert!(fast);
    assert_eq!(full.kind(), DecisionKind::Admit);
    let usage = r.gov.group_usage();
    assert_eq!((usage.len(), usage[0].running, usage[0].memory), (1, 1, MIB));
}

#[test]
fn a_group_memory_limit_caps_the_batch_and_waits_with_the_figures() {
    let r = rig();
    let g = render();
    r.gov.set_group_limits(&g, GroupLimits { memory: Some(4 * GIB), ..GroupLimits::default() });
    let _held = r.gov.reserve_available(&in_group(3 * GIB, &g)).unwrap();
    let (fast, full) = both(&r, &in_group(2 * GIB, &g));
    assert!(!fast);
    assert_eq!((full.kind(), full.reason()), (DecisionKind::Wait, ReasonCode::GroupLimit));
    assert_eq!(
        full.message(),
        "group render holds 3.0 GiB of its 4.0 GiB memory; needs 2.0 GiB for 1 item(s)"
    );
    // A batched task gets the batch the group's room allows (1 GiB: 4
    // items of 256 MiB), not the host's (11 GiB free); the fast path,
    // which grants only the full target, leaves it to the full order.
    let batched = Estimate::builder().memory_per_item(256 * MIB).batch(1, 16).group(g.clone()).build();
    let (fast, full) = both(&r, &batched);
    assert!(!fast);
    assert_eq!((full.kind(), full.contract().map(|c| c.batch)), (DecisionKind::ReduceBatch, Some(4)));
    // The same task outside the group gets its full batch.
    let free = Estimate::builder().memory_per_item(256 * MIB).batch(1, 16).build();
    assert_eq!(both(&r, &free).1.contract().map(|c| c.batch), Some(16));
}

#[test]
fn a_group_cpu_limit_waits_or_reduces_the_cpus() {
    let r = rig();
    let g = render();
    r.gov.set_group_limits(&g, GroupLimits { cpu_millis: Some(2000), ..GroupLimits::default() });
    let _one =
        r.gov.reserve_available(&Estimate::builder().cpu_millis(1000).group(g.clone()).build()).unwrap();
    let exact = Estimate::builder().cpu_millis(2000).cpus_exact().group(g.clone()).build();
    let (fast, full) = both(&r, &exact);
    assert!(!fast);
    assert_eq!((full.kind(), full.reason()), (DecisionKind::Wait, ReasonCode::GroupLimit));
    assert_eq!(full.message(), "group render holds 1 of its 2 CPUs; needs 2");
    let reducible = Estimate::builder().cpu_millis(2000).group(g.clone()).build();
    let (fast, full) = both(&r, &reducible);
    assert!(!fast);
    assert_eq!(full.kind(), DecisionKind::ReduceBatch);
    assert_eq!(full.contract().map(|c| c.cpu_millis), Some(1000));
}

#[test]
fn removing_a_limit_moves_the_generation_and_admits() {
    let r = rig();
    let g = render();
    r.gov.set_group_limits(&g, GroupLimits { max_running: Some(1), ..GroupLimits::default() });
    let _a = r.gov.reserve_available(&in_group(MIB, &g)).unwrap();
    assert_eq!(both(&r, &in_group(MIB, &g)).1.reason(), ReasonCode::GroupLimit);
    let seen = r.gov.generation();
    r.gov.set_group_limits(&g, GroupLimits::default());
    assert!(r.gov.generation() > seen, "waiters must look again");
    assert!(both(&r, &in_group(MIB, &g)).0);
    // The group's holdings are still accounted (a new limit counts them).
    r.gov.set_group_limits(&g, GroupLimits { max_running: Some(1), ..GroupLimits::default() });
    assert_eq!(both(&r, &in_group(MIB, &g)).1.reason(), ReasonCode::GroupLimit);
}
