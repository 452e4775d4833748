//! A provider's track record: the dry run, the back-off ladder after
//! failed submissions, and the pause after too many failures in a row.

use std::time::{Duration, Instant};

/// Waits after the 1st, 2nd, … successive failed submission (then the
/// last one again): 0, 1, 15, 30, 60 minutes.
pub const BACKOFF_LADDER: [Duration; 5] = [
    Duration::ZERO,
    Duration::from_secs(60),
    Duration::from_secs(15 * 60),
    Duration::from_secs(30 * 60),
    Duration::from_secs(60 * 60),
];

/// Successive failed submissions that pause the provider.
pub const MAX_SUBMIT_FAILURES: u32 = 10;
/// Successive allocations that failed to start that pause the provider.
pub const MAX_START_FAILURES: u32 = 3;

/// What the Provisioner remembers of one provider. Fields are private so
/// that every change goes through the `record_*` methods, which keep the
/// ladder and the pause consistent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    dry_run_passed: bool,
    submit_failures: u32,
    start_failures: u32,
    retry_at: Option<Instant>,
    paused: Option<String>,
}

impl Default for Health {
    fn default() -> Self {
        Self::new()
    }
}

impl Health {
    /// A provider just added: it must pass a dry run before anything is
    /// submitted for real.
    #[must_use]
    pub fn new() -> Self {
        Health { dry_run_passed: false, submit_failures: 0, start_failures: 0, retry_at: None, paused: None }
    }

    /// Whether the dry run passed.
    #[must_use]
    pub fn dry_run_passed(&self) -> bool {
        self.dry_run_passed
    }

    /// Why the provider is paused, if it is (a person must resume it).
    #[must_use]
    pub fn paused(&self) -> Option<&str> {
        self.paused.as_deref()
    }

    /// Until when submissions wait after a failure, if later than `now`.
    #[must_use]
    pub fn backing_off(&self, now: Instant) -> Option<Instant> {
        self.retry_at.filter(|t| *t > now)
    }

    /// The dry run's result. A failed dry run pauses the provider with
    /// its error: its configuration is wrong, and retrying cannot help.
    pub fn record_dry_run(&mut self, result: Result<(), String>) {
        match result {
            Ok(()) => self.dry_run_passed = true,
            Err(e) => self.paused = Some(format!("the dry run failed: {e}")),
        }
    }

    /// A real submission's result at `now`: success clears the ladder; a
    /// failure climbs it, and the tenth in a row pauses the provider.
    pub fn record_submit(&mut self, result: Result<(), String>, now: Instant) {
        match result {
            Ok(()) => {
                self.submit_failures = 0;
                self.retry_at = None;
            }
            Err(e) => {
                self.submit_failures = self.submit_failures.saturating_add(1);
                let step = (self.submit_failures as usize - 1).min(BACKOFF_LADDER.len() - 1);
                self.retry_at = Some(now + BACKOFF_LADDER[step]);
                if self.submit_failures >= MAX_SUBMIT_FAILURES {
                    self.paused =
                        Some(format!("{} submissions failed in a row; the last: {e}", self.submit_failures));
                }
            }
        }
    }

    /// An allocation ended: `started` says whether its agent ever said
    /// hello. The third in a row that never started pauses the provider.
    pub fn record_allocation_end(&mut self, started: bool, detail: &str) {
        if started {
            self.start_failures = 0;
            return;
        }
        self.start_failures = self.start_failures.saturating_add(1);
        if self.start_failures >= MAX_START_FAILURES {
            self.paused = Some(format!(
                "{} allocations in a row ended before their agent started; the last: {detail}",
                self.start_failures
            ));
        }
    }

    /// A person resumed the provider: the pause and the ladder are cleared
    /// (the dry run's pass is kept).
    pub fn resume(&mut self) {
        self.paused = None;
        self.submit_failures = 0;
        self.start_failures = 0;
        self.retry_at = None;
    }
}
