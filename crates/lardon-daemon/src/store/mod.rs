//! The durable store: one SQLite database (WAL, `synchronous=FULL`) in the
//! state dir.
//!
//! * Every state change is **one** atomic unit (a savepoint: its own
//!   transaction when alone, part of the open group inside the writer)
//!   touching only the rows it changes (no whole-state rewrites), and
//!   appends its event in the same unit.
//! * Schema versions live in `PRAGMA user_version` ([`schema`]); a database
//!   from a newer build is refused with [`StoreError::TooNew`].
//! * Task numbers come from a counter that only moves forward, so ids are
//!   never reused, even after `remove`/`clean`.
//! * [`Store::recover_after_crash`] applies docs/DESIGN.md §10's crash recovery.
//!
//! The store is synchronous. The daemon writes only through one
//! [`StoreWriter`] thread, which groups the writes queued behind each other
//! into one transaction (one fsync per group) and replies after the commit;
//! it reads through a second connection from [`Store::open_reader`].
//!
//! Table groups: `tasks` (insert, read, remove), `transitions` (state
//! changes, cursor, progress, decisions, recovery), `course` (each task's
//! bounded decision history), `hooks` (each end's hook), `events`, `learning` (class history,
//! capability feedback), `config` (policy overrides, scratch volumes), `usage` (what each
//! task's runs used, and the report's read).

mod config;
mod course;
mod error;
mod events;
mod groups;
mod hooks;
mod learning;
pub mod schema;
mod tasks;
mod transitions;
mod unit;
mod usage;
mod writer;

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OpenFlags};

pub use config::ScratchVolumeRow;
pub use course::{COURSE_PER_TASK, CourseEntry, CourseKind, Grant};
pub use error::StoreError;
pub use events::{EventKind, EventRow};
pub use groups::GroupRow;
pub use hooks::{HOOK_OUTPUT_MAX, HOOKS_PER_TASK, HookEnd, HookResult, HookRow, PendingHook};
pub use learning::{FeedbackRow, HISTORY_PER_CLASS, HistorySample, MAX_FEEDBACK_ROWS};
pub use schema::SCHEMA_VERSION;
pub use tasks::{Inserted, NewTask, StoredDep, TaskFilter};
pub use transitions::{INTERRUPTED, Outcome, RecoveryReport};
pub use usage::{ReportFilter, ReportTask, RunUsage};
pub use writer::{LINGER, MAX_GROUP, StoreWriter};

use crate::spec::{DecisionKind, TaskId, TaskSpec, TaskState};
use error::Ctx;

/// How long a writer waits for a lock held by another connection.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// Prepared statements kept per connection: more than the store has (about
/// 45), so that none is parsed again (rusqlite keeps 16 by default, and a
/// task's path through the writer alone uses a dozen).
const STATEMENT_CACHE: usize = 64;

/// Default bound on the events table (oldest pruned first).
pub const DEFAULT_MAX_EVENTS: u64 = 200_000;

/// A source of wall-clock time in Unix milliseconds (injectable for tests).
pub type WallClock = Box<dyn Fn() -> i64 + Send>;

fn system_now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Durable progress reported by a task.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Progress {
    /// Units done.
    pub done: u64,
    /// Units in all (0 = unknown).
    pub total: u64,
    /// Last message.
    pub message: String,
}

/// The last admission decision on a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecisionRecord {
    /// What admission answered.
    pub kind: DecisionKind,
    /// Stable machine key (e.g. `memory`, `pressure_red`).
    pub reason_code: String,
    /// One human sentence.
    pub message: String,
    /// Granted batch, for ADMIT / REDUCE_BATCH.
    pub batch: Option<u64>,
    /// When (Unix ms; filled by the store).
    pub at_ms: i64,
}

/// A task as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskRecord {
    /// Local number.
    pub id: TaskId,
    /// The immutable spec.
    pub spec: TaskSpec,
    /// Current state.
    pub state: TaskState,
    /// For PAUSED: whether it was running when paused (it keeps its
    /// reservation and its process is stopped, not gone).
    pub paused_running: bool,
    /// Why the task is in its state (`interrupted`, a failure reason, …).
    pub state_reason: Option<String>,
    /// Earlier attempts: interrupted ones, and ended ones a restart
    /// re-ran (the current or next attempt is number `attempts + 1`).
    pub attempts: u32,
    /// Submission time, Unix ms.
    pub created_ms: i64,
    /// Start of the latest attempt, Unix ms.
    pub started_ms: Option<i64>,
    /// End time of a terminal task, Unix ms.
    pub finished_ms: Option<i64>,
    /// Exit code of the last run, when it exited.
    pub exit_code: Option<i32>,
    /// Durable progress.
    pub progress: Progress,
    /// Batched tasks: items durably done (the next run starts here).
    pub cursor: u64,
    /// The last admission decision, if any.
    pub last_decision: Option<DecisionRecord>,
    /// The executor's handle of the live run, if recorded.
    pub run_handle: Option<String>,
    /// Runs killed at their memory limit and run again.
    pub memory_retries: u32,
    /// The last overrun past the slack that soft enforcement let through.
    pub overrun_note: Option<String>,
}

/// The durable store. See the module docs.
pub struct Store {
    conn: Connection,
    path: PathBuf,
    clock: WallClock,
    max_events: u64,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store").field("path", &self.path).field("max_events", &self.max_events).finish()
    }
}

impl Store {
    /// Opens (creating if needed) the database at `path` and migrates it.
    ///
    /// # Errors
    /// [`StoreError::TooNew`] for a database from a newer lardon; I/O or
    /// SQLite errors otherwise.
    pub fn open(path: impl AsRef<Path>) -> Result<Store, StoreError> {
        Self::open_with_clock(path, Box::new(system_now_ms))
    }

    /// Like [`Store::open`] with an injected wall clock.
    ///
    /// # Errors
    /// As [`Store::open`].
    pub fn open_with_clock(path: impl AsRef<Path>, clock: WallClock) -> Result<Store, StoreError> {
        let path = path.as_ref().to_path_buf();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|source| StoreError::Io { path: dir.to_path_buf(), source })?;
        }
        let mut conn = Connection::open(&path).ctx("open database")?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        conn.busy_timeout(BUSY_TIMEOUT).ctx("set busy timeout")?;
        stable_plans(&conn)?;
        // WAL: readers never block the writer; FULL: a commit is durable
        // once COMMIT returns, even on power loss.
        let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0)).ctx("enable WAL")?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Corrupt {
                what: "journal mode".into(),
                detail: format!(
                    "SQLite refused WAL (got `{mode}`); is the state dir on a network filesystem?"
                ),
            });
        }
        conn.pragma_update(None, "synchronous", "FULL").ctx("set synchronous=FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON").ctx("enable foreign keys")?;
        // Savepoints nest (the writer's unit per job, each method's own):
        // the pages they must be able to roll back go to a sub-journal,
        // which SQLite spills to a temporary file past 64 KiB. A burst of
        // the pump's writes in one job passed that and cost a `pwrite` per
        // page; in memory it is a copy (bounded by one group's pages).
        conn.pragma_update(None, "temp_store", "MEMORY").ctx("set temp_store=MEMORY")?;
        schema::migrate(&mut conn, &path)?;
        Ok(Store { conn, path, clock, max_events: DEFAULT_MAX_EVENTS })
    }

    /// Opens a second, read-only connection to the database at `path`,
    /// which [`Store::open`] must have created and migrated. With WAL it
    /// reads the last committed state without waiting for the writer, and
    /// SQLite itself refuses any write through it (`query_only`), so only
    /// the `&self` reads make sense on it.
    ///
    /// # Errors
    /// SQLite errors (e.g. no database there).
    pub fn open_reader(path: impl AsRef<Path>) -> Result<Store, StoreError> {
        let path = path.as_ref().to_path_buf();
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(&path, flags).ctx("open database for reading")?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        conn.busy_timeout(BUSY_TIMEOUT).ctx("set busy timeout")?;
        stable_plans(&conn)?;
        conn.pragma_update(None, "query_only", "ON").ctx("set query_only")?;
        Ok(Store { conn, path, clock: Box::new(system_now_ms), max_events: DEFAULT_MAX_EVENTS })
    }

    /// Opens a group: every write until [`Store::commit_group`] joins one
    /// transaction (each write still runs in its own savepoint, so a
    /// refused write leaves the others in the group intact).
    ///
    /// # Errors
    /// SQLite errors (e.g. a group is already open).
    pub fn begin_group(&mut self) -> Result<(), StoreError> {
        // IMMEDIATE: the write lock is taken now, not at the first write.
        self.conn.execute_batch("BEGIN IMMEDIATE").ctx("begin group")
    }

    /// Commits the open group: one fsync (`synchronous=FULL`) makes every
    /// write in it durable together.
    ///
    /// # Errors
    /// SQLite errors; the group is rolled back then and nothing of it is kept.
    pub fn commit_group(&mut self) -> Result<(), StoreError> {
        let committed = self.conn.execute_batch("COMMIT").ctx("commit group");
        if committed.is_err() && !self.conn.is_autocommit() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
        committed
    }

    /// Runs `f` as one unit: every write it made is kept if it returns
    /// `Ok`, none if it returns `Err` (a savepoint; inside a group, the
    /// group's other writes are untouched either way).
    ///
    /// # Errors
    /// `f`'s error, or SQLite's if the savepoint cannot be taken or
    /// released.
    pub fn atomically<T>(
        &mut self,
        f: impl FnOnce(&mut Store) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        // Cached statements: every write of a group takes a savepoint, and
        // parsing the two statements again each time cost more than the
        // savepoint itself.
        self.conn.prepare_cached("SAVEPOINT unit").and_then(|mut s| s.execute([])).ctx("begin unit")?;
        let result = f(self);
        if result.is_ok() {
            self.conn.prepare_cached("RELEASE unit").and_then(|mut s| s.execute([])).ctx("end unit")?;
        } else {
            self.conn.execute_batch("ROLLBACK TO unit; RELEASE unit").ctx("end unit")?;
        }
        result
    }

    /// Sets the bound on stored events (at least 1).
    pub fn set_max_events(&mut self, max: u64) {
        self.max_events = max.max(1);
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The schema version of the open database.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn schema_version(&self) -> Result<u32, StoreError> {
        schema::version(&self.conn)
    }

    fn now_ms(&self) -> i64 {
        (self.clock)()
    }
}

/// Turns on SQLite's query planner stability guarantee: a statement keeps
/// the plan it was prepared with whatever values are bound to it. Without
/// it, SQLite marks a parameter used as a `LIMIT`/`OFFSET` (the history,
/// course and event trims) so that every new binding re-prepares the
/// statement: measured with perf, re-preparing was most of `record_run`'s
/// cost on every run. The store's plans do not depend on those values.
fn stable_plans(conn: &Connection) -> Result<(), StoreError> {
    conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
        .ctx("enable the query planner stability guarantee")
        .map(drop)
}

/// Converts a stored signed integer to `u64` (negative means corruption).
fn to_u64(v: i64, what: &str) -> Result<u64, StoreError> {
    u64::try_from(v)
        .map_err(|_| StoreError::Corrupt { what: what.to_owned(), detail: format!("negative value {v}") })
}

/// Converts a `u64` to SQLite's signed integer (values above `i64::MAX`
/// are refused rather than wrapped).
fn to_i64(v: u64, what: &'static str) -> Result<i64, StoreError> {
    i64::try_from(v).map_err(|_| StoreError::OutOfRange { what, value: v })
}

#[cfg(test)]
mod hooks_tests;
#[cfg(test)]
mod order_tests;
#[cfg(test)]
mod tests;
