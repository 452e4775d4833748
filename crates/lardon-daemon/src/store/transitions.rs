//! State changes, cursor, progress, decisions and crash recovery: each one
//! transaction that updates only the task's row and appends its event.

use super::unit::Unit;
use rusqlite::{Connection, OptionalExtension, params};

use super::course::{self, CourseKind, Grant};
use super::error::{Ctx, StoreError};
use super::events::{EventKind, push_event};
use super::hooks;
use super::{Store, to_i64, to_u64};
use crate::spec::{DecisionKind, TaskId, TaskState};

/// Reason recorded on tasks a crash interrupted.
pub const INTERRUPTED: &str = "interrupted";

/// How a task ended, for [`Store::finish`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// COMPLETED, FAILED or CANCELLED.
    pub state: TaskState,
    /// The command's exit code, when it exited.
    pub exit_code: Option<i32>,
    /// Why (failure reason, "cancelled by user", …).
    pub reason: Option<String>,
}

/// What [`Store::recover_after_crash`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// RUNNING tasks put back to PENDING (attempts + 1, "interrupted").
    pub requeued: Vec<TaskId>,
    /// Tasks that were paused while running: still PAUSED (now holding no
    /// reservation), attempts + 1, "interrupted"; a resume queues them.
    pub still_paused: Vec<TaskId>,
    /// Interrupted tasks whose spec forbids a retry: FAILED.
    pub failed: Vec<TaskId>,
    /// Run handles ([`Store::set_run_handle`]) of the interrupted runs: the
    /// daemon must make sure these processes are gone before anything runs.
    pub orphans: Vec<(TaskId, String)>,
}

impl RecoveryReport {
    /// Every task the crash interrupted.
    pub fn interrupted(&self) -> usize {
        self.requeued.len() + self.still_paused.len() + self.failed.len()
    }
}

/// The (state, paused_running, attempts) of a task, inside a transaction.
fn current(tx: &Connection, id: TaskId) -> Result<(TaskState, bool, u32), StoreError> {
    let row: Option<(String, bool, u32)> = tx
        .prepare_cached("SELECT state, paused_running, attempts FROM tasks WHERE id = ?1")
        .ctx("read task state")?
        .query_row([to_i64(id.0, "task id")?], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()
        .ctx("read task state")?;
    let (state, paused_running, attempts) = row.ok_or(StoreError::NotFound(id))?;
    let state = crate::spec::parse_state(&state)
        .map_err(|e| StoreError::Corrupt { what: format!("task {id} state"), detail: e.to_string() })?;
    Ok((state, paused_running, attempts))
}

fn state_event(from: TaskState, to: TaskState, reason: Option<&str>) -> String {
    serde_json::json!({ "from": from.as_str(), "to": to.as_str(), "reason": reason }).to_string()
}

impl Store {
    /// The one place a task's state changes. Rules:
    /// * nothing leaves a terminal state;
    /// * RUNNING only from PENDING (a start: sets the first start time and
    ///   clears the last reason) or from PAUSED-while-running (a resume);
    /// * PENDING only from PENDING or PAUSED-while-pending (an interrupted
    ///   run goes back through [`Store::recover_after_crash`]);
    /// * PAUSED from any live state, remembering whether it was running;
    /// * terminal from any live state (sets the end time).
    ///
    /// Setting the current state again is a no-op. Returns the previous state.
    ///
    /// # Errors
    /// [`StoreError::NotFound`], [`StoreError::IllegalTransition`]; SQLite errors.
    pub fn set_state(
        &mut self,
        id: TaskId,
        to: TaskState,
        reason: Option<&str>,
    ) -> Result<TaskState, StoreError> {
        self.transition(id, to, reason, None, None).map(|(from, _)| from)
    }

    /// Changes the state in one transaction; `expect` refuses any other
    /// starting state. Returns the previous state and the attempts counter.
    fn transition(
        &mut self,
        id: TaskId,
        to: TaskState,
        reason: Option<&str>,
        exit_code: Option<i32>,
        expect: Option<TaskState>,
    ) -> Result<(TaskState, u32), StoreError> {
        self.transition_with(id, to, reason, exit_code, expect, |_, _| Ok(())).map(|(from, n, _)| (from, n))
    }

    /// [`Store::transition`], with `also` written in the same transaction
    /// (given it and the time) when the state changes. An end queues its
    /// hook in that transaction too (`hooks::queue`); the third value says
    /// whether it did.
    fn transition_with(
        &mut self,
        id: TaskId,
        to: TaskState,
        reason: Option<&str>,
        exit_code: Option<i32>,
        expect: Option<TaskState>,
        also: impl FnOnce(&rusqlite::Connection, i64) -> Result<(), StoreError>,
    ) -> Result<(TaskState, u32, bool), StoreError> {
        const OP: &str = "change task state";
        let now = self.now_ms();
        let max_events = self.max_events;
        let tx = Unit::begin(&self.conn).ctx("begin state change")?;
        let (from, paused_running, attempts) = current(&tx, id)?;
        let illegal = StoreError::IllegalTransition { id, from, to };
        if from.is_terminal() || expect.is_some_and(|e| e != from) {
            return Err(illegal);
        }
        if from == to {
            return Ok((from, attempts, false));
        }
        let key = to_i64(id.0, "task id")?;
        let exec = |sql: &str, args: &[&dyn rusqlite::ToSql]| -> Result<(), StoreError> {
            tx.prepare_cached(sql).ctx(OP)?.execute(args).ctx(OP).map(drop)
        };
        match to {
            // A start clears nothing a later stage of the same attempt may
            // already have written (its run's handle and exit code travel
            // on the worker's path and can reach the writer first): every
            // path back to PENDING that begins a new attempt clears them.
            TaskState::Running if from == TaskState::Pending => exec(
                "UPDATE tasks SET state = 'running', started_ms = coalesce(started_ms, ?2),
                        state_reason = ?3 WHERE id = ?1",
                &[&key, &now, &reason],
            )?,
            TaskState::Running if paused_running => exec(
                "UPDATE tasks SET state = 'running', paused_running = 0,
                        state_reason = coalesce(?2, state_reason) WHERE id = ?1",
                &[&key, &reason],
            )?,
            TaskState::Pending if from == TaskState::Paused && !paused_running => exec(
                "UPDATE tasks SET state = 'pending', state_reason = coalesce(?2, state_reason) WHERE id = ?1",
                &[&key, &reason],
            )?,
            // SET expressions see the old row: `state = 'running'` is the state before.
            TaskState::Paused => exec(
                "UPDATE tasks SET state = 'paused', paused_running = (state = 'running'),
                        state_reason = coalesce(?2, state_reason) WHERE id = ?1",
                &[&key, &reason],
            )?,
            TaskState::Completed | TaskState::Failed | TaskState::Cancelled => exec(
                "UPDATE tasks SET state = ?2, paused_running = 0, finished_ms = ?3, state_reason = ?4,
                        exit_code = coalesce(?5, exit_code), run_handle = NULL WHERE id = ?1",
                &[&key, &to.as_str(), &now, &reason, &exit_code],
            )?,
            TaskState::Running | TaskState::Pending => return Err(illegal),
        }
        // After the update: the row holds the end's state and exit code.
        let hooked = to.is_terminal() && hooks::queue(&tx, id, now)?;
        push_event(&tx, Some(id), EventKind::State, &state_event(from, to, reason), now, max_events)?;
        also(&tx, now)?;
        tx.commit().ctx("commit state change")?;
        Ok((from, attempts, hooked))
    }

    /// PENDING → RUNNING for a new attempt; returns its number (1 for the
    /// first run, 2 after one interruption, …).
    ///
    /// # Errors
    /// [`StoreError::IllegalTransition`] unless the task is PENDING.
    pub fn start_attempt(&mut self, id: TaskId) -> Result<u32, StoreError> {
        let (_, attempts) = self.transition(id, TaskState::Running, None, None, Some(TaskState::Pending))?;
        Ok(attempts.saturating_add(1))
    }

    /// [`Store::start_attempt`] for a run admitted with `grant`: in the same
    /// transaction, the task's decision shows the grant and its course
    /// gains an `admitted` entry (its open wait period, if any, ends).
    ///
    /// # Errors
    /// As [`Store::start_attempt`].
    pub fn start_attempt_granted(&mut self, id: TaskId, grant: &Grant) -> Result<u32, StoreError> {
        let also = |conn: &rusqlite::Connection, now: i64| {
            course::close_wait(conn, id, now)?;
            course::show_grant(conn, id, grant)?;
            course::push(conn, id, CourseKind::Admitted, now, Some(grant), "", &grant.describe())
        };
        let (_, attempts, _) =
            self.transition_with(id, TaskState::Running, None, None, Some(TaskState::Pending), also)?;
        Ok(attempts.saturating_add(1))
    }

    /// Records the executor's opaque handle of the task's live run (process
    /// group, cgroup, …), or clears it. Terminal transitions and crash
    /// recovery clear it; recovery reports the handles it found
    /// ([`RecoveryReport::orphans`]). A task that already ended holds no
    /// run: a handle that reaches the store after the end is dropped.
    ///
    /// # Errors
    /// [`StoreError::NotFound`]; SQLite errors.
    pub fn set_run_handle(&mut self, id: TaskId, handle: Option<&str>) -> Result<(), StoreError> {
        const OP: &str = "set run handle";
        let key = to_i64(id.0, "task id")?;
        let n = self
            .conn
            .prepare_cached(
                "UPDATE tasks SET run_handle = ?2
                  WHERE id = ?1 AND state NOT IN ('completed', 'failed', 'cancelled')",
            )
            .ctx(OP)?
            .execute(params![key, handle])
            .ctx(OP)?;
        if n == 0 {
            // Ended (nothing to do) or absent: only the rare miss reads.
            current(&self.conn, id)?;
        }
        Ok(())
    }

    /// Runs `sql` (an `UPDATE` of task `?1` with one value `?2`).
    fn update_task(
        &mut self,
        id: TaskId,
        op: &'static str,
        sql: &str,
        value: &dyn rusqlite::ToSql,
    ) -> Result<(), StoreError> {
        let n = self
            .conn
            .prepare_cached(sql)
            .ctx(op)?
            .execute(params![to_i64(id.0, "task id")?, value])
            .ctx(op)?;
        if n == 0 { Err(StoreError::NotFound(id)) } else { Ok(()) }
    }

    /// Records the exit code of the task's latest run. Its end keeps it,
    /// and so does its start when this arrives first; what begins a new
    /// attempt (crash recovery, a restart, a hand-back from the broker)
    /// clears it.
    ///
    /// # Errors
    /// [`StoreError::NotFound`]; SQLite errors.
    pub fn set_exit_code(&mut self, id: TaskId, code: i32) -> Result<(), StoreError> {
        self.update_task(id, "set exit code", "UPDATE tasks SET exit_code = ?2 WHERE id = ?1", &code)
    }

    /// Pauses a live task (a no-op if already paused); returns the previous state.
    ///
    /// # Errors
    /// As [`Store::set_state`].
    pub fn pause(&mut self, id: TaskId) -> Result<TaskState, StoreError> {
        self.transition(id, TaskState::Paused, None, None, None).map(|(from, _)| from)
    }

    /// Resumes a paused task: back to RUNNING if it was paused while
    /// running, else to PENDING. Returns the new state (a live task that is
    /// not paused is left as is).
    ///
    /// # Errors
    /// [`StoreError::NotFound`]; [`StoreError::IllegalTransition`] for a terminal task.
    pub fn resume(&mut self, id: TaskId) -> Result<TaskState, StoreError> {
        let task = self.get_task(id)?.ok_or(StoreError::NotFound(id))?;
        let to = match task.state {
            TaskState::Paused if task.paused_running => TaskState::Running,
            TaskState::Paused => TaskState::Pending,
            s if s.is_terminal() => {
                return Err(StoreError::IllegalTransition { id, from: s, to: TaskState::Pending });
            }
            s => return Ok(s),
        };
        self.transition(id, to, None, None, Some(TaskState::Paused))?;
        Ok(to)
    }

    /// Runs a finished task again: COMPLETED, FAILED or CANCELLED →
    /// PENDING in one transaction, the only way out of a terminal state.
    /// The spec is unchanged; the attempt count grows by one (so the next
    /// start is a new attempt), the cursor, progress, exit code, end time
    /// and decision are cleared, and the course gains a `restarted` entry.
    /// Its events, course and log are kept. Returns the state it left.
    ///
    /// # Errors
    /// [`StoreError::NotFound`]; [`StoreError::StillLive`] for a live task.
    pub fn restart(&mut self, id: TaskId) -> Result<TaskState, StoreError> {
        const OP: &str = "restart task";
        let now = self.now_ms();
        let max_events = self.max_events;
        let tx = Unit::begin(&self.conn).ctx("begin restart")?;
        let (from, _, attempts) = current(&tx, id)?;
        if !from.is_terminal() {
            return Err(StoreError::StillLive { id, state: from });
        }
        let key = to_i64(id.0, "task id")?;
        let attempt = attempts.saturating_add(2);
        let reason = format!("restarted (attempt {attempt})");
        tx.prepare_cached(
            "UPDATE tasks SET state = 'pending', paused_running = 0, state_reason = ?2,
                    attempts = attempts + 1, started_ms = NULL, finished_ms = NULL, exit_code = NULL,
                    run_handle = NULL, cursor = 0, progress_done = 0, progress_total = 0,
                    progress_message = '', decision_kind = NULL, decision_code = NULL,
                    decision_message = NULL, decision_batch = NULL, decision_ms = NULL,
                    memory_retries = 0, overrun_note = NULL
             WHERE id = ?1",
        )
        .ctx(OP)?
        .execute(params![key, reason])
        .ctx(OP)?;
        let message = format!("restarted after it ended {from} (attempt {attempt})");
        course::push(&tx, id, CourseKind::Restarted, now, None, "", &message)?;
        let event = state_event(from, TaskState::Pending, Some(&reason));
        push_event(&tx, Some(id), EventKind::State, &event, now, max_events)?;
        tx.commit().ctx("commit restart")?;
        Ok(from)
    }

    /// Offload: a task shipped to the broker (RUNNING there) is handed
    /// back to run here: RUNNING → PENDING with its run handle and start
    /// time cleared, the attempt unchanged (nothing ran), a `ran_locally`
    /// course entry saying why, one transaction.
    ///
    /// # Errors
    /// [`StoreError::IllegalTransition`] unless the task is RUNNING.
    pub fn return_to_queue(
        &mut self,
        id: TaskId,
        reason_code: &str,
        message: &str,
    ) -> Result<(), StoreError> {
        const OP: &str = "return task to the queue";
        let now = self.now_ms();
        let max_events = self.max_events;
        let tx = Unit::begin(&self.conn).ctx("begin return to queue")?;
        let (from, _, _) = current(&tx, id)?;
        if from != TaskState::Running {
            return Err(StoreError::IllegalTransition { id, from, to: TaskState::Pending });
        }
        tx.prepare_cached(
            "UPDATE tasks SET state = 'pending', state_reason = ?2, started_ms = NULL, run_handle = NULL,
                    exit_code = NULL WHERE id = ?1",
        )
        .ctx(OP)?
        .execute(params![to_i64(id.0, "task id")?, message])
        .ctx(OP)?;
        course::push(&tx, id, CourseKind::RanLocally, now, None, reason_code, message)?;
        let event = state_event(from, TaskState::Pending, Some(message));
        push_event(&tx, Some(id), EventKind::State, &event, now, max_events)?;
        tx.commit().ctx("commit return to queue")
    }

    /// Ends a live task with `outcome` (one transaction, which also queues
    /// the end's hook when the task or the policy names one: returns
    /// whether it did).
    ///
    /// # Errors
    /// [`StoreError::IllegalTransition`] if the task already ended or the
    /// outcome's state is not terminal.
    pub fn finish(&mut self, id: TaskId, outcome: &Outcome) -> Result<bool, StoreError> {
        if !outcome.state.is_terminal() {
            let from = self.get_task(id)?.ok_or(StoreError::NotFound(id))?.state;
            return Err(StoreError::IllegalTransition { id, from, to: outcome.state });
        }
        // A task cancelled while it waited: its wait period ends here.
        let also = |conn: &rusqlite::Connection, now: i64| course::close_wait(conn, id, now);
        let (_, _, hooked) = self.transition_with(
            id,
            outcome.state,
            outcome.reason.as_deref(),
            outcome.exit_code,
            None,
            also,
        )?;
        Ok(hooked)
    }

    /// Moves a batched task's durable cursor to `cursor` (items done). Only
    /// forward; the same value again is a no-op.
    ///
    /// # Errors
    /// [`StoreError::CursorBackwards`], [`StoreError::CursorBeyondEnd`]
    /// (including any cursor on an unbatched task), [`StoreError::NotFound`].
    pub fn advance_cursor(&mut self, id: TaskId, cursor: u64) -> Result<(), StoreError> {
        const OP: &str = "advance cursor";
        let now = self.now_ms();
        let max_events = self.max_events;
        let key = to_i64(id.0, "task id")?;
        let tx = Unit::begin(&self.conn).ctx("begin cursor")?;
        let row: Option<(i64, Option<i64>)> = tx
            .prepare_cached("SELECT cursor, items FROM tasks WHERE id = ?1")
            .ctx(OP)?
            .query_row([key], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()
            .ctx(OP)?;
        let (current, items) = row.ok_or(StoreError::NotFound(id))?;
        let current = to_u64(current, "cursor")?;
        let items = items.map_or(Ok(0), |n| to_u64(n, "items"))?;
        if cursor < current {
            return Err(StoreError::CursorBackwards { id, current, requested: cursor });
        }
        if cursor > items {
            return Err(StoreError::CursorBeyondEnd { id, requested: cursor, items });
        }
        if cursor == current {
            return Ok(());
        }
        tx.prepare_cached("UPDATE tasks SET cursor = ?2 WHERE id = ?1")
            .ctx(OP)?
            .execute(params![key, to_i64(cursor, "cursor")?])
            .ctx(OP)?;
        push_event(&tx, Some(id), EventKind::Cursor, &cursor.to_string(), now, max_events)?;
        tx.commit().ctx("commit cursor")
    }

    /// Stores a task's latest progress (no event: progress is frequent).
    ///
    /// # Errors
    /// [`StoreError::NotFound`]; SQLite errors.
    pub fn set_progress(
        &mut self,
        id: TaskId,
        done: u64,
        total: u64,
        message: &str,
    ) -> Result<(), StoreError> {
        let n = self
            .conn
            .prepare_cached(
                "UPDATE tasks SET progress_done = ?2, progress_total = ?3, progress_message = ?4 WHERE id = ?1",
            )
            .ctx("set progress")?
            .execute(params![to_i64(id.0, "task id")?, to_i64(done, "done")?, to_i64(total, "total")?, message])
            .ctx("set progress")?;
        if n == 0 { Err(StoreError::NotFound(id)) } else { Ok(()) }
    }

    /// Stores the last admission decision on a task. An event is appended
    /// only when the kind or reason code changes, so a task waiting through
    /// many scans does not flood the events table.
    ///
    /// # Errors
    /// [`StoreError::NotFound`]; SQLite errors.
    pub fn record_decision(
        &mut self,
        id: TaskId,
        kind: DecisionKind,
        reason_code: &str,
        message: &str,
        batch: Option<u64>,
    ) -> Result<(), StoreError> {
        const OP: &str = "record decision";
        let now = self.now_ms();
        let max_events = self.max_events;
        let key = to_i64(id.0, "task id")?;
        let tx = Unit::begin(&self.conn).ctx("begin decision")?;
        let prev: Option<(Option<String>, Option<String>)> = tx
            .prepare_cached("SELECT decision_kind, decision_code FROM tasks WHERE id = ?1")
            .ctx(OP)?
            .query_row([key], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()
            .ctx(OP)?;
        let (prev_kind, prev_code) = prev.ok_or(StoreError::NotFound(id))?;
        tx.prepare_cached(
            "UPDATE tasks SET decision_kind = ?2, decision_code = ?3, decision_message = ?4,
                    decision_batch = ?5, decision_ms = ?6 WHERE id = ?1",
        )
        .ctx(OP)?
        .execute(params![
            key,
            kind.as_str(),
            reason_code,
            message,
            batch.map(|b| to_i64(b, "batch")).transpose()?,
            now
        ])
        .ctx(OP)?;
        if prev_kind.as_deref() != Some(kind.as_str()) || prev_code.as_deref() != Some(reason_code) {
            let payload =
                serde_json::json!({ "kind": kind.as_str(), "reason": reason_code, "message": message });
            push_event(&tx, Some(id), EventKind::Decision, &payload.to_string(), now, max_events)?;
            // One wait period per reason: a new decision ends the open one.
            course::close_wait(&tx, id, now)?;
            match kind {
                DecisionKind::Wait => {
                    course::push(&tx, id, CourseKind::Waited, now, None, reason_code, message)?;
                }
                DecisionKind::Reject => {
                    course::push(&tx, id, CourseKind::Rejected, now, None, reason_code, message)?;
                }
                DecisionKind::Admit | DecisionKind::ReduceBatch => {}
            }
        }
        tx.commit().ctx("commit decision")
    }

    /// Crash recovery (docs/DESIGN.md §10), in one transaction, at daemon start
    /// before anything runs:
    /// * RUNNING → PENDING, attempts + 1, reason "interrupted", the
    ///   interrupted run's exit code cleared (the next attempt starts clean);
    /// * PAUSED while running → PAUSED (no longer holding anything),
    ///   attempts + 1, reason "interrupted": the user's pause is kept;
    /// * either of those with `retry_on_interrupt = false` → FAILED;
    /// * batched tasks keep their cursor, and their progress falls back to
    ///   it (work after the cursor was not committed);
    /// * everything else (pending, paused pending, terminal) is untouched.
    ///
    /// # Errors
    /// SQLite errors (nothing is changed then).
    pub fn recover_after_crash(&mut self) -> Result<RecoveryReport, StoreError> {
        const OP: &str = "recover after crash";
        const LIVE_RUN: &str = "(state = 'running' OR (state = 'paused' AND paused_running = 1))";
        let now = self.now_ms();
        let max_events = self.max_events;
        let failed_reason = format!("{INTERRUPTED} (not retried: the task asked for no retry)");
        let tx = Unit::begin(&self.conn).ctx("begin recovery")?;
        let run = |sql: &str, args: &[&dyn rusqlite::ToSql]| -> Result<Vec<TaskId>, StoreError> {
            let mut stmt = tx.prepare(sql).ctx(OP)?;
            let mut ids = stmt
                .query_map(args, |r| r.get::<_, i64>(0))
                .ctx(OP)?
                .map(|r| r.ctx(OP).and_then(|i| to_u64(i, "task id").map(TaskId)))
                .collect::<Result<Vec<_>, _>>()?;
            ids.sort_unstable();
            Ok(ids)
        };
        let orphans = {
            let mut stmt = tx
                .prepare(&format!(
                    "SELECT id, run_handle FROM tasks WHERE {LIVE_RUN} AND run_handle IS NOT NULL ORDER BY id"
                ))
                .ctx(OP)?;
            let rows = stmt
                .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))
                .ctx(OP)?
                .collect::<Result<Vec<_>, _>>()
                .ctx(OP)?;
            rows.into_iter()
                .map(|(id, h)| Ok((TaskId(to_u64(id, "task id")?), h)))
                .collect::<Result<Vec<_>, StoreError>>()?
        };
        let common = "attempts = attempts + 1, paused_running = 0, run_handle = NULL,
                      progress_done = CASE WHEN items IS NULL THEN progress_done ELSE cursor END";
        let failed = run(
            &format!(
                "UPDATE tasks SET state = 'failed', state_reason = ?1, finished_ms = ?2, {common}
                  WHERE {LIVE_RUN} AND retry_on_interrupt = 0 RETURNING id"
            ),
            &[&failed_reason, &now],
        )?;
        let requeued = run(
            &format!(
                "UPDATE tasks SET state = 'pending', state_reason = ?1, exit_code = NULL, {common}
                  WHERE state = 'running' RETURNING id"
            ),
            &[&INTERRUPTED],
        )?;
        let still_paused = run(
            &format!(
                "UPDATE tasks SET state_reason = ?1, exit_code = NULL, {common}
                  WHERE state = 'paused' AND paused_running = 1 RETURNING id"
            ),
            &[&INTERRUPTED],
        )?;
        // Ended here: their hooks queue with the end, like any other end's.
        for id in &failed {
            hooks::queue(&tx, *id, now)?;
        }
        for (ids, what) in [(&failed, "failed"), (&requeued, "pending"), (&still_paused, "paused")] {
            for id in ids {
                push_event(&tx, Some(*id), EventKind::Recovered, what, now, max_events)?;
            }
        }
        tx.commit().ctx("commit recovery")?;
        Ok(RecoveryReport { requeued, still_paused, failed, orphans })
    }
}
