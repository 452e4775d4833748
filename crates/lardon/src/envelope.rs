//! Capability envelopes and the throughput ramp (docs/DESIGN.md §6).
//!
//! A task may offer up to four [`Alternative`]s (say, GPU first and a CPU
//! fallback), tried in order. Reducible dimensions — CPUs, batch and
//! in-flight — start at their minimum and grow one at a time by doubling
//! (the last rung is the exact maximum: 1, 2, 4, 8, 16, 28), each step kept
//! only if measured throughput gains at least 5 %.
//!
//! # Ramp protocol
//! 1. Baseline: the mean rate of 2 sequences at the current rungs.
//! 2. Trial: the next rung of the first growable dimension, judged on 2
//!    sequences by their **minimum** rate. Kept iff
//!    `trial ≥ baseline + ceil(baseline / 20)` (baseline 0: iff > 0); the
//!    trial rate becomes the new baseline and the same dimension grows
//!    again. Otherwise the rung is reverted and that dimension stops.
//! 3. Any pressure resets the ramp to its minimums (a new epoch: evidence
//!    from earlier sequences is ignored).

use thiserror::Error;

use crate::estimate::{Class, Estimate, MILLIS_PER_CPU};

/// Most alternatives an envelope may hold.
pub const MAX_ALTERNATIVES: usize = 4;
/// Ramps remembered per Governor (keyed by class and alternative).
pub(crate) const MAX_RAMPS: usize = 256;
/// Sequences in a baseline or a trial.
pub(crate) const SEQUENCES_PER_STEP: usize = 2;

/// Why an envelope could not be built.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EnvelopeError {
    /// Zero or more than four alternatives.
    #[error("an envelope holds 1 to {MAX_ALTERNATIVES} alternatives, got {0}")]
    Count(usize),
    /// An in-flight range with `min > max` or `min == 0`.
    #[error("alternative `{0}`: inflight range must satisfy 1 <= min <= max")]
    Inflight(String),
}

/// One way to run a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alternative {
    /// Borrowed for the one name every single-estimate task shares
    /// (`default`): no allocation per submitted task.
    pub(crate) name: std::borrow::Cow<'static, str>,
    pub(crate) estimate: Estimate,
    pub(crate) ramp_cpus: bool,
    pub(crate) ramp_batch: bool,
    pub(crate) inflight: (u32, u32),
    pub(crate) gpu_memory_per_inflight: u64,
}

impl Alternative {
    /// An alternative running `estimate` as declared (nothing ramps).
    pub fn new(name: impl Into<String>, estimate: Estimate) -> Self {
        Self::named(std::borrow::Cow::Owned(name.into()), estimate)
    }

    /// [`Alternative::new`] with a name that may be borrowed.
    fn named(name: std::borrow::Cow<'static, str>, estimate: Estimate) -> Self {
        Alternative {
            name,
            estimate,
            ramp_cpus: false,
            ramp_batch: false,
            inflight: (1, 1),
            gpu_memory_per_inflight: 0,
        }
    }

    /// Ramp CPUs from 1 up to the estimate's CPUs (capped by the pool).
    #[must_use]
    pub fn ramp_cpus(mut self) -> Self {
        self.ramp_cpus = true;
        self
    }

    /// Ramp the batch from `batch_min` up to `batch_max`.
    #[must_use]
    pub fn ramp_batch(mut self) -> Self {
        self.ramp_batch = true;
        self
    }

    /// Ramp in-flight work from `min` to `max`, each in-flight unit adding
    /// `gpu_memory_each` to the fixed GPU memory.
    #[must_use]
    pub fn ramp_inflight(mut self, min: u32, max: u32, gpu_memory_each: u64) -> Self {
        self.inflight = (min, max);
        self.gpu_memory_per_inflight = gpu_memory_each;
        self
    }

    /// The alternative's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The declared estimate.
    pub fn estimate(&self) -> &Estimate {
        &self.estimate
    }

    fn ramps(&self) -> bool {
        self.ramp_cpus || self.ramp_batch || self.inflight.0 < self.inflight.1
    }
}

/// Up to four alternatives, preferred first.
///
/// Equality is the alternatives' (in order), however they are stored.
#[derive(Clone, PartialEq, Eq)]
pub struct Envelope {
    alternatives: Alternatives,
}

/// The stored alternatives. A lone alternative (every [`Envelope::single`],
/// the common task) is stored in place: no heap block to allocate on the
/// submitting thread and free on a worker. `Many` always holds 2 to
/// [`MAX_ALTERNATIVES`], so equal lists are stored alike and the derived
/// equality is the lists'.
#[derive(Clone, PartialEq, Eq)]
enum Alternatives {
    One(Alternative),
    Many(Vec<Alternative>),
}

impl std::fmt::Debug for Envelope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Envelope").field("alternatives", &self.alternatives()).finish()
    }
}

impl Envelope {
    /// An envelope of `alternatives`, tried in the order given.
    ///
    /// # Errors
    /// [`EnvelopeError`] for an empty or oversized list, or a bad in-flight range.
    pub fn new(alternatives: Vec<Alternative>) -> Result<Self, EnvelopeError> {
        if alternatives.is_empty() || alternatives.len() > MAX_ALTERNATIVES {
            return Err(EnvelopeError::Count(alternatives.len()));
        }
        for a in &alternatives {
            if a.inflight.0 == 0 || a.inflight.0 > a.inflight.1 {
                return Err(EnvelopeError::Inflight(a.name.to_string()));
            }
        }
        let mut alternatives = alternatives;
        let alternatives = match alternatives.pop() {
            Some(only) if alternatives.is_empty() => Alternatives::One(only),
            Some(last) => {
                alternatives.push(last);
                Alternatives::Many(alternatives)
            }
            // Refused above (an empty list is `Count(0)`).
            None => return Err(EnvelopeError::Count(0)),
        };
        Ok(Envelope { alternatives })
    }

    /// An envelope of one fixed alternative.
    pub fn single(estimate: Estimate) -> Self {
        Envelope {
            alternatives: Alternatives::One(Alternative::named(
                std::borrow::Cow::Borrowed("default"),
                estimate,
            )),
        }
    }

    /// The alternatives, in trial order.
    pub fn alternatives(&self) -> &[Alternative] {
        match &self.alternatives {
            Alternatives::One(only) => std::slice::from_ref(only),
            Alternatives::Many(all) => all,
        }
    }

    /// The lone alternative of an envelope of one (every
    /// [`Envelope::single`]); `None` for two or more.
    pub(crate) fn only(&self) -> Option<&Alternative> {
        match &self.alternatives {
            Alternatives::One(only) => Some(only),
            Alternatives::Many(_) => None,
        }
    }

    /// The most items left any alternative declares
    /// ([`Estimate::items_left`]), if one does.
    pub fn items_left(&self) -> Option<u64> {
        self.alternatives().iter().filter_map(|a| a.estimate.items_left()).max()
    }

    /// This envelope with every alternative declaring `items` items left.
    #[must_use]
    pub fn with_items_left(&self, items: u64) -> Envelope {
        let mut next = self.clone();
        let all = match &mut next.alternatives {
            Alternatives::One(only) => std::slice::from_mut(only),
            Alternatives::Many(all) => all.as_mut_slice(),
        };
        for a in all {
            a.estimate = a.estimate.with_items_left(items);
        }
        next
    }
}

/// A reducible dimension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dimension {
    /// Whole CPUs.
    Cpus,
    /// In-flight units.
    Inflight,
    /// Batch size.
    Batch,
}

const ORDER: [Dimension; 3] = [Dimension::Cpus, Dimension::Inflight, Dimension::Batch];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rung {
    min: u64,
    current: u64,
    max: u64,
    ramps: bool,
    stopped: bool,
}

impl Rung {
    fn new(min: u64, max: u64, ramps: bool) -> Self {
        let max = max.max(min);
        Rung { min, current: if ramps { min } else { max }, max, ramps, stopped: false }
    }
    fn growable(&self) -> bool {
        self.ramps && !self.stopped && self.current < self.max
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Baseline,
    Trial { dim: Dimension, previous: u64 },
    Settled,
}

/// The rungs one sequence ran at, carried in its contract so its measured
/// throughput feeds the right ramp.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RampTicket {
    pub(crate) key: (Class, usize),
    pub(crate) epoch: u64,
    pub(crate) exercised: bool,
}

/// The current rungs of one ramp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RampLimits {
    /// CPUs, whole.
    pub cpus: u64,
    /// In-flight units.
    pub inflight: u64,
    /// Batch maximum.
    pub batch: u64,
}

/// Throughput ramp for one (class, alternative).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ramp {
    cpus: Rung,
    inflight: Rung,
    batch: Rung,
    epoch: u64,
    phase: Phase,
    baseline: Option<u64>,
    observations: Vec<u64>,
    pub(crate) touched: u64,
}

impl Ramp {
    pub(crate) fn new(alt: &Alternative, compute_cpus: u32) -> Self {
        let desired =
            u64::from(alt.estimate.cpus.div_ceil(MILLIS_PER_CPU).max(1)).min(u64::from(compute_cpus.max(1)));
        Ramp {
            cpus: Rung::new(1, desired, alt.ramp_cpus),
            inflight: Rung::new(
                u64::from(alt.inflight.0),
                u64::from(alt.inflight.1),
                alt.inflight.0 < alt.inflight.1,
            ),
            batch: Rung::new(alt.estimate.batch_min, alt.estimate.batch_max, alt.ramp_batch),
            epoch: 0,
            phase: Phase::Baseline,
            baseline: None,
            observations: Vec::new(),
            touched: 0,
        }
    }

    pub(crate) fn limits(&self) -> RampLimits {
        RampLimits { cpus: self.cpus.current, inflight: self.inflight.current, batch: self.batch.current }
    }

    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    fn rung_mut(&mut self, dim: Dimension) -> &mut Rung {
        match dim {
            Dimension::Cpus => &mut self.cpus,
            Dimension::Inflight => &mut self.inflight,
            Dimension::Batch => &mut self.batch,
        }
    }

    /// The dimension on trial, if any.
    #[cfg(test)]
    pub(crate) fn trial(&self) -> Option<Dimension> {
        match self.phase {
            Phase::Trial { dim, .. } => Some(dim),
            _ => None,
        }
    }

    /// Back to the minimums, forgetting every trial (pressure).
    pub(crate) fn reset(&mut self) {
        for dim in ORDER {
            let r = self.rung_mut(dim);
            r.stopped = false;
            if r.ramps {
                r.current = r.min;
            }
        }
        self.epoch += 1;
        self.phase = Phase::Baseline;
        self.baseline = None;
        self.observations.clear();
    }

    /// Resets unless already fresh (at the minimums, no evidence), so that
    /// a long pressure episode does not churn epochs.
    pub(crate) fn reset_unless_fresh(&mut self) {
        let fresh = self.phase == Phase::Baseline
            && self.observations.is_empty()
            && ORDER.iter().all(|&d| {
                let r = match d {
                    Dimension::Cpus => &self.cpus,
                    Dimension::Inflight => &self.inflight,
                    Dimension::Batch => &self.batch,
                };
                !r.stopped && (!r.ramps || r.current == r.min)
            });
        if !fresh {
            self.reset();
        }
    }

    /// Feeds the rate (milli-items per second) of one sequence run at
    /// `epoch`. Returns false when the evidence was ignored.
    pub(crate) fn observe(&mut self, epoch: u64, exercised: bool, rate: u64) -> bool {
        if epoch != self.epoch || !exercised || self.phase == Phase::Settled {
            return false;
        }
        self.observations.push(rate);
        if self.observations.len() < SEQUENCES_PER_STEP {
            return true;
        }
        match self.phase {
            Phase::Baseline => {
                let sum: u128 = self.observations.iter().map(|&r| u128::from(r)).sum();
                self.baseline =
                    Some(u64::try_from(sum / self.observations.len() as u128).unwrap_or(u64::MAX));
            }
            Phase::Trial { dim, previous } => {
                let trial = self.observations.iter().copied().min().unwrap_or(0);
                let baseline = self.baseline.unwrap_or(0);
                let improved =
                    if baseline == 0 { trial > 0 } else { trial >= baseline + baseline.div_ceil(20) };
                if improved {
                    self.baseline = Some(trial);
                } else {
                    let rung = self.rung_mut(dim);
                    rung.current = previous;
                    rung.stopped = true;
                }
            }
            Phase::Settled => {}
        }
        self.observations.clear();
        self.open_next_trial();
        true
    }

    fn open_next_trial(&mut self) {
        for dim in ORDER {
            let rung = self.rung_mut(dim);
            if rung.growable() {
                let previous = rung.current;
                rung.current = previous.saturating_mul(2).min(rung.max);
                self.phase = Phase::Trial { dim, previous };
                return;
            }
        }
        self.phase = Phase::Settled;
    }

    /// The estimate to admit at the current rungs.
    pub(crate) fn operational_estimate(&self, alt: &Alternative) -> Estimate {
        let mut e = alt.estimate.clone();
        if alt.ramp_cpus {
            e.cpus = u32::try_from(self.cpus.current.saturating_mul(u64::from(MILLIS_PER_CPU)))
                .unwrap_or(u32::MAX);
        }
        if alt.ramp_batch {
            e.batch_max = self.batch.current.max(e.batch_min);
        }
        let extra = alt.gpu_memory_per_inflight.saturating_mul(self.inflight.current);
        e.gpu_memory_fixed = e.gpu_memory_fixed.saturating_add(extra);
        e
    }

    pub(crate) fn ramps(alt: &Alternative) -> bool {
        alt.ramps()
    }
}

/// Sequence rate in milli-items per second.
pub(crate) fn rate(items: u64, wall: std::time::Duration) -> u64 {
    let nanos = wall.as_nanos().max(1);
    u64::try_from(u128::from(items) * 1_000_000_000_000 / nanos).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu_alt(cpus: u32) -> Alternative {
        Alternative::new("cpu", Estimate::builder().cpus(cpus).build()).ramp_cpus()
    }

    /// Drives the ramp with a throughput model and returns the CPU rung of
    /// each sequence.
    fn drive(ramp: &mut Ramp, sequences: usize, model: impl Fn(u64) -> u64) -> Vec<u64> {
        let mut seen = Vec::new();
        for _ in 0..sequences {
            let cpus = ramp.limits().cpus;
            seen.push(cpus);
            ramp.observe(ramp.epoch(), true, model(cpus));
        }
        seen
    }

    #[test]
    fn cpu_ramp_doubles_to_the_exact_maximum() {
        let mut ramp = Ramp::new(&cpu_alt(28), 28);
        let seen = drive(&mut ramp, 14, |cpus| cpus * 1000);
        assert_eq!(seen, vec![1, 1, 2, 2, 4, 4, 8, 8, 16, 16, 28, 28, 28, 28]);
    }

    #[test]
    fn pool_caps_the_ramp() {
        let mut ramp = Ramp::new(&cpu_alt(64), 6);
        let seen = drive(&mut ramp, 10, |cpus| cpus * 1000);
        assert_eq!(seen, vec![1, 1, 2, 2, 4, 4, 6, 6, 6, 6]);
    }

    #[test]
    fn a_trial_gaining_less_than_5_percent_is_reverted() {
        let mut ramp = Ramp::new(&cpu_alt(8), 8);
        // 1 CPU: 1000; 2 CPUs: 1049 (< 1000 + 50): reverted and stopped.
        let seen = drive(&mut ramp, 8, |cpus| if cpus == 1 { 1000 } else { 1049 });
        assert_eq!(seen, vec![1, 1, 2, 2, 1, 1, 1, 1]);
        assert_eq!(ramp.trial(), None);
    }

    #[test]
    fn exactly_5_percent_is_kept() {
        let mut ramp = Ramp::new(&cpu_alt(2), 8);
        let seen = drive(&mut ramp, 6, |cpus| if cpus == 1 { 1000 } else { 1050 });
        assert_eq!(seen, vec![1, 1, 2, 2, 2, 2]);
    }

    #[test]
    fn a_trial_is_judged_by_its_minimum_rate() {
        let mut ramp = Ramp::new(&cpu_alt(4), 8);
        ramp.observe(0, true, 1000);
        ramp.observe(0, true, 1000);
        assert_eq!(ramp.limits().cpus, 2);
        ramp.observe(0, true, 5000); // one outlier
        ramp.observe(0, true, 1010); // the minimum is no gain
        assert_eq!(ramp.limits().cpus, 1);
    }

    #[test]
    fn pressure_resets_to_the_minimum_and_ignores_old_evidence() {
        let mut ramp = Ramp::new(&cpu_alt(8), 8);
        drive(&mut ramp, 4, |cpus| cpus * 1000);
        assert_eq!(ramp.limits().cpus, 4);
        let old_epoch = ramp.epoch();
        ramp.reset();
        assert_eq!(ramp.limits().cpus, 1);
        assert!(!ramp.observe(old_epoch, true, 99_999), "evidence from before the reset is ignored");
        assert!(!ramp.observe(ramp.epoch(), false, 99_999), "an unexercised trial is ignored");
        assert_eq!(drive(&mut ramp, 4, |cpus| cpus * 1000), vec![1, 1, 2, 2]);
    }

    #[test]
    fn dimensions_ramp_one_at_a_time_in_order() {
        let alt = Alternative::new("gpu", Estimate::builder().cpus(2).batch(1, 4).gpu_slots(1).build())
            .ramp_cpus()
            .ramp_batch()
            .ramp_inflight(1, 2, 100);
        let mut ramp = Ramp::new(&alt, 8);
        let mut seen = Vec::new();
        let mut rate = 1000;
        for _ in 0..12 {
            let l = ramp.limits();
            seen.push((l.cpus, l.inflight, l.batch));
            rate += 1000;
            ramp.observe(ramp.epoch(), true, rate);
        }
        assert_eq!(
            &seen[..10],
            &[
                (1, 1, 1),
                (1, 1, 1),
                (2, 1, 1),
                (2, 1, 1),
                (2, 2, 1),
                (2, 2, 1),
                (2, 2, 2),
                (2, 2, 2),
                (2, 2, 4),
                (2, 2, 4)
            ]
        );
        let e = ramp.operational_estimate(&alt);
        assert_eq!((e.cpus, e.batch_max, e.gpu_memory_fixed), (2000, 4, 200));
    }

    #[test]
    fn envelope_bounds() {
        let e = || Alternative::new("a", Estimate::builder().build());
        assert!(Envelope::new(vec![]).is_err());
        assert!(Envelope::new(vec![e(), e(), e(), e()]).is_ok());
        assert_eq!(Envelope::new(vec![e(), e(), e(), e(), e()]), Err(EnvelopeError::Count(5)));
        assert!(Envelope::new(vec![e().ramp_inflight(3, 2, 0)]).is_err());
    }

    #[test]
    fn rate_is_milli_items_per_second() {
        assert_eq!(rate(10, std::time::Duration::from_secs(1)), 10_000);
        assert_eq!(rate(1, std::time::Duration::ZERO), 1_000_000_000_000);
    }

    #[test]
    fn an_envelope_of_one_is_stored_in_place_and_equal_however_built() {
        let est = Estimate::builder().memory(1 << 30).build();
        let single = Envelope::single(est.clone());
        let built = Envelope::new(vec![Alternative::new("default", est.clone())]);
        let Ok(built) = built else { panic!("one alternative is an envelope: {built:?}") };
        assert!(single.only().is_some() && built.only().is_some(), "one alternative: in place");
        assert_eq!(single, built, "the same lone alternative, built two ways");
        assert_eq!(single.alternatives().len(), 1);
        assert_eq!(single.alternatives()[0].estimate(), &est);
        let two = Envelope::new(vec![cpu_alt(2), Alternative::new("default", est.clone())]);
        let Ok(two) = two else { panic!("two alternatives are an envelope: {two:?}") };
        assert!(two.only().is_none(), "two alternatives: a list");
        assert_eq!(two.alternatives().iter().map(Alternative::name).collect::<Vec<_>>(), ["cpu", "default"]);
        assert_ne!(two, single);
        assert_eq!(
            format!("{single:?}"),
            format!("Envelope {{ alternatives: {:?} }}", single.alternatives())
        );
        // Rewriting the items left reaches every alternative, either form.
        let items = Estimate::builder().memory(1 << 30).items_left(10).build();
        let one = Envelope::single(items.clone()).with_items_left(4);
        assert_eq!(one.items_left(), Some(4));
        let both = Envelope::new(vec![Alternative::new("a", items.clone()), Alternative::new("b", items)]);
        let Ok(both) = both else { panic!("two alternatives are an envelope: {both:?}") };
        assert!(both.with_items_left(3).alternatives().iter().all(|a| a.estimate().items_left() == Some(3)));
        assert_eq!(Envelope::new(Vec::new()), Err(EnvelopeError::Count(0)));
    }
}
