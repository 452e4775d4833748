//! Group limits that survive restarts (`lardon group add|remove`, schema
//! v10's `groups` table) and the per-state counts `lardon group list` shows.

use rusqlite::params;

use super::error::{Ctx, StoreError};
use super::unit::Unit;
use super::{Store, to_i64, to_u64};
use crate::spec::TaskState;

/// One group's stored limits; `None`: that resource is not limited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupRow {
    /// The group's name (a valid [`lardon::GroupName`]).
    pub name: String,
    /// Running tasks at once.
    pub max_running: Option<u32>,
    /// Memory its tasks may hold at once, bytes.
    pub memory: Option<u64>,
    /// CPUs its tasks may hold at once, thousandths.
    pub cpu_millis: Option<u64>,
}

impl GroupRow {
    /// The limits as the Governor takes them.
    pub fn limits(&self) -> lardon::GroupLimits {
        lardon::GroupLimits {
            max_running: self.max_running,
            memory: self.memory,
            cpu_millis: self.cpu_millis,
        }
    }
}

fn from_i64(v: Option<i64>, what: &'static str) -> Result<Option<u64>, StoreError> {
    v.map(|v| to_u64(v, what)).transpose()
}

impl Store {
    /// Every group with stored limits, by name.
    ///
    /// # Errors
    /// SQLite or decoding errors.
    pub fn groups(&self) -> Result<Vec<GroupRow>, StoreError> {
        const OP: &str = "read groups";
        let mut stmt = self
            .conn
            .prepare_cached("SELECT name, max_running, memory, cpu_millis FROM groups ORDER BY name")
            .ctx(OP)?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, Option<i64>>(1)?,
                    r.get::<_, Option<i64>>(2)?,
                    r.get::<_, Option<i64>>(3)?,
                ))
            })
            .ctx(OP)?
            .collect::<Result<Vec<_>, _>>()
            .ctx(OP)?;
        rows.into_iter()
            .map(|(name, max_running, memory, cpu)| {
                let max_running =
                    from_i64(max_running, "group max_running")?.map(|n| u32::try_from(n).unwrap_or(u32::MAX));
                Ok(GroupRow {
                    name,
                    max_running,
                    memory: from_i64(memory, "group memory")?,
                    cpu_millis: from_i64(cpu, "group cpu_millis")?,
                })
            })
            .collect()
    }

    /// Stores `row`'s limits, replacing the group's earlier ones.
    ///
    /// # Errors
    /// SQLite errors (nothing changed then).
    pub fn set_group(&mut self, row: &GroupRow) -> Result<(), StoreError> {
        const OP: &str = "write group";
        let now = self.now_ms();
        let memory = row.memory.map(|m| to_i64(m, "group memory")).transpose()?;
        let cpu = row.cpu_millis.map(|m| to_i64(m, "group cpu_millis")).transpose()?;
        let tx = Unit::begin(&self.conn).ctx("begin group")?;
        tx.prepare_cached(
            "INSERT INTO groups (name, max_running, memory, cpu_millis, updated_ms) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (name) DO UPDATE SET max_running = excluded.max_running, memory = excluded.memory,
                 cpu_millis = excluded.cpu_millis, updated_ms = excluded.updated_ms",
        )
        .ctx(OP)?
        .execute(params![row.name, row.max_running, memory, cpu, now])
        .ctx(OP)?;
        tx.commit().ctx("commit group")
    }

    /// Drops a group's limits; false when it had none. Its tasks keep
    /// their group name.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn remove_group(&mut self, name: &str) -> Result<bool, StoreError> {
        const OP: &str = "remove group";
        let tx = Unit::begin(&self.conn).ctx("begin group")?;
        let n = tx.prepare_cached("DELETE FROM groups WHERE name = ?1").ctx(OP)?.execute([name]).ctx(OP)?;
        tx.commit().ctx("commit group")?;
        Ok(n > 0)
    }

    /// Each group's tasks by state (groups named by a task, with or
    /// without limits), by group name.
    ///
    /// # Errors
    /// SQLite or decoding errors.
    pub fn group_counts(&self) -> Result<Vec<(String, TaskState, u64)>, StoreError> {
        const OP: &str = "count group tasks";
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT group_name, state, count(*) FROM tasks WHERE group_name IS NOT NULL
                 GROUP BY group_name, state ORDER BY group_name",
            )
            .ctx(OP)?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, i64>(2)?)))
            .ctx(OP)?
            .collect::<Result<Vec<_>, _>>()
            .ctx(OP)?;
        rows.into_iter()
            .map(|(g, s, n)| {
                let state = crate::spec::parse_state(&s)
                    .map_err(|e| StoreError::Corrupt { what: "task state".into(), detail: e.to_string() })?;
                Ok((g, state, to_u64(n, "count")?))
            })
            .collect()
    }
}
