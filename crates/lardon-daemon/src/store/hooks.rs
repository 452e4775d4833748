//! Each end's hook (docs/DESIGN.md §10 Hooks): the pending row a task's
//! end inserts in the end's own transaction ([`queue`], called by every
//! terminal transition), the runner's start and outcome, and the rows the
//! views read. One row per end (`UNIQUE (task_id, attempt)`), so a hook
//! can neither be lost with a durable end nor queued twice for one.

use rusqlite::{Connection, OptionalExtension, params};

use super::error::{Ctx, StoreError};
use super::{Store, to_i64, to_u64};
use crate::spec::{TaskId, TaskState};

/// The most of a hook's output (stdout and stderr together) that is kept.
pub const HOOK_OUTPUT_MAX: usize = 64 << 10;

/// Hook rows kept per task (one per end); older finished ones are dropped
/// when a new end queues its hook (a task restarted again and again).
pub const HOOKS_PER_TASK: usize = 16;

/// Queues the hook of task `id`'s end, inside the end's transaction: a row
/// when the task's spec (`$.on_end`) or else the policy (`on_end`) names a
/// command; nothing otherwise. Returns whether a row was queued.
pub(super) fn queue(conn: &Connection, id: TaskId, now: i64) -> Result<bool, StoreError> {
    const OP: &str = "queue the end's hook";
    let key = to_i64(id.0, "task id")?;
    // The policy's `on_end` is an override row only while it names a
    // command (setting it to `none` resets it: see `Engine::set_policy`).
    let n = conn
        .prepare_cached(
            "INSERT OR IGNORE INTO task_hooks (task_id, attempt, command, task_state, exit_code, ended_ms)
             SELECT id, attempts, cmd, state, exit_code, ?2 FROM (
                SELECT id, attempts, state, exit_code,
                       coalesce(json_extract(spec, '$.on_end'),
                                (SELECT value FROM policy_overrides WHERE key = 'on_end')) AS cmd
                  FROM tasks WHERE id = ?1)
              WHERE cmd IS NOT NULL",
        )
        .ctx(OP)?
        .execute(params![key, now])
        .ctx(OP)?;
    if n > 0 {
        conn.prepare_cached(
            "DELETE FROM task_hooks WHERE task_id = ?1 AND finished_ms IS NOT NULL AND seq <=
                (SELECT seq FROM task_hooks WHERE task_id = ?1 ORDER BY seq DESC LIMIT 1 OFFSET ?2)",
        )
        .ctx(OP)?
        .execute(params![key, to_i64(HOOKS_PER_TASK as u64, "hooks per task")?])
        .ctx(OP)?;
    }
    Ok(n > 0)
}

/// A hook that has not run to its end: queued, or started by a daemon
/// that died before its outcome was recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingHook {
    /// Its row: hooks run in this order.
    pub seq: u64,
    /// The task that ended.
    pub task: TaskId,
    /// The command (`sh -c`).
    pub command: String,
    /// How the task ended.
    pub task_state: TaskState,
    /// The task's exit code at its end, when it exited.
    pub exit_code: Option<i32>,
    /// Starts so far (0: never started).
    pub tries: u32,
}

/// How a hook's run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookEnd {
    /// It exited with this code.
    Exited(i32),
    /// A signal killed it (not the time limit).
    Signalled(i32),
    /// It reached `on_end_timeout`: its process group was killed.
    TimedOut,
    /// `sh` could not be started (the working directory is gone, …).
    FailedToStart(String),
}

impl HookEnd {
    /// `exited`, `signalled`, `timed_out`, `failed_to_start`.
    pub fn as_str(&self) -> &'static str {
        match self {
            HookEnd::Exited(_) => "exited",
            HookEnd::Signalled(_) => "signalled",
            HookEnd::TimedOut => "timed_out",
            HookEnd::FailedToStart(_) => "failed_to_start",
        }
    }

    /// The exit code, or the signal number.
    pub fn code(&self) -> Option<i32> {
        match self {
            HookEnd::Exited(c) | HookEnd::Signalled(c) => Some(*c),
            HookEnd::TimedOut | HookEnd::FailedToStart(_) => None,
        }
    }
}

/// What a hook's run left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookResult {
    /// How it ended.
    pub end: HookEnd,
    /// From its start to its end.
    pub duration_ms: u64,
    /// Its stdout and stderr, at most [`HOOK_OUTPUT_MAX`] bytes.
    pub output: Vec<u8>,
    /// Output bytes past those.
    pub output_dropped: u64,
}

/// One hook row as the views show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookRow {
    /// Its row (run order).
    pub seq: u64,
    /// The command.
    pub command: String,
    /// The end it is for.
    pub task_state: TaskState,
    /// When the task ended, Unix ms.
    pub ended_ms: i64,
    /// Starts so far.
    pub tries: u32,
    /// When it was last started.
    pub started_ms: Option<i64>,
    /// When its outcome was recorded.
    pub finished_ms: Option<i64>,
    /// Its outcome, once finished.
    pub result: Option<HookResult>,
}

fn state_of(text: &str) -> Result<TaskState, StoreError> {
    crate::spec::parse_state(text)
        .map_err(|e| StoreError::Corrupt { what: "hook task state".into(), detail: e.to_string() })
}

impl Store {
    /// Unfinished hooks after row `after` (0: all), oldest first, at most `limit`.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn pending_hooks(&self, after: u64, limit: u32) -> Result<Vec<PendingHook>, StoreError> {
        const OP: &str = "read pending hooks";
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT seq, task_id, command, task_state, exit_code, tries FROM task_hooks
                  WHERE finished_ms IS NULL AND seq > ?1 ORDER BY seq LIMIT ?2",
            )
            .ctx(OP)?;
        let rows = stmt
            .query_map(params![to_i64(after, "hook row")?, limit], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, Option<i32>>(4)?,
                    r.get::<_, u32>(5)?,
                ))
            })
            .ctx(OP)?
            .collect::<Result<Vec<_>, _>>()
            .ctx(OP)?;
        rows.into_iter()
            .map(|(seq, task, command, state, exit_code, tries)| {
                Ok(PendingHook {
                    seq: to_u64(seq, "hook row")?,
                    task: TaskId(to_u64(task, "task id")?),
                    command,
                    task_state: state_of(&state)?,
                    exit_code,
                    tries,
                })
            })
            .collect()
    }

    /// Marks hook `seq` started (durable before its command starts) and
    /// returns its start count, this one included; `None` when the row is
    /// gone (its task removed) or already finished.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn start_hook(&mut self, seq: u64) -> Result<Option<u32>, StoreError> {
        const OP: &str = "start a hook";
        let now = self.now_ms();
        self.conn
            .prepare_cached(
                "UPDATE task_hooks SET tries = tries + 1, started_ms = ?2
                  WHERE seq = ?1 AND finished_ms IS NULL RETURNING tries",
            )
            .ctx(OP)?
            .query_row(params![to_i64(seq, "hook row")?, now], |r| r.get::<_, u32>(0))
            .optional()
            .ctx(OP)
    }

    /// Records the process group hook `seq` runs in, so that a daemon
    /// started after a crash can kill it before running it again; `false`
    /// when the row is gone or already finished.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn set_hook_process(
        &mut self,
        seq: u64,
        group: &crate::handle::ProcessGroup,
    ) -> Result<bool, StoreError> {
        const OP: &str = "record a hook's process group";
        let n = self
            .conn
            .prepare_cached("UPDATE task_hooks SET process = ?2 WHERE seq = ?1 AND finished_ms IS NULL")
            .ctx(OP)?
            .execute(params![to_i64(seq, "hook row")?, group.encode()])
            .ctx(OP)?;
        Ok(n == 1)
    }

    /// The process groups of unfinished hooks that had started: what a
    /// crash left running.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn unfinished_hook_processes(&self) -> Result<Vec<(u64, crate::handle::ProcessGroup)>, StoreError> {
        const OP: &str = "read the hooks left running";
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT seq, process FROM task_hooks WHERE finished_ms IS NULL AND process IS NOT NULL ORDER BY seq",
            )
            .ctx(OP)?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))
            .ctx(OP)?
            .collect::<Result<Vec<_>, _>>()
            .ctx(OP)?;
        Ok(rows
            .into_iter()
            .filter_map(|(seq, text)| match crate::handle::RunHandle::parse(&text) {
                Some(crate::handle::RunHandle::Local(group)) => Some((u64::try_from(seq).ok()?, group)),
                _ => None,
            })
            .collect())
    }

    /// Records hook `seq`'s outcome (its output cut to [`HOOK_OUTPUT_MAX`]);
    /// `false` when the row is gone or already finished.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn finish_hook(&mut self, seq: u64, result: &HookResult) -> Result<bool, StoreError> {
        const OP: &str = "record a hook's outcome";
        let now = self.now_ms();
        let keep = result.output.len().min(HOOK_OUTPUT_MAX);
        let dropped = result.output_dropped.saturating_add((result.output.len() - keep) as u64);
        let error = match &result.end {
            HookEnd::FailedToStart(why) => Some(why.as_str()),
            _ => None,
        };
        let n = self
            .conn
            .prepare_cached(
                "UPDATE task_hooks SET finished_ms = ?2, outcome = ?3, code = ?4, error = ?5,
                        duration_ms = ?6, output = ?7, output_dropped = ?8
                  WHERE seq = ?1 AND finished_ms IS NULL",
            )
            .ctx(OP)?
            .execute(params![
                to_i64(seq, "hook row")?,
                now,
                result.end.as_str(),
                result.end.code(),
                error,
                to_i64(result.duration_ms, "hook duration")?,
                &result.output[..keep],
                to_i64(dropped, "hook output dropped")?,
            ])
            .ctx(OP)?;
        Ok(n > 0)
    }

    /// Task `id`'s hook rows, oldest first (at most [`HOOKS_PER_TASK`] + 1).
    ///
    /// # Errors
    /// SQLite errors.
    pub fn hook_runs(&self, id: TaskId) -> Result<Vec<HookRow>, StoreError> {
        const OP: &str = "read a task's hooks";
        type Raw = (i64, String, String, i64, u32, Option<i64>, Option<i64>, Option<String>, Option<i32>);
        type Rest = (Option<String>, Option<i64>, Option<Vec<u8>>, i64);
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT seq, command, task_state, ended_ms, tries, started_ms, finished_ms, outcome, code,
                        error, duration_ms, output, output_dropped
                   FROM task_hooks WHERE task_id = ?1 ORDER BY seq",
            )
            .ctx(OP)?;
        let rows: Vec<(Raw, Rest)> = stmt
            .query_map([to_i64(id.0, "task id")?], |r| {
                Ok((
                    (
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                        r.get(6)?,
                        r.get(7)?,
                        r.get(8)?,
                    ),
                    (r.get(9)?, r.get(10)?, r.get(11)?, r.get(12)?),
                ))
            })
            .ctx(OP)?
            .collect::<Result<_, _>>()
            .ctx(OP)?;
        rows.into_iter()
            .map(|((seq, command, state, ended_ms, tries, started_ms, finished_ms, outcome, code), rest)| {
                let (error, duration_ms, output, dropped) = rest;
                let result = match outcome.as_deref() {
                    None => None,
                    Some(word) => {
                        let end = match (word, code) {
                            ("exited", Some(c)) => HookEnd::Exited(c),
                            ("signalled", Some(c)) => HookEnd::Signalled(c),
                            ("timed_out", _) => HookEnd::TimedOut,
                            ("failed_to_start", _) => HookEnd::FailedToStart(error.unwrap_or_default()),
                            (other, _) => {
                                return Err(StoreError::Corrupt {
                                    what: format!("task {id} hook outcome"),
                                    detail: format!("`{other}` with code {code:?}"),
                                });
                            }
                        };
                        Some(HookResult {
                            end,
                            duration_ms: to_u64(duration_ms.unwrap_or(0), "hook duration")?,
                            output: output.unwrap_or_default(),
                            output_dropped: to_u64(dropped, "hook output dropped")?,
                        })
                    }
                };
                Ok(HookRow {
                    seq: to_u64(seq, "hook row")?,
                    command,
                    task_state: state_of(&state)?,
                    ended_ms,
                    tries,
                    started_ms,
                    finished_ms,
                    result,
                })
            })
            .collect()
    }
}
