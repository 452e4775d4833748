//! Batch choice while memory is contended (docs/DESIGN.md §4 step 9) and
//! the caution band's planned memory (§5), through the Governor.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::{DecisionKind, Estimate, HostProfile, ReasonCode};

use super::packing::CONTENTION_WINDOW;
use super::tests::Rig;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// 1 GiB fixed + 100 MiB per item, batch 1..64: 11 items hold the fixed part.
fn batched() -> Estimate {
    Estimate::builder().memory(GIB).memory_per_item(100 * MIB).batch(1, 64).build()
}

fn big(bytes: u64) -> Estimate {
    Estimate::builder().memory(bytes).build()
}

/// 16 GiB, 8 CPUs, custom policy (reserve 2 GiB, no caution band): a
/// 14 GiB budget and no pressure from packing.
fn rig() -> Rig {
    Rig::with(HostProfile::new(16 * GIB, 8), |p| {
        p.memory_reserve = 2 * GIB;
        p.emergency_floor = GIB;
        p.memory_caution = None;
    })
}

#[test]
fn while_memory_is_contended_a_batch_holds_about_its_fixed_part_in_items() {
    let r = rig();
    let granted = |r: &Rig| {
        let d = r.gov.decide(&batched(), &r.snap_with(|_| {}));
        (d.kind(), d.contract().map(|c| c.batch))
    };
    // Nothing waits: the full target.
    assert_eq!(granted(&r), (DecisionKind::Admit, Some(64)));
    assert_eq!(r.gov.batch_target(&batched()), 64);
    // 8 GiB held; a 10 GiB task waits for memory.
    let _held = r.gov.reserve(&big(8 * GIB), &r.snap_with(|_| {})).unwrap();
    let d = r.gov.decide(&big(10 * GIB), &r.snap_with(|_| {}));
    assert_eq!((d.kind(), d.reason()), (DecisionKind::Wait, ReasonCode::Memory), "{d}");
    // 6 GiB would hold (6 − 1) GiB / 100 MiB = 51 items; contended, the
    // batch stops at ceil(1 GiB / 100 MiB) = 11, which is its target.
    assert_eq!(r.gov.batch_target(&batched()), 11);
    assert_eq!(granted(&r), (DecisionKind::Admit, Some(11)));
    // A second after the last WAIT for memory, batches grow back.
    r.clock.advance(CONTENTION_WINDOW);
    assert_eq!(granted(&r), (DecisionKind::ReduceBatch, Some(51)));
    assert_eq!(r.gov.batch_target(&batched()), 64);
}

#[test]
fn only_a_wait_for_memory_contends_and_only_batched_work_with_a_fixed_part_is_capped() {
    let r = rig();
    // A task waiting for CPUs (4 exact CPUs of a 4-CPU pool while one is
    // granted) says nothing about memory.
    let one_cpu = Estimate::builder().memory(MIB).cpus(1).cpus_exact().build();
    let _cpu = r.gov.reserve(&one_cpu, &r.snap_with(|_| {})).unwrap();
    let four_cpus = Estimate::builder().memory(MIB).cpus(4).cpus_exact().build();
    let d = r.gov.decide(&four_cpus, &r.snap_with(|_| {}));
    assert_eq!((d.kind(), d.reason()), (DecisionKind::Wait, ReasonCode::Cpu), "{d}");
    assert_eq!(r.gov.batch_target(&batched()), 64);
    // Now memory is contended.
    let _held = r.gov.reserve(&big(8 * GIB), &r.snap_with(|_| {})).unwrap();
    assert_eq!(r.gov.decide(&big(10 * GIB), &r.snap_with(|_| {})).reason(), ReasonCode::Memory);
    assert_eq!(r.gov.batch_target(&batched()), 11);
    // No per-item memory, no fixed memory, or nothing to reduce: uncapped.
    let free_items = Estimate::builder().memory(GIB).batch(1, 64).build();
    assert_eq!(r.gov.batch_target(&free_items), 64);
    let no_fixed = Estimate::builder().memory_per_item(100 * MIB).batch(1, 64).build();
    assert_eq!(r.gov.batch_target(&no_fixed), 64);
    let fixed_batch = Estimate::builder().memory(GIB).memory_per_item(100 * MIB).batch(32, 32).build();
    assert_eq!(r.gov.batch_target(&fixed_batch), 32);
    // batch_min is a floor: 12 ≥ 11.
    let at_least_12 = Estimate::builder().memory(GIB).memory_per_item(100 * MIB).batch(12, 64).build();
    assert_eq!(r.gov.batch_target(&at_least_12), 12);
}

#[test]
fn the_cap_uses_the_learned_per_item_cost() {
    use crate::{Class, RunOutcome, RunRecord};
    let r = rig();
    // The class measured 200 MiB per item (a batch of 8 peaking at
    // 1 GiB + 1600 MiB): contended, ceil(1 GiB / 200 MiB) = 6.
    let e = Estimate::builder().memory(GIB).memory_per_item(100 * MIB).batch(1, 64).class("heavy").build();
    let peak = GIB + 8 * 200 * MIB;
    r.gov.record_run(
        &Class::new("heavy"),
        RunRecord::batch(8, Duration::from_secs(1), RunOutcome::Completed { peak: Some(peak) }),
    );
    assert_eq!(r.gov.batch_target(&e), 32, "uncontended: the history target 64 × 100 / 200");
    let _held = r.gov.reserve(&big(8 * GIB), &r.snap_with(|_| {})).unwrap();
    assert_eq!(r.gov.decide(&big(10 * GIB), &r.snap_with(|_| {})).reason(), ReasonCode::Memory);
    assert_eq!(r.gov.batch_target(&e), 6);
    let c = r.gov.decide(&e, &r.snap_with(|_| {})).contract().cloned().unwrap();
    assert_eq!((c.batch, c.memory), (6, GIB + 6 * 200 * MIB), "granted at the learned size");
}

#[test]
fn the_cap_lifts_as_soon_as_the_waiter_is_granted() {
    let r = rig();
    let held = r.gov.reserve(&big(8 * GIB), &r.snap_with(|_| {})).unwrap();
    assert_eq!(r.gov.decide(&big(10 * GIB), &r.snap_with(|_| {})).reason(), ReasonCode::Memory);
    assert_eq!(r.gov.batch_target(&batched()), 11);
    // Memory comes back and the waiter is admitted: nobody waits any more,
    // so the next batched task gets its full target within the same second.
    drop(held);
    let _waiter = r.gov.reserve(&big(10 * GIB), &r.snap_with(|_| {})).unwrap();
    assert_eq!(r.gov.batch_target(&batched()), 64);
    // Another estimate's WAIT is its own: a second waiter keeps it contended.
    assert_eq!(r.gov.decide(&big(5 * GIB), &r.snap_with(|_| {})).reason(), ReasonCode::Memory);
    assert_eq!(r.gov.batch_target(&batched()), 11);
}

/// `batched()` of class `long`, whose one measured batch matched its
/// declaration (a proven class), with `left` items left.
fn proven(r: &Rig, left: Option<u64>) -> Estimate {
    use crate::{Class, RunOutcome, RunRecord};
    r.gov.record_run(
        &Class::new("long"),
        RunRecord::batch(8, Duration::from_secs(1), RunOutcome::Completed { peak: Some(GIB + 800 * MIB) }),
    );
    let b = Estimate::builder().memory(GIB).memory_per_item(100 * MIB).batch(1, 64).class("long");
    match left {
        Some(n) => b.items_left(n).build(),
        None => b.build(),
    }
}

#[test]
fn while_contended_a_proven_task_with_many_items_left_keeps_large_batches() {
    let r = rig();
    let long = proven(&r, Some(640));
    let _held = r.gov.reserve(&big(8 * GIB), &r.snap_with(|_| {})).unwrap();
    assert_eq!(r.gov.decide(&big(10 * GIB), &r.snap_with(|_| {})).reason(), ReasonCode::Memory);
    // 640 items left: at least 64 per sequence, over the contended cap of 11.
    assert_eq!(r.gov.batch_target(&long), 64);
    let c = r.gov.decide(&long, &r.snap_with(|_| {})).contract().cloned().unwrap();
    assert_eq!(c.batch, 51, "the target, within the 6 GiB free");
    // 300 left: 30. Near its end (50 left: a floor of 5) the cap applies.
    assert_eq!(r.gov.batch_target(&long.with_items_left(300)), 30);
    assert_eq!(r.gov.batch_target(&long.with_items_left(50)), 11);
    // Items left unknown, or a class with no measured run: the cap.
    assert_eq!(r.gov.batch_target(&proven(&r, None)), 11);
    assert_eq!(r.gov.batch_target(&batched().with_items_left(640)), 11);
}

#[test]
fn the_critical_floor_is_not_halved_by_yellow_nor_lifts_the_next_halving() {
    use crate::{PressureLevel, SwapCounters};
    let r = rig();
    let long = proven(&r, Some(640));
    let mut out = 0;
    let mut sample = |bump: bool| {
        out += u64::from(bump);
        let o = out;
        r.snap_with(|s| s.swap = Some(SwapCounters { pages_in: 0, pages_out: o }))
    };
    // The baseline sample, with a batch of 64 granted (and ended).
    assert_eq!(r.gov.reserve(&batched(), &sample(false)).unwrap().contract().batch, 64);
    r.gov.observe(&sample(true));
    assert_eq!(r.gov.pressure().0, PressureLevel::Yellow);
    // YELLOW halved the target for everyone but the critical floor.
    assert_eq!(r.gov.batch_target(&batched()), 32);
    assert_eq!(r.gov.batch_target(&long), 64);
    for _ in 0..3 {
        r.gov.observe(&sample(false));
    }
    assert_eq!(r.gov.pressure().0, PressureLevel::Green);
    assert_eq!(r.gov.batch_target(&batched()), 32, "GREEN starts from the halved target");
    // A floor grant of 64 above the target of 32 is noted as 32: the next
    // YELLOW halves 32, not 64.
    let granted = r.gov.reserve(&long, &sample(false)).unwrap();
    assert_eq!(granted.contract().batch, 64);
    drop(granted);
    r.gov.observe(&sample(true));
    assert_eq!(r.gov.pressure().0, PressureLevel::Yellow);
    assert_eq!(r.gov.batch_target(&batched()), 16);
}

/// A class "slivers" declaring 1 GiB + 100 MiB per item that ran batches of
/// 8 and 16 items in 9 s and 13 s: 5 s per sequence + 0.5 s per item, so
/// its least memory × time per item is at sqrt(1024 × 5 ÷ (100 × 0.5)) ≈ 10.
fn timed_class(r: &Rig, sizes: &[(u64, u64)]) -> Estimate {
    use crate::{Class, RunOutcome, RunRecord};
    for &(items, secs) in sizes {
        let peak = GIB + items * 100 * MIB;
        r.gov.record_run(
            &Class::new("slivers"),
            RunRecord::batch(items, Duration::from_secs(secs), RunOutcome::Completed { peak: Some(peak) }),
        );
    }
    Estimate::builder().memory(GIB).memory_per_item(100 * MIB).batch(1, 64).class("slivers").build()
}

#[test]
fn a_sliver_below_the_least_memory_time_batch_waits_while_our_own_memory_will_come_back() {
    let r = rig();
    let e = timed_class(&r, &[(8, 9), (16, 13)]);
    assert_eq!(r.gov.learned(&e).and_then(|l| l.times).map(|t| t.fixed), Some(Duration::from_secs(5)));
    // 12.5 of the 14 GiB budget held by our own task: 1.5 GiB fits 5 items,
    // half the best batch. It waits for memory, and says why.
    let held = r.gov.reserve(&big(12 * GIB + GIB / 2), &r.snap_with(|_| {})).unwrap();
    let d = r.gov.decide(&e, &r.snap_with(|_| {}));
    assert_eq!((d.kind(), d.reason()), (DecisionKind::Wait, ReasonCode::Memory), "{d}");
    assert!(d.to_string().contains("below the 10 whose memory × time per item is least"), "{d}");
    // 2 GiB fits 10 items: the best batch is no sliver.
    drop(held);
    let held = r.gov.reserve(&big(12 * GIB), &r.snap_with(|_| {})).unwrap();
    let d = r.gov.decide(&e, &r.snap_with(|_| {}));
    assert_eq!((d.kind(), d.contract().map(|c| c.batch)), (DecisionKind::ReduceBatch, Some(10)), "{d}");
    // A task with 5 items left needs no more than 5: not a sliver either.
    drop(held);
    let _held = r.gov.reserve(&big(12 * GIB + GIB / 2), &r.snap_with(|_| {})).unwrap();
    let d = r.gov.decide(&e.with_items_left(5), &r.snap_with(|_| {}));
    assert_eq!((d.kind(), d.contract().map(|c| c.batch)), (DecisionKind::ReduceBatch, Some(5)), "{d}");
}

#[test]
fn a_sliver_is_granted_when_nothing_of_ours_will_come_back_or_the_times_are_unknown() {
    let r = rig();
    // Foreign use leaves 1.5 GiB of the budget and we hold nothing: waiting
    // would wait for nothing, so 5 items are granted.
    let e = timed_class(&r, &[(8, 9), (16, 13)]);
    let foreign = |s: &mut crate::Snapshot| s.memory_available = 3 * GIB + GIB / 2;
    let d = r.gov.decide(&e, &r.snap_with(foreign));
    assert_eq!((d.kind(), d.contract().map(|c| c.batch)), (DecisionKind::ReduceBatch, Some(5)), "{d}");
    // One batch size recorded: the times are not known, nothing is a sliver.
    let r = rig();
    let e = timed_class(&r, &[(8, 9), (8, 9)]);
    assert_eq!(r.gov.learned(&e).and_then(|l| l.times), None);
    let _held = r.gov.reserve(&big(12 * GIB + GIB / 2), &r.snap_with(|_| {})).unwrap();
    let d = r.gov.decide(&e, &r.snap_with(|_| {}));
    assert_eq!((d.kind(), d.contract().map(|c| c.batch)), (DecisionKind::ReduceBatch, Some(5)), "{d}");
}

/// The default policy's caution band (docs/DESIGN.md §5): 16 GiB, reserve
/// 2 GiB, band up to 3 GiB of MemAvailable.
fn banded() -> Rig {
    Rig::with(HostProfile::new(16 * GIB, 8), |p| {
        p.memory_reserve = 2 * GIB;
        p.emergency_floor = GIB;
        p.memory_caution = Some(3 * GIB);
    })
}

#[test]
fn the_caution_band_alone_does_not_halve_a_proven_class() {
    use crate::{PressureLevel, SwapCounters};
    let r = banded();
    let long = proven(&r, None);
    let sample = |available: u64, out: u64| {
        r.snap_with(|s| {
            s.memory_available = available;
            s.swap = Some(SwapCounters { pages_in: 0, pages_out: out });
        })
    };
    // A batch of 64 granted while GREEN.
    assert_eq!(r.gov.decide(&batched(), &sample(16 * GIB, 0)).contract().unwrap().batch, 64);
    let granted = r.gov.reserve(&batched(), &sample(16 * GIB, 0)).unwrap();
    drop(granted);
    // The band alone: YELLOW; the unproven class is halved, the proven one
    // keeps its history target.
    r.gov.observe(&sample(2 * GIB + GIB / 2, 0));
    assert_eq!(r.gov.pressure().0, PressureLevel::Yellow);
    assert_eq!(r.gov.batch_target(&batched()), 32);
    assert_eq!(r.gov.batch_target(&long), 64, "a measured class is not halved by the band alone");
    // A swap signal: the proven class is halved too, and stays so in the band.
    r.gov.observe(&sample(2 * GIB + GIB / 2, 1));
    assert_eq!(r.gov.pressure().0, PressureLevel::Yellow);
    assert_eq!(r.gov.batch_target(&long), 32, "swap still halves");
    r.gov.observe(&sample(2 * GIB + GIB / 2, 1));
    assert_eq!(r.gov.batch_target(&long), 32, "the band does not lift a signalled YELLOW");
}
