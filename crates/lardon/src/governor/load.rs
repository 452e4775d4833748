//! # Implementation details
//!
//! The load gate of docs/DESIGN.md §4 step 7 counts only *foreign* load: the
//! host's 1-minute load minus Lardon's own share of it. Lardon's own
//! running tasks must never be the reason it cannot admit the next one.
//!
//! Lardon's share is the larger of the CPUs granted to running
//! reservations now and Lardon's own CPU use averaged the way the kernel
//! averages its load (an exponential average with a 60 s time constant,
//! advanced at every host sample). What is averaged is the CPUs granted
//! since the previous sample **plus** the CPU time the process itself and
//! its reaped children used in that interval ([`Snapshot::own_cpu`], when
//! the probe knows it): a thousand one-millisecond tasks a second hold no
//! grant for long, yet they and the daemon that starts them keep about
//! one and a half CPUs busy, and the kernel's load counts every one of
//! them. Without the measured part that load read as somebody else's and
//! closed the gate on Lardon's own launches.
//!
//! The average matters when tasks end: the kernel's 1-minute load still
//! carries them for about a minute, and without it the load they left
//! behind would read as somebody else's and hold the next task back. The
//! figure granted now matters when tasks start: the kernel's average has
//! not caught up yet, and counting the grant at once errs towards
//! admitting, never towards blaming ourselves.
//!
//! A long task's CPU time reaches the children's total only when it is
//! reaped, all at once, although its grant already counted while it ran:
//! the measured rate of one interval is capped at the host's CPU count, so
//! that step adds at most one interval's worth of phantom load.
//!
//! [`Snapshot::own_cpu`]: crate::Snapshot::own_cpu

use std::time::Duration;

use crate::clock::MonoTime;

/// The kernel's time constant for the 1-minute load average.
const LOAD_WINDOW: Duration = Duration::from_secs(60);

/// Lardon's own CPUs, averaged like the kernel's 1-minute load.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct OwnLoad {
    average: f64,
    at: Option<MonoTime>,
    /// The process's own CPU time at `at`, when the probe reported it.
    cpu: Option<Duration>,
}

impl OwnLoad {
    /// Advances the average to `at`, with `granted` CPUs held since the
    /// previous sample and `cpu` the process's own CPU time now (itself
    /// and its reaped children); the rate measured from it is capped at
    /// `cpus`, the host's CPU count. A sample not later than the previous
    /// one changes nothing.
    pub(crate) fn advance(&mut self, at: MonoTime, granted: f64, cpu: Option<Duration>, cpus: f64) {
        let Some(before) = self.at else {
            // Nothing of ours ran before the first sample.
            self.at = Some(at);
            self.cpu = cpu;
            return;
        };
        let Some(dt) = at.checked_since(before).filter(|dt| !dt.is_zero()) else { return };
        let measured = match (self.cpu, cpu) {
            (Some(was), Some(now)) => {
                (now.saturating_sub(was).as_secs_f64() / dt.as_secs_f64()).min(cpus.max(0.0))
            }
            _ => 0.0,
        };
        let keep = (-dt.as_secs_f64() / LOAD_WINDOW.as_secs_f64()).exp();
        self.average = self.average * keep + (granted + measured) * (1.0 - keep);
        debug_assert!(self.average.is_finite() && self.average >= 0.0, "own load {}", self.average);
        self.at = Some(at);
        self.cpu = cpu;
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
        own.advance(MonoTime(0), 2.0, None, 2.0);
        assert_eq!(own.share(0.0), 0.0, "the first sample only sets the time");
        own.advance(MonoTime(60 * SECOND), 2.0, None, 2.0);
        // One time constant: 1 − 1/e of the way.
        assert!((own.share(0.0) - 2.0 * (1.0 - (-1.0f64).exp())).abs() < 1e-9);
        own.advance(MonoTime(60 * SECOND), 0.0, None, 2.0);
        assert!(own.share(0.0) > 1.2, "a repeated sample time changes nothing");
        own.advance(MonoTime(600 * SECOND), 0.0, None, 2.0);
        assert!(own.share(0.0) < 0.01, "it fades once our tasks are gone");
        assert_eq!(own.share(3.0), 3.0, "a grant counts at once");
    }

    #[test]
    fn the_process_and_its_reaped_children_count_as_own_load() {
        // 1.6 CPU-seconds a second, sampled every 10 ms, no grant held:
        // short tasks and the daemon that starts them.
        let mut own = OwnLoad::default();
        let mut cpu = Duration::ZERO;
        for step in 0..=30_000u64 {
            own.advance(MonoTime(step * SECOND / 100), 0.0, Some(cpu), 2.0);
            cpu += Duration::from_millis(16);
        }
        // Five minutes: five time constants.
        assert!((own.share(0.0) - 1.6).abs() < 0.02, "{}", own.share(0.0));
        // Without the measured figure the same run reads as no load of ours.
        let mut blind = OwnLoad::default();
        for step in 0..=30_000u64 {
            blind.advance(MonoTime(step * SECOND / 100), 0.0, None, 2.0);
        }
        assert_eq!(blind.share(0.0), 0.0);
    }

    #[test]
    fn a_long_task_reaped_at_once_adds_at_most_one_capped_interval() {
        let mut own = OwnLoad::default();
        own.advance(MonoTime(0), 1.0, Some(Duration::ZERO), 2.0);
        own.advance(MonoTime(600 * SECOND), 1.0, Some(Duration::ZERO), 2.0);
        let running = own.share(0.0);
        assert!((running - 1.0).abs() < 1e-3, "{running}");
        // Reaped: 600 CPU-seconds show up in one 5 s interval, its grant gone.
        own.advance(MonoTime(605 * SECOND), 0.0, Some(Duration::from_secs(600)), 2.0);
        let keep = (-5.0f64 / 60.0).exp();
        let expected = running * keep + 2.0 * (1.0 - keep);
        assert!((own.share(0.0) - expected).abs() < 1e-9, "{} vs {expected}", own.share(0.0));
        // A counter that went backwards (another process's figure) adds nothing.
        own.advance(MonoTime(610 * SECOND), 0.0, Some(Duration::ZERO), 2.0);
        assert!(own.share(0.0) < expected);
    }

    #[test]
    fn the_gate_compares_foreign_load_and_off_never_holds() {
        let at = |foreign: f64, threshold| LoadFigures { load: foreign, own: 0.0, foreign, threshold };
        assert!(at(1.8, Some(1.8)).reached(), "at the threshold holds");
        assert!(!at(1.79, Some(1.8)).reached());
        assert!(!at(1e9, None).reached());
    }
}
