//! Group limits through the queue (docs/DESIGN.md §4 step 7b): the scan
//! and the hand-off admit no task of a group at its limit, the waiting task
//! reads `group_limit` with the figures, other tasks pass it, and a release
//! of the group starts it.

use super::*;
use crate::{GroupLimits, GroupName};

fn grouped(group: &GroupName) -> Estimate {
    Estimate::builder().memory(GIB / 16).group(group.clone()).build()
}

/// To see it fail, make `Ledger::limited_group` answer `None`: the third
/// task starts beside the first two.
#[test]
fn a_task_of_a_group_at_its_limit_waits_and_starts_when_the_group_releases() {
    let r = rig();
    let g = GroupName::new("render").unwrap();
    r.queue.governor().set_group_limits(&g, GroupLimits { max_running: Some(2), ..GroupLimits::default() });
    let (gate_a, cb_a) = gated();
    let (gate_b, cb_b) = gated();
    let a = r.queue.submit(Task::new("a", grouped(&g), cb_a)).unwrap();
    let b = r.queue.submit(Task::new("b", grouped(&g), cb_b)).unwrap();
    r.started(a);
    r.started(b);
    let c = r.queue.submit(Task::new("c", grouped(&g), |_| Ok(()))).unwrap();
    match r.until("c meets its group's limit", |e| matches!(e, QueueEvent::Decision { id, .. } if *id == c)) {
        QueueEvent::Decision { reason, message, .. } => {
            assert_eq!(reason, ReasonCode::GroupLimit);
            assert_eq!(message, "group render holds 2 of its 2 running tasks");
        }
        _ => unreachable!(),
    }
    // Not a group's task: not held by it.
    let free = r.queue.submit(Task::new("free", mem(GIB / 16), |_| Ok(()))).unwrap();
    assert_eq!(r.finished(free), TaskState::Completed);
    assert_eq!(r.queue.get(c).unwrap().state, TaskState::Pending);
    gate_a.send(()).unwrap();
    assert_eq!(r.finished(a), TaskState::Completed);
    assert_eq!(r.finished(c), TaskState::Completed, "the release of a started c");
    gate_b.send(()).unwrap();
    assert_eq!(r.finished(b), TaskState::Completed);
    assert_eq!(r.queue.governor().group_usage()[0].running, 0, "every reservation given back");
}

/// Sixty tasks of a group limited to 2 on a 4-CPU pool: scans and
/// hand-offs alike never run more than 2 at once.
#[test]
fn a_group_limit_holds_through_scans_and_hand_offs() {
    let r = rig();
    let g = GroupName::new("g").unwrap();
    r.queue.governor().set_group_limits(&g, GroupLimits { max_running: Some(2), ..GroupLimits::default() });
    let now = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    for i in 0..60 {
        let (now, most) = (now.clone(), most.clone());
        r.queue
            .submit(Task::new(format!("t{i}"), grouped(&g), move |_| {
                let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(n, Ordering::SeqCst);
                for _ in 0..200 {
                    std::thread::yield_now();
                }
                now.fetch_sub(1, Ordering::SeqCst);
                Ok(())
            }))
            .unwrap();
    }
    r.queue.wait_idle();
    assert!(most.load(Ordering::SeqCst) <= 2, "{} at once", most.load(Ordering::SeqCst));
}
