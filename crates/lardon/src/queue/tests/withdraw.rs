//! `withdraw`: a task that has not started leaves the queue for good (it
//! never starts here), one that has started stays, and the id is free to
//! be submitted again.

use super::*;

#[test]
fn a_waiting_task_is_withdrawn_and_never_starts_and_its_id_can_come_back() {
    let r = rig_with(QueueConfig::default(), |p| p.max_running = Some(1));
    let (go_tx, go_rx) = channel::<()>();
    let busy = r
        .queue
        .submit(Task::new("busy", mem(GIB), move |_| {
            let _ = go_rx.recv();
            Ok(())
        }))
        .unwrap();
    r.started(busy);
    let called = Arc::new(AtomicUsize::new(0));
    let c2 = called.clone();
    let waiting = r
        .queue
        .submit(Task::new("waiting", mem(GIB), move |_| {
            c2.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }))
        .unwrap();
    r.until(
        "waiting told WAIT",
        |e| matches!(e, QueueEvent::Decision { id, kind: crate::DecisionKind::Wait, .. } if *id == waiting),
    );

    assert_eq!(r.queue.withdraw(busy).unwrap_err(), crate::QueueError::Started(busy));
    let view = r.queue.withdraw(waiting).unwrap();
    assert_eq!(view.last_decision.map(|d| d.kind), Some(crate::DecisionKind::Wait));
    assert!(r.queue.get(waiting).is_none(), "gone from the queue");
    assert_eq!(r.queue.withdraw(waiting).unwrap_err(), crate::QueueError::NotFound(waiting));

    go_tx.send(()).unwrap();
    assert_eq!(r.finished(busy), TaskState::Completed);
    r.queue.wait_idle();
    assert_eq!(called.load(Ordering::SeqCst), 0, "a withdrawn task never runs here");

    // Its id was never ended here: it can be queued again (a fallback).
    let again = r.queue.submit(Task::new("again", mem(GIB), |_| Ok(())).with_id(waiting)).unwrap();
    assert_eq!(again, waiting);
    assert_eq!(r.finished(waiting), TaskState::Completed);
}

#[test]
fn a_task_others_wait_on_is_not_withdrawn() {
    let r = rig_with(QueueConfig::default(), |p| p.max_running = Some(1));
    let (go_tx, go_rx) = channel::<()>();
    let busy = r
        .queue
        .submit(Task::new("busy", mem(GIB), move |_| {
            let _ = go_rx.recv();
            Ok(())
        }))
        .unwrap();
    r.started(busy);
    let first = r.queue.submit(Task::new("first", mem(GIB), |_| Ok(()))).unwrap();
    let then = r.queue.submit(Task::new("then", mem(GIB), |_| Ok(())).after(first)).unwrap();
    assert_eq!(r.queue.withdraw(first).unwrap_err(), crate::QueueError::HasDependents(first));
    go_tx.send(()).unwrap();
    assert_eq!(r.finished(first), TaskState::Completed);
    assert_eq!(r.finished(then), TaskState::Completed);
}
