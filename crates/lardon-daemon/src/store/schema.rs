//! Schema migrations, numbered by `PRAGMA user_version`.
//!
//! Each migration runs in its own transaction together with the version
//! bump, so a crash mid-migration leaves the previous version intact. A
//! database newer than [`SCHEMA_VERSION`] is refused, never touched.

use std::path::Path;

use rusqlite::{Connection, TransactionBehavior};

use super::error::{Ctx, StoreError};

/// Migration `i` (0-based) brings the schema from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[V1, V2, V3, V4, V5, V6, V7, V8, V9, V10, V11];

/// The schema version this build writes.
pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

/// Version 1: tasks and their dependencies, events, learning, policy, scratch.
const V1: &str = r"
-- Monotonic counters (next task number: ids are never reused, even after
-- remove/clean, because the counter only moves forward).
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
INSERT INTO meta (key, value) VALUES ('next_task_number', 1);

CREATE TABLE tasks (
    id                 INTEGER PRIMARY KEY,
    name               TEXT NOT NULL,
    spec               TEXT NOT NULL,            -- JSON TaskSpec, immutable
    class              TEXT NOT NULL,            -- copied from spec for filters
    priority           INTEGER NOT NULL,         -- copied from spec for ordering
    items              INTEGER,                  -- batched tasks: total items
    retry_on_interrupt INTEGER NOT NULL CHECK (retry_on_interrupt IN (0, 1)),
    state              TEXT NOT NULL CHECK (state IN
                         ('pending', 'running', 'paused', 'completed', 'failed', 'cancelled')),
    paused_running     INTEGER NOT NULL DEFAULT 0 CHECK (paused_running IN (0, 1)),
    state_reason       TEXT,                     -- why the current state ('interrupted', failure reason)
    attempts           INTEGER NOT NULL DEFAULT 0,   -- earlier attempts that were interrupted
    created_ms         INTEGER NOT NULL,
    started_ms         INTEGER,
    finished_ms        INTEGER,
    exit_code          INTEGER,
    progress_done      INTEGER NOT NULL DEFAULT 0,
    progress_total     INTEGER NOT NULL DEFAULT 0,
    progress_message   TEXT NOT NULL DEFAULT '',
    cursor             INTEGER NOT NULL DEFAULT 0 CHECK (cursor >= 0),
    decision_kind      TEXT CHECK (decision_kind IN ('admit', 'reduce_batch', 'wait', 'reject')),
    decision_code      TEXT,
    decision_message   TEXT,
    decision_batch     INTEGER,
    decision_ms        INTEGER
) STRICT;
-- The dispatcher's scan (state = 'pending' ORDER BY priority DESC, id) and
-- every listing by state walk this index.
CREATE INDEX tasks_by_state ON tasks (state, priority DESC, id);

CREATE TABLE task_deps (
    task_id INTEGER NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    dep_id  INTEGER NOT NULL,                    -- may outlive a removed dependency
    kind    TEXT NOT NULL CHECK (kind IN ('success', 'end')),
    PRIMARY KEY (task_id, dep_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX task_deps_by_dep ON task_deps (dep_id);

-- Bounded audit trail: pruned by sequence number as it grows.
CREATE TABLE events (
    seq     INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: a follower cursor
    task_id INTEGER REFERENCES tasks (id) ON DELETE CASCADE,
    at_ms   INTEGER NOT NULL,
    kind    TEXT NOT NULL,
    payload TEXT NOT NULL DEFAULT ''
) STRICT;
CREATE INDEX events_by_task ON events (task_id, seq);

-- The Governor's per-class history (last 8 samples per class, docs/DESIGN.md §6).
CREATE TABLE class_history (
    seq         INTEGER PRIMARY KEY,
    class       TEXT NOT NULL,
    items       INTEGER NOT NULL,
    duration_ns INTEGER NOT NULL,
    peak_bytes  INTEGER,                         -- unknown peaks are stored as NULL
    at_ms       INTEGER NOT NULL
) STRICT;
CREATE INDEX class_history_by_class ON class_history (class, seq);

-- Capability-envelope feedback, keyed by (class, alternative), opaque blob.
CREATE TABLE capability_feedback (
    class       TEXT NOT NULL,
    alternative TEXT NOT NULL,
    blob        BLOB NOT NULL,
    updated_ms  INTEGER NOT NULL,
    PRIMARY KEY (class, alternative)
) STRICT, WITHOUT ROWID;

CREATE TABLE policy_overrides (
    key        TEXT PRIMARY KEY,
    value      TEXT NOT NULL,
    updated_ms INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

CREATE TABLE scratch_volumes (
    name     TEXT PRIMARY KEY,
    path     TEXT NOT NULL UNIQUE,
    capacity INTEGER,                            -- NULL: the filesystem's size
    hook     TEXT NOT NULL DEFAULT '[]',         -- JSON argv run on drain
    draining INTEGER NOT NULL DEFAULT 0 CHECK (draining IN (0, 1)),
    added_ms INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
";

/// Version 2: the executor's handle of a task's live run (e.g. its process
/// group or cgroup), so that after a crash the daemon can find and stop
/// orphaned processes before running the task again.
const V2: &str = r"
ALTER TABLE tasks ADD COLUMN run_handle TEXT;
";

/// Version 3: the whole estimate learns (docs/DESIGN.md §6). A history row
/// is an unbatched run (`unbatched = 1`, `items = 0`) or a batch, and either
/// completed with a measured peak or killed at its memory limit
/// (`killed_at`; the limit is never stored as a peak). Rows that carry
/// nothing (a batch of 0 items, an unknown peak) are no longer kept: they
/// used to push real samples out of the class's last 8.
const V3: &str = r"
ALTER TABLE class_history ADD COLUMN unbatched INTEGER NOT NULL DEFAULT 0 CHECK (unbatched IN (0, 1));
ALTER TABLE class_history ADD COLUMN killed_at INTEGER CHECK (killed_at IS NULL OR peak_bytes IS NULL);
DELETE FROM class_history WHERE peak_bytes IS NULL OR items = 0;
DROP INDEX class_history_by_class;
CREATE INDEX class_history_by_class ON class_history (class, unbatched, seq);
";

/// Version 4: each task's course — the decisions that changed it (admitted
/// with a grant, waited on X from t1 to t2, batch changed, re-run after a
/// memory kill, soft overrun, rejected), bounded per task — and the
/// task's memory-retry count and last overrun note.
const V4: &str = r"
CREATE TABLE task_course (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id     INTEGER NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    kind        TEXT NOT NULL CHECK (kind IN
                  ('admitted', 'waited', 'batch_changed', 'memory_retry', 'soft_overrun', 'rejected')),
    from_ms     INTEGER NOT NULL,
    to_ms       INTEGER,                         -- end of a wait period; NULL while it lasts
    batch       INTEGER,
    memory      INTEGER,
    cpu_millis  INTEGER,
    reason_code TEXT NOT NULL DEFAULT '',
    message     TEXT NOT NULL
) STRICT;
CREATE INDEX task_course_by_task ON task_course (task_id, seq);
ALTER TABLE tasks ADD COLUMN memory_retries INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN overrun_note TEXT;
";

/// Version 5: a finished task can be restarted (`lardon restart`), and its
/// course says so. SQLite cannot widen a CHECK constraint in place, so the
/// course table is rebuilt with its rows, sequence numbers included.
const V5: &str = r"
CREATE TABLE task_course_v5 (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id     INTEGER NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    kind        TEXT NOT NULL CHECK (kind IN
                  ('admitted', 'waited', 'batch_changed', 'memory_retry', 'soft_overrun', 'rejected',
                   'restarted')),
    from_ms     INTEGER NOT NULL,
    to_ms       INTEGER,
    batch       INTEGER,
    memory      INTEGER,
    cpu_millis  INTEGER,
    reason_code TEXT NOT NULL DEFAULT '',
    message     TEXT NOT NULL
) STRICT;
INSERT INTO task_course_v5 SELECT seq, task_id, kind, from_ms, to_ms, batch, memory, cpu_millis, reason_code, message
    FROM task_course;
DROP TABLE task_course;
ALTER TABLE task_course_v5 RENAME TO task_course;
CREATE INDEX task_course_by_task ON task_course (task_id, seq);
";

/// Version 6: offload (docs/DESIGN.md §14). A task's course says where it
/// ran and why: `offloaded` (shipped to the broker, ended at agent X) and
/// `ran_locally` (handed back: broker unreachable, no agent, agents lost).
/// The course table is rebuilt as in version 5 to widen its CHECK.
const V6: &str = r"
CREATE TABLE task_course_v6 (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id     INTEGER NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    kind        TEXT NOT NULL CHECK (kind IN
                  ('admitted', 'waited', 'batch_changed', 'memory_retry', 'soft_overrun', 'rejected',
                   'restarted', 'offloaded', 'ran_locally')),
    from_ms     INTEGER NOT NULL,
    to_ms       INTEGER,
    batch       INTEGER,
    memory      INTEGER,
    cpu_millis  INTEGER,
    reason_code TEXT NOT NULL DEFAULT '',
    message     TEXT NOT NULL
) STRICT;
INSERT INTO task_course_v6 SELECT seq, task_id, kind, from_ms, to_ms, batch, memory, cpu_millis, reason_code, message
    FROM task_course;
DROP TABLE task_course;
ALTER TABLE task_course_v6 RENAME TO task_course;
CREATE INDEX task_course_by_task ON task_course (task_id, seq);
";

/// Version 7: a shippable task's spec (the JSON in `tasks.spec`) may name
/// input and output files (`offload.inputs`, `offload.outputs`; absent when
/// empty, so every older spec reads the same). No table changes: the bump
/// is for older builds, whose spec reader refuses unknown fields, to refuse
/// this database as too new (naming both versions) instead of failing on
/// one task's spec.
const V7: &str = "-- tasks.spec: offload.inputs and offload.outputs";

/// Version 8: the submitter's environment (`lardon submit` captures it,
/// docs/DESIGN.md §10), one blob per task (`NAME=VALUE\0…`); NULL: the
/// daemon's environment (`lardon run`, tasks stored before). The spec's
/// JSON may carry `timeout_ms` and `retry_on_timeout` (absent when unset):
/// the bump also makes an older build, whose spec reader refuses unknown
/// fields, refuse this database as too new.
const V8: &str = "ALTER TABLE tasks ADD COLUMN env BLOB;";

/// Version 9: each end's hook (docs/DESIGN.md §10 Hooks). A task's end
/// inserts its row in the end's own transaction when the task (its spec's
/// JSON `on_end`) or the policy (`policy_overrides.on_end`) names a
/// command, one row per end (`attempt`: the task's attempts at that end);
/// the hook runner starts it (`tries` + 1, durable before the command
/// starts) and records its outcome, bounded output included
/// (`finished_ms` set). A row left unfinished by a crash runs again at the
/// next start. The spec's JSON may carry `on_end` (absent when unset): the
/// bump also makes an older build refuse this database as too new.
const V9: &str = r"
CREATE TABLE task_hooks (
    seq            INTEGER PRIMARY KEY AUTOINCREMENT,   -- run order: the ends' commit order
    task_id        INTEGER NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    attempt        INTEGER NOT NULL,                    -- the task's attempts at the end
    command        TEXT NOT NULL,
    task_state     TEXT NOT NULL CHECK (task_state IN ('completed', 'failed', 'cancelled')),
    exit_code      INTEGER,                             -- the task's, at the end
    ended_ms       INTEGER NOT NULL,
    tries          INTEGER NOT NULL DEFAULT 0,          -- starts so far (LARDON_HOOK_ATTEMPT)
    started_ms     INTEGER,
    process        TEXT,                                -- the running hook's process group (a run handle's text)
    finished_ms    INTEGER,                             -- NULL: not yet run to its end
    outcome        TEXT CHECK (outcome IN ('exited', 'signalled', 'timed_out', 'failed_to_start')),
    code           INTEGER,                             -- exited: exit code; signalled: signal
    error          TEXT,                                -- failed_to_start: why
    duration_ms    INTEGER,
    output         BLOB,                                -- stdout and stderr, the first 64 KiB
    output_dropped INTEGER NOT NULL DEFAULT 0,          -- bytes past those
    UNIQUE (task_id, attempt),
    CHECK ((finished_ms IS NULL) = (outcome IS NULL))
) STRICT;
CREATE INDEX task_hooks_pending ON task_hooks (seq) WHERE finished_ms IS NULL;
";

/// Version 10: groups (docs/DESIGN.md §10, "Groups"). A task's group is in
/// its spec's JSON (`group`, absent when none) and copied to
/// `tasks.group_name` for the filters (`status|wait|pause|resume|cancel
/// --group`, `restart --failed --group`), which walk `tasks_by_group`. A
/// group's limits (`lardon group add`) are rows of `groups`, re-applied to
/// the Governor at start; removing a group's limits deletes its row and
/// leaves its tasks' names.
const V10: &str = r"
ALTER TABLE tasks ADD COLUMN group_name TEXT;
CREATE INDEX tasks_by_group ON tasks (group_name, id) WHERE group_name IS NOT NULL;
CREATE TABLE groups (
    name        TEXT PRIMARY KEY,
    max_running INTEGER CHECK (max_running > 0),
    memory      INTEGER CHECK (memory > 0),
    cpu_millis  INTEGER CHECK (cpu_millis > 0),
    updated_ms  INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
";

/// Version 11: what each task's runs used, for `lardon report`
/// (docs/DESIGN.md §10, "Report"). The class history keeps only the last
/// runs per class (what the Governor needs); these totals keep every run
/// of the task, added in the run's own write: runs ended, runs killed at
/// their memory limit, the highest measured peak, the summed wall time,
/// and byte·seconds reserved (the grant × the run's wall time) and used
/// (the measured peak × the wall time; a run with no measured peak, or one
/// killed at its limit, counts its whole grant as used, so waste is never
/// claimed where it was not measured). REAL: byte·seconds pass 2^63 within
/// a month of a TiB.
const V11: &str = r"
ALTER TABLE tasks ADD COLUMN runs INTEGER NOT NULL DEFAULT 0 CHECK (runs >= 0);
ALTER TABLE tasks ADD COLUMN memory_kills INTEGER NOT NULL DEFAULT 0 CHECK (memory_kills >= 0);
ALTER TABLE tasks ADD COLUMN peak_bytes INTEGER CHECK (peak_bytes IS NULL OR peak_bytes >= 0);
ALTER TABLE tasks ADD COLUMN run_ms INTEGER NOT NULL DEFAULT 0 CHECK (run_ms >= 0);
ALTER TABLE tasks ADD COLUMN reserved_byte_s REAL NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN used_byte_s REAL NOT NULL DEFAULT 0;
";

/// The database's `user_version`.
pub(crate) fn version(conn: &Connection) -> Result<u32, StoreError> {
    conn.query_row("PRAGMA user_version", [], |r| r.get::<_, u32>(0)).ctx("read schema version")
}

/// Brings the database to [`SCHEMA_VERSION`], one transaction per step.
///
/// # Errors
/// [`StoreError::TooNew`] for a database from a newer build; SQLite errors.
pub(crate) fn migrate(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    migrate_to(conn, path, SCHEMA_VERSION)
}

/// Brings the database to `target` (at most [`SCHEMA_VERSION`]).
pub(crate) fn migrate_to(conn: &mut Connection, path: &Path, target: u32) -> Result<(), StoreError> {
    let found = version(conn)?;
    if found > SCHEMA_VERSION {
        return Err(StoreError::TooNew { path: path.to_path_buf(), found, known: SCHEMA_VERSION });
    }
    for (step, sql) in (0u32..).zip(MIGRATIONS).skip(found as usize).take_while(|(step, _)| *step < target) {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).ctx("begin migration")?;
        // Re-check under the write lock: another process may have migrated.
        if version(&tx)? != step {
            continue;
        }
        tx.execute_batch(sql).ctx("apply migration")?;
        tx.pragma_update(None, "user_version", step + 1).ctx("bump schema version")?;
        tx.commit().ctx("commit migration")?;
    }
    Ok(())
}
