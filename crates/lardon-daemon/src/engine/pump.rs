//! The pump: one thread subscribed to the local queue's events turns each
//! state change, decision, start and end into a lifecycle [`Write`]
//! (`kernel/lifecycle.rs`) for the store's writer (which commits them in
//! groups) and, once the write is durable, fans the change out to the
//! watchers. The events of one wake-up (a burst) travel to the writer as
//! one job, each write in its own unit. Every route's state changes reach
//! the store as such writes: the local queue's through here, the local
//! run's, Slurm's and offload's through `Shared::record`, so a task's
//! state reaches the store by one typed path, in the writer's order.
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

use crate::kernel::{Applied, Shared, Write};
use crate::spec::{TaskId, TaskState};
use crate::store::{DecisionRecord, Grant, Outcome, Store, StoreError};

/// The most events one store write carries: a long burst still reaches
/// the store (and the watchers) in steps.
const MAX_BURST: usize = 64;

pub(crate) fn spawn(shared: Arc<Shared>, queue: &TaskQueue) -> std::io::Result<JoinHandle<()>> {
    // Nothing is queued yet, so no event falls between these two lines.
    let events = queue.subscribe();
    let mut handed = queue.events_emitted();
    let run = move || {
        // One wake-up takes every event already queued (a hand-off's end,
        // decision and start come together) and sends their writes to the
        // store as one job: one channel send, one wake of the writer and
        // one completion per burst instead of per event.
        while let Ok(first) = events.recv() {
            shared.wakeups.pump.fetch_add(1, Ordering::Relaxed);
            let mut burst = Burst::default();
            burst.add(&shared, first);
            let mut taken = 1;
            while taken < MAX_BURST {
                let Ok(next) = events.try_recv() else { break };
                burst.add(&shared, next);
                taken += 1;
            }
            burst.persist(&shared);
            handed += taken as u64;
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

/// The writes of one burst of events.
#[derive(Default)]
struct Burst(Vec<Write>);

impl Burst {
    fn add(&mut self, shared: &Shared, event: QueueEvent) {
        if let Some(write) = write_for(shared, event) {
            self.0.push(write);
        }
    }

    /// Queues the burst's writes as one background job; once they are
    /// durable, tells the watchers (in event order) or logs why not.
    fn persist(self, shared: &Arc<Shared>) {
        if self.0.is_empty() {
            return;
        }
        let writes = self.0;
        let count = writes.len();
        let watchers = Arc::clone(shared);
        shared.writer.send_background(
            move |s| {
                let (failed, hooked) = apply_all(s, &writes);
                Ok((writes, failed, hooked))
            },
            move |result: Result<(Vec<Write>, Failed, bool), StoreError>| match result {
                Ok((writes, failed, hooked)) => {
                    for (id, e) in failed {
                        tracing::error!("task {id}: cannot persist a change: {e}");
                    }
                    if hooked {
                        // An end queued its hook, durable now.
                        watchers.hooks.wake();
                    }
                    for write in writes {
                        for notice in write.notices() {
                            watchers.emit(notice);
                        }
                    }
                }
                // The commit failed: nothing of the burst is durable.
                Err(e) => tracing::error!("cannot persist {count} task changes: {e}"),
            },
        );
    }
}

/// The writes of a burst that failed, with why.
type Failed = Vec<(TaskId, StoreError)>;

/// Applies `writes` in order: the ones that fail are returned with their
/// errors, and leave nothing behind; the others stay. No savepoint of its
/// own per write: every store method a [`Write`] calls makes its changes
/// in its own unit (`store/unit.rs`) and rolls them back when it fails.
/// Also says whether an end among them queued its hook.
fn apply_all(s: &mut Store, writes: &[Write]) -> (Failed, bool) {
    let mut failed = Vec::new();
    let mut hooked = false;
    for write in writes {
        match write.apply(s) {
            Ok(applied) => hooked |= applied == Applied::HookQueued,
            Err(e) => failed.push((write.task(), e)),
        }
    }
    (failed, hooked)
}

/// The store write an event asks for, if any.
fn write_for(shared: &Shared, event: QueueEvent) -> Option<Write> {
    match event {
        QueueEvent::Submitted { .. } | QueueEvent::Progress { .. } => None,
        // Emitted only when the batch changed (no write per batch).
        QueueEvent::Sequence { id, contract } => Some(Write::Grant(TaskId(id.0), grant_of(&contract))),
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
            Some(Write::Decision(id, record))
        }
        QueueEvent::Started { id, contract } => Some(Write::Started(TaskId(id.0), grant_of(&contract))),
        QueueEvent::StateChanged { id, state } => {
            if shared.stopping() {
                return None;
            }
            let id = TaskId(id.0);
            Some(match state {
                lardon::TaskState::Paused => Write::Paused(id),
                _ => Write::Resumed(id),
            })
        }
        QueueEvent::Finished { id, state, message } => {
            // At shutdown, runs the daemon itself stopped and pending tasks
            // the closing queue cancelled stay live in the store: the next
            // start queues them again. A run that ends failed while the
            // daemon stops may have been ended by the stop (its SIGTERM
            // racing the stop's cancel), so it is left live too: at worst a
            // failing run is tried once more after the restart, never lost.
            if shared.stopping() && state != TaskState::Completed {
                return None;
            }
            // The exit code is on the row: the runner wrote it with its last
            // run, ahead of this end in the writer's order (its callback
            // returned before the queue emitted this). It may have landed
            // before this attempt's start, which clears nothing it wrote.
            Some(Write::Finished(TaskId(id.0), Outcome { state, exit_code: None, reason: message }))
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::spec::TaskSpec;
    use crate::store::NewTask;

    /// One job carries a whole burst, but a write that fails (its task was
    /// removed meanwhile) must neither undo nor stop the others.
    #[test]
    fn a_failing_write_in_a_burst_leaves_the_others_applied() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path().join("db")).unwrap();
        let a = store.insert_task(&NewTask::new(TaskSpec::command(["true"]))).unwrap();
        let b = store.insert_task(&NewTask::new(TaskSpec::command(["true"]))).unwrap();
        let gone = TaskId(99);
        let grant = Grant { batch: 1, memory: 1 << 20, cpu_millis: 1000 };
        let done = Outcome { state: TaskState::Completed, exit_code: None, reason: None };
        let writes = [
            Write::Started(a, grant),
            Write::Started(gone, grant),
            Write::Started(b, grant),
            Write::Finished(a, done),
        ];
        store.begin_group().unwrap();
        let (failed, _) = apply_all(&mut store, &writes);
        store.commit_group().unwrap();
        assert_eq!(failed.iter().map(|(id, _)| *id).collect::<Vec<_>>(), vec![gone]);
        let state = |id| store.get_task(id).unwrap().unwrap().state;
        assert_eq!((state(a), state(b)), (TaskState::Completed, TaskState::Running));
    }
}
