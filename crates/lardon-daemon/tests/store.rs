//! The store's public API, operation by operation, across reopen.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use lardon::{
    Class, Estimate, FakeProbe, Governor, HostPolicy, HostProfile, RunOutcome, RunRecord, RunShape,
};
use lardon_daemon::spec::{DecisionKind, DepKind, EnvVar, TaskId, TaskSpec, TaskState};
use lardon_daemon::store::{
    INTERRUPTED, NewTask, Outcome, SCHEMA_VERSION, ScratchVolumeRow, Store, StoreError, TaskFilter,
};

fn open(dir: &tempfile::TempDir) -> Store {
    Store::open(dir.path().join("state/lardon.db")).unwrap()
}

fn spec(name: &str) -> TaskSpec {
    let mut s = TaskSpec::command(["echo", name]);
    s.name = name.to_owned();
    s
}

fn batched(name: &str, items: u64) -> TaskSpec {
    let mut s = spec(name);
    s.items = Some(items);
    s
}

fn outcome(state: TaskState) -> Outcome {
    Outcome { state, exit_code: Some(0), reason: None }
}

#[test]
fn migrates_fresh_db_and_reopens_at_same_version() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    drop(store);
    let store = open(&dir);
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
}

#[test]
fn refuses_a_database_from_a_newer_lardon() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state/lardon.db");
    drop(Store::open(&path).unwrap());
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1).unwrap();
    drop(conn);
    let err = Store::open(&path).unwrap_err();
    assert!(
        matches!(err, StoreError::TooNew { found, known, .. } if found == SCHEMA_VERSION + 1 && known == SCHEMA_VERSION)
    );
    let text = err.to_string();
    assert!(text.contains("newer") || text.contains("only knows"), "{text}");
    assert!(text.contains("lardon.db"), "{text}");
}

#[test]
fn insert_get_list_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(AtomicI64::new(1_000));
    let c = clock.clone();
    let mut store =
        Store::open_with_clock(dir.path().join("db"), Box::new(move || c.load(Ordering::SeqCst))).unwrap();
    let mut full = batched("full", 100);
    full.cwd = Some("/tmp".into());
    full.env = vec![EnvVar { key: "K".into(), value: "V".into() }];
    full.estimate.memory_fixed = 2 << 30;
    full.estimate.memory_per_item = 50 << 20;
    full.estimate.batch_max = Some(32);
    full.estimate.class = "features.extract".into();
    full.priority = 5;
    full.retry_on_interrupt = false;
    let a = store.insert_task(&NewTask::new(full.clone())).unwrap();
    clock.store(2_000, Ordering::SeqCst);
    let b = store.insert_task(&NewTask { spec: spec("b"), paused: true }).unwrap();
    assert_eq!((a, b), (TaskId(1), TaskId(2)));

    let ta = store.get_task(a).unwrap().unwrap();
    assert_eq!(ta.spec, full);
    assert_eq!(ta.state, TaskState::Pending);
    assert_eq!((ta.attempts, ta.cursor, ta.created_ms), (0, 0, 1_000));
    assert_eq!(
        (ta.started_ms, ta.finished_ms, ta.exit_code, ta.last_decision.clone()),
        (None, None, None, None)
    );
    let tb = store.get_task(b).unwrap().unwrap();
    assert_eq!((tb.state, tb.paused_running, tb.created_ms), (TaskState::Paused, false, 2_000));
    assert_eq!(store.get_task(TaskId(99)).unwrap(), None);

    drop(store);
    let store = open_at(&dir);
    assert_eq!(store.get_task(a).unwrap().unwrap(), ta, "survives reopen exactly");
    let by = |f: TaskFilter| store.list_tasks(&f).unwrap().into_iter().map(|t| t.id).collect::<Vec<_>>();
    assert_eq!(by(TaskFilter::default()), [a, b]);
    assert_eq!(by(TaskFilter { states: vec![TaskState::Paused], ..Default::default() }), [b]);
    assert_eq!(by(TaskFilter { class: Some("features.extract".into()), ..Default::default() }), [a]);
    assert_eq!(by(TaskFilter { name_contains: Some("ul".into()), ..Default::default() }), [a]);
    assert_eq!(by(TaskFilter { ids: vec![b, TaskId(7)], ..Default::default() }), [b]);
    assert_eq!(by(TaskFilter { limit: Some(1), ..Default::default() }), [a]);
    assert_eq!(store.load_all().unwrap().len(), 2);
    let mut counts = store.count_by_state().unwrap();
    counts.sort_by_key(|(s, _)| s.as_str());
    assert_eq!(counts, [(TaskState::Paused, 1), (TaskState::Pending, 1)]);
}

fn open_at(dir: &tempfile::TempDir) -> Store {
    Store::open(dir.path().join("db")).unwrap()
}

#[test]
fn pending_order_is_priority_then_fifo() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(&dir);
    let mut ids = Vec::new();
    for (name, prio) in [("low", 0), ("high", 9), ("low2", 0), ("high2", 9), ("mid", 3)] {
        let mut s = spec(name);
        s.priority = prio;
        ids.push(store.insert_task(&NewTask::new(s)).unwrap());
    }
    store.start_attempt(ids[1]).unwrap();
    let order: Vec<_> = store.pending_in_order(None).unwrap().into_iter().map(|t| t.spec.name).collect();
    assert_eq!(order, ["high2", "mid", "low", "low2"]);
    assert_eq!(store.pending_in_order(Some(2)).unwrap().len(), 2);
}

#[test]
fn state_transitions_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(&dir);
    let id = store.insert_task(&NewTask::new(spec("t"))).unwrap();

    assert_eq!(store.start_attempt(id).unwrap(), 1);
    let t = store.get_task(id).unwrap().unwrap();
    assert_eq!(t.state, TaskState::Running);
    assert!(t.started_ms.is_some());
    assert!(matches!(store.start_attempt(id), Err(StoreError::IllegalTransition { .. })));

    // Pause while running keeps the fact; resume goes back to running.
    assert_eq!(store.pause(id).unwrap(), TaskState::Running);
    let t = store.get_task(id).unwrap().unwrap();
    assert_eq!((t.state, t.paused_running), (TaskState::Paused, true));
    assert_eq!(store.pause(id).unwrap(), TaskState::Paused, "pausing again is a no-op");
    assert_eq!(store.resume(id).unwrap(), TaskState::Running);
    assert!(!store.get_task(id).unwrap().unwrap().paused_running);
    assert_eq!(store.resume(id).unwrap(), TaskState::Running, "resuming a running task is a no-op");

    // Running cannot go back to pending by hand (only recovery does that).
    assert!(matches!(
        store.set_state(id, TaskState::Pending, None),
        Err(StoreError::IllegalTransition { from: TaskState::Running, to: TaskState::Pending, .. })
    ));

    store
        .finish(id, &Outcome { state: TaskState::Failed, exit_code: Some(3), reason: Some("exit 3".into()) })
        .unwrap();
    let t = store.get_task(id).unwrap().unwrap();
    assert_eq!(
        (t.state, t.exit_code, t.state_reason.as_deref()),
        (TaskState::Failed, Some(3), Some("exit 3"))
    );
    assert!(t.finished_ms.is_some());
    for to in lardon_daemon::spec::STATES {
        assert!(matches!(store.set_state(id, to, None), Err(StoreError::IllegalTransition { .. })), "{to}");
    }
    assert!(matches!(store.resume(id), Err(StoreError::IllegalTransition { .. })));
    assert!(matches!(store.finish(TaskId(42), &outcome(TaskState::Completed)), Err(StoreError::NotFound(_))));

    // Pending → paused → pending; a non-terminal outcome is refused.
    let p = store.insert_task(&NewTask::new(spec("p"))).unwrap();
    store.pause(p).unwrap();
    assert!(!store.get_task(p).unwrap().unwrap().paused_running);
    assert_eq!(store.resume(p).unwrap(), TaskState::Pending);
    assert!(matches!(
        store.finish(p, &outcome(TaskState::Running)),
        Err(StoreError::IllegalTransition { .. })
    ));
    store.set_state(p, TaskState::Cancelled, Some("cancelled by user")).unwrap();
    assert_eq!(store.get_task(p).unwrap().unwrap().state, TaskState::Cancelled);

    let kinds: Vec<_> = store.task_events(id, 100).unwrap().into_iter().map(|e| e.kind).collect();
    assert_eq!(kinds, ["submitted", "state", "state", "state", "state"]);
}

#[test]
fn cursor_only_moves_forward() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(&dir);
    let id = store.insert_task(&NewTask::new(batched("b", 100))).unwrap();
    store.advance_cursor(id, 10).unwrap();
    store.advance_cursor(id, 10).unwrap();
    store.advance_cursor(id, 40).unwrap();
    assert!(matches!(
        store.advance_cursor(id, 39),
        Err(StoreError::CursorBackwards { current: 40, requested: 39, .. })
    ));
    assert!(matches!(store.advance_cursor(id, 101), Err(StoreError::CursorBeyondEnd { items: 100, .. })));
    store.advance_cursor(id, 100).unwrap();
    drop(store);
    let mut store = open(&dir);
    assert_eq!(store.get_task(id).unwrap().unwrap().cursor, 100);
    let plain = store.insert_task(&NewTask::new(spec("plain"))).unwrap();
    assert!(matches!(store.advance_cursor(plain, 1), Err(StoreError::CursorBeyondEnd { items: 0, .. })));
    assert!(matches!(store.advance_cursor(TaskId(77), 1), Err(StoreError::NotFound(_))));
}

#[test]
fn progress_and_decisions_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(&dir);
    let id = store.insert_task(&NewTask::new(spec("t"))).unwrap();
    store.set_progress(id, 3, 10, "loading").unwrap();
    for _ in 0..5 {
        store.record_decision(id, DecisionKind::Wait, "memory", "needs 2 GiB, 1 GiB free", None).unwrap();
    }
    store.record_decision(id, DecisionKind::ReduceBatch, "batch_reduced", "batch 4 of 8", Some(4)).unwrap();
    drop(store);
    let mut store = open(&dir);
    let t = store.get_task(id).unwrap().unwrap();
    assert_eq!((t.progress.done, t.progress.total, t.progress.message.as_str()), (3, 10, "loading"));
    let d = t.last_decision.unwrap();
    assert_eq!(
        (d.kind, d.reason_code.as_str(), d.batch),
        (DecisionKind::ReduceBatch, "batch_reduced", Some(4))
    );
    let decisions = store.task_events(id, 100).unwrap().into_iter().filter(|e| e.kind == "decision").count();
    assert_eq!(decisions, 2, "repeated identical decisions append one event");
    assert!(matches!(store.set_progress(TaskId(9), 1, 1, ""), Err(StoreError::NotFound(_))));
    assert!(matches!(
        store.record_decision(TaskId(9), DecisionKind::Admit, "", "", None),
        Err(StoreError::NotFound(_))
    ));
}

#[test]
fn ids_are_never_reused_after_remove_and_clean() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(&dir);
    let a = store.insert_task(&NewTask::new(spec("a"))).unwrap();
    let b = store.insert_task(&NewTask::new(spec("b"))).unwrap();
    assert!(matches!(store.remove_task(b), Err(StoreError::NotTerminal { state: TaskState::Pending, .. })));
    store.finish(a, &outcome(TaskState::Completed)).unwrap();
    store.finish(b, &outcome(TaskState::Cancelled)).unwrap();
    store.remove_task(b).unwrap();
    assert!(matches!(store.remove_task(b), Err(StoreError::NotFound(_))));
    assert_eq!(store.task_events(b, 10).unwrap(), [], "events go with the task");
    assert_eq!(store.clean(&[]).unwrap(), [a]);
    assert_eq!(store.load_all().unwrap(), []);
    assert_eq!(store.next_task_number().unwrap(), TaskId(3));
    drop(store);
    let mut store = open(&dir);
    assert_eq!(store.insert_task(&NewTask::new(spec("c"))).unwrap(), TaskId(3));
}

#[test]
fn clean_only_touches_the_terminal_states_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(&dir);
    let ids: Vec<_> =
        (0..4).map(|i| store.insert_task(&NewTask::new(spec(&i.to_string()))).unwrap()).collect();
    store.finish(ids[0], &outcome(TaskState::Completed)).unwrap();
    store.finish(ids[1], &outcome(TaskState::Failed)).unwrap();
    store.start_attempt(ids[2]).unwrap();
    assert_eq!(store.clean(&[TaskState::Completed, TaskState::Running]).unwrap(), [ids[0]]);
    assert_eq!(store.clean(&[TaskState::Pending]).unwrap(), []);
    assert_eq!(store.clean(&[]).unwrap(), [ids[1]]);
    assert_eq!(store.load_all().unwrap().len(), 2);
}

#[test]
fn dependencies_must_exist_and_are_indexed() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(&dir);
    let a = store.insert_task(&NewTask::new(spec("a"))).unwrap();
    let mut s = spec("b");
    s.after = vec![a];
    s.after_any = vec![a];
    let b = store.insert_task(&NewTask::new(s)).unwrap();
    let mut s = spec("c");
    s.after_any = vec![a];
    let c = store.insert_task(&NewTask::new(s)).unwrap();
    assert_eq!(store.dependents(a).unwrap(), [(b, DepKind::Success), (c, DepKind::End)]);

    let mut bad = spec("d");
    bad.after = vec![TaskId(99)];
    let before = store.next_task_number().unwrap();
    let batch = [NewTask::new(spec("ok")), NewTask::new(bad)];
    assert!(matches!(store.insert_tasks(&batch), Err(StoreError::UnknownDependency { dep: TaskId(99) })));
    assert_eq!(store.next_task_number().unwrap(), before, "a failed bulk insert leaves nothing behind");
    assert_eq!(store.load_all().unwrap().len(), 3);

    // Within one bulk insert a later task may depend on an earlier one.
    let mut later = spec("later");
    later.after = vec![before];
    let ids = store.insert_tasks(&[NewTask::new(spec("first")), NewTask::new(later)]).unwrap();
    assert_eq!(ids, [before, TaskId(before.0 + 1)]);
}

#[test]
fn crash_recovery_follows_the_design() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(&dir);
    let running = store.insert_task(&NewTask::new(spec("running"))).unwrap();
    let mut no_retry = spec("no-retry");
    no_retry.retry_on_interrupt = false;
    let no_retry = store.insert_task(&NewTask::new(no_retry)).unwrap();
    let batch = store.insert_task(&NewTask::new(batched("batch", 100))).unwrap();
    let done = store.insert_task(&NewTask::new(spec("done"))).unwrap();
    let pending = store.insert_task(&NewTask::new(spec("pending"))).unwrap();
    let paused_run = store.insert_task(&NewTask::new(spec("paused-run"))).unwrap();
    let paused_pend = store.insert_task(&NewTask::new(spec("paused-pend"))).unwrap();
    for id in [running, no_retry, batch, done, paused_run] {
        store.start_attempt(id).unwrap();
    }
    store.advance_cursor(batch, 40).unwrap();
    store.set_progress(batch, 55, 100, "mid-batch").unwrap();
    store.set_run_handle(running, Some(r#"{"pgid":4242}"#)).unwrap();
    store.set_run_handle(done, Some(r#"{"pgid":1}"#)).unwrap();
    store.finish(done, &outcome(TaskState::Completed)).unwrap();
    store.pause(paused_run).unwrap();
    store.pause(paused_pend).unwrap();
    let done_before = store.get_task(done).unwrap().unwrap();
    assert_eq!(done_before.run_handle, None);
    let pending_before = store.get_task(pending).unwrap().unwrap();
    drop(store); // the "crash": nothing else is written

    let mut store = open(&dir);
    let report = store.recover_after_crash().unwrap();
    assert_eq!(report.requeued, [running, batch]);
    assert_eq!(report.failed, [no_retry]);
    assert_eq!(report.still_paused, [paused_run]);
    assert_eq!(report.interrupted(), 4);
    assert_eq!(report.orphans, [(running, r#"{"pgid":4242}"#.to_owned())], "finish cleared the other handle");
    assert_eq!(store.get_task(running).unwrap().unwrap().run_handle, None);

    let t = store.get_task(running).unwrap().unwrap();
    assert_eq!((t.state, t.attempts, t.state_reason.as_deref()), (TaskState::Pending, 1, Some(INTERRUPTED)));
    let t = store.get_task(no_retry).unwrap().unwrap();
    assert_eq!((t.state, t.attempts), (TaskState::Failed, 1));
    assert!(t.state_reason.unwrap().starts_with(INTERRUPTED));
    assert!(t.finished_ms.is_some());
    let t = store.get_task(batch).unwrap().unwrap();
    assert_eq!(
        (t.state, t.cursor, t.progress.done),
        (TaskState::Pending, 40, 40),
        "cursor kept, progress back to it"
    );
    let t = store.get_task(paused_run).unwrap().unwrap();
    assert_eq!((t.state, t.paused_running, t.attempts), (TaskState::Paused, false, 1));
    assert_eq!(store.get_task(paused_pend).unwrap().unwrap().state, TaskState::Paused);
    assert_eq!(store.get_task(done).unwrap().unwrap(), done_before, "completed stays completed");
    assert_eq!(store.get_task(pending).unwrap().unwrap(), pending_before);

    // The next run is attempt 2; a second recovery with nothing running is a no-op.
    assert_eq!(store.start_attempt(running).unwrap(), 2);
    assert_eq!(store.resume(paused_run).unwrap(), TaskState::Pending, "no longer holds anything");
    store.finish(running, &outcome(TaskState::Completed)).unwrap();
    let again = store.recover_after_crash().unwrap();
    assert_eq!(again.interrupted(), 0);
    assert_eq!(store.get_task(running).unwrap().unwrap().state, TaskState::Completed);
}

fn completed(peak: u64) -> RunOutcome {
    RunOutcome::Completed { peak: Some(peak) }
}

#[test]
fn history_keeps_the_last_eight_completed_runs_per_class_and_shape() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(&dir);
    for i in 1..=12u64 {
        store.record_batch("a", i, Duration::from_millis(i), Some(i * 100)).unwrap();
        // Records that carry nothing are not written and evict nothing.
        store.record_batch("a", 0, Duration::ZERO, Some(1)).unwrap();
        store.record_batch("a", i, Duration::ZERO, None).unwrap();
    }
    for i in 1..=3u64 {
        assert!(store.record_run("a", &RunRecord::unbatched(Duration::ZERO, completed(i))).unwrap());
    }
    store.record_batch("b", 1, Duration::from_secs(1), Some(5)).unwrap();
    drop(store);
    let store = open(&dir);
    let a = store.history("a").unwrap();
    let batches: Vec<u64> = a
        .iter()
        .filter_map(|s| match s.record.shape {
            RunShape::Batch { items } => Some(items),
            RunShape::Unbatched => None,
        })
        .collect();
    assert_eq!(batches, (5..=12).collect::<Vec<_>>(), "unbatched runs evict no batch");
    assert_eq!(a[0].record, RunRecord::batch(5, Duration::from_millis(5), completed(500)));
    assert_eq!(a.len(), 11);
    assert_eq!(store.all_history().unwrap().len(), 12);
    assert_eq!(store.history("none").unwrap(), []);
}

#[test]
fn kills_are_kept_until_a_completion_supersedes_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(&dir);
    let kill = |limit| RunRecord::unbatched(Duration::ZERO, RunOutcome::KilledAtLimit { limit });
    store.record_run("liar", &kill(284)).unwrap();
    store.record_run("liar", &kill(652)).unwrap();
    let rows: Vec<RunRecord> = store.history("liar").unwrap().into_iter().map(|s| s.record).collect();
    assert_eq!(rows, [kill(284), kill(652)], "kills since the last completion are kept");
    for limit in 1000..1010 {
        store.record_run("liar", &kill(limit)).unwrap();
    }
    let rows: Vec<RunRecord> = store.history("liar").unwrap().into_iter().map(|s| s.record).collect();
    assert_eq!(rows, (1002..1010).map(kill).collect::<Vec<_>>(), "at most the newest 8");
    store
        .record_run("liar", &RunRecord::batch(4, Duration::ZERO, RunOutcome::KilledAtLimit { limit: 9 }))
        .unwrap();
    store.record_run("liar", &RunRecord::unbatched(Duration::ZERO, completed(1000))).unwrap();
    let rows: Vec<RunRecord> = store.history("liar").unwrap().into_iter().map(|s| s.record).collect();
    assert_eq!(
        rows,
        [
            RunRecord::batch(4, Duration::ZERO, RunOutcome::KilledAtLimit { limit: 9 }),
            RunRecord::unbatched(Duration::ZERO, completed(1000))
        ],
        "an unbatched completion supersedes only the unbatched kill"
    );
}

#[test]
fn learning_survives_a_restart() {
    const MIB: u64 = 1 << 20;
    let dir = tempfile::tempdir().unwrap();
    let live = governor();
    let mut store = open(&dir);
    let runs = [
        (
            "liar",
            RunRecord::unbatched(Duration::from_secs(2), RunOutcome::KilledAtLimit { limit: 284 * MIB }),
        ),
        ("b6", RunRecord::batch(32, Duration::from_secs(1), completed(16 * MIB + 32 * 40 * MIB))),
        ("b6", RunRecord::batch(8, Duration::from_secs(1), RunOutcome::KilledAtLimit { limit: 400 * MIB })),
        ("plain", RunRecord::unbatched(Duration::from_secs(1), completed(700 * MIB))),
        ("b6", RunRecord::batch(0, Duration::from_secs(1), completed(MIB))),
    ];
    for (class, record) in runs {
        live.record_run(&Class::new(class), record);
        store.record_run(class, &record).unwrap();
    }
    drop(store);
    let restarted = governor();
    for sample in open(&dir).all_history().unwrap() {
        restarted.record_run(&Class::new(sample.class), sample.record);
    }
    let estimates = [
        Estimate::builder().memory(200 * MIB).class("liar").build(),
        Estimate::builder().memory(32 * MIB).memory_per_item(10 * MIB).batch(1, 32).class("b6").build(),
        Estimate::builder().memory(100 * MIB).class("plain").build(),
    ];
    for e in &estimates {
        let learned = restarted.learned(e);
        assert!(learned.is_some(), "{e:?}");
        assert_eq!(learned, live.learned(e), "{e:?}");
    }
}

fn governor() -> Governor {
    let profile = HostProfile::new(16 << 30, 8);
    Governor::new(HostPolicy::default_for(&profile), FakeProbe::new(profile)).unwrap()
}

#[test]
fn feedback_policy_and_scratch_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(&dir);
    store.put_feedback("render", "gpu", b"v1").unwrap();
    store.put_feedback("render", "gpu", b"v2").unwrap();
    store.put_feedback("render", "cpu", b"c").unwrap();
    store
        .set_policy_overrides(&[("io_slots".into(), "2".into()), ("enforce".into(), "soft".into())], &[])
        .unwrap();
    store.set_policy_overrides(&[("io_slots".into(), "3".into())], &["enforce".into()]).unwrap();
    let vol = ScratchVolumeRow {
        name: "fast".into(),
        path: "/mnt/fast".into(),
        capacity: Some(10 << 30),
        hook: vec!["umount".into(), "/mnt/fast".into()],
        draining: false,
        added_ms: 0,
    };
    store.add_scratch(&vol).unwrap();
    assert!(matches!(store.add_scratch(&vol), Err(StoreError::ScratchExists(_))));
    assert!(matches!(
        store.add_scratch(&ScratchVolumeRow { name: "other".into(), ..vol.clone() }),
        Err(StoreError::ScratchExists(_))
    ));
    store.set_scratch_draining("fast", true).unwrap();
    assert!(matches!(store.set_scratch_draining("nope", true), Err(StoreError::ScratchNotFound(_))));
    drop(store);

    let mut store = open(&dir);
    let fb = store.all_feedback().unwrap();
    assert_eq!(
        fb.iter().map(|f| (f.alternative.as_str(), f.blob.as_slice())).collect::<Vec<_>>(),
        [("cpu", &b"c"[..]), ("gpu", &b"v2"[..])]
    );
    assert_eq!(store.policy_overrides().unwrap(), [("io_slots".to_owned(), "3".to_owned())]);
    let vols = store.scratch_volumes().unwrap();
    assert_eq!(vols.len(), 1);
    assert_eq!(
        (vols[0].hook.clone(), vols[0].draining, vols[0].capacity),
        (vol.hook.clone(), true, vol.capacity)
    );
    store.remove_scratch("fast").unwrap();
    assert!(matches!(store.remove_scratch("fast"), Err(StoreError::ScratchNotFound(_))));
    assert_eq!(store.scratch_volumes().unwrap(), []);
}

#[test]
fn events_are_bounded_and_followable() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(&dir);
    store.set_max_events(5);
    let id = store.insert_task(&NewTask::new(spec("t"))).unwrap();
    for i in 0..10 {
        store.append_event(Some(id), lardon_daemon::store::EventKind::Note, &format!("n{i}")).unwrap();
    }
    store.append_event(None, lardon_daemon::store::EventKind::Note, "daemon").unwrap();
    let all = store.events_after(0, 100).unwrap();
    assert_eq!(all.len(), 5);
    assert_eq!(all.last().unwrap().payload, "daemon");
    assert_eq!(all.last().unwrap().task, None);
    let tail = store.events_after(all[2].seq, 100).unwrap();
    assert_eq!(tail.len(), 2);
    assert_eq!(store.prune_events(1).unwrap(), 4);
    assert_eq!(store.events_after(0, 100).unwrap().len(), 1);
    // A removed task's events vanish but sequence numbers are never reused.
    store.finish(id, &outcome(TaskState::Completed)).unwrap();
    let newest = store.events_after(0, 10).unwrap().last().unwrap().seq;
    store.remove_task(id).unwrap();
    store.append_event(None, lardon_daemon::store::EventKind::Note, "after").unwrap();
    let after = store.events_after(0, 10).unwrap().last().unwrap().clone();
    assert_eq!(after.payload, "after");
    assert!(after.seq > newest, "{} reused a removed sequence number", after.seq);
}
