//! Putting tasks into the queue: [`TaskQueue::submit`], its non-blocking
//! and paused forms, and [`TaskQueue::submit_many`], which inserts a
//! whole batch under one hold of the queue lock and wakes the dispatcher
//! once.

use std::sync::PoisonError;

use crate::clock::MonoTime;
use crate::progress::ProgressTracker;

use super::events::QueueEvent;
use super::state::{Entry, QueueState};
use super::task::{Callback, Task, TaskId, TaskState};
use super::{MutexGuard, SubmitError, TaskQueue};

/// Why a task cannot go in now.
enum NoRoom {
    Closing,
    Full,
}

impl NoRoom {
    fn refuse(self, task: Task) -> SubmitError {
        match self {
            NoRoom::Closing => SubmitError::Closing(Box::new(task)),
            NoRoom::Full => SubmitError::Full(Box::new(task)),
        }
    }
}

impl TaskQueue {
    /// Submits `task`, blocking while the queue is full.
    ///
    /// # Errors
    /// [`SubmitError::Closing`], [`SubmitError::DuplicateId`] or
    /// [`SubmitError::UnknownDependency`].
    pub fn submit(&self, task: Task) -> Result<TaskId, SubmitError> {
        self.submit_inner(task, true, false)
    }

    /// Submits `task` without blocking.
    ///
    /// # Errors
    /// [`SubmitError::Full`] when at capacity, else as [`TaskQueue::submit`].
    pub fn try_submit(&self, task: Task) -> Result<TaskId, SubmitError> {
        self.submit_inner(task, false, false)
    }

    /// Submits `task` already PAUSED (skipped by the dispatcher until
    /// [`TaskQueue::resume`]), under the same lock as the insertion so it
    /// can never start before the pause lands: a daemon restoring a paused
    /// task, or `lardon submit --paused`. Blocks while the queue is full.
    ///
    /// # Errors
    /// As [`TaskQueue::submit`].
    pub fn submit_paused(&self, task: Task) -> Result<TaskId, SubmitError> {
        self.submit_inner(task, true, true)
    }

    /// Submits `tasks` in order, each exactly as [`TaskQueue::submit`]
    /// would (same ids, checks, order and events), under one hold of the
    /// queue lock and with one wake of the dispatcher for the whole batch:
    /// a burst of N tasks costs one lock round trip and one wake, not N.
    /// While the queue is full it blocks as `submit` does, after waking
    /// the dispatcher so that the tasks already in can start. Returns one
    /// answer per task, in the tasks' order; a refused task does not stop
    /// the ones after it.
    pub fn submit_many(&self, tasks: Vec<Task>) -> Vec<Result<TaskId, SubmitError>> {
        let mut answers = Vec::with_capacity(tasks.len());
        let mut dropped = Vec::new();
        let mut st = self.inner.lock();
        for task in tasks {
            let (guard, no_room) = self.wait_for_room(st, true);
            st = guard;
            if let Some(no_room) = no_room {
                answers.push(Err(no_room.refuse(task)));
                continue;
            }
            let now = self.inner.governor.now();
            answers.push(self.insert_locked(&mut st, task, false, now).map(|(id, _, mut ended)| {
                dropped.append(&mut ended);
                id
            }));
        }
        let left = (!dropped.is_empty()).then(|| st.entries.is_empty());
        drop(st);
        drop(dropped);
        if let Some(idle) = left {
            self.inner.tasks_left(idle);
        }
        self.inner.wake_dispatcher();
        answers
    }

    /// Inserts `task` (PAUSED from the start when `paused`, under the same
    /// lock, so it can never start before the pause lands).
    fn submit_inner(&self, task: Task, block: bool, paused: bool) -> Result<TaskId, SubmitError> {
        let (mut st, no_room) = self.wait_for_room(self.inner.lock(), block);
        if let Some(no_room) = no_room {
            return Err(no_room.refuse(task));
        }
        let now = self.inner.governor.now();
        let (id, announce, dropped) = self.insert_locked(&mut st, task, paused, now)?;
        let left = (!dropped.is_empty()).then(|| st.entries.is_empty());
        drop(st);
        drop(dropped);
        if let Some(idle) = left {
            self.inner.tasks_left(idle);
        }
        if announce || left.is_some() {
            self.inner.wake_dispatcher();
        }
        Ok(id)
    }

    /// Waits, when `block`, while the pending order is at capacity; says
    /// why a task cannot go in when it cannot. The dispatcher is woken
    /// before any sleep (a batch's earlier tasks are not yet announced).
    fn wait_for_room<'a>(
        &self,
        mut st: MutexGuard<'a, QueueState>,
        block: bool,
    ) -> (MutexGuard<'a, QueueState>, Option<NoRoom>) {
        loop {
            if st.closing {
                return (st, Some(NoRoom::Closing));
            }
            if st.pending.len() < self.inner.config.capacity {
                return (st, None);
            }
            if !block {
                return (st, Some(NoRoom::Full));
            }
            // A leaf lock: safe to take under the queue lock.
            self.inner.wake_dispatcher();
            st.blocked_submits += 1;
            st = self.inner.not_full.wait(st).unwrap_or_else(PoisonError::into_inner);
            st.blocked_submits -= 1;
        }
    }

    /// Inserts `task` under the queue lock (room was checked): its id, its
    /// dependencies, its entry and place in the pending order. A task whose
    /// `after` dependency already failed ends FAILED at once; its callback
    /// (and any dependents') comes back to be dropped outside the lock.
    ///
    /// Also says whether the dispatcher must be woken for it: only when
    /// the fresh list was empty. A task submitted while earlier fresh
    /// tasks wait for their first evaluation is seen by the same scan,
    /// because every scan empties the list (so a non-empty list means the
    /// dispatcher was woken after its first task went in and has not
    /// scanned since). In a burst this spares a lock of the dispatcher's
    /// signal per submit.
    fn insert_locked(
        &self,
        st: &mut QueueState,
        task: Task,
        paused: bool,
        now: MonoTime,
    ) -> Result<(TaskId, bool, Vec<Callback>), SubmitError> {
        let id = match task.id {
            Some(id) => {
                if st.entries.contains_key(&id) || st.outcomes.contains_key(&id) {
                    return Err(SubmitError::DuplicateId(id));
                }
                st.next_id = st.next_id.max(id.0.saturating_add(1));
                id
            }
            None => {
                let id = TaskId(st.next_id);
                st.next_id += 1;
                id
            }
        };
        let mut waiting_on = Vec::new();
        let mut failed_dep = None;
        for &dep in &task.after {
            match (st.entries.contains_key(&dep), st.outcomes.get(&dep)) {
                (true, _) => waiting_on.push(dep),
                (false, Some(TaskState::Completed)) => {}
                (false, Some(state)) => failed_dep = Some((dep, *state)),
                (false, None) => return Err(SubmitError::UnknownDependency(dep)),
            }
        }
        let mut waiting_any = Vec::new();
        for &dep in &task.after_any {
            match (st.entries.contains_key(&dep), st.outcomes.contains_key(&dep)) {
                (true, _) => waiting_any.push(dep),
                (false, true) => {}
                (false, false) => return Err(SubmitError::UnknownDependency(dep)),
            }
        }
        let seq = st.next_seq;
        st.next_seq += 1;
        let entry = Box::new(Entry {
            id,
            name: task.name,
            envelope: task.envelope,
            priority: task.priority,
            seq,
            state: if paused { TaskState::Paused } else { TaskState::Pending },
            started: false,
            waiting_on,
            waiting_any,
            callback: Some(task.callback),
            pause_requested: paused,
            cancel_requested: false,
            failed_message: None,
            contract: None,
            last_decision: None,
            progress: ProgressTracker::new(),
            submitted_at: now,
            started_at: None,
            finished_at: None,
            message: None,
            sequences: 0,
            bypassed_since: None,
        });
        // The name is copied for the event only when someone subscribes
        // (`emit` builds no event otherwise).
        let event_name = (!st.subscribers.is_empty()).then(|| entry.name.clone().into_owned());
        for &dep in entry.waiting_on.iter().chain(&entry.waiting_any) {
            st.dependents.entry(dep).or_default().push(id);
        }
        st.pending.insert(entry.order_key(), id);
        st.entries.insert(id, entry);
        let announce = st.fresh.is_empty();
        st.fresh.push(id);
        st.emit(|| QueueEvent::Submitted { id, name: event_name.unwrap_or_default() });
        let dropped = match failed_dep {
            Some((dep, state)) => {
                st.finish(id, TaskState::Failed, Some(format!("dependency {dep} ended {state}")), now)
            }
            None => Vec::new(),
        };
        Ok((id, announce, dropped))
    }
}
