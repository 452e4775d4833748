//! The pump: one thread subscribed to the queue's events turns each state
//! change, decision, start and end into a write for the store's writer
//! (which commits them in groups) and, once the write is durable, fans the
//! change out to the watchers. The queue's events are the only path by
//! which a task's state reaches the store after it was submitted.
//!
//! It blocks on the queue's event stream with no timeout: it wakes once
//! per event and ends when the stream does, which the queue's `close`
//! guarantees (docs/DESIGN.md §8: no fixed polling), so an idle daemon's
//! pump never wakes. After each event it moves [`super::PumpMark`], which
//! is what lets an action wait for its own events (`Engine::settle`).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;

use lardon::{DecisionKind, QueueEvent, TaskQueue};

use super::{DaemonEvent, Shared};
use crate::spec::{TaskId, TaskState};
use crate::store::{DecisionRecord, Grant, Outcome, Store, StoreError};

pub(crate) fn spawn(shared: Arc<Shared>, queue: &TaskQueue) -> std::io::Result<JoinHandle<()>> {
    // Nothing is queued yet, so no event falls between these two lines.
    let events = queue.subscribe();
    let mut handed = queue.events_emitted();
    let run = move || {
        for event in events {
            shared.wakeups.pump.fetch_add(1, Ordering::Relaxed);
            handle(&shared, event);
            handed += 1;
            shared.pumped.set(handed);
        }
        // The stream ended (the queue closed): release any waiter.
        shared.pumped.set(u64::MAX);
    };
    std::thread::Builder::new().name("lardon-pump".into()).spawn(run)
}

/// What a contract grants, as the task's course records it.
fn grant_of(c: &lardon::Contract) -> Grant {
    Grant { batch: c.batch, memory: c.memory, cpu_millis: c.cpu_millis }
}

/// Queues `write` for task `id`; once it is durable, tells the watchers
/// (`finished`: it ended) or logs why it failed.
fn persist(
    shared: &Arc<Shared>,
    id: TaskId,
    finished: bool,
    write: impl FnOnce(&mut Store) -> Result<(), StoreError> + Send + 'static,
) {
    let watchers = Arc::clone(shared);
    shared.writer.send_background(write, move |result| {
        if let Err(e) = result {
            tracing::error!("task {id}: cannot persist a change: {e}");
        }
        watchers.emit(DaemonEvent::TaskChanged(id));
        if finished {
            watchers.emit(DaemonEvent::TaskFinished(id));
        }
    });
}

fn handle(shared: &Arc<Shared>, event: QueueEvent) {
    match event {
        QueueEvent::Submitted { .. } | QueueEvent::Progress { .. } => {}
        QueueEvent::Sequence { id, contract } => {
            // Written only when the batch changed (no write per batch).
            let grant = grant_of(&contract);
            persist(shared, TaskId(id.0), false, move |s| s.record_grant(TaskId(id.0), &grant));
        }
        QueueEvent::Decision { id, kind, reason, message } => {
            let id = TaskId(id.0);
            if kind == DecisionKind::Reject {
                tracing::warn!("task {id}: rejected ({}): {message}", reason.as_str());
            } else {
                tracing::debug!("task {id}: {} ({}): {message}", kind.as_str(), reason.as_str());
            }
            let record = DecisionRecord {
                kind,
                reason_code: reason.as_str().to_owned(),
                message,
                batch: None,
                at_ms: crate::now_ms(),
            };
            shared.stats.lock().unwrap_or_else(std::sync::PoisonError::into_inner).record(id, &record);
            let watchers = Arc::clone(shared);
            let stored = record.clone();
            shared.writer.send_background(
                move |s| s.record_decision(id, stored.kind, &stored.reason_code, &stored.message, None),
                move |result| {
                    if let Err(e) = result {
                        tracing::error!("task {id}: cannot persist a decision: {e}");
                    }
                    watchers.emit(DaemonEvent::Decision(id, record));
                    watchers.emit(DaemonEvent::TaskChanged(id));
                },
            );
        }
        QueueEvent::Started { id, contract } => {
            let grant = grant_of(&contract);
            let id = TaskId(id.0);
            persist(shared, id, false, move |s| s.start_attempt_granted(id, &grant).map(drop));
        }
        QueueEvent::StateChanged { id, state } => {
            if shared.stopping() {
                return;
            }
            let id = TaskId(id.0);
            persist(shared, id, false, move |s| match state {
                lardon::TaskState::Paused => s.pause(id).map(drop),
                _ => s.resume(id).map(drop),
            });
        }
        QueueEvent::Finished { id, state, message } => {
            let id = TaskId(id.0);
            // At shutdown, runs the daemon itself stopped and pending tasks
            // the closing queue cancelled stay live in the store: the next
            // start queues them again. A run that ends failed while the
            // daemon stops may have been ended by the stop (its SIGTERM
            // racing the stop's cancel), so it is left live too: at worst a
            // failing run is tried once more after the restart, never lost.
            if shared.stopping() && state != TaskState::Completed {
                return;
            }
            // The exit code is already on the row: the runner wrote it with
            // its last run, ahead of this end in the writer's order.
            let outcome = Outcome { state, exit_code: None, reason: message };
            persist(shared, id, true, move |s| s.finish(id, &outcome));
        }
    }
}
