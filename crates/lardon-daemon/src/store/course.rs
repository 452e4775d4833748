//! A task's course: the decisions that changed it (`lardon explain ID
//! --history`), at most [`COURSE_PER_TASK`] per task, oldest pruned first.
//!
//! Cheap by construction: an entry is written only when something changed
//! (a new decision kind or reason, a start, a different batch, a memory
//! retry, an overrun), never per dispatcher scan, and always inside the
//! transaction of the state change it belongs to where there is one.

use super::unit::Unit;
use std::fmt;
use std::str::FromStr;

use rusqlite::{Connection, OptionalExtension, params};

use super::error::{Ctx, StoreError};
use super::events::{EventKind, push_event};
use super::{Store, to_i64, to_u64};
use crate::spec::TaskId;

/// Entries kept per task.
pub const COURSE_PER_TASK: usize = 32;

/// What changed the task's course.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CourseKind {
    /// A run was admitted (a start, or a sequence with a new grant).
    Admitted,
    /// One wait period on one reason (`to_ms` set when it ended).
    Waited,
    /// The batch of a new sequence differs from the previous one.
    BatchChanged,
    /// A run was killed at its memory limit and will run again.
    MemoryRetry,
    /// A run went past its grant plus slack and enforcement let it (soft).
    SoftOverrun,
    /// Admission rejected the task.
    Rejected,
    /// A finished task was asked to run again (same spec, new attempt).
    Restarted,
    /// Offload: shipped to the broker, or ended at an agent (which one).
    Offloaded,
    /// Offload: handed back to run here, and why (broker unreachable, no
    /// agent for its capability, agents lost).
    RanLocally,
}

impl CourseKind {
    /// The stored and displayed word.
    pub fn as_str(self) -> &'static str {
        match self {
            CourseKind::Admitted => "admitted",
            CourseKind::Waited => "waited",
            CourseKind::BatchChanged => "batch_changed",
            CourseKind::MemoryRetry => "memory_retry",
            CourseKind::SoftOverrun => "soft_overrun",
            CourseKind::Rejected => "rejected",
            CourseKind::Restarted => "restarted",
            CourseKind::Offloaded => "offloaded",
            CourseKind::RanLocally => "ran_locally",
        }
    }
}

impl fmt::Display for CourseKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for CourseKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "admitted" => CourseKind::Admitted,
            "waited" => CourseKind::Waited,
            "batch_changed" => CourseKind::BatchChanged,
            "memory_retry" => CourseKind::MemoryRetry,
            "soft_overrun" => CourseKind::SoftOverrun,
            "rejected" => CourseKind::Rejected,
            "restarted" => CourseKind::Restarted,
            "offloaded" => CourseKind::Offloaded,
            "ran_locally" => CourseKind::RanLocally,
            other => return Err(format!("`{other}` is not a course entry kind")),
        })
    }
}

/// What a run was granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// Items per run (1 for an unbatched task).
    pub batch: u64,
    /// Memory, bytes.
    pub memory: u64,
    /// CPUs in thousandths.
    pub cpu_millis: u32,
}

impl Grant {
    /// `batch 8, 112.0 MiB memory, 1 CPUs`.
    pub fn describe(&self) -> String {
        format!(
            "batch {}, {} memory, {} CPUs",
            self.batch,
            lardon::format_bytes(self.memory),
            lardon::format_cpus(self.cpu_millis)
        )
    }
}

/// One entry of a task's course.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CourseEntry {
    /// What happened.
    pub kind: CourseKind,
    /// When (Unix ms); the start of a wait period.
    pub from_ms: i64,
    /// The end of a wait period (`None` while it lasts, and for every
    /// other kind).
    pub to_ms: Option<i64>,
    /// The grant, for admissions and batch changes.
    pub grant: Option<Grant>,
    /// Machine reason (e.g. `memory`, `cpu_load`), empty when none.
    pub reason_code: String,
    /// One human sentence.
    pub message: String,
}

/// Appends an entry (in the caller's transaction) and prunes the task's
/// oldest beyond [`COURSE_PER_TASK`].
pub(super) fn push(
    conn: &Connection,
    id: TaskId,
    kind: CourseKind,
    now: i64,
    grant: Option<&Grant>,
    reason_code: &str,
    message: &str,
) -> Result<(), StoreError> {
    const OP: &str = "append course entry";
    let key = to_i64(id.0, "task id")?;
    let (batch, memory, cpus) = match grant {
        Some(g) => (Some(to_i64(g.batch, "batch")?), Some(to_i64(g.memory, "memory")?), Some(g.cpu_millis)),
        None => (None, None, None),
    };
    conn.prepare_cached(
        "INSERT INTO task_course (task_id, kind, from_ms, batch, memory, cpu_millis, reason_code, message)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )
    .ctx(OP)?
    .execute(params![key, kind.as_str(), now, batch, memory, cpus, reason_code, message])
    .ctx(OP)?;
    // The cut-off is the seq of the newest entry beyond the bound (the
    // index on (task_id, seq) makes this a short walk).
    let cutoff: Option<i64> = conn
        .prepare_cached("SELECT seq FROM task_course WHERE task_id = ?1 ORDER BY seq DESC LIMIT 1 OFFSET ?2")
        .ctx(OP)?
        .query_row(params![key, i64::try_from(COURSE_PER_TASK).unwrap_or(i64::MAX)], |r| r.get(0))
        .optional()
        .ctx(OP)?;
    if let Some(cutoff) = cutoff {
        conn.prepare_cached("DELETE FROM task_course WHERE task_id = ?1 AND seq <= ?2")
            .ctx(OP)?
            .execute(params![key, cutoff])
            .ctx(OP)?;
    }
    Ok(())
}

/// Ends the task's open wait period, if any, at `now`.
pub(super) fn close_wait(conn: &Connection, id: TaskId, now: i64) -> Result<(), StoreError> {
    conn.prepare_cached(
        "UPDATE task_course SET to_ms = ?2 WHERE task_id = ?1 AND kind = 'waited' AND to_ms IS NULL",
    )
    .ctx("close wait period")?
    .execute(params![to_i64(id.0, "task id")?, now])
    .ctx("close wait period")?;
    Ok(())
}

/// Makes the task's current admission decision show `grant` (its batch and
/// its figures), so a view never shows the first batch of a task whose
/// batch has since changed.
pub(super) fn show_grant(conn: &Connection, id: TaskId, grant: &Grant) -> Result<(), StoreError> {
    conn.prepare_cached(
        "UPDATE tasks SET decision_batch = ?2, decision_message = ?3
          WHERE id = ?1 AND decision_kind IN ('admit', 'reduce_batch')",
    )
    .ctx("show grant")?
    .execute(params![to_i64(id.0, "task id")?, to_i64(grant.batch, "batch")?, grant.describe()])
    .ctx("show grant")?;
    Ok(())
}

/// The task's latest grant, if any (admission or batch change).
fn last_grant(conn: &Connection, id: TaskId) -> Result<Option<Grant>, StoreError> {
    const OP: &str = "read last grant";
    type Raw = (Option<i64>, Option<i64>, Option<i64>);
    let raw: Option<Raw> = conn
        .prepare_cached(
            "SELECT batch, memory, cpu_millis FROM task_course
              WHERE task_id = ?1 AND kind IN ('admitted', 'batch_changed') ORDER BY seq DESC LIMIT 1",
        )
        .ctx(OP)?
        .query_row([to_i64(id.0, "task id")?], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()
        .ctx(OP)?;
    let Some((Some(batch), Some(memory), Some(cpus))) = raw else { return Ok(None) };
    Ok(Some(Grant {
        batch: to_u64(batch, "batch")?,
        memory: to_u64(memory, "memory")?,
        cpu_millis: u32::try_from(cpus).map_err(|_| StoreError::Corrupt {
            what: format!("task {id} course"),
            detail: format!("cpu_millis {cpus}"),
        })?,
    }))
}

impl Store {
    /// A new sequence of a running task was granted `grant`: the task's
    /// current decision now shows it (so `status` shows the current batch
    /// and grant, not the first), and when it differs from the previous
    /// grant an entry is added (`batch_changed` when the batch changed,
    /// else `admitted` with the new grant). One transaction; nothing is
    /// written when nothing changed.
    ///
    /// # Errors
    /// [`StoreError::NotFound`]; SQLite errors.
    pub fn record_grant(&mut self, id: TaskId, grant: &Grant) -> Result<(), StoreError> {
        let now = self.now_ms();
        let tx = Unit::begin(&self.conn).ctx("begin grant")?;
        let previous = last_grant(&tx, id)?;
        if previous.as_ref() == Some(grant) {
            return Ok(());
        }
        show_grant(&tx, id, grant)?;
        let (kind, message) = match previous {
            Some(before) if before.batch != grant.batch => (
                CourseKind::BatchChanged,
                format!("batch {} → {}: {}", before.batch, grant.batch, grant.describe()),
            ),
            Some(before) => (
                CourseKind::Admitted,
                format!(
                    "grant {} → {}: {}",
                    lardon::format_bytes(before.memory),
                    lardon::format_bytes(grant.memory),
                    grant.describe()
                ),
            ),
            None => (CourseKind::Admitted, grant.describe()),
        };
        push(&tx, id, kind, now, Some(grant), "", &message)?;
        tx.commit().ctx("commit grant")
    }

    /// A run of `id` was killed at its memory limit and will run again:
    /// counts the retry and records why, in one transaction.
    ///
    /// # Errors
    /// [`StoreError::NotFound`]; SQLite errors.
    pub fn note_memory_retry(&mut self, id: TaskId, message: &str) -> Result<u32, StoreError> {
        const OP: &str = "note memory retry";
        let now = self.now_ms();
        let tx = Unit::begin(&self.conn).ctx("begin memory retry")?;
        let retries: Option<i64> = tx
            .prepare_cached(
                "UPDATE tasks SET memory_retries = memory_retries + 1 WHERE id = ?1 RETURNING memory_retries",
            )
            .ctx(OP)?
            .query_row([to_i64(id.0, "task id")?], |r| r.get(0))
            .optional()
            .ctx(OP)?;
        let retries = retries.ok_or(StoreError::NotFound(id))?;
        push(&tx, id, CourseKind::MemoryRetry, now, None, "memory_killed", message)?;
        push_event(
            &tx,
            Some(id),
            EventKind::Note,
            &format!("memory retry: {message}"),
            now,
            self.max_events,
        )?;
        tx.commit().ctx("commit memory retry")?;
        u32::try_from(retries).map_err(|_| StoreError::Corrupt {
            what: format!("task {id} memory retries"),
            detail: retries.to_string(),
        })
    }

    /// A run of `id` overran its grant plus slack and soft enforcement let
    /// it: keeps the note on the task and in its course, one transaction.
    ///
    /// # Errors
    /// [`StoreError::NotFound`]; SQLite errors.
    pub fn note_soft_overrun(&mut self, id: TaskId, message: &str) -> Result<(), StoreError> {
        const OP: &str = "note soft overrun";
        let now = self.now_ms();
        let tx = Unit::begin(&self.conn).ctx("begin soft overrun")?;
        let n = tx
            .prepare_cached("UPDATE tasks SET overrun_note = ?2 WHERE id = ?1")
            .ctx(OP)?
            .execute(params![to_i64(id.0, "task id")?, message])
            .ctx(OP)?;
        if n == 0 {
            return Err(StoreError::NotFound(id));
        }
        push(&tx, id, CourseKind::SoftOverrun, now, None, "soft_overrun", message)?;
        push_event(
            &tx,
            Some(id),
            EventKind::Note,
            &format!("soft overrun: {message}"),
            now,
            self.max_events,
        )?;
        tx.commit().ctx("commit soft overrun")
    }

    /// Offload: a course entry of `kind` ([`CourseKind::Offloaded`] or
    /// [`CourseKind::RanLocally`]) and the same words as a note in the
    /// task's events, one transaction. The task's state is not touched.
    ///
    /// # Errors
    /// [`StoreError::NotFound`]; SQLite errors.
    pub fn note_offload(
        &mut self,
        id: TaskId,
        kind: CourseKind,
        reason_code: &str,
        message: &str,
    ) -> Result<(), StoreError> {
        let now = self.now_ms();
        let tx = Unit::begin(&self.conn).ctx("begin offload note")?;
        let exists: Option<i64> = tx
            .prepare_cached("SELECT id FROM tasks WHERE id = ?1")
            .ctx("note offload")?
            .query_row([to_i64(id.0, "task id")?], |r| r.get(0))
            .optional()
            .ctx("note offload")?;
        if exists.is_none() {
            return Err(StoreError::NotFound(id));
        }
        // A task that ships no longer waits here: its open wait ends.
        if kind == CourseKind::Offloaded {
            close_wait(&tx, id, now)?;
        }
        push(&tx, id, kind, now, None, reason_code, message)?;
        push_event(&tx, Some(id), EventKind::Note, message, now, self.max_events)?;
        tx.commit().ctx("commit offload note")
    }

    /// The task's course, oldest first (empty for an unknown task).
    ///
    /// # Errors
    /// SQLite errors; [`StoreError::Corrupt`] for an undecodable row.
    pub fn course(&self, id: TaskId) -> Result<Vec<CourseEntry>, StoreError> {
        const OP: &str = "read course";
        type Raw = (String, i64, Option<i64>, Option<i64>, Option<i64>, Option<i64>, String, String);
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT kind, from_ms, to_ms, batch, memory, cpu_millis, reason_code, message
                   FROM task_course WHERE task_id = ?1 ORDER BY seq",
            )
            .ctx(OP)?;
        let rows: Vec<Raw> = stmt
            .query_map([to_i64(id.0, "task id")?], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?, r.get(7)?))
            })
            .ctx(OP)?
            .collect::<Result<_, _>>()
            .ctx(OP)?;
        rows.into_iter()
            .map(|(kind, from_ms, to_ms, batch, memory, cpus, reason_code, message)| {
                let corrupt =
                    |detail: String| StoreError::Corrupt { what: format!("task {id} course"), detail };
                let grant = match (batch, memory, cpus) {
                    (Some(b), Some(m), Some(c)) => Some(Grant {
                        batch: to_u64(b, "batch")?,
                        memory: to_u64(m, "memory")?,
                        cpu_millis: u32::try_from(c).map_err(|_| corrupt(format!("cpu_millis {c}")))?,
                    }),
                    _ => None,
                };
                Ok(CourseEntry {
                    kind: kind.parse().map_err(corrupt)?,
                    from_ms,
                    to_ms,
                    grant,
                    reason_code,
                    message,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::Arc;
    use std::sync::atomic::{AtomicI64, Ordering};

    use super::*;
    use crate::spec::{DecisionKind, TaskSpec, TaskState};
    use crate::store::{NewTask, Outcome};

    /// A store on a clock the test moves.
    fn store() -> (tempfile::TempDir, Store, Arc<AtomicI64>, TaskId) {
        let dir = tempfile::tempdir().unwrap();
        let now = Arc::new(AtomicI64::new(1_000));
        let clock = Arc::clone(&now);
        let mut s =
            Store::open_with_clock(dir.path().join("db"), Box::new(move || clock.load(Ordering::SeqCst)))
                .unwrap();
        let id = s.insert_task(&NewTask::new(TaskSpec::command(["true"]))).unwrap();
        (dir, s, now, id)
    }

    fn grant(batch: u64) -> Grant {
        Grant { batch, memory: batch << 20, cpu_millis: 1000 }
    }

    fn kinds(s: &Store, id: TaskId) -> Vec<CourseKind> {
        s.course(id).unwrap().into_iter().map(|e| e.kind).collect()
    }

    #[test]
    fn one_entry_per_wait_period_not_per_scan() {
        let (_d, mut s, now, id) = store();
        for _ in 0..5 {
            // The same wait re-recorded (as a re-evaluation would) adds nothing.
            s.record_decision(id, DecisionKind::Wait, "memory", "needs 1 GiB", None).unwrap();
        }
        now.store(5_000, Ordering::SeqCst);
        s.record_decision(id, DecisionKind::Wait, "cpu_load", "load 9", None).unwrap();
        now.store(9_000, Ordering::SeqCst);
        s.record_decision(id, DecisionKind::Admit, "ok", "admitted", None).unwrap();
        s.start_attempt_granted(id, &grant(8)).unwrap();
        let c = s.course(id).unwrap();
        assert_eq!(kinds(&s, id), [CourseKind::Waited, CourseKind::Waited, CourseKind::Admitted]);
        assert_eq!((c[0].reason_code.as_str(), c[0].from_ms, c[0].to_ms), ("memory", 1_000, Some(5_000)));
        assert_eq!((c[1].reason_code.as_str(), c[1].from_ms, c[1].to_ms), ("cpu_load", 5_000, Some(9_000)));
        assert_eq!(c[2].grant, Some(grant(8)));
    }

    #[test]
    fn the_current_batch_is_shown_and_only_changes_are_recorded() {
        let (_d, mut s, _now, id) = store();
        s.record_decision(id, DecisionKind::Admit, "ok", "batch 32, …", None).unwrap();
        s.start_attempt_granted(id, &grant(32)).unwrap();
        s.record_grant(id, &grant(32)).unwrap();
        s.record_grant(id, &grant(8)).unwrap();
        s.record_grant(id, &grant(8)).unwrap();
        assert_eq!(kinds(&s, id), [CourseKind::Admitted, CourseKind::BatchChanged]);
        let d = s.get_task(id).unwrap().unwrap().last_decision.unwrap();
        assert_eq!(d.batch, Some(8), "status shows the current batch, not the first");
        assert!(d.message.starts_with("batch 8,"), "{}", d.message);
        assert!(s.course(id).unwrap()[1].message.starts_with("batch 32 → 8"));
    }

    #[test]
    fn bounded_per_task_and_retries_counted() {
        let (_d, mut s, _now, id) = store();
        for i in 0..(COURSE_PER_TASK + 10) {
            s.note_memory_retry(id, &format!("retry {i}")).unwrap();
        }
        let c = s.course(id).unwrap();
        assert_eq!(c.len(), COURSE_PER_TASK);
        assert_eq!(
            c.last().unwrap().message,
            format!("retry {}", COURSE_PER_TASK + 9),
            "the newest are kept"
        );
        assert_eq!(
            s.get_task(id).unwrap().unwrap().memory_retries,
            u32::try_from(COURSE_PER_TASK + 10).unwrap()
        );
        s.note_soft_overrun(id, "used 1.0 GiB of 200 MiB").unwrap();
        assert_eq!(s.get_task(id).unwrap().unwrap().overrun_note.as_deref(), Some("used 1.0 GiB of 200 MiB"));
    }

    #[test]
    fn a_cancel_ends_the_open_wait() {
        let (_d, mut s, now, id) = store();
        s.record_decision(id, DecisionKind::Wait, "memory", "needs 1 GiB", None).unwrap();
        now.store(3_000, Ordering::SeqCst);
        let outcome = Outcome { state: TaskState::Cancelled, exit_code: None, reason: None };
        s.finish(id, &outcome).unwrap();
        assert_eq!(s.course(id).unwrap()[0].to_ms, Some(3_000));
    }
}
