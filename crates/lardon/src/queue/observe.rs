//! Reading the queue: views of tasks, the event stream, and waiting for
//! tasks to end ([`TaskQueue::get`], [`TaskQueue::snapshot`],
//! [`TaskQueue::subscribe`], [`TaskQueue::wait`], [`TaskQueue::wait_idle`]).

use std::sync::mpsc::{Receiver, channel};

use super::state::{Entry, Retired};
use super::{QueueEvent, QueueSnapshot, TaskId, TaskQueue, TaskView};

impl TaskQueue {
    /// A view of `id`, live or among the last 64 ended.
    pub fn get(&self, id: TaskId) -> Option<TaskView> {
        let now = self.inner.governor.now();
        let green = self.pressure_green();
        let st = self.inner.lock();
        st.entries
            .get(&id)
            .map(|e| e.view(now, green, st.queue_wait.as_ref()))
            .or_else(|| st.history.iter().find(|v| v.id() == id).map(Retired::view))
    }

    /// Every live task in submission order, then the last 64 ended ones.
    pub fn snapshot(&self) -> QueueSnapshot {
        let now = self.inner.governor.now();
        let green = self.pressure_green();
        let generation = self.inner.governor.generation();
        let st = self.inner.lock();
        let mut live: Vec<&Entry> = st.entries.values().map(|e| &**e).collect();
        live.sort_by_key(|e| e.seq);
        QueueSnapshot {
            live: live.into_iter().map(|e| e.view(now, green, st.queue_wait.as_ref())).collect(),
            finished: st.history.iter().map(Retired::view).collect(),
            generation,
        }
    }

    /// A stream of every event from now on.
    pub fn subscribe(&self) -> Receiver<QueueEvent> {
        let (tx, rx) = channel();
        self.inner.lock().subscribers.push(tx);
        rx
    }

    /// How many events the queue has emitted since it was created. Events
    /// are sent to every subscriber under the queue's lock, so once a call
    /// that changed a task returns, this count covers its events: a
    /// subscriber that has handled this many has seen them (the daemon
    /// waits on it before acknowledging a change, docs/DESIGN.md §10).
    pub fn events_emitted(&self) -> u64 {
        self.inner.lock().emitted
    }

    /// Blocks until `id` has ended (or is unknown); returns its view.
    ///
    /// # Blocking
    /// Sleeps on the queue's task signal; never polls.
    pub fn wait(&self, id: TaskId) -> Option<TaskView> {
        loop {
            let epoch = self.inner.tasks.epoch();
            {
                let st = self.inner.lock();
                if !st.entries.contains_key(&id) {
                    return st.history.iter().find(|v| v.id() == id).map(Retired::view);
                }
            }
            self.inner.tasks.wait(epoch, None);
        }
    }

    /// Blocks until no task is live.
    ///
    /// # Blocking
    /// Sleeps on the queue's idle signal, which is bumped only when the
    /// last live task leaves (not at every task end); never polls.
    pub fn wait_idle(&self) {
        loop {
            let epoch = self.inner.idle.epoch();
            if self.inner.lock().entries.is_empty() {
                return;
            }
            self.inner.idle.wait(epoch, None);
        }
    }
}
