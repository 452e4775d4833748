//! What the Governor learns and must keep across restarts (docs/DESIGN.md §6):
//! per-class batch history (last 8 per class) and capability feedback.

use std::time::Duration;

use rusqlite::params;

use super::error::{Ctx, StoreError};
use super::{Store, to_i64, to_u64};

/// Samples kept per class (the Governor's ring size).
pub const HISTORY_PER_CLASS: u32 = 8;

/// Feedback rows kept in all (least recently updated pruned first).
pub const MAX_FEEDBACK_ROWS: u32 = 4096;

/// One recorded batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistorySample {
    /// Learning key.
    pub class: String,
    /// Items in the batch.
    pub items: u64,
    /// How long it ran.
    pub duration: Duration,
    /// Measured peak memory, if known.
    pub peak_bytes: Option<u64>,
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

impl Store {
    /// Records a batch and keeps only the newest [`HISTORY_PER_CLASS`] of
    /// its class (one transaction).
    ///
    /// # Errors
    /// [`StoreError::OutOfRange`] for values above 2^63-1; SQLite errors.
    pub fn record_batch(
        &mut self,
        class: &str,
        items: u64,
        duration: Duration,
        peak_bytes: Option<u64>,
    ) -> Result<(), StoreError> {
        const OP: &str = "record batch";
        let now = self.now_ms();
        let nanos = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        let tx = self.conn.transaction().ctx("begin history")?;
        tx.prepare_cached(
            "INSERT INTO class_history (class, items, duration_ns, peak_bytes, at_ms) VALUES (?1, ?2, ?3, ?4, ?5)",
        )
        .ctx(OP)?
        .execute(params![
            class,
            to_i64(items, "items")?,
            to_i64(nanos, "duration")?,
            peak_bytes.map(|p| to_i64(p, "peak")).transpose()?,
            now
        ])
        .ctx(OP)?;
        tx.prepare_cached(
            "DELETE FROM class_history WHERE class = ?1 AND seq <=
               (SELECT seq FROM class_history WHERE class = ?1 ORDER BY seq DESC LIMIT 1 OFFSET ?2)",
        )
        .ctx(OP)?
        .execute(params![class, HISTORY_PER_CLASS])
        .ctx(OP)?;
        tx.commit().ctx("commit history")
    }

    /// The samples of one class, oldest first.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn history(&self, class: &str) -> Result<Vec<HistorySample>, StoreError> {
        self.read_history("SELECT class, items, duration_ns, peak_bytes, at_ms FROM class_history WHERE class = ?1 ORDER BY seq", Some(class))
    }

    /// Every sample, by class then age: what the daemon replays into the
    /// Governor at start.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn all_history(&self) -> Result<Vec<HistorySample>, StoreError> {
        self.read_history(
            "SELECT class, items, duration_ns, peak_bytes, at_ms FROM class_history ORDER BY class, seq",
            None,
        )
    }

    fn read_history(&self, sql: &str, class: Option<&str>) -> Result<Vec<HistorySample>, StoreError> {
        const OP: &str = "read history";
        let mut stmt = self.conn.prepare_cached(sql).ctx(OP)?;
        let map = |r: &rusqlite::Row<'_>| -> rusqlite::Result<(String, i64, i64, Option<i64>, i64)> {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        };
        let rows = match class {
            Some(c) => stmt.query_map([c], map),
            None => stmt.query_map([], map),
        }
        .ctx(OP)?
        .collect::<Result<Vec<_>, _>>()
        .ctx(OP)?;
        rows.into_iter()
            .map(|(class, items, ns, peak, at_ms)| {
                Ok(HistorySample {
                    class,
                    items: to_u64(items, "items")?,
                    duration: Duration::from_nanos(to_u64(ns, "duration")?),
                    peak_bytes: peak.map(|p| to_u64(p, "peak")).transpose()?,
                    at_ms,
                })
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
        let tx = self.conn.transaction().ctx("begin feedback")?;
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
