//! How an agent stops when asked to (docs/DESIGN.md §14): Slurm sends
//! SIGTERM a grace before the walltime (`--signal=B:TERM@grace`),
//! Kubernetes before an eviction.
//!
//! * The **first** stop request starts a drain: the agent takes nothing
//!   new (an assignment that still arrives is answered WAIT, so it goes
//!   back to its route), tells the broker it is draining with the tasks it
//!   still runs (the broker queues every other task it had given it again
//!   at once), lets the running ones finish and reports them; once nothing
//!   runs and every report is acknowledged it exits 0.
//! * A **second** request, or the grace running out, cancels what still
//!   runs; their reports are not sent, so the broker queues them again
//!   when the agent's stream ends. It exits 0 then too: it did what it was
//!   asked.
//!
//! The grace defaults to the signal's lead time: the time left before the
//! allocation ends (less [`Drain::MARGIN`], for the reports to get out
//! before the engine kills the agent), or [`Drain::DEFAULT_GRACE`] when the
//! end is not known (Kubernetes' default termination grace is 30 s).

use std::time::Duration;

use tokio::time::Instant;

/// Where the agent is in its stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Serving,
    Draining { until: Instant },
    Stopping,
}

/// What a stop request does now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Start draining (the first request).
    Drain,
    /// Cancel what runs and exit (a second request).
    Stop,
}

/// An agent's stop state (see the module docs). The phase only moves
/// forward: serving → draining → stopping.
#[derive(Debug, Clone)]
pub(crate) struct Drain {
    phase: Phase,
}

impl Drain {
    /// Kept back from the allocation's end for the last reports.
    pub(crate) const MARGIN: Duration = Duration::from_secs(5);
    /// The grace when the allocation's end is not known.
    pub(crate) const DEFAULT_GRACE: Duration = Duration::from_secs(25);

    /// Serving.
    pub(crate) fn new() -> Self {
        Drain { phase: Phase::Serving }
    }

    /// A stop request arrived at `now`; a drain it starts lasts `grace`.
    pub(crate) fn request(&mut self, now: Instant, grace: Duration) -> Step {
        match self.phase {
            Phase::Serving => {
                self.phase = Phase::Draining { until: now + grace };
                Step::Drain
            }
            Phase::Draining { .. } | Phase::Stopping => {
                self.phase = Phase::Stopping;
                Step::Stop
            }
        }
    }

    /// The grace ran out: stop.
    pub(crate) fn expire(&mut self) {
        self.phase = Phase::Stopping;
    }

    /// Draining or stopping: nothing new is taken.
    pub(crate) fn is_draining(&self) -> bool {
        self.phase != Phase::Serving
    }

    /// When the grace ends, while draining.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        match self.phase {
            Phase::Draining { until } => Some(until),
            _ => None,
        }
    }
}

/// The default grace for a stop request at `now_ms` from an allocation
/// that ends at `ends_at_ms` (Unix milliseconds): the time left less
/// [`Drain::MARGIN`], at least one second; `None` without an end.
pub(crate) fn grace_from_end(ends_at_ms: Option<u64>, now_ms: u64) -> Option<Duration> {
    let left = Duration::from_millis(ends_at_ms?.saturating_sub(now_ms));
    Some(left.saturating_sub(Drain::MARGIN).max(Duration::from_secs(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_request_drains_and_the_second_stops() {
        let mut d = Drain::new();
        assert!(!d.is_draining() && d.deadline().is_none());
        let now = Instant::now();
        assert_eq!(d.request(now, Duration::from_secs(40)), Step::Drain);
        assert_eq!(d.deadline(), Some(now + Duration::from_secs(40)));
        assert!(d.is_draining());
        assert_eq!(d.request(now, Duration::from_secs(40)), Step::Stop);
        assert_eq!(d.deadline(), None, "stopping: no grace left to wait for");
        assert!(d.is_draining(), "never serves again");
        let mut d = Drain::new();
        d.request(now, Duration::from_secs(3));
        d.expire();
        assert_eq!((d.deadline(), d.request(now, Duration::from_secs(3))), (None, Step::Stop));
    }

    #[test]
    fn the_default_grace_is_the_time_left_before_the_allocation_ends_less_a_margin() {
        // Slurm's --signal=B:TERM@120 arrives 120 s before the end.
        assert_eq!(grace_from_end(Some(1_120_000), 1_000_000), Some(Duration::from_secs(115)));
        assert_eq!(grace_from_end(Some(1_002_000), 1_000_000), Some(Duration::from_secs(1)), "at least 1 s");
        assert_eq!(grace_from_end(Some(5), 1_000_000), Some(Duration::from_secs(1)), "already past");
        assert_eq!(grace_from_end(None, 1_000_000), None);
    }
}
