//! The events table: a bounded, prunable audit trail written in the same
//! transaction as the change it records.

use super::unit::Unit;
use rusqlite::{Connection, params};

use super::error::{Ctx, StoreError};
use super::{Store, to_i64, to_u64};
use crate::spec::TaskId;

/// What an event records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// A task was inserted (payload: its first state).
    Submitted,
    /// A state change (payload: JSON `{"from", "to", "reason"}`).
    State,
    /// A new kind or reason of admission decision (payload: JSON).
    Decision,
    /// A batch cursor advanced (payload: the new cursor).
    Cursor,
    /// Crash recovery touched the task (payload: what it did).
    Recovered,
    /// Anything else the daemon notes (payload: free text).
    Note,
}

impl EventKind {
    /// The stored word.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Submitted => "submitted",
            EventKind::State => "state",
            EventKind::Decision => "decision",
            EventKind::Cursor => "cursor",
            EventKind::Recovered => "recovered",
            EventKind::Note => "note",
        }
    }
}

/// A stored event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRow {
    /// Increasing sequence number (a cursor for followers).
    pub seq: u64,
    /// The task, if the event is about one.
    pub task: Option<TaskId>,
    /// When, Unix ms.
    pub at_ms: i64,
    /// [`EventKind::as_str`] of the kind.
    pub kind: String,
    /// Kind-specific payload.
    pub payload: String,
}

/// Appends an event and prunes the oldest beyond `max_events`; call inside
/// the transaction of the change it records.
pub(super) fn push_event(
    conn: &Connection,
    task: Option<TaskId>,
    kind: EventKind,
    payload: &str,
    now: i64,
    max_events: u64,
) -> Result<(), StoreError> {
    const OP: &str = "append event";
    let task = task.map(|t| to_i64(t.0, "task id")).transpose()?;
    conn.prepare_cached("INSERT INTO events (task_id, at_ms, kind, payload) VALUES (?1, ?2, ?3, ?4)")
        .ctx(OP)?
        .execute(params![task, now, kind.as_str(), payload])
        .ctx(OP)?;
    let seq = conn.last_insert_rowid();
    let cutoff = seq.saturating_sub(i64::try_from(max_events).unwrap_or(i64::MAX));
    // Pruning by primary key range costs O(rows removed): about one per append.
    if cutoff > 0 {
        conn.prepare_cached("DELETE FROM events WHERE seq <= ?1").ctx(OP)?.execute([cutoff]).ctx(OP)?;
    }
    Ok(())
}

fn read_events(
    conn: &Connection,
    sql: &str,
    args: [i64; 2],
    op: &'static str,
) -> Result<Vec<EventRow>, StoreError> {
    let mut stmt = conn.prepare_cached(sql).ctx(op)?;
    let raws = stmt
        .query_map(args, |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, Option<i64>>(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .ctx(op)?
        .collect::<Result<Vec<_>, _>>()
        .ctx(op)?;
    raws.into_iter()
        .map(|(seq, task, at_ms, kind, payload)| {
            Ok(EventRow {
                seq: to_u64(seq, "event seq")?,
                task: task.map(|t| to_u64(t, "task id").map(TaskId)).transpose()?,
                at_ms,
                kind,
                payload,
            })
        })
        .collect()
}

impl Store {
    /// Records an event in its own transaction.
    ///
    /// # Errors
    /// SQLite errors (a task that does not exist violates the foreign key).
    pub fn append_event(
        &mut self,
        task: Option<TaskId>,
        kind: EventKind,
        payload: &str,
    ) -> Result<(), StoreError> {
        let now = self.now_ms();
        let tx = Unit::begin(&self.conn).ctx("begin event")?;
        push_event(&tx, task, kind, payload, now, self.max_events)?;
        tx.commit().ctx("commit event")
    }

    /// The last `limit` events of a task, oldest first.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn task_events(&self, id: TaskId, limit: u32) -> Result<Vec<EventRow>, StoreError> {
        let mut rows = read_events(
            &self.conn,
            "SELECT seq, task_id, at_ms, kind, payload FROM events WHERE task_id = ?1 ORDER BY seq DESC LIMIT ?2",
            [to_i64(id.0, "task id")?, i64::from(limit)],
            "read task events",
        )?;
        rows.reverse();
        Ok(rows)
    }

    /// Up to `limit` events with a sequence number above `after`, oldest
    /// first (a follower's cursor).
    ///
    /// # Errors
    /// SQLite errors.
    pub fn events_after(&self, after: u64, limit: u32) -> Result<Vec<EventRow>, StoreError> {
        read_events(
            &self.conn,
            "SELECT seq, task_id, at_ms, kind, payload FROM events WHERE seq > ?1 ORDER BY seq LIMIT ?2",
            [to_i64(after, "event seq")?, i64::from(limit)],
            "read events",
        )
    }

    /// Keeps only the newest `keep` events; returns how many were removed.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn prune_events(&mut self, keep: u64) -> Result<u64, StoreError> {
        const OP: &str = "prune events";
        let max: Option<i64> =
            self.conn.query_row("SELECT max(seq) FROM events", [], |r| r.get(0)).ctx(OP)?;
        let Some(max) = max else { return Ok(0) };
        let cutoff = max.saturating_sub(i64::try_from(keep).unwrap_or(i64::MAX));
        let n = self.conn.execute("DELETE FROM events WHERE seq <= ?1", [cutoff]).ctx(OP)?;
        Ok(n as u64)
    }
}
