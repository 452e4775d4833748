//! Property tests of the queue over random operation sequences
//! (docs/DESIGN.md §13): never over budget, never running without a reservation, every
//! reservation released exactly once, every task ends in exactly one
//! terminal state.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex};

use proptest::prelude::*;

use crate::{
    Estimate, FakeClock, FakeProbe, Governor, HostPolicy, HostProfile, MonoTime, QueueConfig, QueueEvent,
    Task, TaskId, TaskQueue, TaskState,
};

const GIB: u64 = 1 << 30;

#[derive(Debug, Clone)]
enum Op {
    Submit { gib: u64, priority: i32 },
    Cancel(usize),
    Pause(usize),
    Resume(usize),
    Finish(usize),
    HostSample { available_gib: u64 },
    Close,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u64..9, -1i32..2).prop_map(|(gib, priority)| Op::Submit { gib, priority }),
        1 => (0usize..32).prop_map(Op::Cancel),
        1 => (0usize..32).prop_map(Op::Pause),
        1 => (0usize..32).prop_map(Op::Resume),
        3 => (0usize..32).prop_map(Op::Finish),
        1 => (4u64..17).prop_map(|available_gib| Op::HostSample { available_gib }),
        1 => Just(Op::Close),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn random_operations_keep_every_queue_invariant(ops in proptest::collection::vec(op(), 1..40)) {
        let profile = HostProfile::new(16 * GIB, 8);
        let clock = Arc::new(FakeClock::new(MonoTime(1_000_000_000)));
        let probe = Arc::new(FakeProbe::new(profile.clone()).stamped_by(clock.clone()));
        let mut policy = HostPolicy::default_for(&profile);
        policy.memory_reserve = 2 * GIB;
        policy.emergency_floor = GIB;
        policy.memory_caution = None;
        let budget = 14 * GIB;
        let gov = Governor::with_clock(policy, probe.clone(), clock.clone()).unwrap();
        let queue = TaskQueue::with_config(gov.clone(), QueueConfig::default());
        let events = queue.subscribe();
        let violations = Arc::new(AtomicUsize::new(0));
        let mut gates: Vec<(TaskId, Sender<()>)> = Vec::new();
        let submitted = Arc::new(Mutex::new(Vec::new()));

        for op in ops {
            match op {
                Op::Submit { gib, priority } => {
                    let (tx, rx) = channel::<()>();
                    let v = violations.clone();
                    let task = Task::new("t", Estimate::builder().memory(gib * GIB).build(), move |ctx| {
                        if !ctx.holds_reservation() {
                            v.fetch_add(1, Ordering::SeqCst);
                        }
                        let _ = rx.recv();
                        ctx.checkpoint()?;
                        Ok(())
                    })
                    .priority(priority);
                    if let Ok(id) = queue.try_submit(task) {
                        submitted.lock().unwrap().push(id);
                        gates.push((id, tx));
                    }
                }
                Op::Cancel(i) => { if let Some((id, _)) = gates.get(i) { let _ = queue.cancel(*id); } }
                Op::Pause(i) => { if let Some((id, _)) = gates.get(i) { let _ = queue.pause(*id); } }
                Op::Resume(i) => { if let Some((id, _)) = gates.get(i) { let _ = queue.resume(*id); } }
                Op::Finish(i) => { if i < gates.len() { drop(gates.remove(i)); } }
                Op::HostSample { available_gib } => {
                    clock.advance(std::time::Duration::from_millis(300));
                    probe.update(|s| s.memory_available = available_gib * GIB);
                    queue.resources_changed();
                }
                Op::Close => {
                    drop(std::mem::take(&mut gates));
                    queue.close();
                }
            }
            let av = gov.availability();
            prop_assert!(av.memory_reserved <= budget, "over budget: {}", av.memory_reserved);
        }
        // Let every task end: release all gates, resume all, then close.
        drop(gates);
        let ids = submitted.lock().unwrap().clone();
        for &id in &ids {
            let _ = queue.resume(id);
        }
        queue.close();
        prop_assert_eq!(violations.load(Ordering::SeqCst), 0, "a callback ran without a reservation");
        let av = gov.availability();
        prop_assert_eq!((av.reservations, av.memory_reserved), (0, 0));
        let mut finished: HashMap<TaskId, Vec<TaskState>> = HashMap::new();
        while let Ok(e) = events.try_recv() {
            if let QueueEvent::Finished { id, state, .. } = e {
                finished.entry(id).or_default().push(state);
            }
        }
        for id in ids {
            let states = finished.get(&id).cloned().unwrap_or_default();
            prop_assert_eq!(states.len(), 1, "task {} ended {:?}", id, states);
            prop_assert!(states[0].is_terminal());
        }
    }
}
