//! Taking a task that has not started back out of the queue, for a caller
//! that will run it elsewhere (a daemon shipping it to a cluster agent).

use super::{QueueError, TaskId, TaskQueue, TaskView};

impl TaskQueue {
    /// Takes `id` out of the queue when it has not started, under the lock
    /// the dispatcher and the hand-offs start tasks under: once this returns
    /// `Ok` the task can never start here, and once a task has started this
    /// returns [`QueueError::Started`] — exactly one of the two happens.
    /// The task leaves no outcome (its id may be submitted again, e.g. to
    /// run it here after all), emits no event and its callback is dropped
    /// unrun. A task another live task waits on stays (its dependents
    /// would otherwise never resolve). Returns its last view.
    ///
    /// # Errors
    /// [`QueueError::NotFound`]/[`QueueError::AlreadyEnded`],
    /// [`QueueError::Started`], or [`QueueError::HasDependents`].
    pub fn withdraw(&self, id: TaskId) -> Result<TaskView, QueueError> {
        let now = self.inner.governor.now();
        let mut st = self.inner.lock();
        let Some(e) = st.entries.get(&id) else { return Err(self.missing(&st, id)) };
        if e.started {
            return Err(QueueError::Started(id));
        }
        let waited_on = st
            .dependents
            .get(&id)
            .is_some_and(|ds| ds.iter().any(|d| st.entries.get(d).is_some_and(|x| !x.started)));
        if waited_on {
            return Err(QueueError::HasDependents(id));
        }
        let key = e.order_key();
        let view = e.view(now, true, st.queue_wait.as_ref());
        st.pending.remove(&key);
        let callback = st.entries.remove(&id).and_then(|mut e| e.callback.take());
        st.dependents.remove(&id);
        if st.blocked_submits > 0 {
            self.inner.not_full.notify_all();
        }
        let idle = st.entries.is_empty();
        drop(st);
        drop(callback);
        // A `wait` on it, or a `wait_idle` it was the last live task of,
        // returns now.
        self.inner.tasks_left(idle);
        // The dispatcher may have been holding room for it.
        self.inner.wake_dispatcher();
        Ok(view)
    }
}
