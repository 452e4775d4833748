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
    assert_eq!(get("temp_store"), rusqlite::types::Value::Integer(2), "MEMORY: no sub-journal file");
    assert_eq!(get("busy_timeout"), rusqlite::types::Value::Integer(5000));
}

/// Both connections keep their plans whatever is bound: a bound `LIMIT`
/// or `OFFSET` must not re-prepare its statement on every call.
#[test]
fn plans_are_stable_on_both_connections() {
    use rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG as QPSG;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("db")).unwrap();
    let reader = Store::open_reader(dir.path().join("db")).unwrap();
    assert!(store.conn.db_config(QPSG).unwrap(), "writer");
    assert!(reader.conn.db_config(QPSG).unwrap(), "reader");
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
        "SELECT seq FROM class_history WHERE class = 'a' AND unbatched = 0 AND killed_at IS NULL ORDER BY seq DESC LIMIT 1 OFFSET 8",
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

#[test]
fn a_version_6_store_opens_with_its_shippable_task_and_takes_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut conn = rusqlite::Connection::open(&path).unwrap();
    schema::migrate_to(&mut conn, &path, 6).unwrap();
    conn.execute(
        "INSERT INTO tasks (id, name, spec, class, priority, retry_on_interrupt, state, created_ms)
         VALUES (100, 'old', '{\"argv\":[\"true\"],\"offload\":{\"capability\":\"sh@1:*\"}}',
                 'default', 0, 1, 'pending', 5)",
        [],
    )
    .unwrap();
    drop(conn);
    let mut store = Store::open(&path).unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    let old = store.get_task(TaskId(100)).unwrap().unwrap();
    let offload = old.spec.offload.clone().unwrap();
    assert_eq!((offload.capability.as_str(), offload.inputs.len(), offload.outputs.len()), ("sh@1:*", 0, 0));
    // A spec with files is stored and read back whole.
    let mut spec = old.spec.clone();
    spec.cwd = Some("/work".into());
    spec.offload = Some(crate::spec::Offload {
        inputs: vec!["in.txt".into(), "src/a.c".into()],
        outputs: vec!["out.txt".into()],
        ..offload
    });
    let id = store.insert_task(&NewTask::new(spec.clone())).unwrap();
    drop(store);
    let store = Store::open(&path).unwrap();
    assert_eq!(store.get_task(id).unwrap().unwrap().spec, spec);
}

#[test]
fn history_rows_from_version_2_migrate_and_rows_that_carry_nothing_go() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut conn = rusqlite::Connection::open(&path).unwrap();
    schema::migrate_to(&mut conn, &path, 2).unwrap();
    conn.execute_batch(
        "INSERT INTO class_history (class, items, duration_ns, peak_bytes, at_ms) VALUES
           ('b', 8, 1000, 800, 1), ('b', 8, 1000, NULL, 2), ('b', 0, 1000, 5, 3), ('b', 4, 2000, 900, 4)",
    )
    .unwrap();
    drop(conn);
    let store = Store::open(&path).unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    let completed = |peak| lardon::RunOutcome::Completed { peak: Some(peak) };
    let rows: Vec<lardon::RunRecord> = store.history("b").unwrap().into_iter().map(|s| s.record).collect();
    assert_eq!(
        rows,
        [
            lardon::RunRecord::batch(8, std::time::Duration::from_nanos(1000), completed(800)),
            lardon::RunRecord::batch(4, std::time::Duration::from_nanos(2000), completed(900)),
        ]
    );
}

/// A course written before version 5 keeps its rows and numbering, and
/// accepts the `restarted` entry afterwards.
#[test]
fn the_course_from_version_4_migrates_and_takes_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut conn = rusqlite::Connection::open(&path).unwrap();
    schema::migrate_to(&mut conn, &path, 4).unwrap();
    conn.execute_batch(
        "INSERT INTO tasks (id, name, spec, class, priority, retry_on_interrupt, state, created_ms)
           VALUES (1, 'old', '{\"argv\":[\"true\"]}', 'default', 0, 1, 'failed', 5);
         INSERT INTO task_course (seq, task_id, kind, from_ms, message) VALUES (7, 1, 'admitted', 6, 'm');",
    )
    .unwrap();
    drop(conn);
    let mut store = Store::open(&path).unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    assert_eq!(store.restart(TaskId(1)).unwrap(), crate::spec::TaskState::Failed);
    let seqs: Vec<(i64, String)> = store
        .conn
        .prepare("SELECT seq, kind FROM task_course ORDER BY seq")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(seqs, [(7, "admitted".to_owned()), (8, "restarted".to_owned())]);
}

/// A restart is the one way out of a terminal state: back to PENDING as a
/// new attempt with the run's traces cleared; a live task is refused.
#[test]
fn a_restart_reopens_only_a_finished_task_as_a_new_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path().join("db")).unwrap();
    let mut spec = TaskSpec::command(["work"]);
    spec.items = Some(10);
    let id = store.insert_tasks(&[NewTask { spec, paused: false }]).unwrap()[0];
    assert!(matches!(store.restart(id), Err(StoreError::StillLive { .. })), "pending");
    assert_eq!(store.start_attempt(id).unwrap(), 1);
    assert!(matches!(store.restart(id), Err(StoreError::StillLive { .. })), "running");
    store.advance_cursor(id, 4).unwrap();
    store.set_progress(id, 4, 10, "half").unwrap();
    let failed =
        Outcome { state: crate::spec::TaskState::Failed, exit_code: Some(3), reason: Some("x".into()) };
    store.finish(id, &failed).unwrap();

    assert_eq!(store.restart(id).unwrap(), crate::spec::TaskState::Failed);
    let t = store.get_task(id).unwrap().unwrap();
    assert_eq!(t.state, crate::spec::TaskState::Pending);
    assert_eq!((t.cursor, t.exit_code, t.finished_ms), (0, None, None));
    assert_eq!(t.state_reason.as_deref(), Some("restarted (attempt 2)"));
    assert_eq!(store.start_attempt(id).unwrap(), 2, "a new attempt");
}

/// Offload: a shipped task (RUNNING there) handed back goes to PENDING with
/// its handle cleared and the reason in its course; only a RUNNING task can
/// be handed back, so a task that ended meanwhile stays ended.
#[test]
fn a_shipped_task_handed_back_is_pending_again_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path().join("db")).unwrap();
    let id = store.insert_tasks(&[NewTask { spec: TaskSpec::command(["cc"]), paused: false }]).unwrap()[0];
    assert!(matches!(
        store.return_to_queue(id, "no_executor", "x"),
        Err(StoreError::IllegalTransition { .. })
    ));
    assert_eq!(store.start_attempt(id).unwrap(), 1);
    store.set_run_handle(id, Some("offload:h:t1:a1:r0")).unwrap();
    store.note_offload(id, CourseKind::Offloaded, "shipped", "shipped to broker b").unwrap();
    store.return_to_queue(id, "no_executor", "no agent for capability cc@*:*: ran locally").unwrap();
    let t = store.get_task(id).unwrap().unwrap();
    assert_eq!(t.state, crate::spec::TaskState::Pending);
    assert_eq!((t.run_handle.as_deref(), t.started_ms), (None, None));
    let course: Vec<(CourseKind, String)> =
        store.course(id).unwrap().into_iter().map(|e| (e.kind, e.reason_code)).collect();
    assert_eq!(
        course,
        [(CourseKind::Offloaded, "shipped".to_owned()), (CourseKind::RanLocally, "no_executor".to_owned())]
    );
    assert_eq!(store.start_attempt(id).unwrap(), 1, "nothing ran: the same attempt");
    let done = Outcome { state: crate::spec::TaskState::Completed, exit_code: Some(0), reason: None };
    store.finish(id, &done).unwrap();
    assert!(matches!(store.return_to_queue(id, "x", "x"), Err(StoreError::IllegalTransition { .. })));
}

/// Schema v9: a v8 store's tasks read the same (no group), a task of a
/// group is found by its group through `tasks_by_group`, group limits are
/// stored, replaced and removed, and the per-group counts are by state.
#[test]
fn a_version_8_store_takes_groups_and_group_limits() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut conn = rusqlite::Connection::open(&path).unwrap();
    schema::migrate_to(&mut conn, &path, 8).unwrap();
    conn.execute(
        "INSERT INTO tasks (id, name, spec, class, priority, retry_on_interrupt, state, created_ms)
         VALUES (100, 'old', '{\"argv\":[\"true\"]}', 'default', 0, 1, 'pending', 5)",
        [],
    )
    .unwrap();
    drop(conn);
    let mut store = Store::open(&path).unwrap();
    assert_eq!(store.get_task(TaskId(100)).unwrap().unwrap().spec.group, None);
    let mut spec = TaskSpec::command(["true"]);
    spec.group = Some(lardon::GroupName::new("render").unwrap());
    let a = store.insert_task(&NewTask::new(spec.clone())).unwrap();
    let b = store.insert_task(&NewTask::new(spec.clone())).unwrap();
    let filter = TaskFilter { group: Some("render".into()), ..TaskFilter::default() };
    let ids: Vec<TaskId> = store.list_tasks(&filter).unwrap().iter().map(|r| r.id).collect();
    assert_eq!(ids, vec![a, b]);
    assert_eq!(store.get_task(a).unwrap().unwrap().spec, spec);
    assert_indexed(&store, "SELECT id FROM tasks WHERE group_name = 'render' ORDER BY id", "tasks_by_group");
    assert_eq!(
        store.group_counts().unwrap(),
        vec![("render".to_owned(), crate::spec::TaskState::Pending, 2)]
    );

    let row = GroupRow { name: "render".into(), max_running: Some(2), memory: None, cpu_millis: Some(4000) };
    store.set_group(&row).unwrap();
    let wider = GroupRow { max_running: None, memory: Some(1 << 30), ..row.clone() };
    store.set_group(&wider).unwrap();
    assert_eq!(store.groups().unwrap(), vec![wider], "add on an existing group replaces its limits");
    assert!(store.remove_group("render").unwrap());
    assert!(!store.remove_group("render").unwrap());
    assert!(store.groups().unwrap().is_empty());
    assert_eq!(store.list_tasks(&filter).unwrap().len(), 2, "its tasks keep their group");
}
