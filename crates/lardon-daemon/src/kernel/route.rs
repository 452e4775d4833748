//! The one interface every route implements ([`Route`]): what it refuses
//! of a spec, how a task starts on it, is adopted again after a restart,
//! is cancelled, paused and resumed, and where its ends are reported (the
//! lifecycle path, [`Shared::record`]). The local route (`local`), offload
//! (`offload`) and native Slurm mode (`slurm`) implement it; the hub holds
//! one of each and dispatches an action on the task's placement to the
//! one route it names, never by asking each in turn.
//!
//! What a route refuses is typed ([`Refusal`]: the route, the field, and
//! the route's words for it), and the features only the local route has
//! are found by one check ([`LocalOnly::of`]) for every other route.

use std::time::Duration;

use super::{Applied, Shared, Write};
use crate::handle::RunHandle;
use crate::spec::{DepKind, RunEngine, TaskId, TaskSpec, TaskState};
use crate::store::{Outcome, StoreError, TaskRecord};

/// Which of the three routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RouteKind {
    /// Run here, by this host's queue and Governor.
    Local,
    /// Shipped to a cluster agent through the broker.
    Offload,
    /// Native Slurm mode: one `sbatch` job per task.
    Slurm,
}

impl RouteKind {
    /// The route's name in messages.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RouteKind::Local => "local",
            RouteKind::Offload => "offload",
            RouteKind::Slurm => "slurm",
        }
    }

    /// Where a task on this route runs, as a refused pause says it.
    fn runs(self) -> &'static str {
        match self {
            RouteKind::Local => "runs here",
            RouteKind::Offload => "runs at a cluster agent",
            RouteKind::Slurm => "runs in Slurm",
        }
    }
}

/// A field of a spec a route may refuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Field {
    /// `items`: a batched task.
    Items,
    /// `after` / `after_any`: dependencies.
    After,
    /// `gpu_mem` / GPU slots.
    GpuMem,
    /// `scratch`: scratch space.
    Scratch,
    /// `engine`: the task is for another route.
    Engine,
    /// Submitted paused.
    Paused,
}

impl Field {
    /// The field's name, as a refusal names it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Field::Items => "items",
            Field::After => "after",
            Field::GpuMem => "gpu_mem",
            Field::Scratch => "scratch",
            Field::Engine => "engine",
            Field::Paused => "paused",
        }
    }
}

/// A feature of a spec only the local route has (an agent runs one argv
/// with its environment, a Slurm job one command): the one check every
/// other route refuses them by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LocalOnly;

impl LocalOnly {
    /// The first local-only field `spec` uses, if any.
    pub(crate) fn of(spec: &TaskSpec) -> Option<Field> {
        let e = &spec.estimate;
        if spec.items.is_some() {
            Some(Field::Items)
        } else if !spec.after.is_empty() || !spec.after_any.is_empty() {
            Some(Field::After)
        } else if e.gpu_slots > 0 || e.gpu_memory_fixed > 0 {
            Some(Field::GpuMem)
        } else if e.scratch_bytes > 0 {
            Some(Field::Scratch)
        } else {
            None
        }
    }
}

/// A route refused a spec: the route and the field; its message is the
/// submit-time refusal users see (`engine slurm: items: …`,
/// `shippable: scratch: …`, `capability: paused: …`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{}: {}: {}", self.by(), self.field.as_str(), self.words())]
pub(crate) struct Refusal {
    /// The route that refused.
    pub(crate) route: RouteKind,
    /// What it refused.
    pub(crate) field: Field,
}

impl Refusal {
    /// `route` refuses `field`.
    pub(crate) fn new(route: RouteKind, field: Field) -> Refusal {
        Refusal { route, field }
    }

    /// The submission's words that put the task on the route.
    fn by(self) -> &'static str {
        match (self.route, self.field) {
            (RouteKind::Slurm, _) => "engine slurm",
            (RouteKind::Offload, Field::Paused) => "capability",
            (RouteKind::Offload, _) => "shippable",
            (RouteKind::Local, _) => "local",
        }
    }

    /// The route's reason, in its words (one table for every route).
    fn words(self) -> &'static str {
        use {Field as F, RouteKind as R};
        match (self.route, self.field) {
            (R::Slurm, F::Items) => "batched tasks run locally only",
            (R::Slurm, F::After) => "dependencies are not supported",
            (R::Slurm, F::GpuMem) => "GPUs are not requested from Slurm yet",
            (R::Slurm, F::Paused) => "cannot submit paused",
            (R::Offload, F::Items) => "batched tasks run here only",
            (R::Offload, F::After) => "a task with dependencies runs here only",
            (R::Offload, F::GpuMem) => "GPU tasks run here only",
            (R::Offload, F::Engine) => "a Slurm task is not shippable",
            (R::Offload, F::Paused) => "a shippable task cannot be submitted paused",
            (_, F::Scratch) => "scratch volumes are local",
            (_, F::Engine) => "not for this route",
            (R::Local, _) => "not refused here",
        }
    }
}

/// An action a route does not take.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ControlError {
    /// The route cannot pause a task (`task 3 runs in Slurm: it cannot be
    /// paused`).
    #[error("task {id} {}: it cannot be paused", route.runs())]
    CannotPause {
        /// The task.
        id: TaskId,
        /// Its route.
        route: RouteKind,
    },
    /// Not possible in the task's state (the queue's words).
    #[error("{0}")]
    Conflict(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a route did with a cancel or a resume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Done: the task's state now (durable).
    Done(TaskState),
    /// The route does not hold the task (any more: offload handed it back,
    /// say): the local route answers for it.
    LetGo,
}

impl From<Option<TaskState>> for Answer {
    /// A route's own answer: `None` when it does not hold the task.
    fn from(state: Option<TaskState>) -> Answer {
        state.map_or(Answer::LetGo, Answer::Done)
    }
}

/// A dependency of a task being queued, with its state as stored when it
/// was resolved (`None`: removed, so it ended).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Dependency {
    /// The task depended on.
    pub(crate) id: TaskId,
    /// On its success, or on any end.
    pub(crate) kind: DepKind,
    /// Its stored state when resolved.
    pub(crate) stored: Option<TaskState>,
}

/// The interface of a route (see the module docs). Each method is called
/// for a task the hub found on this route: by its spec at submit and
/// restart ([`Route::check`], [`Route::submit`]), by its run handle after a
/// restart ([`Route::adopt`]), by its placement for the actions.
pub(crate) trait Route: std::fmt::Debug + Send + Sync {
    /// Which route this is.
    fn kind(&self) -> RouteKind;

    /// The kernel its ends are reported through ([`Route::report`]).
    fn shared(&self) -> &Shared;

    /// What this route refuses of `spec`, naming the field. The local
    /// route refuses nothing here (the spec's own checks are the hub's).
    ///
    /// # Errors
    /// The first field refused.
    fn check(&self, spec: &TaskSpec) -> Result<(), Refusal>;

    /// Whether a task for this route may be submitted paused.
    ///
    /// # Errors
    /// [`Field::Paused`] refused by a route that cannot hold a paused task.
    fn check_paused(&self) -> Result<(), Refusal> {
        Ok(())
    }

    /// Starts a stored task on this route (or hands it on: offload queues
    /// here what it does not ship, Slurm unavailable fails it).
    ///
    /// # Errors
    /// One line when it could not be queued (the queue is closing); the
    /// task is stored and queued again at the next start.
    fn submit(&self, id: TaskId, spec: &TaskSpec, paused: bool, deps: &[Dependency]) -> Result<(), String>;

    /// Takes back the run a previous daemon left out on this route for
    /// the stored task `rec`, by its run handle.
    ///
    /// # Errors
    /// The handle back when it is not this route's, or the route is not
    /// running: the caller queues the task afresh.
    fn adopt(&self, rec: &TaskRecord, handle: RunHandle) -> Result<(), RunHandle>;

    /// Stops a run left out on this route by a previous daemon whose task
    /// is not run again (recovery ended it). Nothing by default.
    fn abandon(&self, id: TaskId, handle: RunHandle) {
        let _ = (id, handle);
    }

    /// Cancels task `id`; `grace` between SIGTERM and SIGKILL where the
    /// route signals a process.
    ///
    /// # Errors
    /// The store failed.
    fn cancel(&self, id: TaskId, grace: Option<Duration>) -> Result<Answer, StoreError>;

    /// Pauses task `id`, answering its state once durable.
    ///
    /// # Errors
    /// [`ControlError::CannotPause`] from a route that cannot pause (the
    /// default), or the queue's refusal.
    fn pause(&self, id: TaskId) -> Result<TaskState, ControlError> {
        Err(ControlError::CannotPause { id, route: self.kind() })
    }

    /// Resumes task `id`. A route with nothing paused lets it go (the
    /// default): the local queue answers.
    ///
    /// # Errors
    /// The queue's refusal, or the store failed.
    fn resume(&self, id: TaskId) -> Result<Answer, ControlError> {
        let _ = id;
        Ok(Answer::LetGo)
    }

    /// Reports a change of a task on this route: through the one
    /// lifecycle path, in order with every other write of it.
    ///
    /// # Errors
    /// The store refused or failed.
    fn report(&self, write: Write) -> Result<Applied, StoreError> {
        self.shared().record(write)
    }

    /// Ends task `id` with `outcome` (logged, not returned, when the store
    /// refuses: a cancel that raced the task's own end, say).
    fn report_end(&self, id: TaskId, outcome: Outcome) {
        if let Err(e) = self.report(Write::Finished(id, outcome)) {
            tracing::warn!("task {id}: cannot record its end ({} route): {e}", self.kind().as_str());
        }
    }
}

/// The route a spec asks for: Slurm for `engine slurm`, offload for a
/// capability, the local route otherwise.
pub(crate) fn requested(spec: &TaskSpec) -> RouteKind {
    if spec.engine == RunEngine::Slurm {
        RouteKind::Slurm
    } else if spec.offload.is_some() {
        RouteKind::Offload
    } else {
        RouteKind::Local
    }
}
