//! What a class's history implies for admission (docs/DESIGN.md §6): the
//! memory a sequence is sized at and the adaptive batch target.
//!
//! For an estimate declaring `fixed + per_item × batch`:
//!
//! - **learned fixed** = the worst measured peak of the class's completed
//!   *unbatched* runs; after an unbatched run killed at limit `L` (and no
//!   completion since), at least `2 × L` — capped at the static memory
//!   budget while `L` itself is below it (a need above the whole budget is
//!   impossible, and admission says so).
//! - **learned per item** = the worst `ceil((peak − fixed) / items)` over
//!   the class's completed batches, where `fixed` is the *declared* fixed
//!   memory: the fixed part is not charged to the items (docs/DESIGN.md §6
//!   writes `ceil(peak / items)`, which is the same when `fixed = 0`; with
//!   a fixed part it made every honest batched task look costlier per item
//!   the smaller its batch, and the packing simulator measured a 3.5×
//!   longer makespan from it). After a batch of `b` items killed at limit
//!   `L`, at least `2 × ceil((L − fixed) / b)`, capped so that `batch_min`
//!   items still fit the budget while the bound itself does.
//! - admission sizes a sequence of `b` items at
//!   `max(declared fixed, learned fixed) + b × max(declared per item,
//!   learned per item)`, and the contract grants exactly that.
//! - **batch target** = `batch_max`, unless the learned per-item cost
//!   exceeds the declared one: then `max(batch_min, floor(batch_max ×
//!   declared / learned))`, so the batch at the target holds about the
//!   memory the user meant `batch_max` to hold.
//!
//! The fixed part of a *batched* class is not learned: one batch's peak
//! cannot be split into fixed and per-item parts, so any overrun of the
//! fixed part is charged to the items at the batch size it was measured at.

use std::fmt;
use std::time::Duration;

use crate::history::{ClassHistory, Kill, Measured};
use crate::units::format_bytes;

/// Where a learned figure comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A completed run's measured peak.
    MeasuredPeak {
        /// Ordinal of the run among the records of its class seen by this
        /// Governor (1-based; a daemon's replay at start counts too).
        run: u64,
        /// Items of the run (0: unbatched).
        items: u64,
        /// Its measured peak, bytes.
        peak: u64,
    },
    /// A run killed at its memory limit: its need is above `limit`, and
    /// the figure is the geometric step above it.
    LowerBound {
        /// Ordinal of the run among the records of its class.
        run: u64,
        /// Items of the run (0: unbatched).
        items: u64,
        /// The limit it was killed at, bytes.
        limit: u64,
    },
}

impl fmt::Display for Source {
    /// "measured peak of run 3 (8 items, 336.0 MiB)" or "lower bound after
    /// kill at 284.0 MiB (run 4, unbatched)".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shape = |items: u64| if items == 0 { "unbatched".to_owned() } else { format!("{items} items") };
        match *self {
            Source::MeasuredPeak { run, items, peak } => {
                write!(f, "measured peak of run {run} ({}, {})", shape(items), format_bytes(peak))
            }
            Source::LowerBound { run, items, limit } => {
                write!(f, "lower bound after kill at {} (run {run}, {})", format_bytes(limit), shape(items))
            }
        }
    }
}

/// A learned memory figure and where it comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Figure {
    /// Bytes (a whole run for the fixed part, one item for the per-item
    /// part).
    pub bytes: u64,
    /// The run it was learned from.
    pub source: Source,
}

/// What a class has learned, sized for one estimate (see the module
/// documentation for the rules). Returned by [`crate::Governor::learned`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Learned {
    /// Measured runs kept (completed with a known peak, both shapes).
    pub samples: usize,
    /// The learned fixed size (unbatched runs), whether or not it exceeds
    /// the declared one; `None` when nothing was learned about it.
    pub learned_fixed: Option<Figure>,
    /// The learned per-item cost (batches), whether or not it exceeds the
    /// declared one; `None` when nothing was learned about it.
    pub learned_per_item: Option<Figure>,
    /// Fixed memory admission uses: `max(declared, learned)`.
    pub fixed: u64,
    /// Per-item memory admission uses: `max(declared, learned)`.
    pub per_item: u64,
    /// The adaptive batch target from history alone (before slow start and
    /// YELLOW pressure, which [`crate::Governor::batch_target`] applies).
    pub batch_target: u64,
    /// The run killed at its limit that currently bounds a figure from
    /// below, if any (a completion of the same shape clears it).
    pub lower_bound: Option<Source>,
    /// The time a batch of the class takes, fitted to its recorded batch
    /// durations ([`ItemTimes::fit`]); `None` until two completed batches
    /// of different sizes are kept.
    pub times: Option<ItemTimes>,
}

/// A batch of `b` items takes `fixed + per_item × b`: the least-squares
/// line through a class's completed batches (items, wall time), each part
/// clamped at zero. What packing (docs/DESIGN.md §4 step 9) uses to say how
/// long a task's remaining items take at a given batch size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ItemTimes {
    /// Time every sequence pays whatever its batch (start-up, loading).
    pub fixed: Duration,
    /// Time each item adds.
    pub per_item: Duration,
}

impl ItemTimes {
    /// The least-squares fit of `duration = fixed + per_item × items` over
    /// `samples` of `(items, duration)`. `None` when fewer than two
    /// distinct batch sizes are given (one size cannot split the fixed time
    /// from the items' time). A negative slope or intercept (noise) is
    /// clamped to zero.
    ///
    /// Two passes over `samples` and no allocation: admission sizes a class
    /// from its history on every decision.
    pub fn fit<I>(samples: I) -> Option<ItemTimes>
    where
        I: IntoIterator<Item = (u64, Duration)>,
        I::IntoIter: Clone,
    {
        let points = samples.into_iter().filter(|(b, _)| *b > 0).map(|(b, d)| (b as f64, d.as_secs_f64()));
        let (count, sx, sy) =
            points.clone().fold((0usize, 0.0, 0.0), |(n, x, y), p| (n + 1, x + p.0, y + p.1));
        if count < 2 {
            return None;
        }
        let n = count as f64;
        let (mx, my) = (sx / n, sy / n);
        let (sxx, sxy) = points
            .fold((0.0, 0.0), |(xx, xy), p| (xx + (p.0 - mx) * (p.0 - mx), xy + (p.0 - mx) * (p.1 - my)));
        if sxx <= f64::EPSILON {
            return None;
        }
        let slope = (sxy / sxx).max(0.0);
        let intercept = (my - slope * mx).max(0.0);
        let secs = |s: f64| Duration::try_from_secs_f64(s).unwrap_or(Duration::MAX);
        Some(ItemTimes { fixed: secs(intercept), per_item: secs(slope) })
    }
}

impl Learned {
    /// Memory for a sequence of `batch` items: `fixed + per_item × batch`
    /// (saturating), what a contract for that batch grants.
    pub fn memory_for(&self, batch: u64) -> u64 {
        self.per_item.saturating_mul(batch).saturating_add(self.fixed)
    }

    /// The learned figures as every view phrases them (`status`, `explain`,
    /// `top`, `report`): the learned fixed and per-item sizes, the kill
    /// that bounds them, and the batch target for a `batched` estimate.
    pub fn phrase(&self, batched: bool) -> crate::LearnedPhrase {
        let lower_bound = self.lower_bound.map(|b| match b {
            Source::LowerBound { limit, .. } | Source::MeasuredPeak { peak: limit, .. } => limit,
        });
        crate::LearnedPhrase {
            samples: u32::try_from(self.samples).unwrap_or(u32::MAX),
            fixed: self.learned_fixed.map(|f| f.bytes),
            per_item: self.learned_per_item.map(|f| f.bytes),
            lower_bound,
            batch_target: batched.then_some(self.batch_target),
        }
    }
}

/// What the estimate declares, in the terms admission uses (GPU bytes
/// already folded in on unified-memory hosts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Declared {
    pub(crate) fixed: u64,
    pub(crate) per_item: u64,
    pub(crate) batch_min: u64,
    pub(crate) batch_max: u64,
}

/// Sizes `declared` by `history` on a host whose static memory budget is
/// `budget`. Without history, the declared figures and `batch_max`.
pub(crate) fn size(history: Option<&ClassHistory>, declared: Declared, budget: u64) -> Learned {
    let Some(h) = history else {
        return Learned {
            samples: 0,
            learned_fixed: None,
            learned_per_item: None,
            fixed: declared.fixed,
            per_item: declared.per_item,
            batch_target: declared.batch_max,
            lower_bound: None,
            times: None,
        };
    };
    let learned_fixed = worst(
        h.whole.iter().map(|m| measured(m, m.peak)),
        h.whole_kill.map(|k| {
            let step = k.limit.saturating_mul(2);
            bound(&k, if k.limit < budget { step.min(budget) } else { step })
        }),
    );
    let fixed = declared.fixed.max(learned_fixed.map_or(0, |f| f.bytes));
    let learned_per_item = worst(
        h.batches.iter().filter(|m| m.items > 0).map(|m| {
            let per_item = m.peak.saturating_sub(declared.fixed).div_ceil(m.items);
            measured(m, per_item)
        }),
        h.batch_kill.filter(|k| k.items > 0).map(|k| {
            let floor = k.limit.saturating_sub(declared.fixed).div_ceil(k.items).max(1);
            let step = floor.saturating_mul(2);
            let cap = budget.saturating_sub(fixed) / declared.batch_min.max(1);
            bound(&k, if floor < cap { step.min(cap) } else { step })
        }),
    );
    let learned_per = learned_per_item.map_or(0, |f| f.bytes);
    let per_item = declared.per_item.max(learned_per);
    let batch_target = if declared.per_item > 0 && learned_per > declared.per_item {
        let corrected =
            u128::from(declared.batch_max) * u128::from(declared.per_item) / u128::from(learned_per);
        u64::try_from(corrected).unwrap_or(declared.batch_max).max(declared.batch_min).max(1)
    } else {
        declared.batch_max
    };
    let lower_bound = h
        .batch_kill
        .into_iter()
        .chain(h.whole_kill)
        .max_by_key(|k| k.run)
        .map(|k| Source::LowerBound { run: k.run, items: k.items, limit: k.limit });
    Learned {
        samples: h.sample_count(),
        learned_fixed,
        learned_per_item,
        fixed,
        per_item,
        batch_target,
        lower_bound,
        times: ItemTimes::fit(h.batches.iter().map(|m| (m.items, m.duration))),
    }
}

fn measured(m: &Measured, bytes: u64) -> Figure {
    Figure { bytes, source: Source::MeasuredPeak { run: m.run, items: m.items, peak: m.peak } }
}

fn bound(k: &Kill, bytes: u64) -> Figure {
    Figure { bytes, source: Source::LowerBound { run: k.run, items: k.items, limit: k.limit } }
}

/// The largest figure; a measured one wins a tie with a bound. Figures of
/// 0 bytes (a batch that stayed within its declared fixed part) say
/// nothing and are skipped.
fn worst(measured: impl Iterator<Item = Figure>, bound: Option<Figure>) -> Option<Figure> {
    measured.chain(bound).filter(|f| f.bytes > 0).fold(None, |best, f| match best {
        Some(b) if b.bytes >= f.bytes => Some(b),
        _ => Some(f),
    })
}

#[cfg(test)]
mod tests;
