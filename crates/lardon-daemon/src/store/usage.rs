//! What each task's runs used (schema v11), and the one read `lardon
//! report` makes (docs/DESIGN.md §10, "Report").
//!
//! A run's usage is added to its task's row by the run's own end write
//! (`Write::RunEnded`, through the writer), so the totals cover every run,
//! where the class history keeps only what the Governor needs. The report
//! reads through a reader ([`Store::open_reader`]): it works while the
//! daemon runs (WAL) and with the daemon stopped.

use lardon::{RunOutcome, RunRecord};
use rusqlite::{OptionalExtension, params};

use super::error::{Ctx, StoreError};
use super::tasks::{RawTask, TASK_COLUMNS};
use super::unit::Unit;
use super::{CourseEntry, Store, TaskRecord, to_i64, to_u64};
use crate::spec::TaskId;

/// The `meta` key of the memory budget the daemon last started with.
const BUDGET_KEY: &str = "memory_budget";

/// A task's runs, summed (every run that ended with a record: each batch
/// of a batched task is one run).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RunUsage {
    /// Runs ended.
    pub runs: u64,
    /// Runs killed at their memory limit.
    pub memory_kills: u64,
    /// The highest measured peak over its runs, bytes (`None`: none
    /// measured).
    pub peak_bytes: Option<u64>,
    /// Summed wall time of its runs, ms.
    pub run_ms: u64,
    /// Σ grant × wall time, byte·seconds.
    pub reserved_byte_s: f64,
    /// Σ measured peak × wall time, byte·seconds; a run with no measured
    /// peak, or killed at its limit, counts its whole grant.
    pub used_byte_s: f64,
}

/// Which tasks [`Store::report_tasks`] returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReportFilter {
    /// Only tasks not ended before this time (Unix ms): those that ended
    /// at or after it, and every task not ended yet.
    pub since_ms: Option<i64>,
    /// Only tasks of this group.
    pub group: Option<String>,
}

/// One task as the report sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportTask {
    /// The task's row.
    pub record: TaskRecord,
    /// What its runs used.
    pub usage: RunUsage,
    /// Its course (grants, waits, retries), oldest first.
    pub course: Vec<CourseEntry>,
}

/// The usage columns read after [`TASK_COLUMNS`], in this order.
const USAGE_COLUMNS: &str = "runs, memory_kills, peak_bytes, run_ms, reserved_byte_s, used_byte_s";

impl Store {
    /// Adds one ended run of `id` to its usage: `reserved` is the memory
    /// the run was granted (bytes). One unit; a record of a run cut short
    /// (nothing learned) is not given here.
    ///
    /// # Errors
    /// [`StoreError::NotFound`]; [`StoreError::OutOfRange`] for values
    /// above 2^63-1; SQLite errors.
    pub fn add_run_usage(&mut self, id: TaskId, record: &RunRecord, reserved: u64) -> Result<(), StoreError> {
        const OP: &str = "add run usage";
        let secs = record.duration.as_secs_f64();
        let ms = u64::try_from(record.duration.as_millis()).unwrap_or(u64::MAX);
        let (peak, killed) = match record.outcome {
            RunOutcome::Completed { peak } => (peak, false),
            RunOutcome::KilledAtLimit { .. } => (None, true),
        };
        // f64 on purpose: byte·seconds overflow i64 (schema v11).
        #[allow(clippy::cast_precision_loss)]
        let reserved_bs = reserved as f64 * secs;
        #[allow(clippy::cast_precision_loss)]
        let used_bs = peak.map_or(reserved_bs, |p| p as f64 * secs);
        let tx = Unit::begin(&self.conn).ctx("begin run usage")?;
        let n = tx
            .prepare_cached(
                "UPDATE tasks SET runs = runs + 1, memory_kills = memory_kills + ?2,
                        peak_bytes = CASE WHEN ?3 IS NULL THEN peak_bytes ELSE max(coalesce(peak_bytes, 0), ?3) END,
                        run_ms = run_ms + ?4, reserved_byte_s = reserved_byte_s + ?5, used_byte_s = used_byte_s + ?6
                  WHERE id = ?1",
            )
            .ctx(OP)?
            .execute(params![
                to_i64(id.0, "task id")?,
                i64::from(killed),
                peak.map(|p| to_i64(p, "peak")).transpose()?,
                to_i64(ms, "run time")?,
                reserved_bs,
                used_bs
            ])
            .ctx(OP)?;
        if n == 0 {
            return Err(StoreError::NotFound(id));
        }
        tx.commit().ctx("commit run usage")
    }

    /// Keeps the memory budget (bytes) the daemon governs, for views that
    /// read the store without it (`lardon report`'s timeline).
    ///
    /// # Errors
    /// [`StoreError::OutOfRange`]; SQLite errors.
    pub fn set_memory_budget(&mut self, budget: u64) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "INSERT INTO meta (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            )
            .ctx("store memory budget")?
            .execute(params![BUDGET_KEY, to_i64(budget, "memory budget")?])
            .ctx("store memory budget")
            .map(drop)
    }

    /// The memory budget the daemon last started with (`None` before a
    /// daemon of this build ran on this store).
    ///
    /// # Errors
    /// SQLite errors; [`StoreError::Corrupt`] for a negative value.
    pub fn memory_budget(&self) -> Result<Option<u64>, StoreError> {
        let v: Option<i64> = self
            .conn
            .prepare_cached("SELECT value FROM meta WHERE key = ?1")
            .ctx("read memory budget")?
            .query_row([BUDGET_KEY], |r| r.get(0))
            .optional()
            .ctx("read memory budget")?;
        v.map(|v| to_u64(v, "memory budget")).transpose()
    }

    /// The tasks `filter` selects, by id, each with its usage and course:
    /// everything `lardon report` aggregates, in one read transaction (so
    /// the figures are of one moment even while the daemon writes).
    ///
    /// # Errors
    /// SQLite or decoding errors.
    pub fn report_tasks(&self, filter: &ReportFilter) -> Result<Vec<ReportTask>, StoreError> {
        const OP: &str = "read report";
        type RawUsage = (i64, i64, Option<i64>, i64, f64, f64);
        // A deferred transaction: every read below sees one snapshot.
        let tx = Unit::begin(&self.conn).ctx("begin report read")?;
        let sql = format!(
            "SELECT {TASK_COLUMNS}, {USAGE_COLUMNS} FROM tasks
              WHERE (?1 IS NULL OR finished_ms IS NULL OR finished_ms >= ?1)
                AND (?2 IS NULL OR group_name = ?2)
              ORDER BY id"
        );
        let raws: Vec<(RawTask, RawUsage)> = tx
            .prepare_cached(&sql)
            .ctx(OP)?
            .query_map(params![filter.since_ms, filter.group], |r| {
                let base = RawTask::COLUMNS;
                Ok((
                    RawTask::from_row(r)?,
                    (
                        r.get(base)?,
                        r.get(base + 1)?,
                        r.get(base + 2)?,
                        r.get(base + 3)?,
                        r.get(base + 4)?,
                        r.get(base + 5)?,
                    ),
                ))
            })
            .ctx(OP)?
            .collect::<Result<_, _>>()
            .ctx(OP)?;
        let mut out = Vec::with_capacity(raws.len());
        for (raw, (runs, kills, peak, run_ms, reserved, used)) in raws {
            let record = raw.decode()?;
            let usage = RunUsage {
                runs: to_u64(runs, "runs")?,
                memory_kills: to_u64(kills, "memory kills")?,
                peak_bytes: peak.map(|p| to_u64(p, "peak")).transpose()?,
                run_ms: to_u64(run_ms, "run time")?,
                reserved_byte_s: reserved,
                used_byte_s: used,
            };
            let course = self.course(record.id)?;
            out.push(ReportTask { record, usage, course });
        }
        tx.commit().ctx("end report read")?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::time::Duration;

    use super::*;
    use crate::spec::TaskSpec;
    use crate::spec::TaskState;
    use crate::store::{NewTask, Outcome};

    const MIB: u64 = 1 << 20;

    #[test]
    fn usage_sums_every_run_and_counts_unmeasured_runs_as_used() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(dir.path().join("db")).unwrap();
        let id = s.insert_task(&NewTask::new(TaskSpec::command(["true"]))).unwrap();
        let two = Duration::from_secs(2);
        s.add_run_usage(
            id,
            &RunRecord::unbatched(two, RunOutcome::KilledAtLimit { limit: 100 * MIB }),
            100 * MIB,
        )
        .unwrap();
        s.add_run_usage(
            id,
            &RunRecord::unbatched(two, RunOutcome::Completed { peak: Some(50 * MIB) }),
            200 * MIB,
        )
        .unwrap();
        let t = s.report_tasks(&ReportFilter::default()).unwrap().remove(0);
        let u = t.usage;
        assert_eq!((u.runs, u.memory_kills, u.peak_bytes, u.run_ms), (2, 1, Some(50 * MIB), 4_000));
        let mib_s = |v: f64| v / MIB as f64;
        assert!((mib_s(u.reserved_byte_s) - 600.0).abs() < 1e-6, "{u:?}");
        // The kill counts its whole grant as used: 200 + 100.
        assert!((mib_s(u.used_byte_s) - 300.0).abs() < 1e-6, "{u:?}");
        assert!(matches!(
            s.add_run_usage(TaskId(99), &RunRecord::unbatched(two, RunOutcome::Completed { peak: None }), 1),
            Err(StoreError::NotFound(_))
        ));
    }

    #[test]
    fn the_filter_keeps_unended_tasks_and_those_ended_since() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(dir.path().join("db")).unwrap();
        let old = s.insert_task(&NewTask::new(TaskSpec::command(["true"]))).unwrap();
        let open = s.insert_task(&NewTask::new(TaskSpec::command(["true"]))).unwrap();
        s.finish(old, &Outcome { state: TaskState::Cancelled, exit_code: None, reason: None }).unwrap();
        let ended = s.get_task(old).unwrap().unwrap().finished_ms.unwrap();
        let ids = |f: &ReportFilter| -> Vec<TaskId> {
            s.report_tasks(f).unwrap().into_iter().map(|t| t.record.id).collect()
        };
        assert_eq!(ids(&ReportFilter { since_ms: Some(ended), group: None }), [old, open]);
        assert_eq!(ids(&ReportFilter { since_ms: Some(ended + 1), group: None }), [open]);
        assert_eq!(ids(&ReportFilter { since_ms: None, group: Some("g".into()) }), []);
        assert_eq!(s.memory_budget().unwrap(), None);
        s.set_memory_budget(3 << 30).unwrap();
        s.set_memory_budget(2 << 30).unwrap();
        assert_eq!(s.memory_budget().unwrap(), Some(2 << 30));
    }
}
