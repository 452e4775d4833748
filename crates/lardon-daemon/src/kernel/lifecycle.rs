//! The one typed path of a task's lifecycle into the store: every state
//! change of every route (the local queue's events through the pump, the
//! local run's handle and exit code, a Slurm job's launch, a shipment, a
//! hand-back, a remote run, a memory retry, an end, a restart) is a
//! [`Write`], applied by the store's one writer in the order it was sent,
//! and heard by the watchers only once it is durable ([`Write::notices`]).
//! No other module calls the store's lifecycle methods (state, stamps,
//! exit code, attempts, run handle), so the order rules of
//! `store/transitions.rs` see every such write.

use crate::handle::RunHandle;
use crate::spec::{TaskId, TaskState};
use crate::store::{CourseKind, DecisionRecord, Grant, Outcome, Store, StoreError};

use super::{DaemonEvent, Shared};

/// One change to a task's lifecycle, as data.
#[derive(Debug)]
pub(crate) enum Write {
    /// The local queue re-sized the task's grant (a new batch).
    Grant(TaskId, Grant),
    /// The local queue's admission decision.
    Decision(TaskId, DecisionRecord),
    /// The local queue started an attempt with this grant.
    Started(TaskId, Grant),
    /// The local queue paused it.
    Paused(TaskId),
    /// The local queue resumed it.
    Resumed(TaskId),
    /// It ended (the local run's exit code is already on the row).
    Finished(TaskId, Outcome),
    /// The local run's handle.
    RunHandle(TaskId, RunHandle),
    /// A local run ended: its record for learning (kept across restarts),
    /// what it used against its grant of `reserved` bytes (the task's
    /// usage, `lardon report`) and its exit code, one job.
    RunEnded { id: TaskId, class: String, record: lardon::RunRecord, reserved: u64, code: Option<i32> },
    /// A run killed at its memory limit runs again (local or Slurm).
    MemoryRetry(TaskId, String),
    /// A Slurm job holds it: a new attempt when `new_attempt` (PENDING →
    /// RUNNING), else the same one (a resubmission), and its handle.
    Launched { id: TaskId, handle: RunHandle, new_attempt: bool },
    /// Shipped to the broker as `remote`: a new attempt when
    /// `new_attempt`, its handle and the course's `offloaded` entry.
    Shipped { id: TaskId, remote: String, new_attempt: bool, message: String },
    /// The broker handed it back to run here (RUNNING → PENDING).
    Returned { id: TaskId, code: String, message: String },
    /// It ran at an agent (or came from the broker's cache) and ended.
    RanRemotely { id: TaskId, message: String, outcome: Outcome },
    /// A finished task runs again (a new attempt, PENDING).
    Restarted(TaskId),
}

/// What a write's store call answered, for the few callers that need it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Applied {
    /// Nothing to tell.
    Done,
    /// [`Write::MemoryRetry`]: the memory retries so far.
    Retries(u32),
    /// [`Write::Restarted`]: the state it left.
    Left(TaskState),
    /// An end ([`Write::Finished`], [`Write::RanRemotely`]) that queued
    /// its hook in its own transaction: the hook runner is woken once it
    /// is durable.
    HookQueued,
}

fn ended(hooked: bool) -> Applied {
    if hooked { Applied::HookQueued } else { Applied::Done }
}

impl Write {
    /// The task it changes.
    pub(crate) fn task(&self) -> TaskId {
        match self {
            Write::Grant(id, _)
            | Write::Decision(id, _)
            | Write::Started(id, _)
            | Write::Paused(id)
            | Write::Resumed(id)
            | Write::Finished(id, _)
            | Write::RunHandle(id, _)
            | Write::RunEnded { id, .. }
            | Write::MemoryRetry(id, _)
            | Write::Restarted(id)
            | Write::Launched { id, .. }
            | Write::Shipped { id, .. }
            | Write::Returned { id, .. }
            | Write::RanRemotely { id, .. } => *id,
        }
    }

    /// Applies it (each store method in its own unit).
    ///
    /// # Errors
    /// The store's refusal (an illegal transition, a task removed).
    pub(crate) fn apply(&self, s: &mut Store) -> Result<Applied, StoreError> {
        let done = |r: Result<(), StoreError>| r.map(|()| Applied::Done);
        match self {
            Write::Grant(id, grant) => done(s.record_grant(*id, grant)),
            Write::Decision(id, d) => done(s.record_decision(*id, d.kind, &d.reason_code, &d.message, None)),
            Write::Started(id, grant) => done(s.start_attempt_granted(*id, grant).map(drop)),
            Write::Paused(id) => done(s.pause(*id).map(drop)),
            Write::Resumed(id) => done(s.resume(*id).map(drop)),
            Write::Finished(id, outcome) => s.finish(*id, outcome).map(ended),
            Write::RunHandle(id, handle) => done(s.set_run_handle(*id, Some(&handle.encode()))),
            Write::RunEnded { id, class, record, reserved, code } => {
                s.record_run(class, record)?;
                s.add_run_usage(*id, record, *reserved)?;
                match code {
                    Some(code) => done(s.set_exit_code(*id, *code)),
                    None => Ok(Applied::Done),
                }
            }
            Write::MemoryRetry(id, note) => s.note_memory_retry(*id, note).map(Applied::Retries),
            Write::Launched { id, handle, new_attempt } => {
                if *new_attempt {
                    s.start_attempt(*id)?;
                }
                done(s.set_run_handle(*id, Some(&handle.encode())))
            }
            Write::Shipped { id, remote, new_attempt, message } => {
                if *new_attempt {
                    s.start_attempt(*id)?;
                }
                s.set_run_handle(*id, Some(&RunHandle::Offload(remote.clone()).encode()))?;
                done(s.note_offload(*id, CourseKind::Offloaded, "shipped", message))
            }
            Write::Returned { id, code, message } => done(s.return_to_queue(*id, code, message)),
            Write::RanRemotely { id, message, outcome } => {
                s.note_offload(*id, CourseKind::Offloaded, "ran_remotely", message)?;
                s.finish(*id, outcome).map(ended)
            }
            Write::Restarted(id) => s.restart(*id).map(Applied::Left),
        }
    }

    /// What the watchers hear once the write is durable. A local run's
    /// handle and exit code tell nothing new (its end will).
    pub(crate) fn notices(self) -> impl Iterator<Item = DaemonEvent> {
        let id = self.task();
        let (first, changed, finished) = match self {
            Write::Decision(id, record) => (Some(DaemonEvent::Decision(id, record)), true, false),
            Write::Finished(..) | Write::RanRemotely { .. } => (None, true, true),
            Write::RunHandle(..) | Write::RunEnded { .. } => (None, false, false),
            _ => (None, true, false),
        };
        first
            .into_iter()
            .chain(changed.then_some(DaemonEvent::TaskChanged(id)))
            .chain(finished.then_some(DaemonEvent::TaskFinished(id)))
    }
}

impl Shared {
    /// Applies `write` through the store's writer, waits until it is
    /// durable, then tells the watchers.
    ///
    /// # Errors
    /// The store's refusal; the writer's failure.
    pub(crate) fn record(&self, write: Write) -> Result<Applied, StoreError> {
        let (applied, write) = self.writer.call(move |s| write.apply(s).map(|a| (a, write)))?;
        if applied == Applied::HookQueued {
            self.hooks.wake();
        }
        for notice in write.notices() {
            self.emit(notice);
        }
        Ok(applied)
    }

    /// [`Shared::record`] without waiting: the writer keeps the order in
    /// which writes were sent; a refusal is logged.
    pub(crate) fn record_background(&self, write: Write) {
        // A local run's handle and end tell the watchers nothing: no
        // sender is held for them (the hot path of a short task).
        let events =
            (!matches!(write, Write::RunHandle(..) | Write::RunEnded { .. })).then(|| self.events.clone());
        // Only an end can queue a hook.
        let hooks = matches!(write, Write::Finished(..) | Write::RanRemotely { .. })
            .then(|| std::sync::Arc::clone(&self.hooks));
        let id = write.task();
        self.writer.send_background(
            move |s| write.apply(s).map(|a| (a, write)),
            move |result| match (result, events) {
                (Ok((applied, write)), events) => {
                    if let (Applied::HookQueued, Some(hooks)) = (applied, hooks) {
                        hooks.wake();
                    }
                    if let Some(events) = events {
                        for notice in write.notices() {
                            // Nobody watching is fine.
                            let _ = events.send(notice);
                        }
                    }
                }
                (Err(e), _) => tracing::warn!("task {id}: a change not recorded: {e}"),
            },
        );
    }
}
