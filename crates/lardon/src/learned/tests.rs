//! The sizing rules of `learned.rs`, on a bare history.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use super::{Declared, ItemTimes, Source, size};
use crate::estimate::Class;
use crate::history::{History, RunOutcome, RunRecord};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const BUDGET: u64 = 61 * GIB;

fn declared(fixed: u64, per_item: u64, min: u64, max: u64) -> Declared {
    Declared { fixed, per_item, batch_min: min, batch_max: max }
}

fn completed(peak: u64) -> RunOutcome {
    RunOutcome::Completed { peak: Some(peak) }
}

fn killed(limit: u64) -> RunOutcome {
    RunOutcome::KilledAtLimit { limit }
}

fn sized(h: &History, c: &Class, d: Declared) -> super::Learned {
    size(h.class(c), d, BUDGET)
}

#[test]
fn worst_batch_lowers_the_target_then_ages_out() {
    let mut h = History::default();
    let c = Class::new("import");
    let d = declared(0, 100 * MIB, 1, 8);
    assert_eq!(sized(&h, &c, d).batch_target, 8);
    h.record(&c, &RunRecord::batch(8, Duration::ZERO, completed(1600 * MIB)));
    let s = sized(&h, &c, d);
    assert_eq!((s.batch_target, s.per_item), (4, 200 * MIB));
    for _ in 0..7 {
        h.record(&c, &RunRecord::batch(4, Duration::ZERO, completed(400 * MIB)));
        assert_eq!(sized(&h, &c, d).batch_target, 4, "the worst sample still counts");
    }
    h.record(&c, &RunRecord::batch(4, Duration::ZERO, completed(400 * MIB)));
    let s = sized(&h, &c, d);
    assert_eq!((s.batch_target, s.per_item), (8, 100 * MIB), "aged out after 8 newer samples");
}

#[test]
fn declared_fixed_memory_is_not_charged_to_items() {
    let mut h = History::default();
    let c = Class::new("batched");
    let d = declared(GIB, 100 * MIB, 1, 8);
    // 1 GiB fixed + 100 MiB × 4 items, exactly as declared.
    h.record(&c, &RunRecord::batch(4, Duration::ZERO, completed(GIB + 400 * MIB)));
    let s = sized(&h, &c, d);
    assert_eq!((s.batch_target, s.per_item, s.fixed), (8, 100 * MIB, GIB), "an honest task keeps its sizes");
    // A real overrun of the per-item part shrinks the target and raises the size.
    h.record(&c, &RunRecord::batch(4, Duration::ZERO, completed(GIB + 800 * MIB)));
    let s = sized(&h, &c, d);
    assert_eq!((s.batch_target, s.per_item), (4, 200 * MIB));
    assert_eq!(s.memory_for(4), GIB + 800 * MIB, "grant = fixed + batch × learned per item");
}

#[test]
fn clamped_to_batch_min_and_no_per_item_estimate_keeps_the_target() {
    let mut h = History::default();
    let c = Class::new("big");
    h.record(&c, &RunRecord::batch(8, Duration::ZERO, completed(8 * GIB)));
    assert_eq!(sized(&h, &c, declared(0, 100 * MIB, 4, 8)).batch_target, 4);
    let s = sized(&h, &c, declared(0, 0, 1, 8));
    assert_eq!((s.batch_target, s.per_item), (8, GIB), "no declared per-item cost: sized, not re-targeted");
}

#[test]
fn unbatched_class_learns_its_fixed_size_from_the_worst_run() {
    let mut h = History::default();
    let c = Class::new("liar");
    let d = declared(200 * MIB, 0, 1, 1);
    for peak in [900 * MIB, GIB, 700 * MIB] {
        h.record(&c, &RunRecord::unbatched(Duration::ZERO, completed(peak)));
    }
    let s = sized(&h, &c, d);
    assert_eq!((s.fixed, s.samples), (GIB, 3));
    assert_eq!(s.learned_fixed.unwrap().source, Source::MeasuredPeak { run: 2, items: 0, peak: GIB });
    assert_eq!(s.memory_for(1), GIB, "an unbatched grant is its learned size");
    // Lighter than declared: the declaration stands.
    let s = sized(&h, &c, declared(2 * GIB, 0, 1, 1));
    assert_eq!(s.fixed, 2 * GIB);
}

#[test]
fn a_kill_grows_the_estimate_geometrically_until_a_run_completes() {
    let mut h = History::default();
    let c = Class::new("liar");
    let d = declared(200 * MIB, 0, 1, 1);
    // Killed at 284 MiB (200 MiB + slack): the next estimate is ≥ 568 MiB.
    h.record(&c, &RunRecord::unbatched(Duration::ZERO, killed(284 * MIB)));
    let s = sized(&h, &c, d);
    assert!(s.fixed >= 568 * MIB, "{}", s.fixed);
    assert_eq!(s.samples, 0, "the kill limit is not a sample");
    let bound = Source::LowerBound { run: 1, items: 0, limit: 284 * MIB };
    assert_eq!((s.learned_fixed.unwrap().source, s.lower_bound), (bound, Some(bound)));
    assert!(bound.to_string().contains("lower bound after kill at 284"), "{bound}");
    // Killed again at that estimate plus slack: it doubles again.
    let limit = s.fixed + 84 * MIB;
    h.record(&c, &RunRecord::unbatched(Duration::ZERO, killed(limit)));
    assert!(sized(&h, &c, d).fixed >= 2 * limit);
    // A run completes at 1 GiB: the bound is gone and the peak rules.
    h.record(&c, &RunRecord::unbatched(Duration::ZERO, completed(GIB)));
    let s = sized(&h, &c, d);
    assert_eq!((s.fixed, s.lower_bound), (GIB, None));
    assert!(matches!(s.learned_fixed.unwrap().source, Source::MeasuredPeak { peak: GIB, .. }));
}

#[test]
fn a_kill_bound_is_capped_at_the_budget_until_the_kill_itself_exceeds_it() {
    let mut h = History::default();
    let c = Class::new("huge");
    let d = declared(GIB, 0, 1, 1);
    h.record(&c, &RunRecord::unbatched(Duration::ZERO, killed(40 * GIB)));
    assert_eq!(sized(&h, &c, d).fixed, BUDGET, "80 GiB capped at the 61 GiB budget");
    h.record(&c, &RunRecord::unbatched(Duration::ZERO, killed(BUDGET + 100 * MIB)));
    assert!(sized(&h, &c, d).fixed > BUDGET, "needs more than the budget: admission finds it impossible");
}

#[test]
fn a_killed_batch_bounds_the_per_item_cost() {
    let mut h = History::default();
    let c = Class::new("b6");
    // 32 MiB fixed + 10 MiB per item declared; a batch of 32 killed at its
    // 352 MiB grant + 64 MiB slack = 416 MiB: > (416 − 32) / 32 = 12 MiB per item.
    let d = declared(32 * MIB, 10 * MIB, 1, 32);
    h.record(&c, &RunRecord::batch(32, Duration::ZERO, killed(416 * MIB)));
    let s = sized(&h, &c, d);
    assert_eq!(s.per_item, 24 * MIB, "twice the bound");
    assert_eq!(s.batch_target, 13, "floor(32 × 10 / 24)");
    assert_eq!(h.samples(&c), [], "the kill limit is never stored as a peak");
    // The batch of 13 completes at 40 MiB per item: measured, bound cleared.
    h.record(&c, &RunRecord::batch(13, Duration::ZERO, completed(32 * MIB + 13 * 40 * MIB)));
    let s = sized(&h, &c, d);
    assert_eq!((s.per_item, s.batch_target, s.lower_bound), (40 * MIB, 8, None));
    // Per-item bound capped so that batch_min still fits the budget.
    let mut h = History::default();
    h.record(&c, &RunRecord::batch(1, Duration::ZERO, killed(40 * GIB)));
    assert_eq!(sized(&h, &c, declared(GIB, MIB, 1, 4)).per_item, BUDGET - GIB);
}

#[test]
fn records_that_carry_nothing_leave_the_sizing_alone() {
    let mut h = History::default();
    let c = Class::new("x");
    let d = declared(0, 100 * MIB, 1, 8);
    h.record(&c, &RunRecord::batch(8, Duration::ZERO, completed(2400 * MIB)));
    let before = sized(&h, &c, d);
    assert_eq!(before.batch_target, 2);
    for _ in 0..16 {
        h.record(&c, &RunRecord::batch(0, Duration::ZERO, completed(MIB)));
        h.record(&c, &RunRecord::batch(8, Duration::ZERO, RunOutcome::Completed { peak: None }));
    }
    assert_eq!(sized(&h, &c, d), before, "the heavy sample still rules; the target does not spring back");
}

#[test]
fn batch_times_are_the_least_squares_line_through_distinct_batch_sizes() {
    let ms = Duration::from_millis;
    // 2 s + 0.5 s per item, exactly.
    let t = ItemTimes::fit([(4, ms(4_000)), (8, ms(6_000)), (16, ms(10_000))]).unwrap();
    assert_eq!((t.fixed, t.per_item), (ms(2_000), ms(500)));
    // Noise: the line between the points, not through either.
    let t = ItemTimes::fit([(10, ms(7_000)), (10, ms(8_000)), (20, ms(12_500))]).unwrap();
    assert_eq!((t.fixed.as_millis(), t.per_item.as_millis()), (2_500, 500));
    // One size (or none) cannot split fixed from per-item time; batches of
    // 0 items are ignored.
    assert_eq!(ItemTimes::fit([(8, ms(6_000)), (8, ms(6_500))]), None);
    assert_eq!(ItemTimes::fit([(0, ms(1_000)), (8, ms(6_000))]), None);
    assert_eq!(ItemTimes::fit([]), None);
    // A negative intercept or slope (noise) is clamped to zero.
    let t = ItemTimes::fit([(1, ms(100)), (10, ms(10_000))]).unwrap();
    assert_eq!(t.fixed, Duration::ZERO);
    let t = ItemTimes::fit([(1, ms(5_000)), (10, ms(4_000))]).unwrap();
    assert_eq!(t.per_item, Duration::ZERO);
}

#[test]
fn a_class_learns_its_batch_times_from_completed_batches_only() {
    let (mut h, c) = (History::default(), Class::new("timed"));
    let d = declared(GIB, 100 * MIB, 1, 64);
    let batch = |items, secs, outcome| RunRecord::batch(items, Duration::from_secs(secs), outcome);
    h.record(&c, &batch(8, 9, completed(GIB + 800 * MIB)));
    assert_eq!(sized(&h, &c, d).times, None, "one batch size");
    // A kill's duration says nothing about the batch's time.
    h.record(&c, &batch(16, 3, killed(3 * GIB)));
    assert_eq!(sized(&h, &c, d).times, None);
    h.record(&c, &batch(16, 13, completed(GIB + 1600 * MIB)));
    let t = sized(&h, &c, d).times.unwrap();
    assert_eq!((t.fixed, t.per_item), (Duration::from_secs(5), Duration::from_millis(500)));
}
