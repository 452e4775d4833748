//! # Implementation details
//!
//! Batch choice while memory is contended, the critical floor of a task
//! with much work left, and the sliver rule once a class's batch times are
//! learned ([`sliver`]) (docs/DESIGN.md §4 step 9).
//!
//! A sequence of `b` items holds `fixed + per_item × b` bytes for
//! `t_fixed + t_item × b`. When nothing waits for memory, the largest
//! batch is best: the task ends soonest and no one is kept out. When other
//! work waits for memory, each byte held is a byte someone else cannot
//! use, and what matters is the memory × time a batch costs per item:
//! `fixed × t_fixed / b + … + per_item × t_item × b`. Large batches hold
//! many items' memory for the whole sequence; small ones pay the fixed part
//! again and again. Lacking the times, admission caps a batched sequence at
//! the batch whose items hold as much memory as its fixed part,
//! `ceil(fixed ÷ per_item)`: no more than half its memory is fixed
//! overhead, and no more than half is items held while others wait.
//!
//! Why (BENCHMARKS.md, "Packing simulator"): without the cap, batch sizes
//! under a memory-bound backlog were set by accident: full batches (7–13
//! GiB each) for the tasks admitted first, then whatever the caution
//! band's YELLOW halving and the free slivers left (1–10). Measured over seeds
//! 1–15 (`simulate --seeds 15`), the cap brings the honest batched
//! workload from 1.613 to 1.555 × its lower bound on average and leaves
//! the batched liars about where they were (1.750 → 1.744; 1.783 → 1.775
//! under hard enforcement, 71 kills either way). It is a partial measure:
//! the rest of the gap is which tasks start first and how long each has
//! left. A task that says how many items it has left gets a *critical
//! floor* ([`critical_floor`]) that the cap does not lower, and the queue
//! starts the most items left first: together 1.345 (batched) and 1.442
//! (liars) over the same seeds.
//!
//! *Contended* means some estimate waits for memory: it got a WAIT for
//! memory within [`CONTENTION_WINDOW`] and has not been granted since. A
//! task that waits for memory is re-evaluated at least every queue sample
//! interval (250 ms), so its entry stays fresh while it waits; once it is
//! admitted its entry goes at once (a task admitted right after the last
//! waiter is not capped), and a waiter that goes away without a grant
//! (cancelled) ages out after the window. Estimates are told apart by
//! their hash: two tasks with equal estimates share an entry, and the
//! other's next WAIT puts it back.

use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
use std::time::Duration;

use crate::clock::MonoTime;
use crate::estimate::Estimate;
use crate::learned::ItemTimes;

/// How long a WAIT for memory keeps memory contended without a new one.
pub(crate) const CONTENTION_WINDOW: Duration = Duration::from_secs(1);
/// Waiting estimates remembered; the oldest is forgotten beyond.
pub(crate) const MAX_WAITERS: usize = 256;

/// The estimates waiting for memory, by hash, with their latest WAIT.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Contention {
    waiting: Vec<(u64, MonoTime)>,
}

impl Contention {
    /// Notes a WAIT for memory of `estimate` decided at `now`.
    pub(crate) fn note_memory_wait(&mut self, estimate: &Estimate, now: MonoTime) {
        let key = key(estimate);
        match self.waiting.iter_mut().find(|(k, _)| *k == key) {
            Some((_, at)) => *at = (*at).max(now),
            None => {
                if self.waiting.len() == MAX_WAITERS
                    && let Some(oldest) =
                        self.waiting.iter().enumerate().min_by_key(|(_, (_, t))| *t).map(|(i, _)| i)
                {
                    self.waiting.swap_remove(oldest);
                }
                self.waiting.push((key, now));
            }
        }
    }

    /// Notes that `estimate` was granted: it no longer waits.
    pub(crate) fn note_grant(&mut self, estimate: &Estimate) {
        if self.waiting.is_empty() {
            return;
        }
        let key = key(estimate);
        self.waiting.retain(|(k, _)| *k != key);
    }

    /// Whether some estimate waits for memory at `now`: a WAIT within
    /// [`CONTENTION_WINDOW`] (or stamped after `now`) not followed by a
    /// grant.
    pub(crate) fn is_contended(&self, now: MonoTime) -> bool {
        self.waiting.iter().any(|&(_, t)| now.saturating_since(t) <= CONTENTION_WINDOW)
    }
}

/// A deterministic hash of the whole estimate.
fn key(estimate: &Estimate) -> u64 {
    BuildHasherDefault::<DefaultHasher>::default().hash_one(estimate)
}

/// The batch target while memory is contended: `target` capped at
/// `ceil(fixed ÷ per_item)`, never below `batch_min`. Unchanged when the
/// estimate is not batched (`batch_min = target`), has no per-item memory
/// (the batch costs no memory), or no fixed memory (the fixed cost is then
/// time alone, which this rule cannot weigh).
pub(crate) fn contended_target(fixed: u64, per_item: u64, batch_min: u64, target: u64) -> u64 {
    if fixed == 0 || per_item == 0 || target <= batch_min {
        return target;
    }
    fixed.div_ceil(per_item).clamp(batch_min, target)
}

/// A proven task with items left is granted at least `1 ÷ CRITICAL_SPREAD`
/// of them per sequence ([`critical_floor`]).
pub(crate) const CRITICAL_SPREAD: u64 = 10;

/// The critical floor (docs/DESIGN.md §4 step 9): the least batch granted
/// to a task that said how many items it has left
/// ([`Estimate::items_left`]) once its class has a measured run:
/// `ceil(items_left ÷ CRITICAL_SPREAD)`, never above the history target
/// `history_target` (which already shrinks a class that proved costlier
/// per item than declared). 0 (no floor) without both.
///
/// The floor is what keeps the longest work on large batches while memory
/// is contended and under YELLOW pressure: the task with the most items
/// left is the one the makespan waits for, and without the floor it ran
/// batches of 1–10 through most of a contended run. A task near its end
/// (or a short one) has a floor below the contended cap and keeps the
/// memory-efficient batch. An unproven class gets no floor: its per-item
/// cost is not measured yet, and a large first batch of a liar is a kill
/// under hard enforcement.
pub(crate) fn critical_floor(est: &Estimate, samples: usize, history_target: u64) -> u64 {
    match est.items_left() {
        Some(left) if samples > 0 => left.div_ceil(CRITICAL_SPREAD).min(history_target),
        _ => 0,
    }
}

/// Memory × time per item of a sequence of `batch` items sized at
/// `fixed + per_item × batch` bytes that takes `times` (byte·seconds):
/// `(fixed + per_item × b) × (t_fixed + t_item × b) ÷ b`.
pub(crate) fn area_per_item(fixed: u64, per_item: u64, times: ItemTimes, batch: u64) -> f64 {
    let b = batch.max(1) as f64;
    let memory = fixed as f64 + per_item as f64 * b;
    memory * (times.fixed.as_secs_f64() + times.per_item.as_secs_f64() * b) / b
}

/// The batch in `[batch_min, target]` with the least memory × time per
/// item ([`area_per_item`]): `sqrt(fixed × t_fixed ÷ (per_item ×
/// t_item))`, the better of the integers either side, clamped. `target`
/// when an item costs no memory or no time (larger is then never worse).
pub(crate) fn least_area_batch(
    fixed: u64,
    per_item: u64,
    times: ItemTimes,
    batch_min: u64,
    target: u64,
) -> u64 {
    let (lo, hi) = (batch_min.max(1), target.max(batch_min).max(1));
    let item = per_item as f64 * times.per_item.as_secs_f64();
    if item <= 0.0 {
        return hi;
    }
    let best = (fixed as f64 * times.fixed.as_secs_f64() / item).sqrt();
    // `as` saturates (and maps NaN to 0) before the clamp.
    let (below, above) = ((best.floor() as u64).clamp(lo, hi), (best.ceil() as u64).clamp(lo, hi));
    if area_per_item(fixed, per_item, times, below) <= area_per_item(fixed, per_item, times, above) {
        below
    } else {
        above
    }
}

/// The sliver rule (docs/DESIGN.md §4 step 9): `Some(best)` when a batch of
/// `batch` items (all that memory allows now, below the target) is smaller
/// than `best`, the batch with the least memory × time per item in
/// `[batch_min, min(target, items_left)]` ([`least_area_batch`]), for a
/// class whose batch times are learned. Admission then WAITs for memory
/// while its own reservations hold some (it will come back) instead of
/// granting a batch that pays the fixed memory × fixed time again for
/// fewer items than it is worth. `None`: the batch is not a sliver.
///
/// Why (BENCHMARKS.md, "Packing simulator"): memory freed by one sequence
/// was handed out in pieces of 2–6 items to whichever task came next, and
/// every piece paid a whole sequence's fixed part; batches below half the
/// optimum wasted 17 % of the least memory × time of the batched liars
/// workload at seed 42 (7 % of the honest one).
pub(crate) fn sliver(
    fixed: u64,
    per_item: u64,
    times: ItemTimes,
    est: &Estimate,
    target: u64,
    batch: u64,
) -> Option<u64> {
    let wanted = est.items_left().filter(|&n| n > 0).map_or(target, |n| n.min(target));
    let best = least_area_batch(fixed, per_item, times, est.batch_min, wanted);
    (batch < best).then_some(best)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn est(mib: u64) -> Estimate {
        Estimate::builder().memory(mib << 20).build()
    }

    #[test]
    fn memory_is_contended_while_an_estimate_waits_and_not_after_its_grant() {
        let mut c = Contention::default();
        let t0 = MonoTime(5_000_000_000);
        assert!(!c.is_contended(t0), "nothing waited yet");
        c.note_memory_wait(&est(10), t0);
        assert!(c.is_contended(t0));
        assert!(c.is_contended(t0 + CONTENTION_WINDOW), "inclusive bound");
        assert!(!c.is_contended(t0 + CONTENTION_WINDOW + Duration::from_nanos(1)), "aged out");
        // An older stamp (another thread's clock read) never moves it back.
        c.note_memory_wait(&est(10), MonoTime(1));
        assert!(c.is_contended(t0 + CONTENTION_WINDOW));
        assert!(c.is_contended(MonoTime(1)), "a wait stamped after now counts");
        // Another estimate's grant changes nothing; its own ends the wait.
        c.note_grant(&est(11));
        assert!(c.is_contended(t0));
        c.note_memory_wait(&est(20), t0);
        c.note_grant(&est(10));
        assert!(c.is_contended(t0), "20 MiB still waits");
        c.note_grant(&est(20));
        assert!(!c.is_contended(t0), "every waiter was granted");
    }

    #[test]
    fn waiters_are_bounded() {
        let mut c = Contention::default();
        for i in 0..(MAX_WAITERS as u64 + 10) {
            c.note_memory_wait(&est(i + 1), MonoTime(i));
        }
        assert_eq!(c.waiting.len(), MAX_WAITERS);
        assert!(c.waiting.iter().all(|&(_, t)| t >= MonoTime(10)), "the oldest were forgotten");
    }

    #[test]
    fn the_critical_floor_spreads_what_is_left_over_ten_sequences_once_proven() {
        let left = |n: u64| Estimate::builder().memory(1 << 30).batch(1, 64).items_left(n).build();
        assert_eq!(critical_floor(&left(640), 1, 64), 64);
        assert_eq!(critical_floor(&left(300), 1, 64), 30);
        assert_eq!(critical_floor(&left(31), 1, 64), 4, "rounded up");
        assert_eq!(critical_floor(&left(1000), 1, 64), 64, "never above the history target");
        assert_eq!(critical_floor(&left(1000), 3, 20), 20, "a learned, smaller target wins");
        assert_eq!(critical_floor(&left(640), 0, 64), 0, "unproven class: no floor");
        assert_eq!(critical_floor(&est(10), 5, 64), 0, "items left unknown: no floor");
    }

    fn times(fixed_ms: u64, per_item_ms: u64) -> ItemTimes {
        ItemTimes { fixed: Duration::from_millis(fixed_ms), per_item: Duration::from_millis(per_item_ms) }
    }

    #[test]
    fn the_least_area_batch_balances_fixed_and_item_memory_times_time() {
        const MIB: u64 = 1 << 20;
        // 1 GiB + 100 MiB per item; 5 s + 0.5 s per item: sqrt(10.24 × 10) = 10.1.
        let t = times(5_000, 500);
        assert_eq!(least_area_batch(1024 * MIB, 100 * MIB, t, 1, 64), 10);
        let area = |b| area_per_item(1024 * MIB, 100 * MIB, t, b);
        assert!(area(10) < area(9) && area(10) < area(11), "10 is the least");
        // Clamped to [batch_min, target].
        assert_eq!(least_area_batch(1024 * MIB, 100 * MIB, t, 1, 6), 6);
        assert_eq!(least_area_batch(1024 * MIB, 100 * MIB, t, 12, 64), 12);
        // Items cost no time or no memory: larger is never worse.
        assert_eq!(least_area_batch(1024 * MIB, 100 * MIB, times(5_000, 0), 1, 64), 64);
        assert_eq!(least_area_batch(1024 * MIB, 0, t, 1, 64), 64);
        // No fixed time or memory: one item is as good as any.
        assert_eq!(least_area_batch(1024 * MIB, 100 * MIB, times(0, 500), 1, 64), 1);
        assert_eq!(least_area_batch(0, 100 * MIB, t, 2, 64), 2);
    }

    #[test]
    fn a_batch_below_the_least_area_batch_is_a_sliver() {
        const MIB: u64 = 1 << 20;
        let t = times(5_000, 500);
        let task = Estimate::builder().memory(1024 * MIB).memory_per_item(100 * MIB).batch(1, 64).build();
        let sliver = |est: &Estimate, target, batch| sliver(1024 * MIB, 100 * MIB, t, est, target, batch);
        assert_eq!(sliver(&task, 64, 9), Some(10));
        assert_eq!(sliver(&task, 64, 10), None, "the best batch");
        assert_eq!(sliver(&task, 64, 30), None, "above it: the contended cap decides");
        assert_eq!(sliver(&task, 4, 3), Some(4), "a target below the best is the best");
        // A task with 3 items left needs no more than 3.
        assert_eq!(sliver(&task.with_items_left(3), 64, 3), None);
        assert_eq!(sliver(&task.with_items_left(3), 64, 2), Some(3));
        assert_eq!(sliver(&task.with_items_left(300), 64, 2), Some(10));
    }

    #[test]
    fn the_contended_target_balances_fixed_and_item_memory() {
        const MIB: u64 = 1 << 20;
        // 1 GiB fixed, 100 MiB per item: 11 items hold at least the fixed part.
        assert_eq!(contended_target(1024 * MIB, 100 * MIB, 1, 64), 11);
        // Never above the target, never below batch_min.
        assert_eq!(contended_target(1024 * MIB, 10 * MIB, 1, 64), 64);
        assert_eq!(contended_target(100 * MIB, 100 * MIB, 4, 64), 4);
        // Nothing to weigh: unbatched, no item memory, no fixed memory.
        assert_eq!(contended_target(1024 * MIB, 100 * MIB, 8, 8), 8);
        assert_eq!(contended_target(1024 * MIB, 0, 1, 64), 64);
        assert_eq!(contended_target(0, 100 * MIB, 1, 64), 64);
    }
}
