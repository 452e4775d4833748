//! The lifecycle writes of one attempt reach the store from two writers
//! whose order against each other nobody fixes: the pump (start, pause,
//! resume, end, from the queue's events) and the run's worker (run handle,
//! exit code, memory retry). Each writer keeps its own order. Whatever the
//! interleaving, the end row must be the same: no exit code, stamp or
//! state lost or overwritten by a write that arrived out of order.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::spec::{TaskSpec, TaskState};

/// One lifecycle write, as the writer that sends it calls the store.
#[derive(Debug, Clone, Copy)]
enum Op {
    /// The pump: `Write::Started` (PENDING → RUNNING, a new attempt).
    Started,
    /// The pump: `Write::Paused`.
    Paused,
    /// The pump: `Write::Resumed`.
    Resumed,
    /// The pump: `Write::Finished`, which carries no exit code (the run's
    /// worker writes it).
    Finished,
    /// The worker: the run's handle.
    Handle(&'static str),
    /// The worker: `persist_run` (run record and exit code, one job).
    Exit(i32),
    /// The worker: a run killed at its memory limit, run again.
    MemoryRetry,
}

fn apply(store: &mut Store, id: TaskId, op: Op) {
    let grant = Grant { batch: 1, memory: 1 << 20, cpu_millis: 1000 };
    let done = Outcome { state: TaskState::Completed, exit_code: None, reason: None };
    let r = match op {
        Op::Started => store.start_attempt_granted(id, &grant).map(drop),
        Op::Paused => store.pause(id).map(drop),
        Op::Resumed => store.resume(id).map(drop),
        Op::Finished => store.finish(id, &done).map(drop),
        Op::Handle(h) => store.set_run_handle(id, Some(h)),
        Op::Exit(code) => store.set_exit_code(id, code),
        Op::MemoryRetry => store.note_memory_retry(id, "killed").map(drop),
    };
    r.unwrap_or_else(|e| panic!("{op:?}: {e}"));
}

/// Every merge of `a` and `b` that keeps each one's order.
fn interleavings(a: &[Op], b: &[Op]) -> Vec<Vec<Op>> {
    match (a.split_first(), b.split_first()) {
        (None, _) => vec![b.to_vec()],
        (_, None) => vec![a.to_vec()],
        (Some((x, ra)), Some((y, rb))) => {
            let mut out = Vec::new();
            for mut rest in interleavings(ra, b) {
                rest.insert(0, *x);
                out.push(rest);
            }
            for mut rest in interleavings(a, rb) {
                rest.insert(0, *y);
                out.push(rest);
            }
            out
        }
    }
}

/// Runs every interleaving of `pump` and `worker` on a fresh task and
/// checks the end row; returns how many orders were tried.
fn every_order_ends_the_same(pump: &[Op], worker: &[Op], memory_retries: u32) -> usize {
    let orders = interleavings(pump, worker);
    for order in &orders {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path().join("db")).unwrap();
        let id = store.insert_task(&NewTask::new(TaskSpec::command(["true"]))).unwrap();
        for op in order {
            apply(&mut store, id, *op);
        }
        let t = store.get_task(id).unwrap().unwrap();
        let seen = (t.state, t.exit_code, t.run_handle.as_deref(), t.paused_running, t.memory_retries);
        assert_eq!(seen, (TaskState::Completed, Some(0), None, false, memory_retries), "order {order:?}");
        assert!(t.started_ms.is_some() && t.finished_ms.is_some(), "stamps lost, order {order:?}");
        assert_eq!(t.attempts, 0, "one attempt, order {order:?}");
    }
    orders.len()
}

#[test]
fn a_runs_exit_code_survives_every_order_of_start_and_end() {
    let pump = [Op::Started, Op::Finished];
    let worker = [Op::Handle("h1"), Op::Exit(0)];
    assert_eq!(every_order_ends_the_same(&pump, &worker, 0), 6);
}

#[test]
fn a_pause_and_resume_during_the_run_lose_nothing_in_any_order() {
    let pump = [Op::Started, Op::Paused, Op::Resumed, Op::Finished];
    let worker = [Op::Handle("h1"), Op::Exit(0)];
    assert_eq!(every_order_ends_the_same(&pump, &worker, 0), 15);
}

#[test]
fn a_memory_retry_keeps_the_last_runs_exit_code_in_any_order() {
    let pump = [Op::Started, Op::Finished];
    let worker = [Op::Handle("h1"), Op::Exit(137), Op::MemoryRetry, Op::Handle("h2"), Op::Exit(0)];
    assert_eq!(every_order_ends_the_same(&pump, &worker, 1), 21);
}

/// The clearing moved to where a new attempt begins: a run interrupted by
/// a crash after its exit code was written starts its next attempt clean.
#[test]
fn an_interrupted_runs_exit_code_does_not_outlive_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path().join("db")).unwrap();
    let id = store.insert_task(&NewTask::new(TaskSpec::command(["true"]))).unwrap();
    apply(&mut store, id, Op::Started);
    apply(&mut store, id, Op::Exit(3));
    let report = store.recover_after_crash().unwrap();
    assert_eq!(report.requeued, vec![id]);
    let t = store.get_task(id).unwrap().unwrap();
    assert_eq!((t.state, t.exit_code, t.attempts), (TaskState::Pending, None, 1));
}
