//! Soft memory enforcement: where an agent cannot make a cgroup per task
//! (docs/DESIGN.md §14), a watchdog samples each task's resident memory
//! every [`SOFT_EVERY`] and kills its process group once it uses more than
//! it declared plus a [`tolerance`]. The engine's limit on the allocation
//! stays the backstop: a fast allocation can outrun one sample.
//!
//! The decision ([`over_limit`]) is pure, and the sampler ([`RssSource`])
//! and the pace are injected, so tests drive the watchdog with scripted
//! samples and ticks; the agent's real sampler is the host crate's
//! process-tree walk (the CLI supplies it: this crate reads no `/proc`).

use std::sync::Arc;
use std::time::Duration;

/// How often a watched task's memory is sampled.
pub const SOFT_EVERY: Duration = Duration::from_millis(100);

/// The least slack over a declaration: 8 MiB.
pub const MIN_TOLERANCE: u64 = 8 << 20;

/// How far past its declaration a task may go before the watchdog kills
/// it: 5 % of the declaration, at least [`MIN_TOLERANCE`]. The samples sum
/// each process's RSS, which counts shared pages (libraries) once per
/// process, so an honest task of several small processes reads a little
/// over what it really uses.
#[must_use]
pub fn tolerance(declared: u64) -> u64 {
    (declared / 20).max(MIN_TOLERANCE)
}

/// Whether `used` bytes break a declaration of `declared` bytes: more than
/// `declared` + [`tolerance`]. Nothing declared (0) is never broken: there
/// is nothing to hold the task to.
#[must_use]
pub fn over_limit(used: u64, declared: u64) -> bool {
    declared > 0 && used > declared.saturating_add(tolerance(declared))
}

/// Samples one task's resident memory.
pub trait RssSampler: Send {
    /// The task's processes' resident memory now, bytes.
    ///
    /// # Errors
    /// Why it cannot be read (the watchdog then stops watching this task,
    /// saying so once).
    fn sample(&mut self) -> Result<u64, String>;

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
    /// Why it cannot follow it (the task then runs unwatched).
    fn watch(&self, pid: u32) -> Result<Box<dyn RssSampler>, String>;
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

/// An executor that runs tasks as [`ProcessExecutor`](super::ProcessExecutor)
/// does, each task that declared its memory watched by the soft memory
/// watchdog (see the module docs).
#[derive(Debug, Clone)]
pub struct WatchedExecutor {
    source: Arc<dyn RssSource>,
    every: Duration,
}

impl WatchedExecutor {
    /// Samples tasks with `source` every [`SOFT_EVERY`].
    #[must_use]
    pub fn new(source: Arc<dyn RssSource>) -> Self {
        WatchedExecutor { source, every: SOFT_EVERY }
    }

    /// Samples every `every` instead (tests).
    #[must_use]
    pub fn every(mut self, every: Duration) -> Self {
        self.every = every;
        self
    }

    fn limit(&self, spec: &lardon_proto::cluster::TaskSpec) -> Option<SoftLimit> {
        let declared = spec.need.map_or(0, |n| n.memory);
        (declared > 0).then(|| SoftLimit { source: Arc::clone(&self.source), declared, every: self.every })
    }
}

impl super::Executor for WatchedExecutor {
    fn run(
        &self,
        spec: lardon_proto::cluster::TaskSpec,
        cancel: tokio::sync::oneshot::Receiver<()>,
    ) -> super::Running {
        let limit = self.limit(&spec).map_or(super::exec::Limit::None, super::exec::Limit::Soft);
        Box::pin(super::exec::run_process(spec, None, cancel, limit))
    }

    fn run_in(
        &self,
        spec: lardon_proto::cluster::TaskSpec,
        dir: &std::path::Path,
        cancel: tokio::sync::oneshot::Receiver<()>,
    ) -> super::Running {
        let limit = self.limit(&spec).map_or(super::exec::Limit::None, super::exec::Limit::Soft);
        Box::pin(super::exec::run_process(spec, Some(dir.to_path_buf()), cancel, limit))
    }
}

#[cfg(test)]
#[path = "watchdog_tests.rs"]
mod tests;
