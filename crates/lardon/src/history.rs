//! What ran, per class (docs/DESIGN.md §6): the last 8 batch samples and the
//! adaptive batch target they imply.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use crate::estimate::Class;

/// Samples kept per class.
pub const SAMPLES_PER_CLASS: usize = 8;
/// Classes remembered; the least recently recorded is forgotten beyond.
pub const MAX_CLASSES: usize = 1024;

/// One measured batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchSample {
    /// Items processed.
    pub items: u64,
    /// Wall time of the batch.
    pub duration: Duration,
    /// Measured peak memory, `None` when unknown (kept, never used for
    /// memory adaptation).
    pub peak_memory: Option<u64>,
}

#[derive(Debug, Default)]
pub(crate) struct History {
    classes: HashMap<Class, (u64, VecDeque<BatchSample>)>,
    clock: u64,
}

impl History {
    pub(crate) fn record(&mut self, class: &Class, sample: BatchSample) {
        self.clock += 1;
        if !self.classes.contains_key(class) && self.classes.len() >= MAX_CLASSES {
            let oldest = self.classes.iter().min_by_key(|(_, (touched, _))| *touched).map(|(c, _)| c.clone());
            if let Some(oldest) = oldest {
                self.classes.remove(&oldest);
            }
        }
        let entry = self.classes.entry(class.clone()).or_default();
        entry.0 = self.clock;
        if entry.1.len() == SAMPLES_PER_CLASS {
            entry.1.pop_front();
        }
        entry.1.push_back(sample);
        debug_assert!(entry.1.len() <= SAMPLES_PER_CLASS);
    }

    pub(crate) fn samples(&self, class: &Class) -> Vec<BatchSample> {
        self.classes.get(class).map(|(_, s)| s.iter().copied().collect()).unwrap_or_default()
    }

    /// The adaptive batch maximum: `batch_max`, unless the worst measured
    /// per-item cost exceeds the estimate's, in which case
    /// `max(batch_min, floor(batch_max × estimate / measured))`.
    ///
    /// The measured per-item cost of a sample is `ceil((peak − fixed) /
    /// items)`: the estimate's declared fixed memory is not charged to the
    /// items (docs/DESIGN.md §6 writes `ceil(peak / items)`, which is the same
    /// when `fixed = 0`; with a fixed part it made every honest batched task
    /// look costlier per item, the more so the smaller its batch — the
    /// packing simulator measured a 3.5× longer makespan from it).
    pub(crate) fn adaptive_max(
        &self,
        class: &Class,
        batch_min: u64,
        batch_max: u64,
        per_item: u64,
        fixed: u64,
    ) -> u64 {
        if per_item == 0 {
            return batch_max;
        }
        let Some((_, samples)) = self.classes.get(class) else { return batch_max };
        let worst = samples
            .iter()
            .filter(|s| s.items > 0)
            .filter_map(|s| Some(s.peak_memory?.saturating_sub(fixed).div_ceil(s.items)))
            .filter(|&c| c > 0)
            .max();
        match worst {
            Some(measured) if measured > per_item => {
                let corrected = u128::from(batch_max) * u128::from(per_item) / u128::from(measured);
                u64::try_from(corrected).unwrap_or(batch_max).max(batch_min).max(1)
            }
            _ => batch_max,
        }
    }

    #[cfg(test)]
    pub(crate) fn class_count(&self) -> usize {
        self.classes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn sample(items: u64, peak: Option<u64>) -> BatchSample {
        BatchSample { items, duration: Duration::from_secs(1), peak_memory: peak }
    }

    #[test]
    fn worst_sample_halves_the_target_then_ages_out() {
        let mut h = History::default();
        let c = Class::new("import");
        assert_eq!(h.adaptive_max(&c, 1, 8, 100 * MIB, 0), 8);
        h.record(&c, sample(8, Some(1600 * MIB)));
        assert_eq!(h.adaptive_max(&c, 1, 8, 100 * MIB, 0), 4);
        for _ in 0..7 {
            h.record(&c, sample(4, Some(400 * MIB)));
            assert_eq!(h.adaptive_max(&c, 1, 8, 100 * MIB, 0), 4, "the worst sample still counts");
        }
        h.record(&c, sample(4, Some(400 * MIB)));
        assert_eq!(h.adaptive_max(&c, 1, 8, 100 * MIB, 0), 8, "aged out after 8 newer samples");
    }

    #[test]
    fn clamped_to_batch_min() {
        let mut h = History::default();
        let c = Class::new("big");
        h.record(&c, sample(8, Some(8 << 30)));
        assert_eq!(h.adaptive_max(&c, 4, 8, 100 * MIB, 0), 4);
    }

    #[test]
    fn unknown_peak_is_stored_but_ignored() {
        let mut h = History::default();
        let c = Class::new("x");
        h.record(&c, sample(8, None));
        assert_eq!(h.samples(&c).len(), 1);
        assert_eq!(h.adaptive_max(&c, 1, 8, MIB, 0), 8);
    }

    #[test]
    fn lighter_than_estimated_changes_nothing_and_classes_are_independent() {
        let mut h = History::default();
        h.record(&Class::new("a"), sample(8, Some(8 * MIB)));
        h.record(&Class::new("b"), sample(1, Some(100 * MIB)));
        assert_eq!(h.adaptive_max(&Class::new("a"), 1, 8, 10 * MIB, 0), 8);
        assert_eq!(h.adaptive_max(&Class::new("b"), 1, 8, 10 * MIB, 0), 1);
        assert_eq!(h.adaptive_max(&Class::new("b"), 1, 8, 0, 0), 8, "no per-item estimate: no adaptation");
    }

    #[test]
    fn declared_fixed_memory_is_not_charged_to_items() {
        let mut h = History::default();
        let c = Class::new("batched");
        // 1 GiB fixed + 100 MiB × 4 items, exactly as declared.
        h.record(&c, sample(4, Some(1024 * MIB + 400 * MIB)));
        assert_eq!(h.adaptive_max(&c, 1, 8, 100 * MIB, 1024 * MIB), 8, "an honest task keeps its target");
        // Charging the fixed part to 4 items would have made it 356 MiB each.
        assert_eq!(h.adaptive_max(&c, 1, 8, 100 * MIB, 0), 2);
        // A real overrun of the per-item part still shrinks the target.
        h.record(&c, sample(4, Some(1024 * MIB + 800 * MIB)));
        assert_eq!(h.adaptive_max(&c, 1, 8, 100 * MIB, 1024 * MIB), 4);
    }

    #[test]
    fn ring_and_class_table_are_bounded() {
        let mut h = History::default();
        for i in 0..(MAX_CLASSES + 10) {
            for _ in 0..20 {
                h.record(&Class::new(format!("c{i}")), sample(1, Some(1)));
            }
        }
        assert_eq!(h.class_count(), MAX_CLASSES);
        assert_eq!(h.samples(&Class::new(format!("c{}", MAX_CLASSES + 9))).len(), SAMPLES_PER_CLASS);
        assert!(h.samples(&Class::new("c0")).is_empty(), "least recently recorded class forgotten");
    }
}
