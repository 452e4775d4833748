//! The broker's durable state in SQLite: every task the router holds (its
//! spec, submitter, attempts, and the agent it is at), and the answers
//! already given (bounded), so that a broker restarted after a crash loses
//! nothing and runs nothing twice (docs/DESIGN.md §14).
//!
//! The schema is versioned by `PRAGMA user_version` ([`SCHEMA_VERSION`],
//! `schema.rs`): an older database is migrated on open, a newer one is
//! refused with [`StoreError::TooNew`].
//!
//! Written in WAL mode with `synchronous = NORMAL`: a commit survives the
//! broker's own crash (kill -9) at once; on power loss the last moments
//! may go, which the agents' re-hello and the submitters' resubmission
//! by id recover. That is why not `FULL`: an fsync per assignment and per
//! answer would bound the broker by the disk for a loss those already
//! cover. Its one user is the broker's core, which runs on its own thread,
//! so these calls block no worker of the async runtime.

use std::path::{Path, PathBuf};

use lardon_proto::cluster as pb;
use prost::Message;
use rusqlite::{Connection, OptionalExtension, params};
use thiserror::Error;

use lardon_cluster_core::learned::Learned;

mod schema;

pub use schema::SCHEMA_VERSION;

/// The store failed.
#[derive(Debug, Error)]
pub enum StoreError {
    /// SQLite refused (the path says which database).
    #[error("broker state {}: {source}", path.display())]
    Sqlite {
        /// The database file.
        path: PathBuf,
        /// What SQLite said.
        #[source]
        source: rusqlite::Error,
    },
    /// The state directory could not be created.
    #[error("broker state dir {}: {source}", path.display())]
    Dir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The database was written by a newer broker: it is left untouched.
    #[error(
        "broker state {}: schema version {found} is newer than this broker's {known}; \
         run the newer lardon, or start with another --state dir",
        path.display()
    )]
    TooNew {
        /// The database file.
        path: PathBuf,
        /// Its `user_version`.
        found: u32,
        /// The newest this build knows.
        known: u32,
    },
    /// A stored row does not decode (the file was edited or corrupted).
    #[error("broker state {}: task {id}: stored {what} does not decode", path.display())]
    Corrupt {
        /// The database file.
        path: PathBuf,
        /// The task.
        id: String,
        /// Which column.
        what: &'static str,
    },
}

/// A live task read back at start.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveTask {
    /// Who submitted it.
    pub submitter: String,
    /// What to run.
    pub spec: pb::TaskSpec,
    /// Runs lost with their agent so far.
    pub attempts: u32,
    /// The agent it was at when the broker stopped (`None`: queued).
    pub agent: Option<String>,
}

/// A `tasks` row as read: id, submitter, spec, attempts, agent.
type Row = (String, String, Vec<u8>, u32, Option<String>);

/// The broker's SQLite database (one file, `broker.db`, in the state dir).
#[derive(Debug)]
pub struct Store {
    conn: Connection,
    path: PathBuf,
    keep_finished: u64,
}

/// The database's file name inside the state dir.
pub const DB_FILE: &str = "broker.db";

impl Store {
    /// Answers remembered by default.
    pub const KEEP_FINISHED: u64 = 100_000;

    /// Opens (creating) `dir/broker.db` and brings its schema to
    /// [`SCHEMA_VERSION`] (an unversioned database from before versions
    /// opens with its rows).
    ///
    /// # Errors
    /// [`StoreError::TooNew`] for a database from a newer broker (left as
    /// it is); [`StoreError`] when the dir or the database cannot be made.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir).map_err(|source| StoreError::Dir { path: dir.to_path_buf(), source })?;
        let path = dir.join(DB_FILE);
        let conn =
            Connection::open(&path).map_err(|source| StoreError::Sqlite { path: path.clone(), source })?;
        let mut store = Store { conn, path, keep_finished: Self::KEEP_FINISHED };
        store.sql(|c| c.execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;"))?;
        store.migrate()?;
        Ok(store)
    }

    /// An in-memory store (nothing survives; for tests and `--state` less
    /// brokers).
    ///
    /// # Errors
    /// [`StoreError`] when SQLite cannot start.
    pub fn in_memory() -> Result<Self, StoreError> {
        let path = PathBuf::from(":memory:");
        let conn = Connection::open_in_memory()
            .map_err(|source| StoreError::Sqlite { path: path.clone(), source })?;
        let mut store = Store { conn, path, keep_finished: Self::KEEP_FINISHED };
        store.migrate()?;
        Ok(store)
    }

    fn migrate(&mut self) -> Result<(), StoreError> {
        schema::migrate(&mut self.conn).map_err(|e| match e {
            schema::MigrateError::TooNew(found) => {
                StoreError::TooNew { path: self.path.clone(), found, known: SCHEMA_VERSION }
            }
            schema::MigrateError::Sqlite(source) => StoreError::Sqlite { path: self.path.clone(), source },
        })
    }

    fn sql<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> Result<T, StoreError> {
        f(&self.conn).map_err(|source| StoreError::Sqlite { path: self.path.clone(), source })
    }

    /// Records a newly queued task.
    ///
    /// # Errors
    /// [`StoreError::Sqlite`].
    pub fn insert(&self, submitter: &str, spec: &pb::TaskSpec) -> Result<(), StoreError> {
        self.sql(|c| {
            c.execute(
                "INSERT OR REPLACE INTO tasks (id, submitter, spec, attempts, agent, finished_seq, reply)
                 VALUES (?1, ?2, ?3, 0, NULL, NULL, NULL)",
                params![spec.task_id, submitter, spec.encode_to_vec()],
            )
            .map(drop)
        })
    }

    /// Records where a live task is now (`agent` `None`: queued) and its
    /// attempts.
    ///
    /// # Errors
    /// [`StoreError::Sqlite`].
    pub fn place(&self, id: &str, agent: Option<&str>, attempts: u32) -> Result<(), StoreError> {
        self.sql(|c| {
            c.execute(
                "UPDATE tasks SET agent = ?2, attempts = ?3 WHERE id = ?1 AND finished_seq IS NULL",
                params![id, agent, attempts],
            )
            .map(drop)
        })
    }

    /// Records a task's answer (it is no longer live) and forgets the
    /// oldest answers past the bound.
    ///
    /// # Errors
    /// [`StoreError::Sqlite`].
    pub fn finish(&self, id: &str, submitter: &str, reply: &pb::SubmitReply) -> Result<(), StoreError> {
        let keep = i64::try_from(self.keep_finished).unwrap_or(i64::MAX);
        self.sql(|c| {
            let tx = c.unchecked_transaction()?;
            let seq: i64 =
                tx.query_row("SELECT COALESCE(MAX(finished_seq), 0) + 1 FROM tasks", [], |r| r.get(0))?;
            tx.execute(
                "INSERT INTO tasks (id, submitter, spec, attempts, agent, finished_seq, reply)
                 VALUES (?1, ?2, x'', 0, NULL, ?3, ?4)
                 ON CONFLICT(id) DO UPDATE SET agent = NULL, finished_seq = ?3, reply = ?4, spec = x''",
                params![id, submitter, seq, reply.encode_to_vec()],
            )?;
            tx.execute(
                "DELETE FROM tasks WHERE finished_seq IS NOT NULL AND finished_seq <= ?1",
                params![seq - keep],
            )?;
            tx.commit()
        })
    }

    /// The answer already given for `id`, if it finished.
    ///
    /// # Errors
    /// [`StoreError`] (a reply that does not decode is
    /// [`StoreError::Corrupt`]).
    pub fn finished(&self, id: &str) -> Result<Option<pb::SubmitReply>, StoreError> {
        let blob: Option<Vec<u8>> = self.sql(|c| {
            c.query_row(
                "SELECT reply FROM tasks WHERE id = ?1 AND finished_seq IS NOT NULL",
                params![id],
                |r| r.get(0),
            )
            .optional()
        })?;
        blob.map(|b| {
            pb::SubmitReply::decode(b.as_slice()).map_err(|_| StoreError::Corrupt {
                path: self.path.clone(),
                id: id.to_owned(),
                what: "reply",
            })
        })
        .transpose()
    }

    /// Every live task, in submission order.
    ///
    /// # Errors
    /// [`StoreError`].
    pub fn live(&self) -> Result<Vec<LiveTask>, StoreError> {
        let rows: Vec<Row> = self.sql(|c| {
            let mut st = c.prepare(
                "SELECT id, submitter, spec, attempts, agent FROM tasks WHERE finished_seq IS NULL ORDER BY rowid",
            )?;
            st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))?.collect()
        })?;
        rows.into_iter()
            .map(|(id, submitter, spec, attempts, agent)| {
                let spec = pb::TaskSpec::decode(spec.as_slice()).map_err(|_| StoreError::Corrupt {
                    path: self.path.clone(),
                    id,
                    what: "spec",
                })?;
                Ok(LiveTask { submitter, spec, attempts, agent })
            })
            .collect()
    }

    /// Answers remembered.
    ///
    /// # Errors
    /// [`StoreError::Sqlite`].
    pub fn finished_count(&self) -> Result<u64, StoreError> {
        let n: i64 = self.sql(|c| {
            c.query_row("SELECT COUNT(*) FROM tasks WHERE finished_seq IS NOT NULL", [], |r| r.get(0))
        })?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// Records one successful run of `class` (see [`lardon_cluster_core::learned`]):
    /// only the newest [`Learned::SAMPLES`] rows of a class are kept, and
    /// at most [`Learned::SAMPLES`] × [`Learned::MAX_CLASSES`] in all.
    ///
    /// # Errors
    /// [`StoreError::Sqlite`].
    pub fn learn(&self, class: &str, peak: u64, wall_ms: u64) -> Result<(), StoreError> {
        let per_class = i64::try_from(Learned::SAMPLES).unwrap_or(i64::MAX);
        let all = i64::try_from(Learned::SAMPLES * Learned::MAX_CLASSES).unwrap_or(i64::MAX);
        let as_i64 = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        self.sql(|c| {
            let tx = c.unchecked_transaction()?;
            tx.execute(
                "INSERT INTO learned (class, peak, wall_ms) VALUES (?1, ?2, ?3)",
                params![class, as_i64(peak), as_i64(wall_ms)],
            )?;
            tx.execute(
                "DELETE FROM learned WHERE class = ?1 AND seq NOT IN
                     (SELECT seq FROM learned WHERE class = ?1 ORDER BY seq DESC LIMIT ?2)",
                params![class, per_class],
            )?;
            tx.execute("DELETE FROM learned WHERE seq <= (SELECT MAX(seq) FROM learned) - ?1", params![all])?;
            tx.commit()
        })
    }

    /// Everything learned, replayed oldest first into a [`Learned`].
    ///
    /// # Errors
    /// [`StoreError::Sqlite`].
    pub fn learned(&self) -> Result<Learned, StoreError> {
        let rows: Vec<(String, i64, i64)> = self.sql(|c| {
            let mut st = c.prepare("SELECT class, peak, wall_ms FROM learned ORDER BY seq")?;
            st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?.collect()
        })?;
        let mut learned = Learned::new();
        for (class, peak, wall_ms) in rows {
            learned.record(&class, u64::try_from(peak).unwrap_or(0), u64::try_from(wall_ms).unwrap_or(0));
        }
        Ok(learned)
    }

    #[cfg(test)]
    pub(crate) fn set_keep_finished(&mut self, keep: u64) {
        self.keep_finished = keep;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(id: &str) -> pb::TaskSpec {
        pb::TaskSpec { task_id: id.into(), argv: vec!["true".into()], ..Default::default() }
    }

    fn reply(id: &str) -> pb::SubmitReply {
        pb::SubmitReply {
            task_id: id.into(),
            outcome: Some(pb::submit_reply::Outcome::Cancelled(pb::Cancelled {})),
        }
    }

    #[test]
    fn live_tasks_and_answers_survive_reopening() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        {
            let s = Store::open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
            s.insert("s1", &spec("a")).unwrap_or_else(|e| panic!("{e}"));
            s.insert("s1", &spec("b")).unwrap_or_else(|e| panic!("{e}"));
            s.place("a", Some("agent-1"), 1).unwrap_or_else(|e| panic!("{e}"));
            s.finish("b", "s1", &reply("b")).unwrap_or_else(|e| panic!("{e}"));
        }
        let s = Store::open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        let live = s.live().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(live.len(), 1);
        assert_eq!(
            (live[0].spec.task_id.as_str(), live[0].agent.as_deref(), live[0].attempts),
            ("a", Some("agent-1"), 1)
        );
        assert_eq!(s.finished("b").unwrap_or_else(|e| panic!("{e}")), Some(reply("b")));
        assert_eq!(s.finished("a").unwrap_or_else(|e| panic!("{e}")), None);
    }

    #[test]
    fn what_was_learned_survives_reopening_bounded_per_class() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        {
            let s = Store::open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
            s.learn("heavy", 900, 9_000).unwrap_or_else(|e| panic!("{e}"));
            for _ in 0..Learned::SAMPLES {
                s.learn("c", 100, 1_000).unwrap_or_else(|e| panic!("{e}"));
            }
            s.learn("c", 300, 500).unwrap_or_else(|e| panic!("{e}"));
        }
        let s = Store::open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        let learned = s.learned().unwrap_or_else(|e| panic!("{e}"));
        let c = learned.estimate("c").unwrap_or_else(|| panic!("c was learned"));
        assert_eq!((c.peak, c.duration.as_millis()), (300, 1_000));
        assert!(learned.estimate("heavy").is_some());
        let rows: i64 = s
            .sql(|c| c.query_row("SELECT COUNT(*) FROM learned WHERE class = 'c'", [], |r| r.get(0)))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(rows, i64::try_from(Learned::SAMPLES).unwrap_or(0), "old rows of a class are dropped");
    }

    /// The schema as the broker wrote it before versions (user_version 0),
    /// exactly as that `Store::open` created it.
    const UNVERSIONED: &str = "PRAGMA journal_mode = WAL;
        CREATE TABLE IF NOT EXISTS tasks (id TEXT PRIMARY KEY, submitter TEXT NOT NULL, spec BLOB NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0, agent TEXT, finished_seq INTEGER, reply BLOB);
        CREATE INDEX IF NOT EXISTS tasks_finished ON tasks(finished_seq) WHERE finished_seq IS NOT NULL;
        CREATE TABLE IF NOT EXISTS learned (seq INTEGER PRIMARY KEY AUTOINCREMENT, class TEXT NOT NULL,
            peak INTEGER NOT NULL, wall_ms INTEGER NOT NULL);
        CREATE INDEX IF NOT EXISTS learned_class ON learned(class, seq);";

    fn user_version(path: &Path) -> u32 {
        let c = Connection::open(path).unwrap_or_else(|e| panic!("{e}"));
        schema::version(&c).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn an_unversioned_database_from_before_versions_opens_with_its_rows_and_is_migrated() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join(DB_FILE);
        {
            let c = Connection::open(&path).unwrap_or_else(|e| panic!("{e}"));
            c.execute_batch(UNVERSIONED).unwrap_or_else(|e| panic!("{e}"));
            c.execute(
                "INSERT INTO tasks (id, submitter, spec, attempts, agent) VALUES ('a', 's1', ?1, 2, 'agent-1')",
                params![spec("a").encode_to_vec()],
            )
            .unwrap_or_else(|e| panic!("{e}"));
            c.execute(
                "INSERT INTO tasks (id, submitter, spec, finished_seq, reply) VALUES ('b', 's1', x'', 1, ?1)",
                params![reply("b").encode_to_vec()],
            )
            .unwrap_or_else(|e| panic!("{e}"));
            c.execute("INSERT INTO learned (class, peak, wall_ms) VALUES ('c', 100, 1000)", [])
                .unwrap_or_else(|e| panic!("{e}"));
        }
        assert_eq!(user_version(&path), 0, "the fixture is unversioned");
        let s = Store::open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        let live = s.live().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(live.len(), 1);
        assert_eq!((live[0].agent.as_deref(), live[0].attempts), (Some("agent-1"), 2));
        assert_eq!(s.finished("b").unwrap_or_else(|e| panic!("{e}")), Some(reply("b")));
        assert!(s.learned().unwrap_or_else(|e| panic!("{e}")).estimate("c").is_some());
        s.insert("s2", &spec("d")).unwrap_or_else(|e| panic!("{e}"));
        drop(s);
        assert_eq!(user_version(&path), SCHEMA_VERSION, "migrated on open");
        let again = Store::open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            again.live().unwrap_or_else(|e| panic!("{e}")).len(),
            2,
            "reopening migrates nothing twice"
        );
    }

    #[test]
    fn a_database_from_a_newer_broker_is_refused_and_left_untouched() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join(DB_FILE);
        {
            let c = Connection::open(&path).unwrap_or_else(|e| panic!("{e}"));
            c.execute_batch("CREATE TABLE future (x); PRAGMA user_version = 99;")
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let err = Store::open(dir.path()).map(drop).err().unwrap_or_else(|| panic!("a newer schema opened"));
        assert!(
            matches!(err, StoreError::TooNew { found: 99, known: SCHEMA_VERSION, .. }),
            "refused as too new: {err}"
        );
        let text = err.to_string();
        assert!(text.contains("schema version 99 is newer") && text.contains(DB_FILE), "{text}");
        assert_eq!(user_version(&path), 99, "left untouched");
        let c = Connection::open(&path).unwrap_or_else(|e| panic!("{e}"));
        let tasks: i64 = c
            .query_row("SELECT COUNT(*) FROM sqlite_master WHERE name = 'tasks'", [], |r| r.get(0))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(tasks, 0, "no table was added to it");
    }

    #[test]
    fn answers_are_bounded_oldest_first() {
        let mut s = Store::in_memory().unwrap_or_else(|e| panic!("{e}"));
        s.set_keep_finished(2);
        for id in ["a", "b", "c"] {
            s.finish(id, "s", &reply(id)).unwrap_or_else(|e| panic!("{e}"));
        }
        assert_eq!(s.finished_count().unwrap_or_else(|e| panic!("{e}")), 2);
        assert_eq!(s.finished("a").unwrap_or_else(|e| panic!("{e}")), None);
        assert!(s.finished("c").unwrap_or_else(|e| panic!("{e}")).is_some());
    }
}
