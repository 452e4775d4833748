//! The pump: one thread subscribed to the queue's events persists every
//! state change, decision and start (one store transaction each) and fans
//! the change out to the watchers.
//!
//! It blocks on the queue's event stream with no timeout: it wakes once
//! per event and ends when the stream does, which the queue's `close`
//! guarantees (docs/DESIGN.md §8: no fixed polling), so an idle daemon's
//! pump never wakes.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::thread::JoinHandle;

use lardon::QueueEvent;

use super::{DaemonEvent, Shared};
use crate::spec::{DecisionKind, TaskId, TaskState};
use crate::store::{DecisionRecord, Grant, Outcome};

pub(crate) fn spawn(shared: Arc<Shared>, events: Receiver<QueueEvent>) -> std::io::Result<JoinHandle<()>> {
    let run = move || {
        for event in events {
            shared.wakeups.pump.fetch_add(1, Ordering::Relaxed);
            handle(&shared, event);
        }
    };
    std::thread::Builder::new().name("lardon-pump".into()).spawn(run)
}

fn state_of(s: lardon::TaskState) -> TaskState {
    match s {
        lardon::TaskState::Pending => TaskState::Pending,
        lardon::TaskState::Running => TaskState::Running,
        lardon::TaskState::Paused => TaskState::Paused,
        lardon::TaskState::Completed => TaskState::Completed,
        lardon::TaskState::Failed => TaskState::Failed,
        lardon::TaskState::Cancelled => TaskState::Cancelled,
    }
}

pub(crate) fn kind_of(k: lardon::DecisionKind) -> DecisionKind {
    match k {
        lardon::DecisionKind::Admit => DecisionKind::Admit,
        lardon::DecisionKind::ReduceBatch => DecisionKind::ReduceBatch,
        lardon::DecisionKind::Wait => DecisionKind::Wait,
        lardon::DecisionKind::Reject => DecisionKind::Reject,
    }
}

/// What a contract grants, as the task's course records it.
fn grant_of(c: &lardon::Contract) -> Grant {
    Grant { batch: c.batch, memory: c.memory, cpu_millis: c.cpu_millis }
}

fn handle(shared: &Shared, event: QueueEvent) {
    let (id, result) = match event {
        QueueEvent::Submitted { id, .. } | QueueEvent::Progress { id, .. } => (TaskId(id.0), Ok(())),
        QueueEvent::Sequence { id, contract } => {
            // Written only when the batch changed (no write per batch).
            let id = TaskId(id.0);
            (id, shared.store().record_grant(id, &grant_of(&contract)))
        }
        QueueEvent::Decision { id, kind, reason, message } => {
            let id = TaskId(id.0);
            let kind = kind_of(kind);
            if kind == DecisionKind::Reject {
                tracing::warn!("task {id}: rejected ({}): {message}", reason.as_str());
            } else {
                tracing::debug!("task {id}: {} ({}): {message}", kind.as_str(), reason.as_str());
            }
            let result = shared.store().record_decision(id, kind, reason.as_str(), &message, None);
            let record = DecisionRecord {
                kind,
                reason_code: reason.as_str().to_owned(),
                message,
                batch: None,
                at_ms: crate::now_ms(),
            };
            shared.stats.lock().unwrap_or_else(std::sync::PoisonError::into_inner).record(id, &record);
            shared.emit(DaemonEvent::Decision(id, record));
            (id, result)
        }
        QueueEvent::Started { id, contract } => {
            let id = TaskId(id.0);
            (id, shared.store().start_attempt_granted(id, &grant_of(&contract)).map(drop))
        }
        QueueEvent::StateChanged { id, state } => {
            let id = TaskId(id.0);
            if shared.stopping() {
                return;
            }
            let result = match state {
                lardon::TaskState::Paused => shared.store().pause(id).map(drop),
                _ => shared.store().resume(id).map(drop),
            };
            (id, result)
        }
        QueueEvent::Finished { id, state, message } => {
            let id = TaskId(id.0);
            let state = state_of(state);
            // At shutdown, runs the daemon itself stopped and pending tasks
            // the closing queue cancelled stay live in the store: the next
            // start queues them again. A run that ends failed while the
            // daemon stops may have been ended by the stop (its SIGTERM
            // racing the stop's cancel), so it is left live too: at worst a
            // failing run is tried once more after the restart, never lost.
            if shared.stopping() && state != TaskState::Completed {
                return;
            }
            let outcome = Outcome { state, exit_code: shared.take_exit(id), reason: message };
            let result = shared.store().finish(id, &outcome);
            shared.emit(DaemonEvent::TaskChanged(id));
            shared.emit(DaemonEvent::TaskFinished(id));
            if let Err(e) = result {
                tracing::error!("task {id}: cannot persist its end: {e}");
            }
            return;
        }
    };
    if let Err(e) = result {
        tracing::error!("task {id}: cannot persist a change: {e}");
    }
    shared.emit(DaemonEvent::TaskChanged(id));
}
