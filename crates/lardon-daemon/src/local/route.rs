//! The local route's [`Route`]: a task starts by joining this host's queue
//! ([`super::queue_locally`]); a cancel signals its run's slot and drops it
//! from the queue; a pause stops its process group (SIGSTOP) or has the
//! dispatcher skip it; its ends are recorded by its callback and the pump,
//! through the lifecycle path. Every answer waits until what it changed is
//! durable ([`LocalRoute::settle`]).

use std::sync::Arc;
use std::time::Duration;

use lardon::{QueueError, TaskQueue};

use super::queue_locally;
use crate::handle::RunHandle;
use crate::kernel::{Answer, ControlError, Dependency, Refusal, Route, RouteKind, Shared, Write, qid};
use crate::spec::{TaskId, TaskSpec, TaskState};
use crate::store::{Outcome, StoreError, TaskRecord};

/// The local route (see the module docs): the kernel and the queue, no
/// state of its own.
#[derive(Debug, Clone)]
pub(crate) struct LocalRoute {
    shared: Arc<Shared>,
    queue: Arc<TaskQueue>,
}

impl LocalRoute {
    /// The route over this daemon's kernel and queue.
    pub(crate) fn new(shared: Arc<Shared>, queue: Arc<TaskQueue>) -> LocalRoute {
        LocalRoute { shared, queue }
    }

    /// Waits until every queue event emitted so far (those of a queue call
    /// that just returned included) is committed: after it, the store
    /// shows what the queue did.
    ///
    /// # Errors
    /// The store's writer stopped.
    pub(crate) fn settle(&self) -> Result<(), StoreError> {
        self.shared.pumped.wait_for(self.queue.events_emitted());
        // The pump's writes for those events are queued ahead of this one.
        self.shared.writer.call(|_| Ok(()))
    }

    /// Once the queue's events so far are durable: the task's stored state,
    /// which is what `status` shows from now on.
    ///
    /// # Errors
    /// The store failed, or the task is gone.
    pub(crate) fn settled_state(&self, id: TaskId) -> Result<TaskState, StoreError> {
        self.settle()?;
        Ok(self.shared.reader().get_task(id)?.ok_or(StoreError::NotFound(id))?.state)
    }
}

impl Route for LocalRoute {
    fn kind(&self) -> RouteKind {
        RouteKind::Local
    }

    fn shared(&self) -> &Shared {
        &self.shared
    }

    fn check(&self, _spec: &TaskSpec) -> Result<(), Refusal> {
        Ok(())
    }

    fn submit(&self, id: TaskId, spec: &TaskSpec, paused: bool, deps: &[Dependency]) -> Result<(), String> {
        queue_locally(&self.shared, &self.queue, id, spec, paused, deps)
    }

    /// A local run does not outlive its daemon (recovery killed the
    /// orphan): nothing to adopt, the task is queued afresh.
    fn adopt(&self, _: &TaskRecord, handle: RunHandle) -> Result<(), RunHandle> {
        Err(handle)
    }

    /// A pending task ends at once; a running one gets SIGTERM, then
    /// SIGKILL after `grace` (the daemon's by default) and stays RUNNING
    /// until it exits. A task the queue does not know ends here.
    fn cancel(&self, id: TaskId, grace: Option<Duration>) -> Result<Answer, StoreError> {
        if let Some(slot) = self.shared.placements.route_of(id).slot() {
            slot.cancel(grace.unwrap_or(self.shared.kill_grace));
        }
        match self.queue.cancel(qid(id)) {
            Ok(()) | Err(QueueError::AlreadyEnded(_)) => Ok(Answer::Done(self.settled_state(id)?)),
            Err(_) => {
                // Live in the store but unknown to the queue: end it here.
                let outcome = Outcome { state: TaskState::Cancelled, exit_code: None, reason: None };
                self.report(Write::Finished(id, outcome))?;
                Ok(Answer::Done(TaskState::Cancelled))
            }
        }
    }

    /// A running command is stopped (SIGSTOP to its group) and keeps its
    /// reservation; a pending task is skipped by the dispatcher.
    fn pause(&self, id: TaskId) -> Result<TaskState, ControlError> {
        // Twice at most: a pending task may start between the two queue calls.
        for _ in 0..2 {
            match self.queue.set_running_paused(qid(id), true) {
                Ok(()) => {
                    self.shared.placements.slot(id).pause();
                    break;
                }
                Err(QueueError::NotStarted(_)) => {
                    self.queue.pause(qid(id)).map_err(|e| ControlError::Conflict(e.to_string()))?;
                    if self.queue.get(qid(id)).is_none_or(|v| v.state != lardon::TaskState::Running) {
                        break;
                    }
                }
                Err(QueueError::AlreadyEnded(_)) => {
                    return Err(ControlError::Conflict(format!("task {id} already ended")));
                }
                Err(e) => return Err(ControlError::Conflict(e.to_string())),
            }
        }
        Ok(self.settled_state(id)?)
    }

    /// SIGCONT for a stopped command; a paused pending task is dispatched
    /// again.
    fn resume(&self, id: TaskId) -> Result<Answer, ControlError> {
        match self.queue.set_running_paused(qid(id), false) {
            Ok(()) => {
                if let Some(slot) = self.shared.placements.route_of(id).slot() {
                    slot.resume();
                }
            }
            Err(QueueError::NotStarted(_)) => {
                self.queue.resume(qid(id)).map_err(|e| ControlError::Conflict(e.to_string()))?;
            }
            Err(e) => return Err(ControlError::Conflict(e.to_string())),
        }
        Ok(Answer::Done(self.settled_state(id)?))
    }
}
