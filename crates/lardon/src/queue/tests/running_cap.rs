//! The running cap (`max_running`) on the scan's short path: once it is
//! reached, tasks evaluated before are not evaluated again, but a fresh
//! task still is (an impossible one is rejected at once), the waiting
//! tasks show the cap as their reason, and a raised cap is seen at once.

use super::*;

/// At the cap, a waiting task reads `max_running` and an impossible task
/// submitted then is rejected at once, before anything ends.
///
/// To see it fail, drop `evaluated_before &&` from the cap's short path in
/// `dispatch::scan_locked`: fresh tasks are skipped too, and the
/// impossible task waits for the blocker's end.
#[test]
fn at_the_cap_a_fresh_impossible_task_is_still_rejected_at_once() {
    let r = rig_with(QueueConfig::default(), |p| p.max_running = Some(1));
    let (gate, cb) = gated();
    let blocker = r.queue.submit(Task::new("blocker", mem(GIB), cb)).unwrap();
    r.started(blocker);
    let waiting = r.queue.submit(Task::new("waiting", mem(GIB), |_| Ok(()))).unwrap();
    r.until(
        "the waiting task meets the cap",
        |e| matches!(e, QueueEvent::Decision { id, reason: ReasonCode::MaxRunning, .. } if *id == waiting),
    );
    let huge = r.queue.submit(Task::new("huge", mem(20 * GIB), |_| Ok(()))).unwrap();
    assert_eq!(r.finished(huge), TaskState::Failed, "rejected while the blocker still runs");
    assert_eq!(r.queue.get(huge).unwrap().last_decision.unwrap().reason, ReasonCode::Impossible);
    let view = r.queue.get(waiting).unwrap();
    assert_eq!(view.state, TaskState::Pending);
    let decision = view.last_decision.unwrap();
    assert_eq!(decision.reason, ReasonCode::MaxRunning);
    assert_eq!(decision.message, "1 task(s) running, the cap is 1");
    gate.send(()).unwrap();
    assert_eq!(r.finished(blocker), TaskState::Completed);
    assert_eq!(r.finished(waiting), TaskState::Completed);
}

/// A cap raised while tasks wait on it starts them at once (the short
/// path reads the cap under the Governor's lock at every scan, never a
/// copy of an older policy).
///
/// To see it fail, make the short path use a cap of 1 whatever the
/// policy says: the waiting task stays pending until the blocker ends.
#[test]
fn raising_the_cap_starts_a_waiting_task_at_once() {
    let r = rig_with(QueueConfig::default(), |p| p.max_running = Some(1));
    let (gate, cb) = gated();
    let blocker = r.queue.submit(Task::new("blocker", mem(GIB), cb)).unwrap();
    r.started(blocker);
    let first = r.queue.submit(Task::new("first", mem(GIB), |_| Ok(()))).unwrap();
    let second = r.queue.submit(Task::new("second", mem(GIB), |_| Ok(()))).unwrap();
    r.until(
        "the second waits on the cap",
        |e| matches!(e, QueueEvent::Decision { id, reason: ReasonCode::MaxRunning, .. } if *id == second),
    );
    let mut policy = r.queue.governor().policy();
    policy.max_running = Some(3);
    r.queue.governor().set_policy(policy).unwrap();
    assert_eq!(r.finished(first), TaskState::Completed, "started with the blocker still running");
    assert_eq!(r.finished(second), TaskState::Completed);
    assert_eq!(r.queue.get(blocker).unwrap().state, TaskState::Running);
    gate.send(()).unwrap();
    assert_eq!(r.finished(blocker), TaskState::Completed);
}

/// A burst of fresh tasks met by one scan at the cap: equal tasks share
/// the first one's queue-wide WAIT, but a task with another envelope is
/// evaluated itself (an impossible one among them is rejected at once).
/// The burst is held together by holding the host-sample cache, the first
/// lock a dispatcher scan takes.
///
/// To see it fail, drop the envelope comparison from the reuse in
/// `dispatch::scan_locked`: the impossible task is told to wait for the
/// cap like the others.
#[test]
fn a_burst_at_the_cap_shares_a_wait_only_between_equal_tasks() {
    let r = rig_with(QueueConfig::default(), |p| p.max_running = Some(1));
    let (gate, cb) = gated();
    let blocker = r.queue.submit(Task::new("blocker", mem(GIB), cb)).unwrap();
    r.started(blocker);
    let cache = crate::sync::lock(&r.queue.inner.last_sample);
    let w1 = r.queue.submit(Task::new("w1", mem(GIB), |_| Ok(()))).unwrap();
    let w2 = r.queue.submit(Task::new("w2", mem(GIB), |_| Ok(()))).unwrap();
    let huge = r.queue.submit(Task::new("huge", mem(20 * GIB), |_| Ok(()))).unwrap();
    let w3 = r.queue.submit(Task::new("w3", mem(GIB), |_| Ok(()))).unwrap();
    drop(cache);
    assert_eq!(r.finished(huge), TaskState::Failed, "rejected while the blocker still runs");
    assert_eq!(r.queue.get(huge).unwrap().last_decision.unwrap().reason, ReasonCode::Impossible);
    for id in [w1, w2, w3] {
        let view = r.queue.get(id).unwrap();
        assert_eq!(view.state, TaskState::Pending, "{id}");
        let decision = view.last_decision.unwrap();
        assert_eq!(
            (decision.reason, decision.message.as_str()),
            (ReasonCode::MaxRunning, "1 task(s) running, the cap is 1")
        );
    }
    gate.send(()).unwrap();
    for id in [blocker, w1, w2, w3] {
        assert_eq!(r.finished(id), TaskState::Completed);
    }
}
