//! The pending-row-with-end rule (docs/DESIGN.md §10 Hooks): a task's end
//! and its hook's row are one transaction, one row per end, the policy's
//! hook for a task that names none, and the runner's start and outcome.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::spec::TaskSpec;

fn task(store: &mut Store, on_end: Option<&str>) -> TaskId {
    let mut spec = TaskSpec::command(["true"]);
    spec.on_end = on_end.map(str::to_owned);
    let id = store.insert_task(&NewTask::new(spec)).unwrap();
    store.start_attempt(id).unwrap();
    id
}

fn end(state: TaskState, code: Option<i32>) -> Outcome {
    Outcome { state, exit_code: code, reason: None }
}

#[test]
fn an_end_and_its_hook_row_are_one_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let mut store = Store::open(&db).unwrap();
    let id = task(&mut store, Some("echo done"));
    // Refused after the end: neither the end nor the hook is kept.
    let undone = store.atomically(|s| {
        assert!(s.finish(id, &end(TaskState::Failed, Some(3)))?);
        Err::<(), _>(StoreError::NotFound(TaskId(0)))
    });
    assert!(undone.is_err());
    assert_eq!(store.get_task(id).unwrap().unwrap().state, TaskState::Running);
    assert!(store.pending_hooks(0, 10).unwrap().is_empty());
    // Kept: both, durable (a fresh connection after the store is gone).
    assert!(store.finish(id, &end(TaskState::Failed, Some(3))).unwrap());
    drop(store);
    let store = Store::open(&db).unwrap();
    let pending = store.pending_hooks(0, 10).unwrap();
    assert_eq!(pending.len(), 1);
    let h = &pending[0];
    assert_eq!(
        (h.task, h.command.as_str(), h.task_state, h.exit_code, h.tries),
        (id, "echo done", TaskState::Failed, Some(3), 0)
    );
}

#[test]
fn no_hook_no_row_and_the_policy_hook_for_tasks_that_name_none() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path().join("db")).unwrap();
    let bare = task(&mut store, None);
    assert!(!store.finish(bare, &end(TaskState::Completed, Some(0))).unwrap());
    assert!(store.pending_hooks(0, 10).unwrap().is_empty());
    store.set_policy_overrides(&[("on_end".into(), "echo policy".into())], &[]).unwrap();
    let (plain, own) = (task(&mut store, None), task(&mut store, Some("echo mine")));
    assert!(store.finish(plain, &end(TaskState::Cancelled, None)).unwrap());
    assert!(store.finish(own, &end(TaskState::Completed, Some(0))).unwrap());
    let pending = store.pending_hooks(0, 10).unwrap();
    let got: Vec<_> = pending.iter().map(|h| (h.task, h.command.as_str(), h.task_state)).collect();
    assert_eq!(
        got,
        vec![(plain, "echo policy", TaskState::Cancelled), (own, "echo mine", TaskState::Completed)]
    );
    // After a row: only the later ones.
    assert_eq!(store.pending_hooks(pending[0].seq, 10).unwrap().len(), 1);
}

#[test]
fn each_end_gets_one_row_a_restart_a_new_one_and_recovery_ends_too() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path().join("db")).unwrap();
    let id = task(&mut store, Some("echo end"));
    store.finish(id, &end(TaskState::Completed, Some(0))).unwrap();
    store.restart(id).unwrap();
    store.start_attempt(id).unwrap();
    store.finish(id, &end(TaskState::Failed, Some(1))).unwrap();
    // A run interrupted by a crash that must not be retried ends at
    // recovery: its hook is queued there.
    let mut spec = TaskSpec::command(["true"]);
    spec.on_end = Some("echo lost".into());
    spec.retry_on_interrupt = false;
    let lost = store.insert_task(&NewTask::new(spec)).unwrap();
    store.start_attempt(lost).unwrap();
    let report = store.recover_after_crash().unwrap();
    assert_eq!(report.failed, vec![lost]);
    let got: Vec<_> =
        store.pending_hooks(0, 10).unwrap().iter().map(|h| (h.task, h.task_state, h.exit_code)).collect();
    assert_eq!(
        got,
        vec![
            (id, TaskState::Completed, Some(0)),
            (id, TaskState::Failed, Some(1)),
            (lost, TaskState::Failed, None)
        ]
    );
}

#[test]
fn starts_count_attempts_and_the_outcome_finishes_the_row_with_capped_output() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path().join("db")).unwrap();
    let id = task(&mut store, Some("echo end"));
    store.finish(id, &end(TaskState::Completed, Some(0))).unwrap();
    let seq = store.pending_hooks(0, 1).unwrap()[0].seq;
    assert_eq!(store.start_hook(seq).unwrap(), Some(1));
    // A daemon that died while it ran: started again, attempt 2.
    assert_eq!(store.pending_hooks(0, 1).unwrap()[0].tries, 1);
    assert_eq!(store.start_hook(seq).unwrap(), Some(2));
    let result = HookResult {
        end: HookEnd::Exited(5),
        duration_ms: 12,
        output: vec![b'x'; HOOK_OUTPUT_MAX + 10],
        output_dropped: 90,
    };
    assert!(store.finish_hook(seq, &result).unwrap());
    assert!(!store.finish_hook(seq, &result).unwrap(), "an outcome is recorded once");
    assert_eq!(store.start_hook(seq).unwrap(), None, "a finished hook never starts again");
    assert!(store.pending_hooks(0, 10).unwrap().is_empty());
    let rows = store.hook_runs(id).unwrap();
    let r = rows[0].result.as_ref().unwrap();
    assert_eq!(
        (rows[0].tries, &r.end, r.output.len(), r.output_dropped),
        (2, &HookEnd::Exited(5), HOOK_OUTPUT_MAX, 100)
    );
    // Removing the task takes its hooks with it.
    store.remove_task(id).unwrap();
    assert!(store.hook_runs(id).unwrap().is_empty());
}
