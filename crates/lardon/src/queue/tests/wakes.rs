//! Who is woken when tasks leave the live set: every `wait` caller, on
//! every path a task can leave by (a dispatcher's REJECT, a withdraw), and
//! `wait_idle` callers only when the last live task leaves.

use super::*;

/// A queue shared with a waiting thread, over the rig's fake host.
fn shared(policy: impl FnOnce(&mut crate::HostPolicy)) -> (Arc<TaskQueue>, Receiver<QueueEvent>) {
    let Rig { queue, events, .. } = rig_with(QueueConfig::default(), policy);
    (Arc::new(queue), events)
}

/// Runs `f` on a new thread; the receiver gets its result.
fn on_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Receiver<T> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx
}

/// A task the dispatcher's scan rejects ends for whoever `wait`s on it.
/// The scan is held back (the host-sample cache is the first lock it
/// takes) until the waiter sleeps, so the rejection is what must wake it.
///
/// To see it fail, drop the `inner.tasks_left(idle)` call from
/// `dispatch::scan`: the waiter sleeps forever.
#[test]
fn wait_returns_for_a_task_the_dispatcher_rejects() {
    let (q, _events) = shared(|_| {});
    let cache = crate::sync::lock(&q.inner.last_sample);
    let id = q.submit(Task::new("huge", mem(20 * GIB), |_| Ok(()))).unwrap();
    let waiter = {
        let q = Arc::clone(&q);
        on_thread(move || q.wait(id).map(|v| v.state))
    };
    eventually("the waiter sleeps", || q.inner.tasks.asleep() == Some(false));
    drop(cache);
    assert_eq!(waiter.recv_timeout(LIMIT), Ok(Some(TaskState::Failed)), "the waiter is woken");
}

/// Withdrawing the last live task ends `wait_idle`, and a `wait` on it.
///
/// To see it fail, drop the `self.inner.tasks_left(idle)` call from
/// `TaskQueue::withdraw`: both waiters sleep forever.
#[test]
fn withdrawing_the_last_task_wakes_wait_and_wait_idle() {
    let (q, _events) = shared(|_| {});
    let id = q.submit_paused(Task::new("parked", mem(GIB), |_| Ok(()))).unwrap();
    let idle = {
        let q = Arc::clone(&q);
        on_thread(move || q.wait_idle())
    };
    let waiter = {
        let q = Arc::clone(&q);
        on_thread(move || q.wait(id).is_none())
    };
    eventually("both sleep", || {
        q.inner.idle.asleep() == Some(false) && q.inner.tasks.asleep() == Some(false)
    });
    q.withdraw(id).unwrap();
    assert_eq!(idle.recv_timeout(LIMIT), Ok(()), "wait_idle returns");
    assert_eq!(waiter.recv_timeout(LIMIT), Ok(true), "wait returns: no view of a withdrawn task");
}

/// A task ending while others stay live does not wake `wait_idle` (a
/// caller draining a long queue is not woken at every end); the last end
/// does.
///
/// To see it fail, make `Inner::tasks_left` bump the idle signal at every
/// call: the sleeper's epoch moves at the first end.
#[test]
fn wait_idle_sleeps_through_ends_until_the_last() {
    let (q, events) = shared(|_| {});
    let (first_go, first) = gated();
    let (second_go, second) = gated();
    let a = q.submit(Task::new("a", mem(GIB), first)).unwrap();
    let b = q.submit(Task::new("b", mem(GIB), second)).unwrap();
    let idle = {
        let q = Arc::clone(&q);
        on_thread(move || q.wait_idle())
    };
    eventually("wait_idle sleeps", || q.inner.idle.asleep() == Some(false));
    let epoch = q.inner.idle.epoch();
    first_go.send(()).unwrap();
    let ended = |id: TaskId| loop {
        match events.recv_timeout(LIMIT) {
            Ok(QueueEvent::Finished { id: x, .. }) if x == id => break,
            Ok(_) => {}
            Err(e) => panic!("no end of {id}: {e}"),
        }
    };
    ended(a);
    eventually("a's worker is done with it", || q.inner.in_flight.load(Ordering::SeqCst) == 1);
    assert_eq!(q.inner.idle.epoch(), epoch, "one task still runs: wait_idle was not woken");
    assert_eq!(q.inner.idle.asleep(), Some(false));
    second_go.send(()).unwrap();
    ended(b);
    assert_eq!(idle.recv_timeout(LIMIT), Ok(()), "the last end wakes wait_idle");
}
