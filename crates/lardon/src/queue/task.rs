//! What is submitted: [`Task`], its [`TaskId`], [`TaskState`] and the
//! callback's error type [`TaskError`].

use std::borrow::Cow;
use std::fmt;

use thiserror::Error;

use crate::envelope::Envelope;
use crate::estimate::Estimate;

use super::context::TaskContext;

/// A task's id: unique in its queue and never reused, even after removal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId(pub u64);

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A task's life: PENDING → RUNNING ⇄ PAUSED → one terminal state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskState {
    /// Waiting for admission or dependencies.
    Pending,
    /// Its callback runs (it holds a reservation, or is between sequences).
    Running,
    /// Paused: pending and skipped by the dispatcher, or running and held at
    /// its next checkpoint (keeping its reservation).
    Paused,
    /// The callback returned `Ok`.
    Completed,
    /// Rejected, failed, panicked, or a dependency failed.
    Failed,
    /// Cancelled.
    Cancelled,
}

impl TaskState {
    /// Completed, failed or cancelled: final.
    pub fn is_terminal(self) -> bool {
        matches!(self, TaskState::Completed | TaskState::Failed | TaskState::Cancelled)
    }

    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Pending => "pending",
            TaskState::Running => "running",
            TaskState::Paused => "paused",
            TaskState::Completed => "completed",
            TaskState::Failed => "failed",
            TaskState::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for TaskState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a callback stops early.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TaskError {
    /// The task was cancelled (returned by `checkpoint`/`sequence_break`).
    #[error("cancelled")]
    Cancelled,
    /// The task failed, with a reason.
    #[error("{0}")]
    Failed(String),
}

impl TaskError {
    /// A failure with `reason`.
    pub fn failed(reason: impl fmt::Display) -> Self {
        TaskError::Failed(reason.to_string())
    }
}

/// What a callback returns.
pub type TaskResult = Result<(), TaskError>;

pub(crate) type Callback = Box<dyn FnOnce(&mut TaskContext) -> TaskResult + Send + 'static>;

/// A unit of work for the [`super::TaskQueue`]: what it needs, where it
/// stands in line, and the callback that does it.
#[must_use]
pub struct Task {
    pub(crate) id: Option<TaskId>,
    /// Borrowed for a literal name (no allocation per submitted task).
    pub(crate) name: Cow<'static, str>,
    pub(crate) envelope: Envelope,
    pub(crate) priority: i32,
    pub(crate) after: Vec<TaskId>,
    pub(crate) after_any: Vec<TaskId>,
    pub(crate) callback: Callback,
}

impl Task {
    /// A task named `name` needing `estimate`, running `callback`. A
    /// `&'static str` name is kept borrowed (no allocation); a `String` is
    /// moved in.
    pub fn new(
        name: impl Into<Cow<'static, str>>,
        estimate: Estimate,
        callback: impl FnOnce(&mut TaskContext) -> TaskResult + Send + 'static,
    ) -> Self {
        Task::with_envelope(name, Envelope::single(estimate), callback)
    }

    /// A task offering a capability envelope (alternatives tried in order).
    pub fn with_envelope(
        name: impl Into<Cow<'static, str>>,
        envelope: Envelope,
        callback: impl FnOnce(&mut TaskContext) -> TaskResult + Send + 'static,
    ) -> Self {
        Task {
            id: None,
            name: name.into(),
            envelope,
            priority: 0,
            after: Vec::new(),
            after_any: Vec::new(),
            callback: Box::new(callback),
        }
    }

    /// Higher runs first; equal priorities run in submission order.
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// Waits for `id` to complete successfully; fails if it does not.
    pub fn after(mut self, id: TaskId) -> Self {
        self.after.push(id);
        self
    }

    /// Waits for `id` to end, whatever the outcome.
    pub fn after_any(mut self, id: TaskId) -> Self {
        self.after_any.push(id);
        self
    }

    /// Uses a preassigned id (restoring durable tasks); refused if taken.
    pub fn with_id(mut self, id: TaskId) -> Self {
        self.id = Some(id);
        self
    }

    /// The task's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Debug for Task {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Task")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("priority", &self.priority)
            .field("after", &self.after)
            .field("after_any", &self.after_any)
            .finish_non_exhaustive()
    }
}
