//! Native Slurm mode (docs/DESIGN.md §14): `lardon submit --engine slurm`
//! sends each task to Slurm as its own `sbatch` job, sized from what its
//! class learned, and learns from what the job measured.
//!
//! * [`sbatch`]: the `--mem` rule and the job's arguments and script;
//! * talking to Slurm (`sbatch`, one `squeue` per refresh, `scancel`, the
//!   state words) is the `lardon-slurm` crate, the one adapter the
//!   cluster's pilot provider uses too;
//! * [`exec`]: `lardon exec`, the wrapper a job runs, which reports the job
//!   cgroup's peak, the wall time and the exit back to the daemon;
//! * the daemon-side engine (submission under `slurm_max_jobs`, tracking,
//!   learning, the one resubmission after OUT_OF_MEMORY, `scancel`) is
//!   private; `SlurmRoute` is the mode as a route of the daemon
//!   (`kernel::Route`).

pub mod exec;
mod outcome;
pub mod sbatch;
mod tracker;

pub(crate) use tracker::{SlurmEngine, scancel};

use std::sync::Arc;
use std::time::Duration;

use crate::handle::{RunHandle, SlurmJob};
use crate::kernel::{Answer, Dependency, Field, LocalOnly, Refusal, Route, RouteKind, Shared};
use crate::spec::{TaskId, TaskSpec, TaskState};
use crate::store::{Outcome, StoreError, TaskRecord};

/// What native mode cannot do yet, refused at submit naming the field:
/// batched tasks, dependencies, GPUs and scratch space are local-only
/// ([`LocalOnly`]).
///
/// # Errors
/// The first offending field.
pub(crate) fn check(spec: &TaskSpec) -> Result<(), Refusal> {
    LocalOnly::of(spec).map_or(Ok(()), |field| Err(Refusal::new(RouteKind::Slurm, field)))
}

/// Native Slurm mode as a [`Route`]: its engine, or `None` when its
/// thread could not start (its tasks then fail saying so). A task waits
/// for room under `slurm_max_jobs`, then runs as a job; its end is judged
/// from the job's report and recorded through the lifecycle path. A job
/// cannot be paused.
#[derive(Debug)]
pub(crate) struct SlurmRoute {
    engine: Option<SlurmEngine>,
    shared: Arc<Shared>,
}

impl SlurmRoute {
    /// Starts native mode's thread; a failure is logged and leaves the
    /// route without an engine.
    pub(crate) fn start(shared: Arc<Shared>) -> SlurmRoute {
        let engine = SlurmEngine::start(Arc::clone(&shared))
            .inspect_err(|e| tracing::error!("native Slurm mode unavailable: {e}"))
            .ok();
        SlurmRoute { engine, shared }
    }

    /// Stops the engine's thread (jobs out keep running; see
    /// [`SlurmEngine::stop`]).
    pub(crate) fn stop(&self) {
        if let Some(engine) = &self.engine {
            engine.stop();
        }
    }
}

impl Route for SlurmRoute {
    fn kind(&self) -> RouteKind {
        RouteKind::Slurm
    }

    fn shared(&self) -> &Shared {
        &self.shared
    }

    fn check(&self, spec: &TaskSpec) -> Result<(), Refusal> {
        check(spec)
    }

    fn check_paused(&self) -> Result<(), Refusal> {
        Err(Refusal::new(RouteKind::Slurm, Field::Paused))
    }

    fn submit(&self, id: TaskId, spec: &TaskSpec, _paused: bool, _deps: &[Dependency]) -> Result<(), String> {
        match &self.engine {
            Some(engine) => engine.submit(id, spec),
            None => {
                let reason = "native Slurm mode is unavailable (see the daemon's log)".to_owned();
                self.report_end(
                    id,
                    Outcome { state: TaskState::Failed, exit_code: None, reason: Some(reason) },
                );
            }
        }
        Ok(())
    }

    /// The job is tracked again; a task that already used its one memory
    /// retry is not resubmitted after OUT_OF_MEMORY.
    fn adopt(&self, rec: &TaskRecord, handle: RunHandle) -> Result<(), RunHandle> {
        let Some(engine) = &self.engine else { return Err(handle) };
        let RunHandle::Slurm(job) = handle else { return Err(handle) };
        engine.adopt(rec.id, &rec.spec, job, rec.memory_retries > 0);
        Ok(())
    }

    /// The job of a task not run again is cancelled.
    fn abandon(&self, id: TaskId, handle: RunHandle) {
        if let RunHandle::Slurm(SlurmJob { job, .. }) = handle {
            tracing::info!("task {id}: cancelling slurm job {job} (the task is not run again)");
            scancel(job);
        }
    }

    fn cancel(&self, id: TaskId, _grace: Option<Duration>) -> Result<Answer, StoreError> {
        Ok(self.engine.as_ref().and_then(|e| e.cancel(id)).into())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::spec::TaskId;

    #[test]
    fn local_only_features_are_refused_naming_the_field() {
        let ok = TaskSpec::command(["true"]);
        assert_eq!(check(&ok), Ok(()));
        let mut batched = ok.clone();
        batched.items = Some(4);
        assert!(check(&batched).unwrap_err().to_string().starts_with("engine slurm: items:"));
        let mut dep = ok.clone();
        dep.after = vec![TaskId(1)];
        assert!(check(&dep).unwrap_err().to_string().starts_with("engine slurm: after:"));
        let mut scratch = ok;
        scratch.estimate.scratch_bytes = 1;
        assert!(check(&scratch).unwrap_err().to_string().starts_with("engine slurm: scratch:"));
    }
}
