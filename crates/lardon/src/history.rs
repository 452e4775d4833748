//! What ran, per class (docs/DESIGN.md §6): the records the Governor learns
//! from and the per-class store that keeps them.
//!
//! A record ([`RunRecord`]) says what shape the run had ([`RunShape`]: a
//! whole unbatched run, or a batch of N items) and how it ended
//! ([`RunOutcome`]: completed with a measured peak, or killed at its memory
//! limit). The store keeps, per class, the last [`SAMPLES_PER_CLASS`]
//! measured batches, the last [`SAMPLES_PER_CLASS`] measured unbatched runs,
//! and the latest kill of each shape not yet superseded by a completion.
//! What those imply for admission is computed in `learned.rs`.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use crate::estimate::Class;

/// Measured samples kept per class and shape (batched, unbatched).
pub const SAMPLES_PER_CLASS: usize = 8;
/// Classes remembered; the least recently recorded is forgotten beyond.
pub const MAX_CLASSES: usize = 1024;

/// The shape of one recorded run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunShape {
    /// A whole task run once, without items: its peak is the class's fixed
    /// size.
    Unbatched,
    /// One batch of `items` items of a batched task. A batch of 0 items
    /// carries nothing to learn from and is ignored.
    Batch {
        /// Items the batch processed.
        items: u64,
    },
}

impl RunShape {
    /// Items the run processed: 0 for an unbatched run.
    pub fn items(self) -> u64 {
        match self {
            RunShape::Unbatched => 0,
            RunShape::Batch { items } => items,
        }
    }
}

/// How one recorded run ended, as far as memory is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunOutcome {
    /// The run ended on its own (successfully or not, but not killed for
    /// memory); `peak` is its measured peak memory, `None` when unknown (a
    /// record with an unknown peak changes nothing).
    Completed {
        /// Measured peak memory, bytes.
        peak: Option<u64>,
    },
    /// The run was killed because it reached its memory limit of `limit`
    /// bytes: its real need is *more* than `limit`, by an unknown amount.
    /// The limit is never taken for a peak; it becomes a lower bound that
    /// grows the next estimate geometrically until a run completes.
    KilledAtLimit {
        /// The enforced limit it was killed at, bytes.
        limit: u64,
    },
}

/// One run of a class, as fed to [`crate::Governor::record_run`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunRecord {
    /// Unbatched or a batch of N items.
    pub shape: RunShape,
    /// Wall time of the run (kept with the sample; not used for memory).
    pub duration: Duration,
    /// Completed with a peak, or killed at its limit.
    pub outcome: RunOutcome,
}

impl RunRecord {
    /// A whole unbatched run.
    pub fn unbatched(duration: Duration, outcome: RunOutcome) -> Self {
        RunRecord { shape: RunShape::Unbatched, duration, outcome }
    }

    /// One batch of `items` items.
    pub fn batch(items: u64, duration: Duration, outcome: RunOutcome) -> Self {
        RunRecord { shape: RunShape::Batch { items }, duration, outcome }
    }

    /// Whether the record can change what the class has learned: false for
    /// a batch of 0 items, an unknown peak or a kill at a limit of 0. Such
    /// a record is ignored entirely (no sample evicted, no generation
    /// change).
    pub fn is_informative(&self) -> bool {
        let shape_ok = !matches!(self.shape, RunShape::Batch { items: 0 });
        let outcome_ok = match self.outcome {
            RunOutcome::Completed { peak } => peak.is_some(),
            RunOutcome::KilledAtLimit { limit } => limit > 0,
        };
        shape_ok && outcome_ok
    }
}

/// One measured batch, as returned by [`crate::Governor::history`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchSample {
    /// Items processed.
    pub items: u64,
    /// Wall time of the batch.
    pub duration: Duration,
    /// Measured peak memory. Always `Some` for a kept sample (records with
    /// an unknown peak are no longer kept); an `Option` for callers written
    /// against the earlier shape.
    pub peak_memory: Option<u64>,
}

/// A completed run with a measured peak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Measured {
    /// Ordinal of the record in its class (1-based), for "run N".
    pub(crate) run: u64,
    /// Items (0 for unbatched).
    pub(crate) items: u64,
    pub(crate) peak: u64,
    pub(crate) duration: Duration,
}

/// A run killed at its limit, not yet superseded by a completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Kill {
    pub(crate) run: u64,
    /// Items (0 for unbatched).
    pub(crate) items: u64,
    pub(crate) limit: u64,
}

/// Everything kept for one class.
#[derive(Debug, Default, Clone)]
pub(crate) struct ClassHistory {
    touched: u64,
    runs: u64,
    pub(crate) batches: VecDeque<Measured>,
    pub(crate) whole: VecDeque<Measured>,
    pub(crate) batch_kill: Option<Kill>,
    pub(crate) whole_kill: Option<Kill>,
}

impl ClassHistory {
    /// Measured samples kept (both shapes).
    pub(crate) fn sample_count(&self) -> usize {
        self.batches.len() + self.whole.len()
    }

    fn record(&mut self, record: &RunRecord) {
        self.runs += 1;
        let run = self.runs;
        let items = record.shape.items();
        let batched = matches!(record.shape, RunShape::Batch { .. });
        match record.outcome {
            RunOutcome::Completed { peak: Some(peak) } => {
                let sample = Measured { run, items, peak, duration: record.duration };
                // A completion is what the lower bound was waiting for: it
                // supersedes the kill of the same shape.
                let (ring, kill) = if batched {
                    (&mut self.batches, &mut self.batch_kill)
                } else {
                    (&mut self.whole, &mut self.whole_kill)
                };
                if ring.len() == SAMPLES_PER_CLASS {
                    ring.pop_front();
                }
                ring.push_back(sample);
                *kill = None;
            }
            RunOutcome::KilledAtLimit { limit } => {
                // The latest kill is kept: estimates grow from one kill to
                // the next, so it is also the most demanding.
                let kill = Some(Kill { run, items, limit });
                if batched {
                    self.batch_kill = kill;
                } else {
                    self.whole_kill = kill;
                }
            }
            // Filtered out by `is_informative` before we get here.
            RunOutcome::Completed { peak: None } => {}
        }
        debug_assert!(self.batches.len() <= SAMPLES_PER_CLASS && self.whole.len() <= SAMPLES_PER_CLASS);
    }
}

/// Per-class records, bounded in classes and samples.
#[derive(Debug, Default)]
pub(crate) struct History {
    classes: HashMap<Class, ClassHistory>,
    clock: u64,
}

impl History {
    /// Records `record` for `class`; returns whether anything changed
    /// (false, with nothing touched, for an uninformative record).
    pub(crate) fn record(&mut self, class: &Class, record: &RunRecord) -> bool {
        if !record.is_informative() {
            return false;
        }
        self.clock += 1;
        if !self.classes.contains_key(class) && self.classes.len() >= MAX_CLASSES {
            let oldest = self.classes.iter().min_by_key(|(_, h)| h.touched).map(|(c, _)| c.clone());
            if let Some(oldest) = oldest {
                self.classes.remove(&oldest);
            }
        }
        let entry = self.classes.entry(class.clone()).or_default();
        entry.touched = self.clock;
        entry.record(record);
        true
    }

    /// What is kept for `class`, if anything.
    pub(crate) fn class(&self, class: &Class) -> Option<&ClassHistory> {
        self.classes.get(class)
    }

    /// The measured batches of `class`, oldest first.
    pub(crate) fn samples(&self, class: &Class) -> Vec<BatchSample> {
        self.classes
            .get(class)
            .map(|h| {
                h.batches
                    .iter()
                    .map(|m| BatchSample { items: m.items, duration: m.duration, peak_memory: Some(m.peak) })
                    .collect()
            })
            .unwrap_or_default()
    }

    #[cfg(test)]
    pub(crate) fn class_count(&self) -> usize {
        self.classes.len()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn batch(items: u64, peak: Option<u64>) -> RunRecord {
        RunRecord::batch(items, Duration::from_secs(1), RunOutcome::Completed { peak })
    }

    #[test]
    fn uninformative_records_touch_nothing() {
        let mut h = History::default();
        let c = Class::new("x");
        assert!(h.record(&c, &batch(8, Some(800 * MIB))));
        for _ in 0..20 {
            assert!(!h.record(&c, &batch(0, Some(MIB))), "a batch of 0 items");
            assert!(!h.record(&c, &batch(8, None)), "an unknown peak");
            assert!(
                !h.record(&c, &RunRecord::unbatched(Duration::ZERO, RunOutcome::Completed { peak: None }))
            );
            assert!(
                !h.record(&c, &RunRecord::batch(4, Duration::ZERO, RunOutcome::KilledAtLimit { limit: 0 }))
            );
        }
        assert_eq!(
            h.samples(&c),
            vec![BatchSample { items: 8, duration: Duration::from_secs(1), peak_memory: Some(800 * MIB) }]
        );
        assert!(h.class(&Class::new("never")).is_none());
        assert!(!h.record(&Class::new("never"), &batch(0, None)));
        assert!(h.class(&Class::new("never")).is_none(), "no class entry for nothing");
    }

    #[test]
    fn shapes_have_their_own_rings_and_kills() {
        let mut h = History::default();
        let c = Class::new("mixed");
        h.record(&c, &batch(4, Some(400 * MIB)));
        for _ in 0..20 {
            h.record(&c, &RunRecord::unbatched(Duration::ZERO, RunOutcome::Completed { peak: Some(MIB) }));
        }
        let k = h.class(&c).unwrap();
        assert_eq!((k.batches.len(), k.whole.len()), (1, SAMPLES_PER_CLASS), "unbatched runs evict no batch");
        h.record(&c, &RunRecord::batch(4, Duration::ZERO, RunOutcome::KilledAtLimit { limit: 500 * MIB }));
        let k = h.class(&c).unwrap();
        assert_eq!(k.batch_kill.map(|k| (k.items, k.limit)), Some((4, 500 * MIB)));
        assert!(k.whole_kill.is_none());
        assert_eq!(k.batches.len(), 1, "a kill is never stored as a measured peak");
        h.record(&c, &RunRecord::unbatched(Duration::ZERO, RunOutcome::Completed { peak: Some(MIB) }));
        assert!(h.class(&c).unwrap().batch_kill.is_some(), "an unbatched completion leaves the batch kill");
        h.record(&c, &batch(2, Some(300 * MIB)));
        assert!(h.class(&c).unwrap().batch_kill.is_none(), "a completed batch supersedes it");
    }

    #[test]
    fn ring_and_class_table_are_bounded() {
        let mut h = History::default();
        for i in 0..(MAX_CLASSES + 10) {
            for _ in 0..20 {
                h.record(&Class::new(format!("c{i}")), &batch(1, Some(1)));
            }
        }
        assert_eq!(h.class_count(), MAX_CLASSES);
        assert_eq!(h.samples(&Class::new(format!("c{}", MAX_CLASSES + 9))).len(), SAMPLES_PER_CLASS);
        assert!(h.samples(&Class::new("c0")).is_empty(), "least recently recorded class forgotten");
    }
}
