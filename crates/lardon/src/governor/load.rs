//! # Implementation details
//!
//! The load gate of docs/DESIGN.md §4 step 7 counts only *foreign* load: the
//! host's 1-minute load minus Lardon's own share of it. Lardon's own
//! running tasks must never be the reason it cannot admit the next one.
//!
//! Lardon's share is the larger of the CPUs granted to running
//! reservations now and the same figure averaged the way the kernel
//! averages its load (an exponential average with a 60 s time constant,
//! advanced at every host sample). The average matters when tasks end:
//! the kernel's 1-minute load still carries them for about a minute, and
//! without it the load they left behind would read as somebody else's and
//! hold the next task back (hundreds of short tasks in a row would throttle
//! themselves). The figure granted now matters when tasks start: the
//! kernel's average has not caught up yet, and counting the grant at once
//! errs towards admitting, never towards blaming ourselves.

use std::time::Duration;

use crate::clock::MonoTime;

/// The kernel's time constant for the 1-minute load average.
const LOAD_WINDOW: Duration = Duration::from_secs(60);

/// Lardon's own CPUs, averaged like the kernel's 1-minute load.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct OwnLoad {
    average: f64,
    at: Option<MonoTime>,
}

impl OwnLoad {
    /// Advances the average to `at`, with `granted` CPUs held since the
    /// previous sample. A sample not later than the previous one changes
    /// nothing.
    pub(crate) fn advance(&mut self, at: MonoTime, granted: f64) {
        let Some(before) = self.at else {
            // Nothing of ours ran before the first sample.
            self.at = Some(at);
            return;
        };
        let Some(dt) = at.checked_since(before) else { return };
        let keep = (-dt.as_secs_f64() / LOAD_WINDOW.as_secs_f64()).exp();
        self.average = self.average * keep + granted * (1.0 - keep);
        self.at = Some(at);
    }

    /// Lardon's share of the 1-minute load with `granted` CPUs held now.
    pub(crate) fn share(&self, granted: f64) -> f64 {
        granted.max(self.average)
    }
}

/// The load gate's figures for one snapshot.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct LoadFigures {
    /// The host's 1-minute load.
    pub(crate) load: f64,
    /// Lardon's share of it.
    pub(crate) own: f64,
    /// `max(0, load − own)`.
    pub(crate) foreign: f64,
    /// `max_load_ratio × compute pool`; `None` when the gate is off.
    pub(crate) threshold: Option<f64>,
}

impl LoadFigures {
    /// Whether the gate holds admission.
    pub(crate) fn reached(&self) -> bool {
        self.threshold.is_some_and(|t| self.foreign >= t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000_000;

    #[test]
    fn the_average_follows_the_kernels_one_minute_decay() {
        let mut own = OwnLoad::default();
        own.advance(MonoTime(0), 2.0);
        assert_eq!(own.share(0.0), 0.0, "the first sample only sets the time");
        own.advance(MonoTime(60 * SECOND), 2.0);
        // One time constant: 1 − 1/e of the way.
        assert!((own.share(0.0) - 2.0 * (1.0 - (-1.0f64).exp())).abs() < 1e-9);
        own.advance(MonoTime(60 * SECOND), 0.0);
        assert!(own.share(0.0) > 1.2, "a repeated sample time changes nothing");
        own.advance(MonoTime(600 * SECOND), 0.0);
        assert!(own.share(0.0) < 0.01, "it fades once our tasks are gone");
        assert_eq!(own.share(3.0), 3.0, "a grant counts at once");
    }

    #[test]
    fn the_gate_compares_foreign_load_and_off_never_holds() {
        let at = |foreign: f64, threshold| LoadFigures { load: foreign, own: 0.0, foreign, threshold };
        assert!(at(1.8, Some(1.8)).reached(), "at the threshold holds");
        assert!(!at(1.79, Some(1.8)).reached());
        assert!(!at(1e9, None).reached());
    }
}
