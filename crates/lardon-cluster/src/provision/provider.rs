//! What an engine must offer the Provisioner, and the `static` provider
//! (machines someone else started; nothing to ask for).

use super::Shape;

/// An allocation's id as its engine names it (a Slurm job id, a pod name).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AllocationId(pub String);

impl std::fmt::Display for AllocationId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where an allocation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllocState {
    /// Waiting in the engine's queue.
    Queued,
    /// Running; its agent may have said hello.
    Running,
    /// Over (completed, cancelled, timed out or failed).
    Ended,
}

/// An engine's refusal, in its own words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{provider}: {message}")]
pub struct ProviderError {
    /// The provider's name.
    pub provider: String,
    /// What went wrong (the engine's message).
    pub message: String,
}

/// An engine that grants allocations, each running `lardon agent` dialing
/// back to the broker.
pub trait Provider: Send {
    /// Its name (`slurm`, `kubernetes`, `static`, `local`).
    fn name(&self) -> &str;
    /// The shapes it can grant.
    fn shapes(&self) -> Vec<Shape>;
    /// Checks that a submission of `shape` would be accepted, without
    /// allocating anything (e.g. `sbatch --test-only`).
    ///
    /// # Errors
    /// The engine's refusal.
    fn dry_run(&mut self, shape: &Shape) -> Result<(), ProviderError>;
    /// Asks for `count` allocations of `shape`.
    ///
    /// # Errors
    /// The engine's refusal.
    fn submit(&mut self, shape: &Shape, count: u32) -> Result<Vec<AllocationId>, ProviderError>;
    /// The state of each of `ids` (one engine query for all of them).
    ///
    /// # Errors
    /// The engine's refusal.
    fn status(&mut self, ids: &[AllocationId]) -> Result<Vec<(AllocationId, AllocState)>, ProviderError>;
    /// Ends an allocation.
    ///
    /// # Errors
    /// The engine's refusal.
    fn cancel(&mut self, id: &AllocationId) -> Result<(), ProviderError>;
    /// The id of the agent an allocation runs (`PREFIX`, or `PREFIX-N`
    /// for node N of several): how the broker tells that an allocation
    /// started.
    fn agent_prefix(&self, id: &AllocationId) -> String {
        id.0.clone()
    }
}

/// Agents someone else runs (systemd units, a fixed Kubernetes
/// Deployment): no shapes, so [`super::plan`] never asks for anything.
#[derive(Debug, Default, Clone, Copy)]
pub struct StaticProvider;

impl Provider for StaticProvider {
    fn name(&self) -> &str {
        "static"
    }
    fn shapes(&self) -> Vec<Shape> {
        Vec::new()
    }
    fn dry_run(&mut self, _: &Shape) -> Result<(), ProviderError> {
        Ok(())
    }
    fn submit(&mut self, _: &Shape, _: u32) -> Result<Vec<AllocationId>, ProviderError> {
        Err(ProviderError {
            provider: "static".into(),
            message: "a static provider allocates nothing".into(),
        })
    }
    fn status(&mut self, ids: &[AllocationId]) -> Result<Vec<(AllocationId, AllocState)>, ProviderError> {
        Ok(ids.iter().map(|id| (id.clone(), AllocState::Ended)).collect())
    }
    fn cancel(&mut self, _: &AllocationId) -> Result<(), ProviderError> {
        Ok(())
    }
}
