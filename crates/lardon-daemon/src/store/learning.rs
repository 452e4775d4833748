//! What the Governor learns and must keep across restarts (docs/DESIGN.md §6):
//! per-class run history (the last 8 completed runs per class and shape, and
//! the kills that bound the next estimate) and capability feedback.

use super::unit::Unit;
use std::time::Duration;

use lardon::{RunOutcome, RunRecord, RunShape};
use rusqlite::params;

use super::error::{Ctx, StoreError};
use super::{Store, to_i64, to_u64};

/// Completed runs kept per class and shape (the Governor's ring size).
pub const HISTORY_PER_CLASS: u32 = 8;

/// Feedback rows kept in all (least recently updated pruned first).
pub const MAX_FEEDBACK_ROWS: u32 = 4096;

/// One recorded run of a class, as the Governor was told it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistorySample {
    /// Learning key.
    pub class: String,
    /// Shape, duration and outcome, replayed into the Governor at start
    /// with `Governor::record_run`.
    pub record: RunRecord,
    /// When recorded, Unix ms.
    pub at_ms: i64,
}

/// Stored capability-envelope feedback for one (class, alternative).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedbackRow {
    /// Learning key.
    pub class: String,
    /// Alternative name.
    pub alternative: String,
    /// Opaque state (serialised by the engine's owner).
    pub blob: Vec<u8>,
    /// Last update, Unix ms.
    pub updated_ms: i64,
}

/// The columns `read_history` maps, in order.
const HISTORY_COLUMNS: &str = "class, items, unbatched, duration_ns, peak_bytes, killed_at, at_ms";

impl Store {
    /// Records one run of `class` as the Governor learns it (docs/DESIGN.md
    /// §6), in one transaction, and prunes what the Governor would no longer
    /// use: per class and shape, completed runs beyond the newest
    /// [`HISTORY_PER_CLASS`], kills older than the newest completion (it
    /// superseded them), and kills beyond the newest [`HISTORY_PER_CLASS`].
    /// Replaying [`Store::all_history`] in order therefore rebuilds what the
    /// Governor had learned (the Governor keeps the most demanding kill
    /// since the last completion; bounds grow from kill to kill, so it is
    /// among the newest). A record that carries nothing (a
    /// batch of 0 items, an unknown peak, a kill at limit 0) is not
    /// written; returns whether a row was.
    ///
    /// # Errors
    /// [`StoreError::OutOfRange`] for values above 2^63-1; SQLite errors.
    pub fn record_run(&mut self, class: &str, record: &RunRecord) -> Result<bool, StoreError> {
        const OP: &str = "record run";
        if !record.is_informative() {
            return Ok(false);
        }
        let now = self.now_ms();
        let nanos = u64::try_from(record.duration.as_nanos()).unwrap_or(u64::MAX);
        let unbatched = matches!(record.shape, RunShape::Unbatched);
        let (peak, killed_at) = match record.outcome {
            RunOutcome::Completed { peak } => (peak, None),
            RunOutcome::KilledAtLimit { limit } => (None, Some(limit)),
        };
        let tx = Unit::begin(&self.conn).ctx("begin history")?;
        tx.prepare_cached(
            "INSERT INTO class_history (class, items, unbatched, duration_ns, peak_bytes, killed_at, at_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )
        .ctx(OP)?
        .execute(params![
            class,
            to_i64(record.shape.items(), "items")?,
            unbatched,
            to_i64(nanos, "duration")?,
            peak.map(|p| to_i64(p, "peak")).transpose()?,
            killed_at.map(|l| to_i64(l, "kill limit")).transpose()?,
            now
        ])
        .ctx(OP)?;
        tx.prepare_cached(
            "DELETE FROM class_history WHERE class = ?1 AND unbatched = ?2 AND killed_at IS NULL AND seq <=
               (SELECT seq FROM class_history WHERE class = ?1 AND unbatched = ?2 AND killed_at IS NULL
                 ORDER BY seq DESC LIMIT 1 OFFSET ?3)",
        )
        .ctx(OP)?
        .execute(params![class, unbatched, HISTORY_PER_CLASS])
        .ctx(OP)?;
        tx.prepare_cached(
            "DELETE FROM class_history WHERE class = ?1 AND unbatched = ?2 AND killed_at IS NOT NULL AND (
               seq < (SELECT COALESCE(MAX(seq), 0) FROM class_history
                       WHERE class = ?1 AND unbatched = ?2 AND killed_at IS NULL)
               OR seq <= (SELECT seq FROM class_history WHERE class = ?1 AND unbatched = ?2 AND killed_at IS NOT NULL
                           ORDER BY seq DESC LIMIT 1 OFFSET ?3))",
        )
        .ctx(OP)?
        .execute(params![class, unbatched, HISTORY_PER_CLASS])
        .ctx(OP)?;
        tx.commit().ctx("commit history")?;
        Ok(true)
    }

    /// Records a completed batch with its measured peak: shorthand for
    /// [`Store::record_run`] (nothing is written for 0 items or an unknown
    /// peak).
    ///
    /// # Errors
    /// As [`Store::record_run`].
    pub fn record_batch(
        &mut self,
        class: &str,
        items: u64,
        duration: Duration,
        peak_bytes: Option<u64>,
    ) -> Result<(), StoreError> {
        let record = RunRecord::batch(items, duration, RunOutcome::Completed { peak: peak_bytes });
        self.record_run(class, &record).map(drop)
    }

    /// The records of one class, oldest first.
    ///
    /// # Errors
    /// SQLite errors; [`StoreError::Corrupt`] for a negative stored value.
    pub fn history(&self, class: &str) -> Result<Vec<HistorySample>, StoreError> {
        self.read_history(
            &format!("SELECT {HISTORY_COLUMNS} FROM class_history WHERE class = ?1 ORDER BY seq"),
            Some(class),
        )
    }

    /// Every record, by class then age: what the daemon replays into the
    /// Governor at start (in this order, with `Governor::record_run`).
    ///
    /// # Errors
    /// SQLite errors; [`StoreError::Corrupt`] for a negative stored value.
    pub fn all_history(&self) -> Result<Vec<HistorySample>, StoreError> {
        self.read_history(&format!("SELECT {HISTORY_COLUMNS} FROM class_history ORDER BY class, seq"), None)
    }

    fn read_history(&self, sql: &str, class: Option<&str>) -> Result<Vec<HistorySample>, StoreError> {
        const OP: &str = "read history";
        type Row = (String, i64, bool, i64, Option<i64>, Option<i64>, i64);
        let mut stmt = self.conn.prepare_cached(sql).ctx(OP)?;
        let map = |r: &rusqlite::Row<'_>| -> rusqlite::Result<Row> {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?))
        };
        let rows = match class {
            Some(c) => stmt.query_map([c], map),
            None => stmt.query_map([], map),
        }
        .ctx(OP)?
        .collect::<Result<Vec<_>, _>>()
        .ctx(OP)?;
        rows.into_iter()
            .map(|(class, items, unbatched, ns, peak, killed_at, at_ms)| {
                let duration = Duration::from_nanos(to_u64(ns, "duration")?);
                let outcome = match killed_at {
                    Some(limit) => RunOutcome::KilledAtLimit { limit: to_u64(limit, "kill limit")? },
                    None => RunOutcome::Completed { peak: peak.map(|p| to_u64(p, "peak")).transpose()? },
                };
                let record = if unbatched {
                    RunRecord::unbatched(duration, outcome)
                } else {
                    RunRecord::batch(to_u64(items, "items")?, duration, outcome)
                };
                Ok(HistorySample { class, record, at_ms })
            })
            .collect()
    }

    /// Stores (replacing) the feedback of one (class, alternative), keeping
    /// at most [`MAX_FEEDBACK_ROWS`] rows.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn put_feedback(&mut self, class: &str, alternative: &str, blob: &[u8]) -> Result<(), StoreError> {
        const OP: &str = "store feedback";
        let now = self.now_ms();
        let tx = Unit::begin(&self.conn).ctx("begin feedback")?;
        tx.prepare_cached(
            "INSERT INTO capability_feedback (class, alternative, blob, updated_ms) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (class, alternative) DO UPDATE SET blob = excluded.blob, updated_ms = excluded.updated_ms",
        )
        .ctx(OP)?
        .execute(params![class, alternative, blob, now])
        .ctx(OP)?;
        tx.prepare_cached(
            "DELETE FROM capability_feedback WHERE (class, alternative) IN
               (SELECT class, alternative FROM capability_feedback
                 ORDER BY updated_ms DESC, class, alternative LIMIT -1 OFFSET ?1)",
        )
        .ctx(OP)?
        .execute([MAX_FEEDBACK_ROWS])
        .ctx(OP)?;
        tx.commit().ctx("commit feedback")
    }

    /// Every stored feedback row, by class and alternative.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn all_feedback(&self) -> Result<Vec<FeedbackRow>, StoreError> {
        const OP: &str = "read feedback";
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT class, alternative, blob, updated_ms FROM capability_feedback ORDER BY class, alternative",
            )
            .ctx(OP)?;
        stmt.query_map([], |r| {
            Ok(FeedbackRow {
                class: r.get(0)?,
                alternative: r.get(1)?,
                blob: r.get(2)?,
                updated_ms: r.get(3)?,
            })
        })
        .ctx(OP)?
        .collect::<Result<Vec<_>, _>>()
        .ctx(OP)
    }
}
