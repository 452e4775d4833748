//! Rules of docs/DESIGN.md §8, driven by events (never sleeps for ordering).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::{
    Estimate, FakeClock, FakeProbe, Governor, HostPolicy, HostProfile, MonoTime, QueueConfig, QueueEvent,
    ReasonCode, SubmitError, Task, TaskError, TaskId, TaskQueue, TaskState,
};

mod groups;
mod handoff;
mod messages;
mod resample;
mod running_cap;
mod submit_many;
mod wakes;
mod withdraw;

const GIB: u64 = 1 << 30;
const LIMIT: Duration = Duration::from_secs(20);

struct Rig {
    clock: Arc<FakeClock>,
    probe: Arc<FakeProbe>,
    queue: TaskQueue,
    events: Receiver<QueueEvent>,
}

/// 16 GiB host, 8 CPUs (pool 4), custom reserve 2 GiB: 14 GiB to hand out.
fn rig_with(config: QueueConfig, policy: impl FnOnce(&mut HostPolicy)) -> Rig {
    let profile = HostProfile::new(16 * GIB, 8);
    let clock = Arc::new(FakeClock::new(MonoTime(1_000_000_000)));
    let probe = Arc::new(FakeProbe::new(profile.clone()).stamped_by(clock.clone()));
    let mut p = HostPolicy::default_for(&profile);
    p.memory_reserve = 2 * GIB;
    p.emergency_floor = GIB;
    p.memory_caution = None;
    // The pool these tests are written against (4 of 8 CPUs), whatever
    // the default reserve.
    p.cpu_reserve = 4;
    policy(&mut p);
    let gov = Governor::with_clock(p, probe.clone(), clock.clone()).unwrap();
    let queue = TaskQueue::with_config(gov, config);
    let events = queue.subscribe();
    Rig { clock, probe, queue, events }
}

fn rig() -> Rig {
    rig_with(QueueConfig::default(), |_| {})
}

impl Rig {
    /// Waits for the first event matching `pred`, returning it.
    fn until(&self, what: &str, pred: impl Fn(&QueueEvent) -> bool) -> QueueEvent {
        loop {
            match self.events.recv_timeout(LIMIT) {
                Ok(e) if pred(&e) => return e,
                Ok(_) => {}
                Err(_) => panic!("no event: {what}"),
            }
        }
    }

    fn started(&self, id: TaskId) {
        self.until(&format!("{id} started"), |e| matches!(e, QueueEvent::Started { id: x, .. } if *x == id));
    }

    fn finished(&self, id: TaskId) -> TaskState {
        match self
            .until(&format!("{id} finished"), |e| matches!(e, QueueEvent::Finished { id: x, .. } if *x == id))
        {
            QueueEvent::Finished { state, .. } => state,
            _ => unreachable!(),
        }
    }

    fn reserved(&self) -> (usize, u64) {
        let av = self.queue.governor().availability();
        (av.reservations, av.memory_reserved)
    }
}

fn mem(bytes: u64) -> Estimate {
    Estimate::builder().memory(bytes).build()
}

/// A callback that blocks until told to finish.
fn gated() -> (Sender<()>, impl FnOnce(&mut crate::TaskContext) -> crate::TaskResult + Send + 'static) {
    let (tx, rx) = channel::<()>();
    (tx, move |_ctx: &mut crate::TaskContext| {
        let _ = rx.recv();
        Ok(())
    })
}

#[test]
fn four_hundred_tasks_start_in_fifo_order_each_with_its_contract() {
    let r = rig();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut ids = Vec::new();
    for i in 0..400u64 {
        let seen = seen.clone();
        let e = Estimate::builder().memory(GIB / 64).cpus(1).build();
        let id = r
            .queue
            .submit(Task::new(format!("t{i}"), e, move |ctx| {
                assert_eq!(ctx.contract().memory, GIB / 64);
                assert_eq!(ctx.contract().cpu_millis, 1000);
                seen.lock().unwrap().push(ctx.id());
                Ok(())
            }))
            .unwrap();
        ids.push(id);
    }
    let mut started = Vec::new();
    while started.len() < 400 {
        if let QueueEvent::Started { id, .. } = r.until("starts", |e| matches!(e, QueueEvent::Started { .. }))
        {
            started.push(id);
        }
    }
    assert_eq!(started, ids, "admission order is FIFO");
    r.queue.wait_idle();
    assert_eq!(seen.lock().unwrap().len(), 400);
    assert_eq!(r.reserved(), (0, 0));
}

#[test]
fn a_waiting_head_is_bypassed_then_admitted_on_release() {
    let r = rig();
    let (release_a, a_cb) = gated();
    let a = r.queue.submit(Task::new("a", mem(10 * GIB), a_cb)).unwrap();
    r.started(a);
    let (release_b, b_cb) = gated();
    let b = r.queue.submit(Task::new("b", mem(8 * GIB), b_cb)).unwrap();
    let (release_c, c_cb) = gated();
    let c = r.queue.submit(Task::new("c", mem(GIB), c_cb)).unwrap();
    r.started(c);
    let view = r.queue.get(b).unwrap();
    assert_eq!(view.state, TaskState::Pending);
    assert_eq!(view.last_decision.unwrap().reason, ReasonCode::Memory);
    release_a.send(()).unwrap();
    r.started(b);
    release_b.send(()).unwrap();
    release_c.send(()).unwrap();
    r.queue.wait_idle();
    assert_eq!(r.reserved(), (0, 0));
}

#[test]
fn higher_priority_runs_first() {
    let r = rig_with(QueueConfig::default(), |p| p.max_running = Some(1));
    let (gate, cb) = gated();
    let blocker = r.queue.submit(Task::new("blocker", mem(GIB), cb)).unwrap();
    r.started(blocker);
    let low = r.queue.submit(Task::new("low", mem(GIB), |_| Ok(()))).unwrap();
    let high = r.queue.submit(Task::new("high", mem(GIB), |_| Ok(())).priority(5)).unwrap();
    gate.send(()).unwrap();
    r.started(high);
    r.started(low);
}

#[test]
fn within_a_priority_the_most_items_left_start_first_then_fifo() {
    let r = rig_with(QueueConfig::default(), |p| p.max_running = Some(1));
    let (gate, cb) = gated();
    let blocker = r.queue.submit(Task::new("blocker", mem(GIB), cb)).unwrap();
    r.started(blocker);
    let left = |n: u64| Estimate::builder().memory(GIB).batch(1, 8).items_left(n).build();
    let plain = r.queue.submit(Task::new("plain", mem(GIB), |_| Ok(()))).unwrap();
    let short = r.queue.submit(Task::new("short", left(10), |_| Ok(()))).unwrap();
    let long = r.queue.submit(Task::new("long", left(400), |_| Ok(()))).unwrap();
    let short2 = r.queue.submit(Task::new("short2", left(10), |_| Ok(()))).unwrap();
    let urgent = r.queue.submit(Task::new("urgent", mem(GIB), |_| Ok(())).priority(1)).unwrap();
    gate.send(()).unwrap();
    let mut order = Vec::new();
    while order.len() < 5 {
        if let QueueEvent::Started { id, .. } = r.until("starts", |e| matches!(e, QueueEvent::Started { .. }))
        {
            order.push(id);
        }
    }
    assert_eq!(order, [urgent, long, short, short2, plain], "priority, then items left, then FIFO");
    r.queue.wait_idle();
}

#[test]
fn a_new_sequence_is_admitted_with_the_items_its_progress_says_are_left() {
    use crate::{Class, DecisionKind, RunOutcome, RunRecord};
    const MIB: u64 = 1 << 20;
    let r = rig();
    let gov = r.queue.governor().clone();
    // A proven class (one batch measured as declared), and memory contended:
    // 8 GiB held, a 10 GiB estimate waiting (the fake clock stands still).
    let peak = Some(GIB + 800 * MIB);
    gov.record_run(&Class::new("long"), RunRecord::batch(8, LIMIT, RunOutcome::Completed { peak }));
    let _held = gov.reserve(&mem(8 * GIB), &gov.sample().unwrap()).unwrap();
    let waiting = gov.decide(&mem(10 * GIB), &gov.sample().unwrap());
    assert_eq!((waiting.kind(), waiting.reason()), (DecisionKind::Wait, ReasonCode::Memory));
    let long = Estimate::builder().memory(GIB).memory_per_item(100 * MIB).batch(1, 64).class("long");
    let (tx, rx) = channel();
    let id = r
        .queue
        .submit(Task::new("long", long.items_left(640).build(), move |ctx| {
            let first = ctx.contract().batch;
            ctx.set_progress(600, 640).unwrap();
            let second = ctx.sequence_break()?.batch;
            tx.send((first, second)).unwrap();
            Ok(())
        }))
        .unwrap();
    // 640 left: the critical floor (64) over the contended cap (11), within
    // the 6 GiB free; 40 left: a floor of 4, so the cap.
    assert_eq!(rx.recv_timeout(LIMIT).unwrap(), (51, 11));
    assert_eq!(r.finished(id), TaskState::Completed);
}

#[test]
fn the_order_key_ranks_priority_over_items_over_submission() {
    use super::state::order_key;
    let mut keys = [
        (order_key(0, 0, 1), "p0 no items"),
        (order_key(0, 5, 2), "p0 5 items"),
        (order_key(0, u64::MAX, 3), "p0 most items"),
        (order_key(1, 0, 4), "p1"),
        (order_key(i32::MIN, u64::MAX, 0), "lowest"),
        (order_key(i32::MAX, 0, 9), "highest"),
        (order_key(0, 5, 0), "p0 5 items, earlier"),
    ];
    keys.sort();
    let names: Vec<&str> = keys.iter().map(|(_, n)| *n).collect();
    assert_eq!(
        names,
        ["highest", "p1", "p0 most items", "p0 5 items, earlier", "p0 5 items", "p0 no items", "lowest"]
    );
}

#[test]
fn a_paused_pending_task_is_not_admitted_until_resumed() {
    let r = rig_with(QueueConfig::default(), |p| p.max_running = Some(1));
    let (gate, cb) = gated();
    let blocker = r.queue.submit(Task::new("blocker", mem(GIB), cb)).unwrap();
    r.started(blocker);
    let p = r.queue.submit(Task::new("p", mem(GIB), |_| Ok(()))).unwrap();
    r.queue.pause(p).unwrap();
    let q = r.queue.submit(Task::new("q", mem(GIB), |_| Ok(()))).unwrap();
    gate.send(()).unwrap();
    r.started(q);
    assert_eq!(r.queue.get(p).unwrap().state, TaskState::Paused);
    r.queue.resume(p).unwrap();
    r.started(p);
    assert_eq!(r.finished(p), TaskState::Completed);
}

#[test]
fn pausing_a_running_task_keeps_its_reservation() {
    let r = rig();
    let (step_tx, step_rx) = channel::<()>();
    let (at_tx, at_rx) = channel::<&'static str>();
    let id = r
        .queue
        .submit(Task::new("pausable", mem(3 * GIB), move |ctx| {
            step_rx.recv().unwrap();
            at_tx.send("before checkpoint").unwrap();
            ctx.checkpoint()?;
            at_tx.send("after checkpoint").unwrap();
            Ok(())
        }))
        .unwrap();
    r.started(id);
    r.queue.pause(id).unwrap();
    step_tx.send(()).unwrap();
    assert_eq!(at_rx.recv().unwrap(), "before checkpoint");
    r.until("paused", |e| matches!(e, QueueEvent::StateChanged { state: TaskState::Paused, .. }));
    assert_eq!(r.reserved(), (1, 3 * GIB), "the reservation is kept while paused");
    assert_eq!(r.queue.get(id).unwrap().state, TaskState::Paused);
    r.queue.resume(id).unwrap();
    assert_eq!(at_rx.recv().unwrap(), "after checkpoint");
    assert_eq!(r.finished(id), TaskState::Completed);
    assert_eq!(r.reserved(), (0, 0));
}

#[test]
fn cancel_of_pending_is_immediate_and_of_running_at_checkpoint() {
    let r = rig_with(QueueConfig::default(), |p| p.max_running = Some(1));
    let (go_tx, go_rx) = channel::<()>();
    let running = r
        .queue
        .submit(Task::new("running", mem(GIB), move |ctx| {
            go_rx.recv().unwrap();
            ctx.checkpoint()?;
            Err(TaskError::failed("should have been cancelled"))
        }))
        .unwrap();
    r.started(running);
    let called = Arc::new(AtomicUsize::new(0));
    let c2 = called.clone();
    let pending = r
        .queue
        .submit(Task::new("pending", mem(GIB), move |_| {
            c2.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }))
        .unwrap();
    r.queue.cancel(pending).unwrap();
    assert_eq!(r.finished(pending), TaskState::Cancelled);
    r.queue.cancel(running).unwrap();
    go_tx.send(()).unwrap();
    assert_eq!(r.finished(running), TaskState::Cancelled);
    assert_eq!(called.load(Ordering::SeqCst), 0, "a cancelled pending task is never called");
    assert_eq!(r.queue.cancel(running), Err(crate::QueueError::AlreadyEnded(running)));
}

#[test]
fn cancel_during_a_wait_inside_sequence_break() {
    let r = rig();
    let (go_tx, go_rx) = channel::<()>();
    let id = r
        .queue
        .submit(Task::new("seq", mem(8 * GIB), move |ctx| {
            go_rx.recv().unwrap();
            ctx.sequence_break()?;
            Err(TaskError::failed("must not get a new sequence"))
        }))
        .unwrap();
    r.started(id);
    // The hog does not fit beside `seq` (8 + 7 > 14 GiB) and waits.
    let (gate, hog_cb) = gated();
    let hog = r.queue.submit(Task::new("hog", mem(7 * GIB), hog_cb)).unwrap();
    r.until(
        "hog waits",
        |e| matches!(e, QueueEvent::Decision { id: x, reason: ReasonCode::Memory, .. } if *x == hog),
    );
    // Paused, `seq` releases its reservation in sequence_break and holds at
    // the checkpoint: the hog takes the memory.
    r.queue.pause(id).unwrap();
    go_tx.send(()).unwrap();
    r.started(hog);
    r.queue.resume(id).unwrap();
    r.until(
        "seq waits",
        |e| matches!(e, QueueEvent::Decision { id: x, reason: ReasonCode::Memory, .. } if *x == id),
    );
    assert_eq!(r.reserved(), (1, 7 * GIB), "only the hog holds memory while seq waits");
    r.queue.cancel(id).unwrap();
    assert_eq!(r.finished(id), TaskState::Cancelled);
    gate.send(()).unwrap();
    r.queue.wait_idle();
    assert_eq!(r.reserved(), (0, 0));
}

#[test]
fn sequence_loop_grows_its_batch_and_ends_with_nothing_reserved() {
    let r = rig();
    let (gate, hog_cb) = gated();
    let hog = r.queue.submit(Task::new("hog", mem(12 * GIB), hog_cb)).unwrap();
    r.started(hog);
    let batches = Arc::new(Mutex::new(Vec::new()));
    let b2 = batches.clone();
    let (first_tx, first_rx) = channel::<()>();
    let (cont_tx, cont_rx) = channel::<()>();
    let per_item = GIB / 10;
    let e = Estimate::builder().memory_per_item(per_item).batch(1, 100).build();
    let id = r
        .queue
        .submit(Task::new("seq", e, move |ctx| {
            let total = 200;
            let mut done = 0;
            ctx.set_progress(0, total).unwrap();
            let mut first = Some(first_tx);
            while done < total {
                let batch = ctx.contract().batch.min(total - done);
                b2.lock().unwrap().push(ctx.contract().batch);
                done += batch;
                ctx.set_progress(done, total).unwrap();
                if let Some(tx) = first.take() {
                    tx.send(()).unwrap();
                    cont_rx.recv().unwrap();
                }
                if done < total {
                    ctx.sequence_break()?;
                }
            }
            Ok(())
        }))
        .unwrap();
    first_rx.recv().unwrap();
    gate.send(()).unwrap();
    assert_eq!(r.finished(hog), TaskState::Completed);
    cont_tx.send(()).unwrap();
    assert_eq!(r.finished(id), TaskState::Completed);
    let batches = batches.lock().unwrap().clone();
    assert_eq!(batches[0], 20, "2 GiB free: 20 items of 0.1 GiB");
    assert!(batches[1..].iter().all(|&b| b >= 20), "{batches:?}");
    assert!(batches.contains(&100), "full batches once the hog is gone: {batches:?}");
    let view = r.queue.get(id).unwrap();
    assert_eq!((view.progress.progress.unwrap().done(), view.sequences as usize), (200, batches.len()));
    assert_eq!(r.reserved(), (0, 0));
}

#[test]
fn rejected_tasks_fail_with_the_reason_and_are_never_called() {
    let r = rig();
    let called = Arc::new(AtomicUsize::new(0));
    let c = called.clone();
    let id = r
        .queue
        .submit(Task::new("huge", mem(20 * GIB), move |_| {
            c.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }))
        .unwrap();
    assert_eq!(r.finished(id), TaskState::Failed);
    let v = r.queue.get(id).unwrap();
    assert!(v.message.unwrap().contains("impossible"));
    assert_eq!(v.last_decision.unwrap().reason, ReasonCode::Impossible);
    assert_eq!(called.load(Ordering::SeqCst), 0);
}

#[test]
fn errors_and_panics_fail_the_task_and_release_once() {
    let r = rig();
    let e = r.queue.submit(Task::new("err", mem(GIB), |_| Err(TaskError::failed("boom")))).unwrap();
    assert_eq!(r.finished(e), TaskState::Failed);
    assert_eq!(r.queue.get(e).unwrap().message.as_deref(), Some("boom"));
    let p = r.queue.submit(Task::new("panic", mem(GIB), |_| panic!("kaboom"))).unwrap();
    assert_eq!(r.finished(p), TaskState::Failed);
    assert!(r.queue.get(p).unwrap().message.unwrap().contains("kaboom"));
    let f = r
        .queue
        .submit(Task::new("fail", mem(GIB), |ctx| {
            ctx.fail("marked");
            Ok(())
        }))
        .unwrap();
    assert_eq!(r.finished(f), TaskState::Failed);
    assert_eq!(r.reserved(), (0, 0));
}

#[test]
fn dependencies_wait_for_success_and_fail_with_their_dependency() {
    let r = rig();
    let (gate, cb) = gated();
    let a = r.queue.submit(Task::new("a", mem(GIB), cb)).unwrap();
    let b = r.queue.submit(Task::new("b", mem(GIB), |_| Ok(())).after(a)).unwrap();
    r.started(a);
    assert_eq!(r.queue.get(b).unwrap().state, TaskState::Pending);
    gate.send(()).unwrap();
    r.started(b);
    let bad = r.queue.submit(Task::new("bad", mem(GIB), |_| Err(TaskError::failed("no")))).unwrap();
    let dep = r.queue.submit(Task::new("dep", mem(GIB), |_| Ok(())).after(bad)).unwrap();
    let any = r.queue.submit(Task::new("any", mem(GIB), |_| Ok(())).after_any(bad)).unwrap();
    assert_eq!(r.finished(bad), TaskState::Failed);
    assert_eq!(r.finished(dep), TaskState::Failed);
    assert!(r.queue.get(dep).unwrap().message.unwrap().contains(&format!("dependency {bad}")));
    assert_eq!(r.finished(any), TaskState::Completed);
    assert!(matches!(
        r.queue.submit(Task::new("x", mem(GIB), |_| Ok(())).after(TaskId(9999))),
        Err(SubmitError::UnknownDependency(TaskId(9999)))
    ));
    let late = r.queue.submit(Task::new("late", mem(GIB), |_| Ok(())).after(bad)).unwrap();
    assert_eq!(r.queue.get(late).unwrap().state, TaskState::Failed, "an ended dependency resolves at once");
}

#[test]
fn ids_are_never_reused_and_history_is_bounded() {
    let r = rig();
    let mut last = 0;
    for i in 0..100 {
        let id = r.queue.submit(Task::new(format!("t{i}"), mem(GIB), |_| Ok(()))).unwrap();
        assert!(id.0 > last);
        last = id.0;
        r.finished(id);
        if i % 10 == 0 {
            r.queue.remove(id).unwrap();
        }
    }
    let snap = r.queue.snapshot();
    assert!(snap.live.is_empty());
    assert_eq!(snap.finished.len(), crate::HISTORY);
    let next = r.queue.submit(Task::new("next", mem(GIB), |_| Ok(()))).unwrap();
    assert_eq!(next.0, last + 1);
    assert!(matches!(
        r.queue.submit(Task::new("dup", mem(GIB), |_| Ok(())).with_id(TaskId(5))),
        Err(SubmitError::DuplicateId(TaskId(5)))
    ));
    let restored = r.queue.submit(Task::new("restored", mem(GIB), |_| Ok(())).with_id(TaskId(1000))).unwrap();
    assert_eq!(restored, TaskId(1000));
    assert_eq!(r.queue.submit(Task::new("after", mem(GIB), |_| Ok(()))).unwrap(), TaskId(1001));
}

/// A restart reuses an ended task's id once the queue releases it; a live
/// id cannot be released, and an unknown one is refused.
#[test]
fn a_released_id_runs_again_and_only_an_ended_id_is_released() {
    let r = rig();
    let id = r.queue.submit(Task::new("once", mem(GIB), |_| Err(TaskError::failed("boom")))).unwrap();
    r.finished(id);
    assert!(matches!(
        r.queue.submit(Task::new("again", mem(GIB), |_| Ok(())).with_id(id)),
        Err(SubmitError::DuplicateId(_))
    ));
    r.queue.release_id(id).unwrap();
    assert!(r.queue.get(id).is_none(), "the old view is gone");
    assert_eq!(r.queue.submit(Task::new("again", mem(GIB), |_| Ok(())).with_id(id)).unwrap(), id);
    r.finished(id);
    assert_eq!(r.queue.get(id).unwrap().state, TaskState::Completed, "the new attempt's outcome");

    let (_go, body) = gated();
    let live = r.queue.submit(Task::new("live", mem(GIB), body)).unwrap();
    assert_eq!(r.queue.release_id(live), Err(crate::QueueError::NotEnded(live)));
    assert_eq!(r.queue.release_id(TaskId(424_242)), Err(crate::QueueError::NotFound(TaskId(424_242))));
}

#[test]
fn try_submit_distinguishes_full_and_closing() {
    let r = rig_with(QueueConfig { capacity: 1, ..QueueConfig::default() }, |p| p.max_running = Some(1));
    let (gate, cb) = gated();
    let a = r.queue.submit(Task::new("a", mem(GIB), cb)).unwrap();
    r.started(a);
    r.queue.try_submit(Task::new("b", mem(GIB), |_| Ok(()))).unwrap();
    let Err(SubmitError::Full(task)) = r.queue.try_submit(Task::new("c", mem(GIB), |_| Ok(()))) else {
        panic!("must be full")
    };
    assert_eq!(task.name(), "c", "the task is handed back");
    gate.send(()).unwrap();
    r.queue.close();
    assert!(matches!(r.queue.try_submit(Task::new("d", mem(GIB), |_| Ok(()))), Err(SubmitError::Closing(_))));
}

/// The third submit is seen blocked (counted under the queue lock) and
/// not returned while the queue is full; room made by the first task's end
/// then lets it in.
///
/// To see it fail, drop the `inner.not_full.notify_all()` call from the
/// dispatcher's scan (`dispatch.rs`): the blocked submit is never woken
/// and the bounded wait for it fails (the queue is then closed so the test
/// ends).
#[test]
fn blocking_submit_waits_for_room() {
    let r = rig_with(QueueConfig { capacity: 1, ..QueueConfig::default() }, |p| p.max_running = Some(1));
    let (gate, cb) = gated();
    let a = r.queue.submit(Task::new("a", mem(GIB), cb)).unwrap();
    r.started(a);
    r.queue.submit(Task::new("b", mem(GIB), |_| Ok(()))).unwrap();
    std::thread::scope(|s| {
        let q = &r.queue;
        let (tx, rx) = channel();
        s.spawn(move || tx.send(q.submit(Task::new("c", mem(GIB), |_| Ok(()))).map(|id| id.0)));
        eventually("the third submit blocks", || r.queue.inner.lock().blocked_submits == 1);
        assert!(rx.try_recv().is_err(), "submit returned while the queue was full");
        gate.send(()).unwrap();
        let got = rx.recv_timeout(LIMIT);
        if got.is_err() {
            // Unblock the submitter (Closing) so the scope can end.
            r.queue.close();
        }
        let got = got.expect("the room made by a's end let the blocked submit in");
        assert!(got.is_ok(), "{got:?}");
    });
    assert_eq!(r.queue.inner.lock().blocked_submits, 0);
    r.queue.wait_idle();
}

/// Spins (yielding) until `cond` holds; fails at [`LIMIT`]. A bound on a
/// condition, never a sleep that orders events.
fn eventually(what: &str, cond: impl Fn() -> bool) {
    let start = std::time::Instant::now();
    while !cond() {
        assert!(start.elapsed() < LIMIT, "timed out: {what}");
        std::thread::yield_now();
    }
}

struct DropCounter(Arc<AtomicUsize>);
impl Drop for DropCounter {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn close_during_a_long_task_releases_everything_and_drops_each_task_once() {
    let r = rig_with(QueueConfig::default(), |p| p.max_running = Some(1));
    let drops = Arc::new(AtomicUsize::new(0));
    let (started_tx, started_rx) = channel::<()>();
    let guard = DropCounter(drops.clone());
    r.queue
        .submit(Task::new("long", mem(4 * GIB), move |ctx| {
            let _g = guard;
            started_tx.send(()).unwrap();
            loop {
                ctx.checkpoint()?;
                std::thread::yield_now();
            }
        }))
        .unwrap();
    for i in 0..5 {
        let g = DropCounter(drops.clone());
        r.queue
            .submit(Task::new(format!("p{i}"), mem(GIB), move |_| {
                let _g = g;
                Ok(())
            }))
            .unwrap();
    }
    started_rx.recv().unwrap();
    r.queue.close();
    assert_eq!(drops.load(Ordering::SeqCst), 6, "each task dropped exactly once");
    assert_eq!(r.reserved(), (0, 0));
    let snap = r.queue.snapshot();
    assert!(snap.live.is_empty());
    assert!(snap.finished.iter().all(|v| v.state == TaskState::Cancelled));
    r.queue.close(); // idempotent
}

#[test]
fn a_long_bypassed_head_gets_a_hold() {
    let r =
        rig_with(QueueConfig { starvation_bound: Duration::from_secs(30), ..QueueConfig::default() }, |_| {});
    let (gate_a, a_cb) = gated();
    let a = r.queue.submit(Task::new("a", mem(8 * GIB), a_cb)).unwrap();
    r.started(a);
    let head = r.queue.submit(Task::new("head", mem(10 * GIB), |_| Ok(()))).unwrap();
    let (gate_c, c_cb) = gated();
    let c = r.queue.submit(Task::new("c", mem(GIB), c_cb)).unwrap();
    r.started(c);
    // Past the bound, a later small task is held back for the head.
    r.clock.advance(Duration::from_secs(31));
    let d = r.queue.submit(Task::new("d", mem(GIB), |_| Ok(()))).unwrap();
    r.until(
        "d held",
        |e| matches!(e, QueueEvent::Decision { id, reason: ReasonCode::HeldForHead, .. } if *id == d),
    );
    gate_c.send(()).unwrap();
    gate_a.send(()).unwrap();
    r.started(head);
    r.queue.wait_idle();
}

/// docs/DESIGN.md §8: the host is re-sampled only while some task waits on host
/// state. An idle dispatcher sleeps without a timeout and the probe is not
/// called; while a task waits on CPU pressure it sleeps with the sample
/// interval and the probe is called again and again; once the task ran,
/// the dispatcher is back to an untimed sleep and the calls stop.
///
/// To see it fail, make `dispatch::run` always sleep with a timeout
/// (`let timeout = Some(inner.config.sample_interval);`): the idle phase
/// never sleeps untimed. Or never (`let timeout = None;`): the waiting
/// phase never re-samples.
#[test]
fn the_host_is_resampled_only_while_a_task_waits_on_it() {
    let r =
        rig_with(QueueConfig { sample_interval: Duration::from_millis(1), ..QueueConfig::default() }, |_| {});
    let inner = &r.queue.inner;
    // Settled: no callback is still sending its end-of-task wake, and the
    // dispatcher sleeps on the current epoch (it has seen every wake).
    let settled =
        |timed: bool| inner.in_flight.load(Ordering::SeqCst) == 0 && inner.dispatch.asleep() == Some(timed);
    let first = r.queue.submit(Task::new("first", mem(GIB), |_| Ok(()))).unwrap();
    assert_eq!(r.finished(first), TaskState::Completed);

    // Idle: an untimed sleep, and no probe call across it.
    eventually("the idle dispatcher sleeps untimed", || settled(false));
    let idle_calls = r.probe.calls();
    let _ = r.queue.snapshot(); // observing the queue does not wake it
    assert!(settled(false), "still asleep, untimed");
    assert_eq!(r.probe.calls(), idle_calls, "no host sample while idle");

    // Waiting on host state: timed sleeps, and the probe is called on.
    r.probe.update(|s| s.pressure.cpu = Some(50.0));
    r.queue.resources_changed();
    let waiting = r.queue.submit(Task::new("waits", mem(GIB), |_| Ok(()))).unwrap();
    r.until(
        "waits on cpu pressure",
        |e| matches!(e, QueueEvent::Decision { id, reason: ReasonCode::CpuPressure, .. } if *id == waiting),
    );
    eventually("the dispatcher sleeps with the sample interval", || inner.dispatch.asleep() == Some(true));
    let waiting_calls = r.probe.calls();
    eventually("the host is re-sampled while the task waits", || r.probe.calls() >= waiting_calls + 3);

    // The host clears: the task runs, and the dispatcher is idle again.
    r.probe.update(|s| s.pressure.cpu = Some(0.0));
    assert_eq!(r.finished(waiting), TaskState::Completed);
    eventually("idle again: an untimed sleep", || settled(false));
    let idle_calls = r.probe.calls();
    let _ = r.queue.snapshot();
    assert!(settled(false), "still asleep, untimed");
    assert_eq!(r.probe.calls(), idle_calls, "no host sample while idle");
}

#[test]
fn host_state_waits_are_resampled_and_released_by_a_host_change() {
    let r = rig();
    r.probe.update(|s| s.pressure.cpu = Some(50.0));
    r.queue.resources_changed();
    let id = r.queue.submit(Task::new("cpu", mem(GIB), |_| Ok(()))).unwrap();
    r.until(
        "waits on cpu pressure",
        |e| matches!(e, QueueEvent::Decision { id: x, reason: ReasonCode::CpuPressure, .. } if *x == id),
    );
    r.probe.update(|s| s.pressure.cpu = Some(0.0));
    r.clock.advance(Duration::from_millis(300));
    // No call: the dispatcher re-samples on its own while a task waits on the host.
    assert_eq!(r.finished(id), TaskState::Completed);
}

#[test]
fn progress_and_events_are_observable() {
    let r = rig();
    let clock = r.clock.clone();
    let id = r
        .queue
        .submit(Task::new("p", mem(GIB), move |ctx| {
            for done in [20, 30, 50] {
                ctx.set_progress(done, 100).unwrap();
                clock.advance(Duration::from_secs(1));
            }
            Ok(())
        }))
        .unwrap();
    let mut progress = Vec::new();
    let is_progress = |e: &QueueEvent| matches!(e, QueueEvent::Progress { .. } | QueueEvent::Finished { .. });
    while let QueueEvent::Progress { progress: p, .. } = r.until("progress", is_progress) {
        progress.push(p.done());
    }
    assert_eq!(progress, vec![20, 30, 50]);
    let v = r.queue.get(id).unwrap();
    assert_eq!(v.state, TaskState::Completed);
    assert!(v.progress.is_integrity_error(), "completed with 50 of 100 is never shown as 100 %");
}

#[test]
fn executors_can_pause_out_of_band_and_relay_progress() {
    let r = rig_with(QueueConfig::default(), |p| p.max_running = Some(1));
    let (gate0, cb0) = gated();
    let first = r.queue.submit(Task::new("first", mem(GIB), cb0)).unwrap();
    r.started(first);
    let (gate, cb) = gated();
    let id = r.queue.submit(Task::new("cmd", mem(2 * GIB), cb)).unwrap();
    assert_eq!(r.queue.set_running_paused(id, true), Err(crate::QueueError::NotStarted(id)));
    gate0.send(()).unwrap();
    r.started(id);
    r.queue.set_running_paused(id, true).unwrap();
    assert_eq!(r.queue.get(id).unwrap().state, TaskState::Paused);
    assert_eq!(r.reserved(), (1, 2 * GIB), "paused out of band, the reservation is kept");
    r.queue.set_running_paused(id, false).unwrap();
    assert_eq!(r.queue.get(id).unwrap().state, TaskState::Running);
    r.queue.report_progress(id, crate::progress::Progress::items(3, 10).unwrap()).unwrap();
    assert_eq!(r.queue.get(id).unwrap().progress.progress.unwrap().done(), 3);
    gate.send(()).unwrap();
    assert_eq!(r.finished(id), TaskState::Completed);
    assert_eq!(
        r.queue.report_progress(id, crate::progress::Progress::items(1, 1).unwrap()),
        Err(crate::QueueError::AlreadyEnded(id))
    );
}

#[test]
fn submit_paused_never_starts_until_resumed() {
    let rig = rig();
    // A running task ahead proves the dispatcher scanned past the paused one.
    let ran = Arc::new(AtomicUsize::new(0));
    let flag = Arc::clone(&ran);
    let paused = rig
        .queue
        .submit_paused(
            Task::new("p", mem(GIB), move |_| {
                flag.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
            .with_id(TaskId(7)),
        )
        .unwrap();
    assert_eq!(paused, TaskId(7));
    assert_eq!(rig.queue.get(paused).unwrap().state, TaskState::Paused);
    let other = rig.queue.submit(Task::new("q", mem(GIB), |_| Ok(()))).unwrap();
    assert_eq!(rig.finished(other), TaskState::Completed);
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    assert_eq!(rig.queue.get(paused).unwrap().state, TaskState::Paused);
    rig.queue.resume(paused).unwrap();
    assert_eq!(rig.finished(paused), TaskState::Completed);
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}

#[test]
fn a_small_gpu_task_passes_a_big_one_waiting_on_gpu_memory() {
    // 32 GiB RAM (29 to hand out), one 8 GiB GPU (7 after its reserve), 4 slots.
    let profile = HostProfile::new(32 * GIB, 8).with_gpu(Some(8 * GIB), false);
    let clock = Arc::new(FakeClock::new(MonoTime(1_000_000_000)));
    let probe = Arc::new(FakeProbe::new(profile.clone()).stamped_by(clock.clone()));
    let mut policy = HostPolicy::default_for(&profile);
    policy.gpu_slots = 4;
    let queue = TaskQueue::new(Governor::with_clock(policy, probe, clock).unwrap());
    let events = queue.subscribe();
    let gpu = |ram: u64, vram: u64| Estimate::builder().memory(ram).gpu_memory(vram).gpu_slots(1).build();
    let (ram_gate, ram_cb) = gated();
    let (gpu_gate, gpu_cb) = gated();
    let _ram_hog = queue.submit(Task::new("ram-hog", mem(28 * GIB), ram_cb)).unwrap();
    let _holder = queue.submit(Task::new("holder", gpu(GIB, 4 * GIB), gpu_cb)).unwrap();
    // `big` waits on GPU memory (3 GiB left), `small` on host memory.
    let big = queue.submit(Task::new("big", gpu(0, 5 * GIB), |_| Ok(()))).unwrap();
    let small = queue.submit(Task::new("small", gpu(2 * GIB, 2 * GIB), |_| Ok(()))).unwrap();
    let waits = |id: TaskId, reason: ReasonCode| loop {
        match events.recv_timeout(LIMIT).expect("a decision") {
            QueueEvent::Decision { id: x, reason: r, .. } if x == id && r == reason => break,
            _ => {}
        }
    };
    waits(big, ReasonCode::GpuMemory);
    waits(small, ReasonCode::Memory);
    // Host memory frees up: the next scan meets `big` (still short of GPU
    // memory) first; `small` needs less GPU memory and must not be skipped.
    ram_gate.send(()).unwrap();
    loop {
        match events.recv_timeout(LIMIT).expect("small finishes") {
            QueueEvent::Finished { id, .. } if id == small => break,
            QueueEvent::Finished { id, .. } => assert_ne!(id, big, "big cannot have run"),
            _ => {}
        }
    }
    assert_eq!(queue.get(big).unwrap().state, TaskState::Pending);
    gpu_gate.send(()).unwrap();
    queue.wait_idle();
}

#[test]
fn closing_the_queue_ends_every_event_stream() {
    // A subscriber (the daemon's event pump) blocks on `recv` with no
    // timeout and learns of the close from the stream ending. Keep the
    // subscribers after `close` and this test sees `Timeout`, not the end.
    let rig = rig();
    let (gate, cb) = gated();
    let id = rig.queue.submit(Task::new("runs at close", mem(GIB), cb)).unwrap();
    rig.started(id);
    drop(gate);
    rig.queue.close();
    loop {
        match rig.events.recv_timeout(LIMIT) {
            Ok(_) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                panic!("the stream outlived the queue's close")
            }
        }
    }
}

#[test]
fn a_task_skipped_by_a_queue_wide_wait_shows_that_reason() {
    let r = rig();
    let (release_a, a_cb) = gated();
    let a = r.queue.submit(Task::new("a", mem(10 * GIB), a_cb)).unwrap();
    r.started(a);
    let b = r.queue.submit(Task::new("b", mem(8 * GIB), |_: &mut crate::TaskContext| Ok(()))).unwrap();
    let c = r.queue.submit(Task::new("c", mem(8 * GIB), |_: &mut crate::TaskContext| Ok(()))).unwrap();
    for id in [b, c] {
        r.until(
            "waits on memory",
            |e| matches!(e, QueueEvent::Decision { id: x, reason: ReasonCode::Memory, .. } if *x == id),
        );
    }
    // Now every task waits on CPU pressure: b, evaluated first, says so;
    // c is skipped by the scan, yet its view must not keep `memory`.
    r.probe.update(|s| s.pressure.cpu = Some(50.0));
    r.clock.advance(Duration::from_millis(300));
    r.queue.resources_changed();
    r.until(
        "b waits on cpu pressure",
        |e| matches!(e, QueueEvent::Decision { id: x, reason: ReasonCode::CpuPressure, .. } if *x == b),
    );
    let view = r.queue.get(c).unwrap().last_decision.unwrap();
    assert_eq!(view.reason, ReasonCode::CpuPressure, "{view:?}");
    let snap = r.queue.snapshot();
    let c_view = snap.live.iter().find(|v| v.id == c).unwrap();
    assert_eq!(c_view.last_decision.as_ref().unwrap().reason, ReasonCode::CpuPressure);
    r.probe.update(|s| s.pressure.cpu = Some(0.0));
    r.clock.advance(Duration::from_millis(300));
    release_a.send(()).unwrap();
    r.queue.wait_idle();
}
