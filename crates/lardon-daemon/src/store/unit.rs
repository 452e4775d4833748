//! A savepoint whose statements are prepared once: every store method that
//! makes several changes runs them in a [`Unit`], and a hot write (a
//! decision, a state change, a run's record) took two statement parses
//! per call with `rusqlite::Savepoint`, which formats a fresh name and
//! parses `SAVEPOINT`/`RELEASE` each time.
//!
//! Units nest (the writer wraps each write in one, and the write's own
//! method opens another): every unit has the same name, and SQLite's
//! `RELEASE`/`ROLLBACK TO` act on the most recent savepoint of a name, so
//! the innermost open unit is always the one ended.

use std::ops::Deref;

use rusqlite::Connection;

/// An open savepoint on `conn`: [`Unit::commit`] keeps its changes;
/// dropping it uncommitted rolls them back (the same contract as
/// `rusqlite::Savepoint` with its default drop behaviour).
pub(crate) struct Unit<'c> {
    conn: &'c Connection,
    ended: bool,
}

impl<'c> Unit<'c> {
    /// Opens a savepoint (a transaction, when none is open).
    pub(crate) fn begin(conn: &'c Connection) -> rusqlite::Result<Unit<'c>> {
        conn.prepare_cached("SAVEPOINT unit")?.execute([])?;
        Ok(Unit { conn, ended: false })
    }

    /// Keeps the unit's changes (in the enclosing transaction, if any).
    pub(crate) fn commit(mut self) -> rusqlite::Result<()> {
        self.ended = true;
        self.conn.prepare_cached("RELEASE unit")?.execute([]).map(drop)
    }
}

impl Drop for Unit<'_> {
    fn drop(&mut self) {
        if !self.ended {
            // Rolled back and released: the enclosing unit (or none) is
            // the innermost again. A failure here leaves the savepoint to
            // the enclosing transaction's end.
            let _ = self.conn.execute_batch("ROLLBACK TO unit; RELEASE unit");
        }
    }
}

impl Deref for Unit<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        self.conn
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn rows(conn: &Connection) -> Vec<i64> {
        let mut s = conn.prepare("SELECT v FROM t ORDER BY v").unwrap();
        s.query_map([], |r| r.get(0)).unwrap().collect::<Result<_, _>>().unwrap()
    }

    #[test]
    fn a_dropped_inner_unit_undoes_only_its_own_changes() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (v INTEGER)").unwrap();
        let outer = Unit::begin(&conn).unwrap();
        outer.execute("INSERT INTO t VALUES (1)", []).unwrap();
        {
            let inner = Unit::begin(&conn).unwrap();
            inner.execute("INSERT INTO t VALUES (2)", []).unwrap();
            // Dropped uncommitted: an error path out of a store method.
        }
        let kept = Unit::begin(&conn).unwrap();
        kept.execute("INSERT INTO t VALUES (3)", []).unwrap();
        kept.commit().unwrap();
        outer.commit().unwrap();
        assert_eq!(rows(&conn), vec![1, 3]);
        assert!(conn.is_autocommit(), "the outermost unit's commit ended the transaction");
    }

    #[test]
    fn a_dropped_outer_unit_undoes_its_committed_inner_units() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (v INTEGER)").unwrap();
        {
            let outer = Unit::begin(&conn).unwrap();
            let inner = Unit::begin(&conn).unwrap();
            inner.execute("INSERT INTO t VALUES (1)", []).unwrap();
            inner.commit().unwrap();
            drop(outer);
        }
        assert_eq!(rows(&conn), Vec::<i64>::new());
        assert!(conn.is_autocommit());
    }
}
