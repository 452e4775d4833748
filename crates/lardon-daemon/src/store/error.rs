//! [`StoreError`]: every failure names the operation that failed.

use std::path::PathBuf;

use thiserror::Error;

use crate::spec::{TaskId, TaskState};

/// A store operation failed.
#[derive(Debug, Error)]
pub enum StoreError {
    /// SQLite refused; `op` says what the store was doing.
    #[error("store: {op}: {source}")]
    Sqlite {
        /// The operation, e.g. "insert task".
        op: &'static str,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// The database was written by a newer lardon.
    #[error(
        "store: database {} has schema version {found}, but this lardon only knows up to {known}: \
         upgrade lardon or use another --state-dir",
        path.display()
    )]
    TooNew {
        /// The database file.
        path: PathBuf,
        /// Its `user_version`.
        found: u32,
        /// The newest version this build knows.
        known: u32,
    },
    /// No task with that id.
    #[error("store: task {0} not found")]
    NotFound(TaskId),
    /// The transition is not allowed (e.g. out of a terminal state).
    #[error("store: task {id} is {from}, it cannot become {to}")]
    IllegalTransition {
        /// The task.
        id: TaskId,
        /// Its current state.
        from: TaskState,
        /// The state asked for.
        to: TaskState,
    },
    /// Batch cursors only move forward.
    #[error("store: task {id}: the cursor cannot move back from {current} to {requested}")]
    CursorBackwards {
        /// The task.
        id: TaskId,
        /// Durable cursor.
        current: u64,
        /// Cursor asked for.
        requested: u64,
    },
    /// A cursor past the last item, or on an unbatched task.
    #[error("store: task {id}: cursor {requested} is beyond its {items} items")]
    CursorBeyondEnd {
        /// The task.
        id: TaskId,
        /// Cursor asked for.
        requested: u64,
        /// Items of the task (0 for an unbatched task).
        items: u64,
    },
    /// Only terminal tasks can be removed.
    #[error("store: task {id} is {state}; only completed, failed or cancelled tasks can be removed")]
    NotTerminal {
        /// The task.
        id: TaskId,
        /// Its state.
        state: TaskState,
    },
    /// Only a finished task can be restarted.
    #[error("store: task {id} is {state}; only completed, failed or cancelled tasks can be restarted")]
    StillLive {
        /// The task.
        id: TaskId,
        /// Its state.
        state: TaskState,
    },
    /// A stored row could not be decoded (corruption or a hand edit).
    #[error("store: {what}: {detail}")]
    Corrupt {
        /// Which row or column.
        what: String,
        /// What was wrong.
        detail: String,
    },
    /// A value could not be encoded for storage.
    #[error("store: {op}: {source}")]
    Encode {
        /// The operation.
        op: &'static str,
        /// serde_json's error.
        #[source]
        source: serde_json::Error,
    },
    /// A number too large for SQLite's signed 64-bit integers.
    #[error("store: {what}: {value} exceeds 2^63-1")]
    OutOfRange {
        /// The field.
        what: &'static str,
        /// The value refused.
        value: u64,
    },
    /// A dependency that is not a stored task (ids must refer to tasks
    /// submitted earlier, which also rules out cycles).
    #[error("store: dependency {dep} is not a known task")]
    UnknownDependency {
        /// The missing task.
        dep: TaskId,
    },
    /// A scratch volume by that name or path already exists.
    #[error("store: scratch volume `{0}` already exists (by name or path)")]
    ScratchExists(String),
    /// No scratch volume by that name.
    #[error("store: scratch volume `{0}` not found")]
    ScratchNotFound(String),
    /// The store's writer thread has stopped (the daemon is shutting down,
    /// or the thread failed): the write was not made.
    #[error("store: the writer has stopped; the change was not written")]
    WriterStopped,
    /// The group this write belonged to could not be committed: nothing of
    /// it is durable.
    #[error("store: commit failed: {0}")]
    CommitFailed(String),
    /// The database file's directory could not be created.
    #[error("store: creating {}: {source}", path.display())]
    Io {
        /// The directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// Attaches the operation name to a rusqlite result.
pub(crate) trait Ctx<T> {
    /// Maps the error to [`StoreError::Sqlite`] with `op`.
    fn ctx(self, op: &'static str) -> Result<T, StoreError>;
}

impl<T> Ctx<T> for Result<T, rusqlite::Error> {
    fn ctx(self, op: &'static str) -> Result<T, StoreError> {
        self.map_err(|source| StoreError::Sqlite { op, source })
    }
}
