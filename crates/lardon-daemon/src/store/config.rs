//! Operator configuration that must survive restarts: policy overrides
//! (`lardon policy --set k=v`) and registered scratch volumes.

use super::unit::Unit;
use rusqlite::{OptionalExtension, params};

use super::error::{Ctx, StoreError};
use super::{Store, to_i64, to_u64};

/// A registered scratch volume (its live state is the Governor's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScratchVolumeRow {
    /// Unique name.
    pub name: String,
    /// Directory on the daemon's host.
    pub path: String,
    /// Configured cap in bytes; `None` = the filesystem's size.
    pub capacity: Option<u64>,
    /// Command (argv) run on drain to unmount / swap off; empty = none.
    pub hook: Vec<String>,
    /// Whether a drain was requested (kept across restarts: no new leases).
    pub draining: bool,
    /// When registered, Unix ms (filled by the store on insert).
    pub added_ms: i64,
}

impl Store {
    /// The policy overrides, by key.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn policy_overrides(&self) -> Result<Vec<(String, String)>, StoreError> {
        const OP: &str = "read policy";
        let mut stmt =
            self.conn.prepare_cached("SELECT key, value FROM policy_overrides ORDER BY key").ctx(OP)?;
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).ctx(OP)?.collect::<Result<Vec<_>, _>>().ctx(OP)
    }

    /// Sets the overrides in `set` and removes those in `reset`, all in
    /// one transaction (the caller validated them against the Governor).
    ///
    /// # Errors
    /// SQLite errors (nothing is changed then).
    pub fn set_policy_overrides(
        &mut self,
        set: &[(String, String)],
        reset: &[String],
    ) -> Result<(), StoreError> {
        const OP: &str = "write policy";
        let now = self.now_ms();
        let tx = Unit::begin(&self.conn).ctx("begin policy")?;
        for key in reset {
            tx.prepare_cached("DELETE FROM policy_overrides WHERE key = ?1")
                .ctx(OP)?
                .execute([key])
                .ctx(OP)?;
        }
        for (key, value) in set {
            tx.prepare_cached(
                "INSERT INTO policy_overrides (key, value, updated_ms) VALUES (?1, ?2, ?3)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_ms = excluded.updated_ms",
            )
            .ctx(OP)?
            .execute(params![key, value, now])
            .ctx(OP)?;
        }
        tx.commit().ctx("commit policy")
    }

    /// Registers a scratch volume.
    ///
    /// # Errors
    /// [`StoreError::ScratchExists`] when the name or path is taken.
    pub fn add_scratch(&mut self, volume: &ScratchVolumeRow) -> Result<(), StoreError> {
        const OP: &str = "add scratch volume";
        let now = self.now_ms();
        let hook =
            serde_json::to_string(&volume.hook).map_err(|source| StoreError::Encode { op: OP, source })?;
        let capacity = volume.capacity.map(|c| to_i64(c, "capacity")).transpose()?;
        let tx = Unit::begin(&self.conn).ctx("begin scratch")?;
        let taken: Option<String> = tx
            .query_row(
                "SELECT name FROM scratch_volumes WHERE name = ?1 OR path = ?2",
                params![volume.name, volume.path],
                |r| r.get(0),
            )
            .optional()
            .ctx(OP)?;
        if taken.is_some() {
            return Err(StoreError::ScratchExists(volume.name.clone()));
        }
        tx.execute(
            "INSERT INTO scratch_volumes (name, path, capacity, hook, draining, added_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![volume.name, volume.path, capacity, hook, volume.draining, now],
        )
        .ctx(OP)?;
        tx.commit().ctx("commit scratch")
    }

    /// Records whether a volume is draining.
    ///
    /// # Errors
    /// [`StoreError::ScratchNotFound`]; SQLite errors.
    pub fn set_scratch_draining(&mut self, name: &str, draining: bool) -> Result<(), StoreError> {
        let n = self
            .conn
            .execute("UPDATE scratch_volumes SET draining = ?2 WHERE name = ?1", params![name, draining])
            .ctx("update scratch volume")?;
        if n == 0 { Err(StoreError::ScratchNotFound(name.to_owned())) } else { Ok(()) }
    }

    /// Forgets a scratch volume.
    ///
    /// # Errors
    /// [`StoreError::ScratchNotFound`]; SQLite errors.
    pub fn remove_scratch(&mut self, name: &str) -> Result<(), StoreError> {
        let n = self
            .conn
            .execute("DELETE FROM scratch_volumes WHERE name = ?1", [name])
            .ctx("remove scratch volume")?;
        if n == 0 { Err(StoreError::ScratchNotFound(name.to_owned())) } else { Ok(()) }
    }

    /// Every registered volume, by name.
    ///
    /// # Errors
    /// SQLite or decoding errors.
    pub fn scratch_volumes(&self) -> Result<Vec<ScratchVolumeRow>, StoreError> {
        const OP: &str = "read scratch volumes";
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT name, path, capacity, hook, draining, added_ms FROM scratch_volumes ORDER BY name",
            )
            .ctx(OP)?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, Option<i64>>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, bool>(4)?,
                    r.get::<_, i64>(5)?,
                ))
            })
            .ctx(OP)?
            .collect::<Result<Vec<_>, _>>()
            .ctx(OP)?;
        rows.into_iter()
            .map(|(name, path, capacity, hook, draining, added_ms)| {
                let hook = serde_json::from_str(&hook).map_err(|e| StoreError::Corrupt {
                    what: format!("scratch volume `{name}` hook"),
                    detail: e.to_string(),
                })?;
                Ok(ScratchVolumeRow {
                    capacity: capacity.map(|c| to_u64(c, "capacity")).transpose()?,
                    name,
                    path,
                    hook,
                    draining,
                    added_ms,
                })
            })
            .collect()
    }
}
