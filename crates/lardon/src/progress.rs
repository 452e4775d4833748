//! Progress, throughput and ETA of one task (docs/DESIGN.md §9): a pure model.
//!
//! A [`ProgressTracker`] is fed the task's lifecycle ([`start`], [`pause`],
//! [`resume`], [`finish`]) and its progress reports ([`update`] for items
//! `done/total`, [`update_percent`] for a percentage), each stamped with a
//! caller-supplied [`MonoTime`]. It never reads a clock and never sleeps, so
//! every rule is deterministic. [`view`] turns that into a [`ProgressView`]:
//! an [`EtaState`], the fraction done, the elapsed time, the smoothed
//! throughput and, in state [`EtaState::Known`] only, the ETA.
//!
//! # The rules
//!
//! - **Units.** Progress is items `done/total` (`total > 0`, `done ≤ total`)
//!   or a percentage in hundredths (`0..=10_000`). Every count, rate and
//!   prefix is expressed in the current unit: items, or hundredths of a
//!   percent. Switching between the two restarts the throughput model.
//! - **Elapsed** runs from the first entry into RUNNING to now (or to the
//!   finish); paused time is included, since it is wall time of the attempt.
//! - **Baseline.** Rate timing runs only while RUNNING. On entering RUNNING
//!   the current progress becomes the baseline (`done`, `now`); if no
//!   progress is known yet, the first report while RUNNING is the baseline.
//!   Progress already done at the very first baseline is the *resumed
//!   prefix* (e.g. work done before a restart): it is never counted as
//!   throughput, and [`ProgressView::resumed_prefix`] reports it. Leaving
//!   RUNNING drops the baseline, so pending and paused time never enter a
//!   sample. Report the initial progress (e.g. `update(0, total, now)`) when
//!   the task starts so that its first interval counts.
//! - **Samples.** A report while RUNNING with `Δdone > 0` and `Δt > 0` since
//!   the baseline is a *positive interval*: its sample `Δdone / Δt` (units
//!   per second) feeds the EWMA `new = 0.65·old + 0.35·sample` (the first
//!   sample is taken as is) and the report becomes the new baseline. A
//!   report with `Δdone = 0` changes nothing (the next positive interval
//!   spans the flat period, and the stall clock keeps running). A report
//!   with `Δdone > 0` and `Δt = 0` is not a sample and keeps the baseline, so
//!   its progress is counted by the next interval; there is never a division
//!   by zero. The throughput is known after [`MIN_RATE_SAMPLES`] samples.
//! - **Monotonic guard.** A report whose `done` is below the previous one, or
//!   whose time is before the baseline, restarts the throughput model: the
//!   EWMA and its sample count are cleared and the report becomes the new
//!   baseline. Nothing panics.
//! - **States**, first match wins (see [`EtaState`]): finished COMPLETED →
//!   [`Complete`](EtaState::Complete), or
//!   [`IntegrityError`](EtaState::IntegrityError) when items `done < total`;
//!   finished FAILED or CANCELLED, or no progress reported →
//!   [`Indeterminate`](EtaState::Indeterminate); `done == total` →
//!   [`Complete`](EtaState::Complete); PAUSED →
//!   [`Throttled`](EtaState::Throttled); PENDING →
//!   [`Indeterminate`](EtaState::Indeterminate); pressure not GREEN →
//!   [`Throttled`](EtaState::Throttled); no progress for [`STALL_AFTER`]
//!   or more → [`Stalled`](EtaState::Stalled); fewer than
//!   [`MIN_RATE_SAMPLES`] samples → [`Calculating`](EtaState::Calculating);
//!   otherwise [`Known`](EtaState::Known) with ETA `ceil(remaining / rate)`
//!   whole seconds (an ETA beyond `Duration`'s range is
//!   [`Indeterminate`](EtaState::Indeterminate)).
//!
//! [`start`]: ProgressTracker::start
//! [`pause`]: ProgressTracker::pause
//! [`resume`]: ProgressTracker::resume
//! [`finish`]: ProgressTracker::finish
//! [`update`]: ProgressTracker::update
//! [`update_percent`]: ProgressTracker::update_percent
//! [`view`]: ProgressTracker::view
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use lardon::MonoTime;
//! use lardon::progress::{EtaState, ProgressTracker};
//!
//! let secs = |s: u64| MonoTime(s * 1_000_000_000);
//! let mut tracker = ProgressTracker::new();
//! tracker.start(secs(0))?;
//! tracker.update(20, 100, secs(0))?; // the baseline
//! tracker.update(30, 100, secs(1))?; // 10 items/s
//! tracker.update(50, 100, secs(2))?; // 20 items/s
//!
//! let view = tracker.view(secs(2), true);
//! assert_eq!(view.state, EtaState::Known);
//! assert_eq!(view.rate_per_sec, Some(13.5)); // 0.65·10 + 0.35·20
//! assert_eq!(view.eta, Some(Duration::from_secs(4))); // ceil(50 / 13.5)
//! # Ok::<(), lardon::progress::ProgressError>(())
//! ```

use std::time::Duration;

use thiserror::Error;

use crate::MonoTime;

/// Weight of a new throughput sample in the EWMA: `new = (1 − α)·old + α·sample`.
pub const EWMA_ALPHA: f64 = 0.35;

/// Number of positive intervals after which the throughput (and so the
/// ETA) is known.
pub const MIN_RATE_SAMPLES: u32 = 2;

/// A running task without progress for this long (or longer) is
/// [`EtaState::Stalled`]: exactly 5 s is stalled, 5 s − 1 ns is not.
pub const STALL_AFTER: Duration = Duration::from_secs(5);

/// Hundredths of a percent in 100 %.
pub const PERCENT_SCALE: u16 = 10_000;

/// The largest `f64` below 1.0: the most a fraction of unfinished work shows.
const BELOW_ONE: f64 = 1.0 - f64::EPSILON / 2.0;

/// An invalid progress report or lifecycle change. The tracker is left
/// unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum ProgressError {
    /// Items progress needs a positive total.
    #[error("progress total must be positive")]
    ZeroTotal,
    /// More items done than there are.
    #[error("progress done ({done}) exceeds total ({total})")]
    DoneExceedsTotal {
        /// Items reported done.
        done: u64,
        /// Items in total.
        total: u64,
    },
    /// A percentage above 100 %.
    #[error("percentage out of range: {hundredths} hundredths of a percent (at most 10000)")]
    PercentOutOfRange {
        /// The value reported, in hundredths of a percent.
        hundredths: u16,
    },
    /// The task has finished: its progress and lifecycle are final.
    #[error("the task has finished; its progress is final")]
    Finished,
}

/// One progress report: items or a percentage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Progress {
    /// `done` of `total` items (`0 < total`, `done ≤ total`).
    Items {
        /// Items done.
        done: u64,
        /// Items in total.
        total: u64,
    },
    /// A percentage, in hundredths (`0..=10_000`).
    Percent {
        /// Hundredths of a percent done.
        hundredths: u16,
    },
}

impl Progress {
    /// Items progress, checked: `total > 0` and `done ≤ total`.
    ///
    /// ```
    /// use lardon::progress::{Progress, ProgressError};
    /// assert!(Progress::items(3, 10).is_ok());
    /// assert_eq!(Progress::items(1, 0), Err(ProgressError::ZeroTotal));
    /// ```
    pub fn items(done: u64, total: u64) -> Result<Self, ProgressError> {
        if total == 0 {
            Err(ProgressError::ZeroTotal)
        } else if done > total {
            Err(ProgressError::DoneExceedsTotal { done, total })
        } else {
            Ok(Progress::Items { done, total })
        }
    }

    /// Percent progress in hundredths, checked: at most 10 000 (100 %).
    pub fn percent(hundredths: u16) -> Result<Self, ProgressError> {
        if hundredths > PERCENT_SCALE {
            Err(ProgressError::PercentOutOfRange { hundredths })
        } else {
            Ok(Progress::Percent { hundredths })
        }
    }

    /// Units done: items, or hundredths of a percent.
    pub fn done(self) -> u64 {
        match self {
            Progress::Items { done, .. } => done,
            Progress::Percent { hundredths } => u64::from(hundredths),
        }
    }

    /// Units in total: items, or 10 000 hundredths.
    pub fn total(self) -> u64 {
        match self {
            Progress::Items { total, .. } => total,
            Progress::Percent { .. } => u64::from(PERCENT_SCALE),
        }
    }

    /// Units left to do.
    pub fn remaining(self) -> u64 {
        self.total().saturating_sub(self.done())
    }

    /// Whether all the work is done (`done == total`).
    pub fn is_done(self) -> bool {
        self.done() >= self.total()
    }

    /// `done / total` in `0.0..=1.0`; exactly 1.0 only when all is done,
    /// however close an unfinished count gets.
    pub fn fraction(self) -> f64 {
        if self.is_done() { 1.0 } else { (self.done() as f64 / self.total() as f64).min(BELOW_ONE) }
    }

    /// The floor percentage in hundredths: the largest `p` with
    /// `done ≥ p·total / 10 000`; 10 000 (100 %) only when all is done.
    ///
    /// ```
    /// use lardon::progress::Progress;
    /// assert_eq!(Progress::items(999, 1000).unwrap().percent_hundredths(), 9990);
    /// assert_eq!(Progress::items(99_999, 100_000).unwrap().percent_hundredths(), 9999);
    /// ```
    pub fn percent_hundredths(self) -> u16 {
        if self.is_done() {
            return PERCENT_SCALE;
        }
        let floor = u128::from(self.done()) * u128::from(PERCENT_SCALE) / u128::from(self.total());
        // done < total, so floor < 10 000.
        u16::try_from(floor).unwrap_or(PERCENT_SCALE - 1)
    }

    fn same_unit(self, other: Progress) -> bool {
        matches!(
            (self, other),
            (Progress::Items { .. }, Progress::Items { .. })
                | (Progress::Percent { .. }, Progress::Percent { .. })
        )
    }
}

/// The lifecycle phase of an unfinished task, as the queue sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Waiting for admission (or for a new one, in a sequence break).
    Pending,
    /// Running its callback: the only phase whose time enters the rate.
    Running,
    /// Paused, pending or running.
    Paused,
}

/// How a task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The callback returned success.
    Completed,
    /// The callback failed, panicked or was rejected.
    Failed,
    /// The task was cancelled.
    Cancelled,
}

/// What can be said about a task's ETA, in the order the states are
/// decided (the module docs give the exact rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EtaState {
    /// All done: finished COMPLETED (items `done == total`, or any
    /// percentage, or no progress reported), or `done == total` while still
    /// active. Shown as 100 %; no ETA.
    Complete,
    /// Finished COMPLETED with items `done < total`: the counts contradict
    /// the outcome. Never shown as 100 %; no ETA.
    IntegrityError,
    /// Paused, or RUNNING while the host's pressure is not GREEN: the rate
    /// does not describe the future.
    Throttled,
    /// Nothing to estimate: no progress reported, PENDING, finished FAILED
    /// or CANCELLED, or an ETA too large to represent.
    Indeterminate,
    /// RUNNING without progress for [`STALL_AFTER`] or more.
    Stalled,
    /// RUNNING with fewer than [`MIN_RATE_SAMPLES`] positive intervals.
    Calculating,
    /// RUNNING with a known throughput: the view carries an ETA.
    Known,
}

/// A consistent read of a task's progress at one instant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProgressView {
    /// The ETA state.
    pub state: EtaState,
    /// The last progress report, if any.
    pub progress: Option<Progress>,
    /// Fraction done in `0.0..=1.0`: 1.0 in state [`EtaState::Complete`],
    /// below 1.0 in [`EtaState::IntegrityError`], otherwise from `progress`
    /// (`None` without one).
    pub fraction: Option<f64>,
    /// Time since the first RUNNING (to the finish, once finished); `None`
    /// if the task never ran.
    pub elapsed: Option<Duration>,
    /// EWMA throughput in units per second (items, or hundredths of a
    /// percent), once [`MIN_RATE_SAMPLES`] positive intervals were seen,
    /// whatever the state; always finite and positive.
    pub rate_per_sec: Option<f64>,
    /// `ceil(remaining / rate)` whole seconds; `Some` exactly in state
    /// [`EtaState::Known`].
    pub eta: Option<Duration>,
    /// Units already done at the first baseline (a resumed prefix), excluded
    /// from the throughput; 0 when none.
    pub resumed_prefix: u64,
}

impl ProgressView {
    /// The floor percentage in hundredths, for display: 10 000 in state
    /// [`EtaState::Complete`], below 10 000 in [`EtaState::IntegrityError`],
    /// otherwise from `progress` (`None` without one).
    pub fn percent_hundredths(&self) -> Option<u16> {
        match self.state {
            EtaState::Complete => Some(PERCENT_SCALE),
            _ => self.progress.map(Progress::percent_hundredths),
        }
    }

    /// Whether the task finished COMPLETED with fewer items done than total.
    pub fn is_integrity_error(&self) -> bool {
        self.state == EtaState::IntegrityError
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lifecycle {
    Active(Phase),
    Finished(Outcome),
}

/// The start of the current rate interval: also the last time progress was
/// made (or rate timing began), which is what the stall clock measures from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Baseline {
    done: u64,
    at: MonoTime,
}

/// The progress/ETA model of one task; see the [module docs](self) for the
/// rules.
#[derive(Debug, Clone, PartialEq)]
pub struct ProgressTracker {
    lifecycle: Lifecycle,
    started_at: Option<MonoTime>,
    finished_at: Option<MonoTime>,
    progress: Option<Progress>,
    /// `Some` once the first baseline in the current unit was taken.
    resumed_prefix: Option<u64>,
    /// `Some` only while RUNNING with progress known.
    baseline: Option<Baseline>,
    ewma: Option<f64>,
    samples: u32,
}

impl Default for ProgressTracker {
    fn default() -> Self {
        ProgressTracker::new()
    }
}

impl ProgressTracker {
    /// A tracker for a PENDING task with no progress reported.
    pub fn new() -> Self {
        ProgressTracker {
            lifecycle: Lifecycle::Active(Phase::Pending),
            started_at: None,
            finished_at: None,
            progress: None,
            resumed_prefix: None,
            baseline: None,
            ewma: None,
            samples: 0,
        }
    }

    /// The last progress report, if any (e.g. to persist it).
    pub fn progress(&self) -> Option<Progress> {
        self.progress
    }

    /// Moves an unfinished task to `phase` at `now`.
    ///
    /// Entering [`Phase::Running`] records the first start (for elapsed) and
    /// takes the current progress, if any, as the baseline; leaving it drops
    /// the baseline so that non-running time never enters a sample. Setting
    /// the current phase again changes nothing. Fails with
    /// [`ProgressError::Finished`] once the task has finished.
    pub fn set_phase(&mut self, phase: Phase, now: MonoTime) -> Result<(), ProgressError> {
        let Lifecycle::Active(current) = self.lifecycle else {
            return Err(ProgressError::Finished);
        };
        if current == phase {
            return Ok(());
        }
        self.lifecycle = Lifecycle::Active(phase);
        if phase == Phase::Running {
            self.started_at.get_or_insert(now);
            self.take_baseline(now);
        } else {
            self.baseline = None;
        }
        Ok(())
    }

    /// The task starts RUNNING: `set_phase(Phase::Running, now)`.
    pub fn start(&mut self, now: MonoTime) -> Result<(), ProgressError> {
        self.set_phase(Phase::Running, now)
    }

    /// The task is paused: `set_phase(Phase::Paused, now)`.
    pub fn pause(&mut self, now: MonoTime) -> Result<(), ProgressError> {
        self.set_phase(Phase::Paused, now)
    }

    /// The task runs again after a pause: `set_phase(Phase::Running, now)`.
    pub fn resume(&mut self, now: MonoTime) -> Result<(), ProgressError> {
        self.set_phase(Phase::Running, now)
    }

    /// Reports `done` of `total` items at `now` (see the module docs for how
    /// reports become samples). Allowed in any unfinished phase: a report
    /// while PENDING (e.g. progress restored after a restart) becomes the
    /// resumed prefix at start.
    pub fn update(&mut self, done: u64, total: u64, now: MonoTime) -> Result<(), ProgressError> {
        self.report(Progress::items(done, total)?, now)
    }

    /// Reports a percentage at `now`, in hundredths (`0..=10_000`).
    pub fn update_percent(&mut self, hundredths: u16, now: MonoTime) -> Result<(), ProgressError> {
        self.report(Progress::percent(hundredths)?, now)
    }

    /// Reports a checked [`Progress`] at `now`.
    pub fn report(&mut self, progress: Progress, now: MonoTime) -> Result<(), ProgressError> {
        let Lifecycle::Active(phase) = self.lifecycle else {
            return Err(ProgressError::Finished);
        };
        let previous = self.progress.replace(progress);
        let running = phase == Phase::Running;
        match previous {
            Some(prev) if !prev.same_unit(progress) => {
                self.resumed_prefix = None;
                self.restart_rate(now, running);
            }
            Some(prev) if progress.done() < prev.done() => self.restart_rate(now, running),
            _ => match self.baseline {
                None if running => self.take_baseline(now),
                None => {}
                Some(base) if now < base.at => self.restart_rate(now, running),
                Some(base) => self.sample(base, progress.done(), now),
            },
        }
        Ok(())
    }

    /// The task ends with `outcome` at `now`; its progress and lifecycle
    /// become final. Fails with [`ProgressError::Finished`] if it had
    /// already ended.
    pub fn finish(&mut self, outcome: Outcome, now: MonoTime) -> Result<(), ProgressError> {
        if let Lifecycle::Finished(_) = self.lifecycle {
            return Err(ProgressError::Finished);
        }
        self.lifecycle = Lifecycle::Finished(outcome);
        self.finished_at = Some(now);
        self.baseline = None;
        Ok(())
    }

    /// The view at `now`, given whether the host's pressure is GREEN.
    pub fn view(&self, now: MonoTime, pressure_green: bool) -> ProgressView {
        let rate_per_sec = self.ewma.filter(|_| self.samples >= MIN_RATE_SAMPLES);
        let (state, eta) = self.state(now, pressure_green, rate_per_sec);
        let fraction = match state {
            EtaState::Complete => Some(1.0),
            _ => self.progress.map(Progress::fraction),
        };
        let end = self.finished_at.unwrap_or(now);
        ProgressView {
            state,
            progress: self.progress,
            fraction,
            elapsed: self.started_at.map(|start| end.saturating_since(start)),
            rate_per_sec,
            eta,
            resumed_prefix: self.resumed_prefix.unwrap_or(0),
        }
    }

    fn state(&self, now: MonoTime, pressure_green: bool, rate: Option<f64>) -> (EtaState, Option<Duration>) {
        let phase = match self.lifecycle {
            Lifecycle::Finished(Outcome::Completed) => {
                return match self.progress {
                    Some(p @ Progress::Items { .. }) if !p.is_done() => (EtaState::IntegrityError, None),
                    _ => (EtaState::Complete, None),
                };
            }
            Lifecycle::Finished(_) => return (EtaState::Indeterminate, None),
            Lifecycle::Active(phase) => phase,
        };
        let Some(progress) = self.progress else {
            return (EtaState::Indeterminate, None);
        };
        if progress.is_done() {
            return (EtaState::Complete, None);
        }
        match phase {
            Phase::Paused => return (EtaState::Throttled, None),
            Phase::Pending => return (EtaState::Indeterminate, None),
            Phase::Running if !pressure_green => return (EtaState::Throttled, None),
            Phase::Running => {}
        }
        let Some(base) = self.baseline else {
            // Unreachable: RUNNING with progress always has a baseline.
            return (EtaState::Indeterminate, None);
        };
        if now.saturating_since(base.at) >= STALL_AFTER {
            return (EtaState::Stalled, None);
        }
        let Some(rate) = rate else {
            return (EtaState::Calculating, None);
        };
        match eta(progress.remaining(), rate) {
            Some(eta) => (EtaState::Known, Some(eta)),
            None => (EtaState::Indeterminate, None),
        }
    }

    /// Takes the current progress as the baseline at `now` (the first one in
    /// the current unit also fixes the resumed prefix).
    fn take_baseline(&mut self, now: MonoTime) {
        self.baseline = self.progress.map(|p| {
            self.resumed_prefix.get_or_insert(p.done());
            Baseline { done: p.done(), at: now }
        });
    }

    /// Clears the throughput model; a running task re-baselines at `now`.
    fn restart_rate(&mut self, now: MonoTime, running: bool) {
        self.ewma = None;
        self.samples = 0;
        self.baseline = None;
        if running {
            self.take_baseline(now);
        }
    }

    /// Folds the interval from `base` to (`done`, `now`) into the EWMA if it
    /// is positive (`Δdone > 0`, `Δt > 0`; the caller checked `now ≥ base.at`
    /// and `done ≥ base.done`).
    fn sample(&mut self, base: Baseline, done: u64, now: MonoTime) {
        let delta_done = done.saturating_sub(base.done);
        let delta_t = now.saturating_since(base.at);
        if delta_done == 0 || delta_t.is_zero() {
            return;
        }
        let sample = delta_done as f64 / delta_t.as_secs_f64();
        self.ewma = Some(match self.ewma {
            None => sample,
            Some(old) => (1.0 - EWMA_ALPHA) * old + EWMA_ALPHA * sample,
        });
        self.samples = self.samples.saturating_add(1);
        self.baseline = Some(Baseline { done, at: now });
    }
}

/// `ceil(remaining / rate)` whole seconds, `None` when not representable.
fn eta(remaining: u64, rate: f64) -> Option<Duration> {
    if rate.is_nan() || rate <= 0.0 {
        return None;
    }
    Duration::try_from_secs_f64((remaining as f64 / rate).ceil()).ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SEC: u64 = 1_000_000_000;

    fn t(secs: u64) -> MonoTime {
        MonoTime(secs * SEC)
    }

    fn ms(millis: u64) -> MonoTime {
        MonoTime(millis * 1_000_000)
    }

    /// A running tracker fed `(done, seconds)` reports of `total` items.
    fn running(total: u64, reports: &[(u64, u64)]) -> ProgressTracker {
        let mut tr = ProgressTracker::new();
        tr.start(t(reports.first().map_or(0, |r| r.1))).unwrap();
        for &(done, at) in reports {
            tr.update(done, total, t(at)).unwrap();
        }
        tr
    }

    #[test]
    fn reproduces_the_reference_example() {
        let tr = running(100, &[(20, 0), (30, 1), (50, 2)]);
        let v = tr.view(t(2), true);
        assert_eq!(v.state, EtaState::Known);
        assert_eq!(v.rate_per_sec, Some(13.5));
        assert_eq!(v.eta, Some(Duration::from_secs(4)));
        assert_eq!(v.fraction, Some(0.5));
        assert_eq!(v.resumed_prefix, 20);
    }

    #[test]
    fn first_report_is_the_baseline_then_calculating_until_two_samples() {
        let mut tr = ProgressTracker::new();
        tr.start(t(0)).unwrap();
        assert_eq!(tr.view(t(0), true).state, EtaState::Indeterminate, "no units yet");
        tr.update(0, 100, t(0)).unwrap();
        assert_eq!(tr.view(t(0), true).state, EtaState::Calculating);
        tr.update(10, 100, t(1)).unwrap();
        let v = tr.view(t(1), true);
        assert_eq!((v.state, v.rate_per_sec, v.eta), (EtaState::Calculating, None, None));
        tr.update(20, 100, t(2)).unwrap();
        let v = tr.view(t(2), true);
        assert_eq!(v.state, EtaState::Known);
        assert_eq!(v.rate_per_sec, Some(10.0));
        assert_eq!(v.eta, Some(Duration::from_secs(8)));
    }

    #[test]
    fn eta_is_rounded_up_to_whole_seconds() {
        // 3 items/s, 10 left: 3.33 s → 4 s.
        let tr = running(16, &[(0, 0), (3, 1), (6, 2)]);
        assert_eq!(tr.view(t(2), true).eta, Some(Duration::from_secs(4)));
    }

    #[test]
    fn pending_with_progress_is_indeterminate() {
        let mut tr = ProgressTracker::new();
        tr.update(5, 10, t(0)).unwrap();
        let v = tr.view(t(1), true);
        assert_eq!((v.state, v.elapsed), (EtaState::Indeterminate, None));
        assert_eq!(v.fraction, Some(0.5));
    }

    #[test]
    fn failed_and_cancelled_are_indeterminate() {
        for outcome in [Outcome::Failed, Outcome::Cancelled] {
            let mut tr = running(100, &[(0, 0), (10, 1), (20, 2)]);
            tr.finish(outcome, t(3)).unwrap();
            let v = tr.view(t(4), true);
            assert_eq!((v.state, v.eta), (EtaState::Indeterminate, None));
            assert_eq!(v.elapsed, Some(Duration::from_secs(3)));
        }
    }

    #[test]
    fn pressure_not_green_throttles_a_running_task() {
        let tr = running(100, &[(20, 0), (30, 1), (50, 2)]);
        let v = tr.view(t(2), false);
        assert_eq!((v.state, v.eta), (EtaState::Throttled, None));
        assert_eq!(v.rate_per_sec, Some(13.5), "the throughput stays known");
    }

    #[test]
    fn paused_is_throttled_even_when_stalled() {
        let mut tr = running(100, &[(20, 0), (30, 1), (50, 2)]);
        tr.pause(t(2)).unwrap();
        assert_eq!(tr.view(t(60), true).state, EtaState::Throttled);
    }

    #[test]
    fn done_equal_total_is_complete_while_active() {
        let tr = running(100, &[(20, 0), (100, 1)]);
        let v = tr.view(t(1), false);
        assert_eq!(
            (v.state, v.eta, v.fraction, v.percent_hundredths()),
            (EtaState::Complete, None, Some(1.0), Some(10_000))
        );
        let mut tr = ProgressTracker::new();
        tr.update_percent(10_000, t(0)).unwrap();
        assert_eq!(tr.view(t(0), true).state, EtaState::Complete);
    }

    #[test]
    fn completed_is_complete_with_full_items_any_percent_or_none() {
        let mut items = running(100, &[(20, 0), (100, 1)]);
        items.finish(Outcome::Completed, t(2)).unwrap();
        let mut percent = ProgressTracker::new();
        percent.start(t(0)).unwrap();
        percent.update_percent(6_000, t(1)).unwrap();
        percent.finish(Outcome::Completed, t(2)).unwrap();
        let mut none = ProgressTracker::new();
        none.start(t(0)).unwrap();
        none.finish(Outcome::Completed, t(2)).unwrap();
        for tr in [items, percent, none] {
            let v = tr.view(t(9), true);
            assert_eq!(v.state, EtaState::Complete);
            assert_eq!((v.fraction, v.percent_hundredths()), (Some(1.0), Some(10_000)));
            assert_eq!(v.elapsed, Some(Duration::from_secs(2)), "frozen at the finish");
            assert!(!v.is_integrity_error());
        }
    }

    #[test]
    fn completed_with_items_missing_is_an_integrity_error_never_100_percent() {
        let mut tr = running(100_000, &[(0, 0), (99_999, 1)]);
        tr.finish(Outcome::Completed, t(2)).unwrap();
        let v = tr.view(t(2), true);
        assert_eq!(v.state, EtaState::IntegrityError);
        assert!(v.is_integrity_error());
        assert_eq!(v.eta, None);
        assert_eq!(v.percent_hundredths(), Some(9_999));
        assert!(v.fraction.unwrap() < 1.0);

        // Even when the ratio rounds to 1.0 in floating point.
        let mut tr = ProgressTracker::new();
        tr.update(u64::MAX - 1, u64::MAX, t(0)).unwrap();
        tr.finish(Outcome::Completed, t(1)).unwrap();
        let v = tr.view(t(1), true);
        assert_eq!(v.state, EtaState::IntegrityError);
        assert!(v.fraction.unwrap() < 1.0);
        assert!(v.percent_hundredths().unwrap() < 10_000);
    }

    #[test]
    fn stalled_after_exactly_five_seconds_without_progress() {
        let tr = running(100, &[(20, 0), (30, 1), (50, 2)]);
        let just_before = t(7) - Duration::from_nanos(1);
        assert_eq!(tr.view(just_before, true).state, EtaState::Known);
        let v = tr.view(t(7), true);
        assert_eq!((v.state, v.eta), (EtaState::Stalled, None));
        // Before any sample, too.
        let tr = running(100, &[(0, 0)]);
        assert_eq!(tr.view(just_before - Duration::from_secs(2), true).state, EtaState::Calculating);
        assert_eq!(tr.view(t(5), true).state, EtaState::Stalled);
    }

    #[test]
    fn flat_reports_do_not_reset_the_stall_clock_but_progress_does() {
        let mut tr = running(100, &[(20, 0), (30, 1), (50, 2)]);
        tr.update(50, 100, t(4)).unwrap();
        tr.update(50, 100, t(6)).unwrap();
        assert_eq!(tr.view(t(7), true).state, EtaState::Stalled);
        tr.update(60, 100, t(8)).unwrap();
        let v = tr.view(t(8), true);
        assert_eq!(v.state, EtaState::Known);
        // The flat period is part of the interval: 10 items over 6 s.
        let expected = 0.65 * 13.5 + 0.35 * (10.0 / 6.0);
        assert!((v.rate_per_sec.unwrap() - expected).abs() < 1e-12);
    }

    #[test]
    fn paused_time_is_excluded_from_the_rate_and_the_stall_clock() {
        let mut tr = running(1000, &[(0, 0), (10, 1)]);
        tr.pause(t(1)).unwrap();
        tr.resume(t(101)).unwrap();
        assert_eq!(tr.view(t(101), true).state, EtaState::Calculating, "not stalled by the pause");
        tr.update(20, 1000, t(102)).unwrap();
        let v = tr.view(t(102), true);
        assert_eq!(v.rate_per_sec, Some(10.0), "10 items in 1 running second, not in 101 s");
        assert_eq!(v.elapsed, Some(Duration::from_secs(102)), "elapsed includes the pause");
    }

    #[test]
    fn progress_made_while_not_running_is_not_a_sample() {
        let mut tr = running(1000, &[(0, 0), (10, 1)]);
        tr.pause(t(1)).unwrap();
        tr.update(40, 1000, t(2)).unwrap();
        tr.resume(t(10)).unwrap();
        tr.update(50, 1000, t(11)).unwrap();
        assert_eq!(tr.view(t(11), true).rate_per_sec, Some(10.0));
    }

    #[test]
    fn pending_time_is_excluded_and_a_restored_prefix_is_not_throughput() {
        let mut tr = ProgressTracker::new();
        tr.update(500, 1000, t(0)).unwrap(); // restored after a restart
        tr.start(t(50)).unwrap();
        tr.update(510, 1000, t(51)).unwrap();
        tr.update(530, 1000, t(52)).unwrap();
        let v = tr.view(t(52), true);
        assert_eq!(v.rate_per_sec, Some(13.5));
        assert_eq!(v.resumed_prefix, 500);
        assert_eq!(v.elapsed, Some(Duration::from_secs(2)), "elapsed counts from the first RUNNING");
        assert_eq!(v.eta, Some(Duration::from_secs(35))); // ceil(470 / 13.5) = ceil(34.8)
    }

    #[test]
    fn resumed_prefix_from_the_first_report_after_start() {
        let tr = running(1000, &[(700, 0), (710, 1), (730, 2)]);
        let v = tr.view(t(2), true);
        assert_eq!((v.resumed_prefix, v.rate_per_sec), (700, Some(13.5)));
        let fresh = running(1000, &[(0, 0)]);
        assert_eq!(fresh.view(t(0), true).resumed_prefix, 0);
    }

    #[test]
    fn percent_mode_reproduces_the_reference_example() {
        let mut tr = ProgressTracker::new();
        tr.start(t(0)).unwrap();
        for (hundredths, at) in [(2_000, 0), (3_000, 1), (5_000, 2)] {
            tr.update_percent(hundredths, t(at)).unwrap();
        }
        let v = tr.view(t(2), true);
        assert_eq!(v.state, EtaState::Known);
        assert_eq!(v.rate_per_sec, Some(1_350.0), "hundredths of a percent per second");
        assert_eq!(v.eta, Some(Duration::from_secs(4)));
        assert_eq!((v.fraction, v.percent_hundredths()), (Some(0.5), Some(5_000)));
    }

    #[test]
    fn switching_units_restarts_the_rate() {
        let mut tr = running(100, &[(20, 0), (30, 1), (50, 2)]);
        tr.update_percent(5_500, ms(2_500)).unwrap();
        let v = tr.view(ms(2_500), true);
        assert_eq!((v.state, v.rate_per_sec, v.resumed_prefix), (EtaState::Calculating, None, 5_500));
        tr.update_percent(6_000, ms(3_500)).unwrap();
        tr.update_percent(7_000, ms(4_500)).unwrap();
        assert_eq!(tr.view(ms(4_500), true).rate_per_sec, Some(0.65 * 500.0 + 0.35 * 1_000.0));
    }

    #[test]
    fn simultaneous_reports_never_divide_by_zero() {
        let mut tr = running(100, &[(0, 0), (10, 0), (20, 0)]);
        assert_eq!(tr.view(t(0), true).rate_per_sec, None);
        // The progress made at t = 0 is counted by the next interval.
        tr.update(30, 100, t(1)).unwrap();
        tr.update(40, 100, t(2)).unwrap();
        let v = tr.view(t(2), true);
        assert_eq!(v.rate_per_sec, Some(0.65 * 30.0 + 0.35 * 10.0));
        assert!(v.eta.is_some());
    }

    #[test]
    fn time_going_backwards_restarts_the_rate() {
        let mut tr = running(100, &[(20, 10), (30, 11), (50, 12)]);
        tr.update(55, 100, t(3)).unwrap();
        let v = tr.view(t(3), true);
        assert_eq!((v.state, v.rate_per_sec), (EtaState::Calculating, None));
        // A view from before the baseline is not stalled and does not panic.
        assert_eq!(tr.view(t(0), true).state, EtaState::Calculating);
        tr.update(60, 100, t(4)).unwrap();
        tr.update(70, 100, t(5)).unwrap();
        assert_eq!(tr.view(t(5), true).rate_per_sec, Some(0.65 * 5.0 + 0.35 * 10.0));
    }

    #[test]
    fn progress_going_backwards_restarts_the_rate() {
        let mut tr = running(100, &[(20, 0), (30, 1), (50, 2)]);
        tr.update(40, 100, t(3)).unwrap();
        let v = tr.view(t(3), true);
        assert_eq!((v.state, v.rate_per_sec, v.fraction), (EtaState::Calculating, None, Some(0.4)));
        tr.update(45, 100, t(4)).unwrap();
        tr.update(55, 100, t(5)).unwrap();
        assert_eq!(tr.view(t(5), true).rate_per_sec, Some(0.65 * 5.0 + 0.35 * 10.0));
    }

    #[test]
    fn an_eta_beyond_duration_is_indeterminate() {
        let tr = running(u64::MAX, &[(0, 0), (1, 100), (2, 200)]);
        let v = tr.view(t(200), true);
        assert_eq!(v.rate_per_sec, Some(0.01));
        assert_eq!((v.state, v.eta), (EtaState::Indeterminate, None));
    }

    #[test]
    fn invalid_reports_are_rejected_and_leave_the_tracker_unchanged() {
        let mut tr = running(100, &[(20, 0), (30, 1)]);
        let before = tr.clone();
        assert_eq!(tr.update(1, 0, t(2)), Err(ProgressError::ZeroTotal));
        assert_eq!(tr.update(11, 10, t(2)), Err(ProgressError::DoneExceedsTotal { done: 11, total: 10 }));
        assert_eq!(
            tr.update_percent(10_001, t(2)),
            Err(ProgressError::PercentOutOfRange { hundredths: 10_001 })
        );
        assert_eq!(tr, before);
    }

    #[test]
    fn a_finished_task_is_final() {
        let mut tr = running(100, &[(20, 0), (30, 1)]);
        tr.finish(Outcome::Failed, t(2)).unwrap();
        let before = tr.clone();
        assert_eq!(tr.update(40, 100, t(3)), Err(ProgressError::Finished));
        assert_eq!(tr.update_percent(1, t(3)), Err(ProgressError::Finished));
        assert_eq!(tr.resume(t(3)), Err(ProgressError::Finished));
        assert_eq!(tr.finish(Outcome::Completed, t(3)), Err(ProgressError::Finished));
        assert_eq!(tr, before);
        assert_eq!(ProgressError::Finished.to_string(), "the task has finished; its progress is final");
    }

    #[test]
    fn setting_the_same_phase_again_keeps_the_baseline() {
        let mut tr = running(100, &[(20, 0), (30, 1)]);
        tr.start(t(3)).unwrap();
        tr.update(50, 100, t(3)).unwrap();
        // The interval runs on from the report at 1 s: 20 items over 2 s.
        assert_eq!(tr.view(t(3), true).rate_per_sec, Some(10.0));
        assert_eq!(tr.view(t(3), true).elapsed, Some(Duration::from_secs(3)));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Phase(Phase),
        Items(u64, u64),
        Percent(u16),
        Finish(Outcome),
        /// Moves time by this many milliseconds (negative: backwards).
        Tick(i64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            prop_oneof![Just(Phase::Pending), Just(Phase::Running), Just(Phase::Paused)].prop_map(Op::Phase),
            (0..200_u64, 0..200_u64).prop_map(|(d, t)| Op::Items(d, t)),
            (any::<u64>(), any::<u64>()).prop_map(|(d, t)| Op::Items(d.min(t), t)),
            (0..10_500_u16).prop_map(Op::Percent),
            prop_oneof![Just(Outcome::Completed), Just(Outcome::Failed), Just(Outcome::Cancelled)]
                .prop_map(Op::Finish),
            (-3_000..8_000_i64).prop_map(Op::Tick),
            (0..3_i64).prop_map(Op::Tick),
        ]
    }

    proptest! {
        #[test]
        fn random_sequences_keep_every_view_sane(
            ops in proptest::collection::vec(op(), 0..60),
            green in proptest::collection::vec(any::<bool>(), 60),
        ) {
            let mut tr = ProgressTracker::new();
            let mut now: u64 = 10_000 * 1_000_000;
            for (i, op) in ops.into_iter().enumerate() {
                let at = MonoTime(now);
                // Errors are fine; panics are not.
                let _ = match op {
                    Op::Phase(p) => tr.set_phase(p, at),
                    Op::Items(d, t) => tr.update(d, t, at),
                    Op::Percent(h) => tr.update_percent(h, at),
                    Op::Finish(o) => tr.finish(o, at),
                    Op::Tick(delta) => {
                        now = now.saturating_add_signed(delta * 1_000_000);
                        Ok(())
                    }
                };
                let v = tr.view(MonoTime(now), green[i]);
                if let Some(rate) = v.rate_per_sec {
                    prop_assert!(rate.is_finite() && rate > 0.0, "rate {rate}");
                }
                prop_assert_eq!(v.eta.is_some(), v.state == EtaState::Known);
                if v.state == EtaState::Known {
                    prop_assert!(v.rate_per_sec.is_some());
                }
                if let Some(f) = v.fraction {
                    prop_assert!((0.0..=1.0).contains(&f), "fraction {f}");
                    prop_assert_eq!(f == 1.0, v.percent_hundredths() == Some(10_000));
                }
                if v.state == EtaState::IntegrityError {
                    prop_assert!(v.percent_hundredths().is_some_and(|p| p < 10_000));
                }
            }
        }
    }
}
