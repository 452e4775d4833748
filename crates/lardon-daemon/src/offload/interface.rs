//! Offload as a [`Route`] of the daemon: what a shippable task cannot be
//! ([`check`]), its start (shipped, or queued here and watched), its
//! adoption after a restart (asked for again under its remote id), its
//! cancel (taken out of the placement table, then cancelled at the
//! broker). A task out at an agent cannot be paused. Its ends are recorded
//! through the lifecycle path, like a local run's.

use std::time::Duration;

use super::OffloadEngine;
use crate::handle::RunHandle;
use crate::kernel::{Answer, Dependency, Field, LocalOnly, Refusal, Route, RouteKind, Shared};
use crate::local::LocalRoute;
use crate::spec::{RunEngine, TaskId, TaskSpec};
use crate::store::{StoreError, TaskRecord};

/// What a shippable task cannot be, refused at submit naming the field:
/// batched, dependent, GPU, scratch ([`LocalOnly`]) and Slurm tasks are
/// local-only (an agent runs one argv with its environment, nothing more).
///
/// # Errors
/// The first offending field.
pub(crate) fn check(spec: &TaskSpec) -> Result<(), Refusal> {
    let field = LocalOnly::of(spec).or((spec.engine == RunEngine::Slurm).then_some(Field::Engine));
    field.map_or(Ok(()), |field| Err(Refusal::new(RouteKind::Offload, field)))
}

/// Offload as a route: its engine (`None` without `--broker`, or when it
/// could not start: shippable tasks then run here), and the local route
/// it hands to what it does not ship.
#[derive(Debug)]
pub(crate) struct OffloadRoute {
    engine: Option<OffloadEngine>,
    local: LocalRoute,
}

impl OffloadRoute {
    /// The route over `engine`, handing what it does not ship to `local`.
    pub(crate) fn new(engine: Option<OffloadEngine>, local: LocalRoute) -> OffloadRoute {
        OffloadRoute { engine, local }
    }
}

impl Route for OffloadRoute {
    fn kind(&self) -> RouteKind {
        RouteKind::Offload
    }

    fn shared(&self) -> &Shared {
        self.local.shared()
    }

    fn check(&self, spec: &TaskSpec) -> Result<(), Refusal> {
        check(spec)
    }

    fn check_paused(&self) -> Result<(), Refusal> {
        Err(Refusal::new(RouteKind::Offload, Field::Paused))
    }

    /// Ships the task when the routing rule says so; otherwise it joins
    /// the local queue, watched so that one still waiting there
    /// `offload_wait_ms` later ships.
    fn submit(&self, id: TaskId, spec: &TaskSpec, paused: bool, deps: &[Dependency]) -> Result<(), String> {
        // Shippable tasks are never paused nor dependent (refused at submit).
        let shippable = !paused && deps.is_empty();
        let engine = self.engine.as_ref().filter(|_| shippable);
        if let Some(engine) = engine
            && engine.offer(id, spec)
        {
            return Ok(());
        }
        self.local.submit(id, spec, paused, deps)?;
        if let Some(engine) = engine {
            engine.watch(id, spec);
        }
        Ok(())
    }

    /// Asked for again under the same remote id: the broker answers a
    /// finished one from its store and drops a live one as a duplicate.
    fn adopt(&self, rec: &TaskRecord, handle: RunHandle) -> Result<(), RunHandle> {
        let (Some(engine), RunHandle::Offload(remote)) = (&self.engine, &handle) else { return Err(handle) };
        engine.adopt(rec.id, &rec.spec, remote);
        Ok(())
    }

    fn cancel(&self, id: TaskId, _grace: Option<Duration>) -> Result<Answer, StoreError> {
        Ok(self.engine.as_ref().and_then(|e| e.cancel(id)).into())
    }
}
