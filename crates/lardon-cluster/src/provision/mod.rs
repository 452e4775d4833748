//! The Provisioner (docs/DESIGN.md §14): the broker asks an existing
//! engine (Slurm, Kubernetes, or nothing) for capacity when its queue holds
//! work no connected agent can take. It owns no machines.
//!
//! The decision is [`plan`], a pure function of the backlog (turned into
//! resources with *learned* per-class peaks and durations), the provider's
//! allocation [`Shape`]s, the allocations already asked for, the
//! [`Limits`], the provider's [`Health`] and the time. It answers with
//! [`Action`]s and, for every demand it does not provision for, a
//! [`Hold`] saying why — what `lardon cluster explain` prints.
//!
//! Safeguards (after HyperQueue's allocation queues): a dry run before the
//! first real submission, a back-off ladder of 0 / 1 / 15 / 30 / 60 minutes
//! after failed submissions, and a pause after 10 successive failed
//! submissions or 3 successive allocations that failed to start.

pub mod command;
mod driver;
mod health;
pub mod kubernetes;
mod launch;
mod local;
mod plan;
mod provider;
pub mod slurm;

pub use driver::{Provisioner, Tracked};
pub use health::{BACKOFF_LADDER, Health, MAX_START_FAILURES, MAX_SUBMIT_FAILURES};
pub use kubernetes::{KubernetesConfig, KubernetesProvider};
pub use launch::AgentLaunch;
pub use local::LocalProvider;
pub use plan::{Action, Hold, Plan, never_fits, plan};
pub use provider::{AllocState, AllocationId, Provider, ProviderError, StaticProvider};
pub use slurm::{SlurmConfig, SlurmProvider, SlurmShape};

use std::time::Duration;

use lardon_cluster_core::Capability;

/// One kind of allocation a provider can grant (a Slurm partition with
/// `--mem`/`--cpus-per-task`/`--time`, a Kubernetes pod template, …).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape {
    /// Its name in the provider's configuration.
    pub name: String,
    /// Memory of each node of one allocation, bytes.
    pub memory: u64,
    /// CPUs of each node of one allocation, thousandths.
    pub cpu_millis: u32,
    /// Nodes of one allocation (one agent each; at least 1).
    pub nodes: u32,
    /// How long an allocation may live.
    pub walltime: Duration,
    /// The capabilities its agent declares.
    pub capabilities: Vec<Capability>,
}

impl Shape {
    /// Tasks of `demand` one allocation runs at once, over all its nodes
    /// (0 if one does not fit on a node).
    fn slots(&self, demand: &Demand) -> u64 {
        let by_memory = self.memory.checked_div(demand.memory).unwrap_or(u64::MAX);
        let by_cpu = u64::from(self.cpu_millis).checked_div(u64::from(demand.cpu_millis)).unwrap_or(u64::MAX);
        by_memory.min(by_cpu).saturating_mul(u64::from(self.nodes.max(1)))
    }

    /// Tasks of `demand` one allocation completes within its walltime.
    fn work(&self, demand: &Demand) -> u64 {
        let rounds = if demand.duration.is_zero() {
            u64::MAX
        } else {
            u64::try_from(self.walltime.as_nanos() / demand.duration.as_nanos()).unwrap_or(u64::MAX)
        };
        self.slots(demand).saturating_mul(rounds)
    }
}

/// Queued work of one capability, sized with what the broker learned: the
/// memory and duration of one task are the class's learned peak and
/// duration where it has them, else the declared estimate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Demand {
    /// What the tasks must run on.
    pub capability: Capability,
    /// Tasks waiting for an agent.
    pub tasks: u64,
    /// Memory of one task, bytes.
    pub memory: u64,
    /// CPUs of one task, thousandths.
    pub cpu_millis: u32,
    /// Wall time of one task.
    pub duration: Duration,
}

/// An allocation asked for and not yet over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    /// The provider's id.
    pub id: AllocationId,
    /// The shape it was asked with.
    pub shape: String,
    /// Queued or running.
    pub state: AllocState,
}

/// Bounds on what the Provisioner asks for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Allocations alive at once (queued or running).
    pub max_allocations: u32,
    /// Allocations waiting in the engine's queue at once.
    pub backlog: u32,
    /// An allocation is asked for only when the work waiting for it would
    /// fill at least this share (0–1) of its slots.
    pub min_utilization: f64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_allocations: 4, backlog: 1, min_utilization: 0.0 }
    }
}

fn format_bytes(bytes: u64) -> String {
    const MIB: f64 = (1u64 << 20) as f64;
    let mib = bytes as f64 / MIB;
    if mib >= 1024.0 { format!("{:.1} GiB", mib / 1024.0) } else { format!("{mib:.0} MiB") }
}

fn format_minutes(d: Duration) -> String {
    let minutes = d.as_secs().div_ceil(60);
    if minutes < 120 { format!("{minutes} min") } else { format!("{:.1} h", minutes as f64 / 60.0) }
}

#[cfg(test)]
mod driver_tests;
#[cfg(test)]
mod slurm_tests;
#[cfg(test)]
mod tests;
