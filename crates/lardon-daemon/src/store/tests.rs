//! White-box checks: connection settings and query plans of the hot paths.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::spec::TaskSpec;

fn plan(store: &Store, sql: &str) -> String {
    let mut stmt = store.conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
    let rows = stmt.query_map([], |r| r.get::<_, String>(3)).unwrap().collect::<Result<Vec<_>, _>>().unwrap();
    rows.join(" | ")
}

fn assert_indexed(store: &Store, sql: &str, index: &str) {
    let p = plan(store, sql);
    assert!(p.contains(index), "{sql}\n  plan: {p}\n  expected {index}");
    assert!(!p.contains("TEMP B-TREE"), "{sql}\n  plan sorts: {p}");
}

#[test]
fn connection_is_wal_full_sync_with_foreign_keys() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("db")).unwrap();
    let get = |p: &str| {
        store.conn.query_row(&format!("PRAGMA {p}"), [], |r| r.get::<_, rusqlite::types::Value>(0)).unwrap()
    };
    assert_eq!(get("journal_mode"), rusqlite::types::Value::Text("wal".into()));
    assert_eq!(get("synchronous"), rusqlite::types::Value::Integer(2), "FULL");
    assert_eq!(get("foreign_keys"), rusqlite::types::Value::Integer(1));
    assert_eq!(get("busy_timeout"), rusqlite::types::Value::Integer(5000));
}

/// 100 000 tasks in one bulk transaction, then one more: the hot queries
/// must walk indexes (never a full scan or a sort), which is what keeps
/// submit latency flat (docs/DESIGN.md §12). Checked by plan, not by timing.
#[test]
fn hot_queries_use_indexes_at_100k_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path().join("db")).unwrap();
    let news: Vec<_> = (0..100_000)
        .map(|i| {
            let mut s = TaskSpec::command(["true"]);
            s.priority = i % 7;
            NewTask::new(s)
        })
        .collect();
    let ids = store.insert_tasks(&news).unwrap();
    assert_eq!(ids.len(), 100_000);
    let mut one = TaskSpec::command(["echo", "one more"]);
    one.after = vec![ids[5]];
    let id = store.insert_task(&NewTask::new(one)).unwrap();
    assert_eq!(id, TaskId(100_001));
    store.conn.execute_batch("ANALYZE").unwrap();

    let cols = tasks::TASK_COLUMNS;
    assert_indexed(
        &store,
        &format!("SELECT {cols} FROM tasks WHERE state = 'pending' ORDER BY priority DESC, id LIMIT 10"),
        "USING INDEX tasks_by_state",
    );
    assert_indexed(&store, "SELECT state, count(*) FROM tasks GROUP BY state", "tasks_by_state");
    assert_indexed(&store, &format!("SELECT {cols} FROM tasks WHERE id = 5"), "INTEGER PRIMARY KEY");
    assert_indexed(&store, "SELECT id FROM tasks WHERE id = 5 AND id < 9", "INTEGER PRIMARY KEY");
    assert_indexed(
        &store,
        "SELECT task_id, kind FROM task_deps WHERE dep_id = 6 ORDER BY task_id",
        "task_deps_by_dep",
    );
    assert_indexed(
        &store,
        "SELECT seq FROM events WHERE task_id = 5 ORDER BY seq DESC LIMIT 10",
        "events_by_task",
    );
    assert_indexed(
        &store,
        "SELECT seq FROM events WHERE seq > 5 ORDER BY seq LIMIT 10",
        "INTEGER PRIMARY KEY",
    );
    assert_indexed(
        &store,
        "SELECT seq FROM class_history WHERE class = 'a' ORDER BY seq DESC LIMIT 1 OFFSET 8",
        "class_history_by_class",
    );
    assert_indexed(&store, "SELECT value FROM meta WHERE key = 'next_task_number'", "PRIMARY KEY");

    assert_eq!(store.pending_in_order(Some(3)).unwrap().len(), 3);
    assert_eq!(store.pending_in_order(Some(1)).unwrap()[0].spec.priority, 6);
}

#[test]
fn store_can_move_to_a_db_thread() {
    fn send<T: Send>() {}
    send::<Store>();
}

#[test]
fn an_older_database_migrates_step_by_step_keeping_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut conn = rusqlite::Connection::open(&path).unwrap();
    schema::migrate_to(&mut conn, &path, 1).unwrap();
    assert_eq!(schema::version(&conn).unwrap(), 1);
    conn.execute(
        "INSERT INTO tasks (id, name, spec, class, priority, retry_on_interrupt, state, created_ms)
         VALUES (1, 'old', '{\"argv\":[\"true\"]}', 'default', 0, 1, 'running', 5)",
        [],
    )
    .unwrap();
    drop(conn);
    let mut store = Store::open(&path).unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    let t = store.get_task(TaskId(1)).unwrap().unwrap();
    assert_eq!(
        (t.spec.argv.as_slice(), t.state, t.run_handle),
        (&["true".to_owned()][..], crate::spec::TaskState::Running, None)
    );
    store.set_run_handle(TaskId(1), Some("h")).unwrap();
    assert_eq!(store.recover_after_crash().unwrap().orphans, [(TaskId(1), "h".to_owned())]);
}
