//! Soft memory enforcement: where an agent cannot make a cgroup per task
//! (docs/DESIGN.md §14), a watchdog samples each task's resident memory
//! every [`SOFT_EVERY`] and kills its process group once it breaks the
//! host crate's one RSS kill rule ([`over_limit`]: more than it declared
//! plus a [`tolerance`], the rule the daemon's cgroup-less backend kills
//! by too). The engine's limit on the allocation stays the backstop: a
//! fast allocation can outrun one sample.
//!
//! The rule is pure ([`lardon_host::watchdog`], tested there); the sampler
//! ([`RssSource`]) and the pace are injected, so tests drive the watchdog
//! with scripted samples and ticks. The agent's real sampler is
//! [`HostRss`](super::HostRss), the host crate's process-tree walk.

use std::sync::Arc;
use std::time::Duration;

use lardon_host::HostError;
pub use lardon_host::watchdog::{MIN_TOLERANCE, over_limit, tolerance};

/// How often a watched task's memory is sampled.
pub const SOFT_EVERY: Duration = Duration::from_millis(100);

/// Samples one task's resident memory.
pub trait RssSampler: Send {
    /// The task's processes' resident memory now, bytes.
    ///
    /// # Errors
    /// The host's error when it cannot be read (the watchdog then stops
    /// watching this task, saying so once).
    fn sample(&mut self) -> Result<u64, HostError>;

    /// Kills every process it follows that left the task's process group
    /// (the group itself is killed by the executor). Default: none.
    fn kill_strays(&mut self) {}
}

/// Makes a sampler for each started task.
pub trait RssSource: Send + Sync + std::fmt::Debug + 'static {
    /// A sampler following process `pid` (the task's group leader) and
    /// its descendants.
    ///
    /// # Errors
    /// The host's error when it cannot follow it (the task then runs
    /// unwatched).
    fn watch(&self, pid: u32) -> Result<Box<dyn RssSampler>, HostError>;
}

/// What a watched task is held to.
#[derive(Debug, Clone)]
pub(super) struct SoftLimit {
    pub(super) source: Arc<dyn RssSource>,
    pub(super) declared: u64,
    pub(super) every: Duration,
}

/// The reason a task killed by the watchdog is reported failed with.
#[must_use]
pub fn killed_reason(used: u64, declared: u64) -> String {
    format!("killed by the soft memory watchdog: it used {used} bytes, more than the {declared} it declared")
}

/// When the watchdog samples next: a tokio interval for real, a scripted
/// pace in tests (an injectable clock).
pub(super) trait Pace {
    /// Resolves when the next sample is due.
    fn next(&mut self) -> impl std::future::Future<Output = ()> + Send;
}

impl Pace for tokio::time::Interval {
    async fn next(&mut self) {
        self.tick().await;
    }
}

/// Samples every `every` (the first at once; late ticks are not made up)
/// and resolves with the bytes used at the first sample [`over_limit`]
/// finds over `declared`; never otherwise.
pub(super) async fn watch(sampler: &mut dyn RssSampler, declared: u64, every: Duration, task: &str) -> u64 {
    let mut interval = tokio::time::interval(every.max(Duration::from_millis(1)));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    watch_paced(sampler, declared, task, &mut interval).await
}

/// [`watch`] at `pace`: samples at each of its ticks; a sampler that
/// fails stops the watch (said once), which then never resolves.
pub(super) async fn watch_paced(
    sampler: &mut dyn RssSampler,
    declared: u64,
    task: &str,
    pace: &mut impl Pace,
) -> u64 {
    loop {
        pace.next().await;
        match sampler.sample() {
            Ok(used) if over_limit(used, declared) => return used,
            Ok(_) => {}
            Err(e) => {
                tracing::warn!("task {task}: the soft memory watchdog stops watching it: {e}");
                return std::future::pending().await;
            }
        }
    }
}

#[cfg(test)]
#[path = "watchdog_tests.rs"]
mod tests;
