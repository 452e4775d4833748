//! The observer API: consistent views of tasks and a stream of events.

use crate::clock::MonoTime;
use crate::contract::Contract;
use crate::decision::{DecisionKind, ReasonCode};
use crate::progress::{Progress, ProgressView};

use super::task::{TaskId, TaskState};

/// The last admission decision taken for a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecisionRecord {
    /// Admit, reduce, wait or reject.
    pub kind: DecisionKind,
    /// Machine-readable reason.
    pub reason: ReasonCode,
    /// Human explanation.
    pub message: String,
    /// When.
    pub at: MonoTime,
}

/// One task as the observer sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskView {
    /// Id.
    pub id: TaskId,
    /// Name.
    pub name: String,
    /// State.
    pub state: TaskState,
    /// Priority.
    pub priority: i32,
    /// Contract of the current sequence, while it holds one.
    pub contract: Option<Contract>,
    /// Progress, throughput and ETA.
    pub progress: ProgressView,
    /// Last decision and its reason.
    pub last_decision: Option<DecisionRecord>,
    /// Submission time.
    pub submitted_at: MonoTime,
    /// First start.
    pub started_at: Option<MonoTime>,
    /// End.
    pub finished_at: Option<MonoTime>,
    /// Failure or cancellation reason.
    pub message: Option<String>,
    /// Sequences started (1 for a task that never called `sequence_break`).
    pub sequences: u32,
    /// The tasks it still waits for before it may be admitted (`after`
    /// and `after_any` dependencies not yet ended), in the order given.
    pub waiting_for: Vec<TaskId>,
}

/// Every task, taken under one lock: live tasks in submission order, then
/// up to 64 terminal ones, oldest first.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueSnapshot {
    /// Live tasks (pending, running, paused).
    pub live: Vec<TaskView>,
    /// The most recent terminal tasks.
    pub finished: Vec<TaskView>,
    /// Governor generation when taken.
    pub generation: u64,
}

/// What happened in the queue, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum QueueEvent {
    /// A task was accepted.
    Submitted {
        /// Id.
        id: TaskId,
        /// Name.
        name: String,
    },
    /// A new admission decision (emitted when its kind or reason changes).
    Decision {
        /// Id.
        id: TaskId,
        /// Kind.
        kind: DecisionKind,
        /// Reason.
        reason: ReasonCode,
        /// Human message.
        message: String,
    },
    /// The callback started.
    Started {
        /// Id.
        id: TaskId,
        /// First contract.
        contract: Contract,
    },
    /// Progress was reported.
    Progress {
        /// Id.
        id: TaskId,
        /// New progress.
        progress: Progress,
    },
    /// A new sequence began after `sequence_break`.
    Sequence {
        /// Id.
        id: TaskId,
        /// Its contract.
        contract: Contract,
    },
    /// Paused or resumed.
    StateChanged {
        /// Id.
        id: TaskId,
        /// New state.
        state: TaskState,
    },
    /// The task ended.
    Finished {
        /// Id.
        id: TaskId,
        /// Terminal state.
        state: TaskState,
        /// Reason, when failed or cancelled.
        message: Option<String>,
    },
}
