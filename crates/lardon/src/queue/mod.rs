//! The [`TaskQueue`]: runs admitted work, many tasks at once (docs/DESIGN.md §8).
//!
//! One dispatcher thread scans pending tasks by priority then FIFO and
//! starts every task the [`Governor`] admits on a pool of worker threads.
//! A worker whose task ends runs the same scan itself and starts the next
//! admitted task on its own thread (the hand-off, docs/DESIGN.md §8), so a
//! busy queue needs no dispatcher round trip per task. The dispatcher
//! sleeps until something changes from outside — a release by another
//! thread, a submit, a resume, a cancel, a policy change, a host sample
//! that moved a budget — and re-samples the host only while some task
//! waits on host state.

mod context;
mod dispatch;
mod events;
mod grant_text;
#[cfg(all(test, loom))]
mod loom_tests;
mod observe;
mod pending;
#[cfg(all(test, not(loom)))]
mod prop_tests;
mod signal;
mod skip;
mod slab;
mod state;
mod submit;
mod task;
#[cfg(all(test, not(loom)))]
mod tests;
mod withdraw;
mod worker;

use std::sync::Arc;
use std::task::Waker;
use std::time::Duration;

use thiserror::Error;

pub use context::TaskContext;
pub use events::{DecisionRecord, QueueEvent, QueueSnapshot, TaskView};
pub use state::HISTORY;
pub use task::{Task, TaskError, TaskId, TaskResult, TaskState};

use crate::governor::Governor;
// Through the loom switch, so the loom models drive the real queue.
use crate::sync::thread::{self, JoinHandle};
use crate::sync::{Condvar, Mutex, MutexGuard};
use signal::Signal;
use state::QueueState;
use worker::Pool;

/// Tunables of a [`TaskQueue`].
#[derive(Clone)]
pub struct QueueConfig {
    /// Most tasks waiting to start; `submit` blocks and `try_submit`
    /// fails beyond it (default 100 000).
    pub capacity: usize,
    /// How long a waiting head may be bypassed before later tasks must
    /// leave room for it (default 30 s, on the Governor's clock).
    pub starvation_bound: Duration,
    /// Host re-sampling period while a task waits on host state (default
    /// 250 ms; at most 500 ms so snapshots stay fresh).
    pub sample_interval: Duration,
    /// Called once on each worker thread before it runs tasks (e.g. to pin
    /// it to the compute pool).
    pub on_worker_start: Option<Arc<dyn Fn() + Send + Sync>>,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            capacity: 100_000,
            starvation_bound: Duration::from_secs(30),
            sample_interval: Duration::from_millis(250),
            on_worker_start: None,
        }
    }
}

impl std::fmt::Debug for QueueConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueConfig")
            .field("capacity", &self.capacity)
            .field("starvation_bound", &self.starvation_bound)
            .field("sample_interval", &self.sample_interval)
            .finish_non_exhaustive()
    }
}

/// Why a submission was refused; the task is handed back when it can be
/// retried.
#[derive(Debug, Error)]
pub enum SubmitError {
    /// The pending capacity is reached (`try_submit` only).
    #[error("the queue is full")]
    Full(Box<Task>),
    /// The queue is closing or closed.
    #[error("the queue is closing")]
    Closing(Box<Task>),
    /// The preassigned id is already used.
    #[error("task id {0} is already used")]
    DuplicateId(TaskId),
    /// A dependency names no task this queue knows.
    #[error("dependency {0} is not a task of this queue")]
    UnknownDependency(TaskId),
}

/// Why an operation on a task was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum QueueError {
    /// No live task (or, for `remove`, no task at all) has this id.
    #[error("no task {0}")]
    NotFound(TaskId),
    /// The task already ended.
    #[error("task {0} already ended")]
    AlreadyEnded(TaskId),
    /// `remove` of a task that has not ended (cancel it first).
    #[error("task {0} has not ended: cancel it first")]
    NotEnded(TaskId),
    /// The task has not started (for operations on running tasks).
    #[error("task {0} has not started")]
    NotStarted(TaskId),
    /// Progress figures were refused.
    #[error("bad progress: {0}")]
    BadProgress(String),
    /// The task has started (for `withdraw`: it runs here).
    #[error("task {0} has started")]
    Started(TaskId),
    /// A live task waits on this one (for `withdraw`: it stays).
    #[error("task {0} has dependents waiting on it")]
    HasDependents(TaskId),
}

pub(crate) struct Inner {
    pub(crate) governor: Governor,
    pub(crate) config: QueueConfig,
    pub(crate) state: Mutex<QueueState>,
    /// Wakes the dispatcher.
    pub(crate) dispatch: Arc<Signal>,
    /// Wakes tasks blocked in `checkpoint`/`sequence_break`, and callers
    /// of `wait` (bumped whenever a task leaves the live set).
    pub(crate) tasks: Arc<Signal>,
    /// Wakes callers of `wait_idle` and `close`: bumped only when the last
    /// live task leaves, so a caller waiting for a drained queue is not
    /// woken (a futex wake and a context switch) at every task end.
    pub(crate) idle: Signal,
    pub(crate) not_full: Condvar,
    pub(crate) pool: Arc<Pool>,
    /// The dispatcher's Governor waker (wakes `dispatch`), kept so a scan
    /// can tell the Governor not to wake it for changes it has seen.
    pub(crate) dispatch_waker: Waker,
    /// The last host snapshot any scan took (a leaf lock: never held while
    /// taking another), reused while younger than the sample interval.
    pub(crate) last_sample: Mutex<Option<crate::Snapshot>>,
    /// Callbacks launched whose `run_callback` has not returned (a test
    /// hook: zero means every wake a task's end sends has been sent).
    #[cfg(test)]
    pub(crate) in_flight: std::sync::atomic::AtomicUsize,
    /// Scans the dispatcher has run (a test hook: a task started by a
    /// worker's hand-off costs none).
    #[cfg(test)]
    pub(crate) dispatcher_scans: std::sync::atomic::AtomicUsize,
}

impl Inner {
    pub(crate) fn lock(&self) -> MutexGuard<'_, QueueState> {
        crate::sync::lock(&self.state)
    }

    pub(crate) fn wake_dispatcher(&self) {
        self.dispatch.bump();
    }

    /// Tells waiters that tasks left the live set (call after the change
    /// is made under the queue lock, with or without that lock): every
    /// `wait` caller, and `wait_idle` callers when `idle` (the live set
    /// was empty after the change).
    pub(crate) fn tasks_left(&self, idle: bool) {
        self.tasks.bump();
        if idle {
            self.idle.bump();
        }
    }
}

/// Runs tasks as the Governor admits them.
///
/// # Examples
/// ```
/// use lardon::{Estimate, FakeProbe, Governor, HostPolicy, HostProfile, Task, TaskQueue, TaskState};
///
/// let profile = HostProfile::new(16 << 30, 8);
/// let governor = Governor::new(HostPolicy::default_for(&profile), FakeProbe::new(profile)).unwrap();
/// let queue = TaskQueue::new(governor);
/// let id = queue
///     .submit(Task::new("hello", Estimate::builder().memory(1 << 30).build(), |ctx| {
///         ctx.set_progress(1, 1).ok();
///         Ok(())
///     }))
///     .unwrap();
/// queue.wait(id);
/// assert_eq!(queue.get(id).unwrap().state, TaskState::Completed);
/// ```
pub struct TaskQueue {
    inner: Arc<Inner>,
    dispatcher: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for TaskQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.inner.lock();
        f.debug_struct("TaskQueue")
            .field("live", &st.entries.len())
            .field("running", &st.running)
            .field("closing", &st.closing)
            .finish()
    }
}

impl TaskQueue {
    /// A queue over `governor` with default settings.
    pub fn new(governor: Governor) -> Self {
        TaskQueue::with_config(governor, QueueConfig::default())
    }

    /// A queue over `governor` with `config`.
    pub fn with_config(governor: Governor, mut config: QueueConfig) -> Self {
        config.sample_interval =
            config.sample_interval.clamp(Duration::from_millis(1), Duration::from_millis(500));
        config.capacity = config.capacity.max(1);
        let pool = Pool::new(config.on_worker_start.clone());
        let dispatch = Arc::new(Signal::default());
        let inner = Arc::new(Inner {
            governor,
            config,
            state: Mutex::new(QueueState { next_id: 1, ..QueueState::default() }),
            dispatch_waker: Waker::from(Arc::clone(&dispatch)),
            dispatch,
            last_sample: Mutex::new(None),
            tasks: Arc::new(Signal::default()),
            idle: Signal::default(),
            not_full: Condvar::new(),
            pool,
            #[cfg(test)]
            in_flight: std::sync::atomic::AtomicUsize::new(0),
            #[cfg(test)]
            dispatcher_scans: std::sync::atomic::AtomicUsize::new(0),
        });
        let for_thread = Arc::clone(&inner);
        let dispatcher = thread::Builder::new()
            .name("lardon-dispatch".into())
            .spawn(move || dispatch::run(&for_thread))
            .ok();
        TaskQueue { inner, dispatcher: Mutex::new(dispatcher) }
    }

    /// The Governor this queue admits through.
    pub fn governor(&self) -> &Governor {
        &self.inner.governor
    }

    /// Cancels `id`: a pending or paused-pending task ends at once; a
    /// running one at its next checkpoint.
    ///
    /// # Errors
    /// [`QueueError::NotFound`] or [`QueueError::AlreadyEnded`].
    pub fn cancel(&self, id: TaskId) -> Result<(), QueueError> {
        let now = self.inner.governor.now();
        let mut st = self.inner.lock();
        let started = match st.entries.get_mut(&id) {
            None => return Err(self.missing(&st, id)),
            Some(e) => {
                e.cancel_requested = true;
                e.started
            }
        };
        let dropped = if started { Vec::new() } else { st.finish(id, TaskState::Cancelled, None, now) };
        if st.blocked_submits > 0 {
            self.inner.not_full.notify_all();
        }
        let idle = st.entries.is_empty();
        drop(st);
        drop(dropped);
        // Also wakes a running task's `checkpoint`, which sees the cancel.
        self.inner.tasks_left(idle);
        self.inner.wake_dispatcher();
        Ok(())
    }

    /// Pauses `id`: a pending task is skipped by the dispatcher; a running
    /// one stops at its next checkpoint and keeps its reservation.
    ///
    /// # Errors
    /// [`QueueError::NotFound`] or [`QueueError::AlreadyEnded`].
    pub fn pause(&self, id: TaskId) -> Result<(), QueueError> {
        let mut st = self.inner.lock();
        let Some(e) = st.entries.get_mut(&id) else { return Err(self.missing(&st, id)) };
        e.pause_requested = true;
        let changed = !e.started && e.state == TaskState::Pending;
        if changed {
            e.state = TaskState::Paused;
            st.emit(|| QueueEvent::StateChanged { id, state: TaskState::Paused });
        }
        Ok(())
    }

    /// Resumes `id`.
    ///
    /// # Errors
    /// [`QueueError::NotFound`] or [`QueueError::AlreadyEnded`].
    pub fn resume(&self, id: TaskId) -> Result<(), QueueError> {
        let mut st = self.inner.lock();
        let Some(e) = st.entries.get_mut(&id) else { return Err(self.missing(&st, id)) };
        e.pause_requested = false;
        let changed = !e.started && e.state == TaskState::Paused;
        if changed {
            e.state = TaskState::Pending;
            st.emit(|| QueueEvent::StateChanged { id, state: TaskState::Pending });
        }
        drop(st);
        self.inner.tasks.bump();
        self.inner.wake_dispatcher();
        Ok(())
    }

    /// Reports progress of a running task from outside its callback (a
    /// daemon relaying `lardon progress` from a child process).
    ///
    /// # Errors
    /// [`QueueError::NotFound`]/[`QueueError::AlreadyEnded`], or
    /// [`QueueError::BadProgress`] for `total == 0` or `done > total`.
    pub fn report_progress(&self, id: TaskId, progress: crate::progress::Progress) -> Result<(), QueueError> {
        let now = self.inner.governor.now();
        let mut st = self.inner.lock();
        let Some(e) = st.entries.get_mut(&id) else { return Err(self.missing(&st, id)) };
        e.progress.report(progress, now).map_err(|err| QueueError::BadProgress(err.to_string()))?;
        st.emit(|| QueueEvent::Progress { id, progress });
        Ok(())
    }

    /// Marks a running task paused or running at once, for executors that
    /// stop work out of band (a daemon sending SIGSTOP/SIGCONT to a child
    /// process group). The task keeps its reservation. Its callback, if it
    /// calls `checkpoint`, also honours the flag.
    ///
    /// # Errors
    /// [`QueueError::NotFound`]/[`QueueError::AlreadyEnded`], or
    /// [`QueueError::NotStarted`] for a task that has not started.
    pub fn set_running_paused(&self, id: TaskId, paused: bool) -> Result<(), QueueError> {
        let now = self.inner.governor.now();
        let mut st = self.inner.lock();
        let Some(e) = st.entries.get_mut(&id) else { return Err(self.missing(&st, id)) };
        if !e.started {
            return Err(QueueError::NotStarted(id));
        }
        e.pause_requested = paused;
        let next = if paused { TaskState::Paused } else { TaskState::Running };
        if e.state != next {
            e.state = next;
            let phase = if paused { crate::progress::Phase::Paused } else { crate::progress::Phase::Running };
            let _ = e.progress.set_phase(phase, now);
            st.emit(|| QueueEvent::StateChanged { id, state: next });
        }
        drop(st);
        self.inner.tasks.bump();
        Ok(())
    }

    /// Frees an ended task's id, outcome included, so that a task submitted
    /// with that id runs as a new attempt (a restart). Nothing live can be
    /// waiting on it: its dependents resolved when it ended.
    ///
    /// # Errors
    /// [`QueueError::NotEnded`] for a live task, [`QueueError::NotFound`]
    /// for an id that never ended here.
    pub fn release_id(&self, id: TaskId) -> Result<(), QueueError> {
        let mut st = self.inner.lock();
        if st.entries.contains_key(&id) {
            return Err(QueueError::NotEnded(id));
        }
        let known = st.outcomes.remove(&id).is_some();
        let before = st.history.len();
        st.history.retain(|v| v.id() != id);
        if known || st.history.len() != before { Ok(()) } else { Err(QueueError::NotFound(id)) }
    }

    /// Forgets an ended task (it leaves `snapshot`; its id stays used).
    ///
    /// # Errors
    /// [`QueueError::NotEnded`] for a live task, [`QueueError::NotFound`].
    pub fn remove(&self, id: TaskId) -> Result<TaskView, QueueError> {
        let mut st = self.inner.lock();
        if st.entries.contains_key(&id) {
            return Err(QueueError::NotEnded(id));
        }
        let pos = st.history.iter().position(|v| v.id() == id).ok_or(QueueError::NotFound(id))?;
        st.history.remove(pos).map(|r| r.view()).ok_or(QueueError::NotFound(id))
    }

    /// Tells the dispatcher that host resources changed outside the
    /// Governor's view (it re-samples the host and rescans at once).
    pub fn resources_changed(&self) {
        self.inner.lock().dispatcher_wake = true;
        self.inner.wake_dispatcher();
    }

    /// Closes the queue: refuses new work, cancels everything pending,
    /// asks running tasks to cancel at their next checkpoint, waits for
    /// their callbacks to return (releasing every reservation) and stops
    /// the dispatcher. Every task's callback is dropped exactly once, and
    /// every [`TaskQueue::subscribe`] stream disconnects after its last
    /// event, so a subscriber can block on it with no timeout. Idempotent.
    pub fn close(&self) {
        let now = self.inner.governor.now();
        let mut st = self.inner.lock();
        st.closing = true;
        let pending: Vec<TaskId> = st.entries.values().filter(|e| !e.started).map(|e| e.id).collect();
        let mut dropped = Vec::new();
        for id in pending {
            if st.entries.contains_key(&id) {
                dropped.extend(st.finish(id, TaskState::Cancelled, Some("queue closed".into()), now));
            }
        }
        for e in st.entries.values_mut() {
            e.cancel_requested = true;
        }
        self.inner.not_full.notify_all();
        let idle = st.entries.is_empty();
        drop(st);
        drop(dropped);
        self.inner.tasks_left(idle);
        self.inner.wake_dispatcher();
        self.wait_idle();
        let handle = crate::sync::lock(&self.dispatcher).take();
        if let Some(handle) = handle {
            let _ = handle.join();
        }
        self.inner.pool.shutdown();
        // Nothing emits from here on: ending the streams lets a subscriber
        // block on `recv` and still notice the close (no periodic wake).
        self.inner.lock().subscribers.clear();
    }

    fn pressure_green(&self) -> bool {
        self.inner.governor.pressure().0 == crate::PressureLevel::Green
    }

    fn missing(&self, st: &QueueState, id: TaskId) -> QueueError {
        if st.outcomes.contains_key(&id) { QueueError::AlreadyEnded(id) } else { QueueError::NotFound(id) }
    }
}

impl Drop for TaskQueue {
    fn drop(&mut self) {
        self.close();
    }
}
