//! Property: random operations, reopens and crash recoveries against a
//! simple model never lose a task, never reuse an id, and leave every task
//! exactly in the state the rules say.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeMap;

use lardon_daemon::spec::{TaskId, TaskSpec, TaskState};
use lardon_daemon::store::{NewTask, Outcome, Store};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Insert { items: Option<u64>, retry: bool, paused: bool },
    Start(usize),
    Pause(usize),
    Resume(usize),
    Finish(usize, TaskState),
    Cursor(usize, u64),
    Remove(usize),
    Reopen,
    Crash,
}

fn op() -> impl Strategy<Value = Op> {
    let terminal =
        prop_oneof![Just(TaskState::Completed), Just(TaskState::Failed), Just(TaskState::Cancelled)];
    prop_oneof![
        3 => (proptest::option::of(1u64..10), any::<bool>(), proptest::bool::weighted(0.2))
            .prop_map(|(items, retry, paused)| Op::Insert { items, retry, paused }),
        3 => any::<usize>().prop_map(Op::Start),
        1 => any::<usize>().prop_map(Op::Pause),
        1 => any::<usize>().prop_map(Op::Resume),
        2 => (any::<usize>(), terminal).prop_map(|(i, s)| Op::Finish(i, s)),
        2 => (any::<usize>(), 0u64..12).prop_map(|(i, c)| Op::Cursor(i, c)),
        1 => any::<usize>().prop_map(Op::Remove),
        1 => Just(Op::Reopen),
        1 => Just(Op::Crash),
    ]
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Model {
    state: TaskState,
    paused_running: bool,
    attempts: u32,
    cursor: u64,
    items: Option<u64>,
    retry: bool,
}

fn check(store: &Store, model: &BTreeMap<TaskId, Model>, next: u64) -> Result<(), TestCaseError> {
    let stored = store.load_all().unwrap();
    prop_assert_eq!(
        stored.iter().map(|t| t.id).collect::<Vec<_>>(),
        model.keys().copied().collect::<Vec<_>>()
    );
    for t in stored {
        let m = &model[&t.id];
        prop_assert_eq!(
            (t.state, t.paused_running, t.attempts, t.cursor, t.spec.items, t.spec.retry_on_interrupt),
            (m.state, m.paused_running, m.attempts, m.cursor, m.items, m.retry),
            "task {}",
            t.id
        );
    }
    prop_assert_eq!(store.next_task_number().unwrap(), TaskId(next));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn random_transitions_and_reopens_never_lose_a_task(ops in proptest::collection::vec(op(), 1..40)) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lardon.db");
        let mut store = Store::open(&path).unwrap();
        let mut model: BTreeMap<TaskId, Model> = BTreeMap::new();
        let mut ever: Vec<TaskId> = Vec::new();
        let mut next = 1u64;
        for op in ops {
            let pick = |i: usize| ever.get(i % ever.len().max(1)).copied().unwrap_or(TaskId(999));
            match op {
                Op::Insert { items, retry, paused } => {
                    let mut spec = TaskSpec::command(["true"]);
                    spec.items = items;
                    spec.retry_on_interrupt = retry;
                    let id = store.insert_task(&NewTask { spec, paused }).unwrap();
                    prop_assert_eq!(id, TaskId(next), "ids are dense and never reused");
                    next += 1;
                    ever.push(id);
                    let state = if paused { TaskState::Paused } else { TaskState::Pending };
                    model.insert(id, Model { state, paused_running: false, attempts: 0, cursor: 0, items, retry });
                }
                Op::Start(i) => {
                    let id = pick(i);
                    let res = store.start_attempt(id);
                    match model.get_mut(&id) {
                        Some(m) if m.state == TaskState::Pending => {
                            prop_assert_eq!(res.unwrap(), m.attempts + 1);
                            m.state = TaskState::Running;
                        }
                        _ => prop_assert!(res.is_err()),
                    }
                }
                Op::Pause(i) => {
                    let id = pick(i);
                    let res = store.pause(id);
                    match model.get_mut(&id) {
                        Some(m) if !m.state.is_terminal() => {
                            prop_assert!(res.is_ok());
                            if m.state != TaskState::Paused {
                                m.paused_running = m.state == TaskState::Running;
                                m.state = TaskState::Paused;
                            }
                        }
                        _ => prop_assert!(res.is_err()),
                    }
                }
                Op::Resume(i) => {
                    let id = pick(i);
                    let res = store.resume(id);
                    match model.get_mut(&id) {
                        Some(m) if !m.state.is_terminal() => {
                            if m.state == TaskState::Paused {
                                m.state = if m.paused_running { TaskState::Running } else { TaskState::Pending };
                                m.paused_running = false;
                            }
                            prop_assert_eq!(res.unwrap(), m.state);
                        }
                        _ => prop_assert!(res.is_err()),
                    }
                }
                Op::Finish(i, state) => {
                    let id = pick(i);
                    let res = store.finish(id, &Outcome { state, exit_code: None, reason: None });
                    match model.get_mut(&id) {
                        Some(m) if !m.state.is_terminal() => {
                            prop_assert!(res.is_ok());
                            m.state = state;
                            m.paused_running = false;
                        }
                        _ => prop_assert!(res.is_err()),
                    }
                }
                Op::Cursor(i, c) => {
                    let id = pick(i);
                    let res = store.advance_cursor(id, c);
                    match model.get_mut(&id) {
                        Some(m) if c >= m.cursor && c <= m.items.unwrap_or(0) => {
                            prop_assert!(res.is_ok());
                            m.cursor = c;
                        }
                        _ => prop_assert!(res.is_err(), "cursor {} accepted", c),
                    }
                }
                Op::Remove(i) => {
                    let id = pick(i);
                    let res = store.remove_task(id);
                    if model.get(&id).is_some_and(|m| m.state.is_terminal()) {
                        prop_assert!(res.is_ok());
                        model.remove(&id);
                    } else {
                        prop_assert!(res.is_err());
                    }
                }
                Op::Reopen => {
                    drop(store);
                    store = Store::open(&path).unwrap();
                }
                Op::Crash => {
                    drop(store);
                    store = Store::open(&path).unwrap();
                    let report = store.recover_after_crash().unwrap();
                    let mut interrupted = 0;
                    for m in model.values_mut() {
                        let live_run = m.state == TaskState::Running
                            || (m.state == TaskState::Paused && m.paused_running);
                        if !live_run {
                            continue;
                        }
                        interrupted += 1;
                        m.attempts += 1;
                        m.paused_running = false;
                        if !m.retry {
                            m.state = TaskState::Failed;
                        } else if m.state == TaskState::Running {
                            m.state = TaskState::Pending;
                        }
                    }
                    prop_assert_eq!(report.interrupted(), interrupted);
                }
            }
            check(&store, &model, next)?;
        }
        drop(store);
        let store = Store::open(&path).unwrap();
        check(&store, &model, next)?;
    }
}
