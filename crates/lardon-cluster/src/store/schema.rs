//! The broker database's schema, numbered by `PRAGMA user_version`, the
//! same discipline as the daemon's store: migration N brings version N to
//! N + 1 and runs in one transaction with the version bump, so a crash
//! mid-migration leaves the previous version intact. A database newer
//! than [`SCHEMA_VERSION`] is refused, never touched.
//!
//! Version 0 is an unversioned database: either a new file or one written
//! before the broker's schema had versions, whose tables migration 0
//! creates only where they are missing (`IF NOT EXISTS`), so such a
//! database opens with its rows as they are.

use rusqlite::{Connection, TransactionBehavior};

/// The schema version this build writes.
pub const SCHEMA_VERSION: u32 = 1;

/// Migration `i` takes version `i` to `i + 1`.
const MIGRATIONS: [&str; SCHEMA_VERSION as usize] = [
    // 0 → 1: live tasks and remembered answers; the learned samples
    // (docs/DESIGN.md §14), one row per successful run, newest last.
    "CREATE TABLE IF NOT EXISTS tasks (
         id TEXT PRIMARY KEY,
         submitter TEXT NOT NULL,
         spec BLOB NOT NULL,
         attempts INTEGER NOT NULL DEFAULT 0,
         agent TEXT,
         finished_seq INTEGER,
         reply BLOB
     );
     CREATE INDEX IF NOT EXISTS tasks_finished ON tasks(finished_seq)
         WHERE finished_seq IS NOT NULL;
     CREATE TABLE IF NOT EXISTS learned (
         seq INTEGER PRIMARY KEY AUTOINCREMENT,
         class TEXT NOT NULL,
         peak INTEGER NOT NULL,
         wall_ms INTEGER NOT NULL
     );
     CREATE INDEX IF NOT EXISTS learned_class ON learned(class, seq);",
];

/// Why the schema could not be brought up to date.
#[derive(Debug)]
pub(super) enum MigrateError {
    /// The file is from a newer broker.
    TooNew(u32),
    /// SQLite refused.
    Sqlite(rusqlite::Error),
}

impl From<rusqlite::Error> for MigrateError {
    fn from(e: rusqlite::Error) -> Self {
        MigrateError::Sqlite(e)
    }
}

/// The database's `user_version`.
pub(super) fn version(conn: &Connection) -> rusqlite::Result<u32> {
    conn.query_row("PRAGMA user_version", [], |r| r.get::<_, u32>(0))
}

/// Brings the database to [`SCHEMA_VERSION`], one transaction per step.
pub(super) fn migrate(conn: &mut Connection) -> Result<(), MigrateError> {
    let found = version(conn)?;
    if found > SCHEMA_VERSION {
        return Err(MigrateError::TooNew(found));
    }
    for (step, sql) in (0u32..).zip(MIGRATIONS).skip(found as usize) {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        // Re-check under the write lock: another process may have migrated.
        if version(&tx)? != step {
            continue;
        }
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", step + 1)?;
        tx.commit()?;
    }
    Ok(())
}
