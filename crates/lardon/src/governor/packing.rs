//! # Implementation details
//!
//! Batch choice while memory is contended (docs/DESIGN.md §4 step 9).
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
//! workload from 1.613 to 1.560 × its lower bound on average and leaves
//! the batched liars where they were (1.750 → 1.761; 1.783 → 1.759 under
//! hard enforcement). It is a partial measure: the rest of the gap is
//! which tasks start first and how long each has left, which admission
//! does not know.
//!
//! *Contended* means a WAIT for memory was decided within
//! [`CONTENTION_WINDOW`]: a task that waits for memory is re-evaluated at
//! least every queue sample interval (250 ms), so contention lasts as long
//! as someone waits and ends about a second after the last one was
//! admitted, when batches grow back to their target.

use std::time::Duration;

use crate::clock::MonoTime;

/// How long a WAIT for memory keeps memory contended.
pub(crate) const CONTENTION_WINDOW: Duration = Duration::from_secs(1);

/// When a WAIT for memory was last decided.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Contention {
    last_memory_wait: Option<MonoTime>,
}

impl Contention {
    /// Notes a WAIT for memory decided at `now`.
    pub(crate) fn note_memory_wait(&mut self, now: MonoTime) {
        self.last_memory_wait = Some(self.last_memory_wait.map_or(now, |t| t.max(now)));
    }

    /// Whether a WAIT for memory was decided within [`CONTENTION_WINDOW`]
    /// of `now` (a wait stamped after `now` counts too).
    pub(crate) fn is_contended(&self, now: MonoTime) -> bool {
        self.last_memory_wait.is_some_and(|t| now.saturating_since(t) <= CONTENTION_WINDOW)
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contention_lasts_a_window_after_the_last_memory_wait() {
        let mut c = Contention::default();
        let t0 = MonoTime(5_000_000_000);
        assert!(!c.is_contended(t0), "nothing waited yet");
        c.note_memory_wait(t0);
        assert!(c.is_contended(t0));
        assert!(c.is_contended(t0 + CONTENTION_WINDOW), "inclusive bound");
        assert!(!c.is_contended(t0 + CONTENTION_WINDOW + Duration::from_nanos(1)));
        // An older stamp (another thread's clock read) never moves it back.
        c.note_memory_wait(MonoTime(1));
        assert!(c.is_contended(t0 + CONTENTION_WINDOW));
        assert!(c.is_contended(MonoTime(1)), "a wait stamped after now counts");
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
