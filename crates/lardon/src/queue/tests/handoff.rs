//! The hand-off: a worker that finishes a task runs the dispatcher's scan
//! itself and starts the next admissible task on its own thread, under
//! the same order rules (docs/DESIGN.md §8). Each test makes every start
//! after the first a hand-off — the dispatcher sleeps untimed throughout
//! and runs no scan — and then checks one rule on that path.

use std::thread::ThreadId;

use super::*;

/// Start order and thread of every recorded callback.
type Log = Arc<Mutex<Vec<(TaskId, ThreadId)>>>;

fn recorded(log: &Log) -> impl FnOnce(&mut crate::TaskContext) -> crate::TaskResult + Send + use<> {
    let log = Arc::clone(log);
    move |ctx| {
        log.lock().unwrap().push((ctx.id(), std::thread::current().id()));
        Ok(())
    }
}

/// A recorded callback that then blocks until told to finish.
fn recorded_gate(
    log: &Log,
) -> (Sender<()>, impl FnOnce(&mut crate::TaskContext) -> crate::TaskResult + Send + use<>) {
    let (tx, rx) = channel::<()>();
    let log = Arc::clone(log);
    (tx, move |ctx: &mut crate::TaskContext| {
        log.lock().unwrap().push((ctx.id(), std::thread::current().id()));
        let _ = rx.recv();
        Ok(())
    })
}

impl Rig {
    /// Waits until the dispatcher sleeps untimed with every wake seen, and
    /// returns how many scans it has run so far.
    fn dispatcher_settled(&self) -> usize {
        let inner = &self.queue.inner;
        eventually("the dispatcher sleeps untimed", || inner.dispatch.asleep() == Some(false));
        inner.dispatcher_scans.load(Ordering::SeqCst)
    }

    fn dispatcher_scans(&self) -> usize {
        self.queue.inner.dispatcher_scans.load(Ordering::SeqCst)
    }
}

fn order(log: &Log) -> Vec<TaskId> {
    log.lock().unwrap().iter().map(|(id, _)| *id).collect()
}

/// Every start after the first ran on `first`'s thread.
fn all_on_one_thread(log: &Log) -> bool {
    let log = log.lock().unwrap();
    log.iter().all(|(_, t)| Some(t) == log.first().map(|(_, t)| t))
}

/// With one task allowed at a time, the worker that ends a task starts the
/// next ones itself: no dispatcher scan, no other thread.
///
/// To see it fail, make `dispatch::end_and_hand_off` skip its scan (end the
/// task, then `inner.wake_dispatcher()`): the dispatcher scans again.
#[test]
fn a_finishing_worker_runs_the_next_task_itself() {
    let r = rig_with(QueueConfig::default(), |p| p.max_running = Some(1));
    let log: Log = Arc::default();
    let (gate, first) = recorded_gate(&log);
    let a = r.queue.submit(Task::new("a", mem(GIB), first)).unwrap();
    r.started(a);
    let b = r.queue.submit(Task::new("b", mem(GIB), recorded(&log))).unwrap();
    let c = r.queue.submit(Task::new("c", mem(GIB), recorded(&log))).unwrap();
    r.until(
        "c waits for the running cap",
        |e| matches!(e, QueueEvent::Decision { id, reason: ReasonCode::MaxRunning, .. } if *id == c),
    );
    let scans = r.dispatcher_settled();
    gate.send(()).unwrap();
    assert_eq!(r.finished(c), TaskState::Completed);
    assert_eq!(order(&log), vec![a, b, c]);
    assert!(all_on_one_thread(&log), "b and c ran on a's worker: {:?}", log.lock().unwrap());
    assert_eq!(r.dispatcher_scans(), scans, "no dispatcher round trip per task");
    r.queue.wait_idle();
    assert_eq!(r.reserved(), (0, 0));
}

/// Priority then FIFO, paused tasks skipped, dependencies held back until
/// they resolve: the hand-off follows the dispatcher's order.
///
/// To see it fail, make the hand-off start the first pending task in key
/// order without the scan's checks (or skip the pause or dependency test
/// in `dispatch::scan_locked`): the paused task or the dependent starts
/// out of turn.
#[test]
fn hand_off_keeps_priority_fifo_pause_and_dependencies() {
    let r = rig_with(QueueConfig::default(), |p| p.max_running = Some(1));
    let log: Log = Arc::default();
    let (gate, first) = recorded_gate(&log);
    let a = r.queue.submit(Task::new("a", mem(GIB), first)).unwrap();
    r.started(a);
    let lo1 = r.queue.submit(Task::new("lo1", mem(GIB), recorded(&log))).unwrap();
    let lo2 = r.queue.submit(Task::new("lo2", mem(GIB), recorded(&log))).unwrap();
    let hi = r.queue.submit(Task::new("hi", mem(GIB), recorded(&log)).priority(3)).unwrap();
    let dep = r.queue.submit(Task::new("dep", mem(GIB), recorded(&log)).priority(5).after(lo1)).unwrap();
    let paused = r.queue.submit_paused(Task::new("paused", mem(GIB), recorded(&log)).priority(9)).unwrap();
    r.until(
        "lo2 waits for the running cap",
        |e| matches!(e, QueueEvent::Decision { id, reason: ReasonCode::MaxRunning, .. } if *id == lo2),
    );
    let scans = r.dispatcher_settled();
    gate.send(()).unwrap();
    assert_eq!(r.finished(lo2), TaskState::Completed);
    assert_eq!(order(&log), vec![a, hi, lo1, dep, lo2], "priority, FIFO, then the freed dependent");
    assert!(all_on_one_thread(&log));
    assert_eq!(r.dispatcher_scans(), scans, "every start was a hand-off");
    assert_eq!(r.queue.get(paused).unwrap().state, TaskState::Paused, "a paused task never starts");
    r.queue.resume(paused).unwrap();
    assert_eq!(r.finished(paused), TaskState::Completed);
    r.queue.wait_idle();
}

/// A failed dependency fails its dependents at the end of the task, and
/// the hand-off then starts the next task in order.
///
/// To see it fail, drop the dependency check from the scan: `dependent`
/// runs although `failing` failed.
#[test]
fn hand_off_fails_dependents_of_a_failed_task_and_moves_on() {
    let r = rig_with(QueueConfig::default(), |p| p.max_running = Some(1));
    let log: Log = Arc::default();
    let (gate, first) = recorded_gate(&log);
    let a = r.queue.submit(Task::new("a", mem(GIB), first)).unwrap();
    r.started(a);
    let failing = r.queue.submit(Task::new("failing", mem(GIB), |_| Err(TaskError::failed("no")))).unwrap();
    let dependent =
        r.queue.submit(Task::new("dependent", mem(GIB), recorded(&log)).priority(1).after(failing)).unwrap();
    let last = r.queue.submit(Task::new("last", mem(GIB), recorded(&log))).unwrap();
    r.until(
        "last waits for the running cap",
        |e| matches!(e, QueueEvent::Decision { id, reason: ReasonCode::MaxRunning, .. } if *id == last),
    );
    let scans = r.dispatcher_settled();
    gate.send(()).unwrap();
    assert_eq!(r.finished(last), TaskState::Completed);
    assert_eq!(r.queue.get(dependent).unwrap().state, TaskState::Failed);
    assert_eq!(order(&log), vec![a, last], "the dependent never ran");
    assert_eq!(r.dispatcher_scans(), scans);
    r.queue.wait_idle();
}

/// WAIT bypass and the anti-starvation hold on the hand-off path: a big
/// head waits for memory and a small task behind it starts (bypass); once
/// the head has been bypassed past the bound, a worker's hand-off keeps
/// room for it — a later small task that would fit is held back — and the
/// head starts first when enough is freed.
///
/// To see it fail, pass no hold to `gov_scan.reserve` in
/// `dispatch::scan_locked`: `small2` starts at the first hand-off, before
/// the head.
#[test]
fn hand_off_bypasses_a_waiting_head_and_keeps_its_hold() {
    // 14 GiB to hand out; memory waits are host waits (the dispatcher
    // re-samples for them), so this test does not count scans: it checks
    // the order the hand-offs produce.
    let r =
        rig_with(QueueConfig { starvation_bound: Duration::from_secs(30), ..QueueConfig::default() }, |_| {});
    // Admission order, from the events (emitted under the queue lock; the
    // callbacks themselves run on several threads).
    let starts = r.queue.subscribe();
    let log: Log = Arc::default();
    let (gate_big, big_cb) = recorded_gate(&log);
    let big = r.queue.submit(Task::new("big", mem(8 * GIB), big_cb)).unwrap();
    r.started(big);
    let (gate_r, r_cb) = recorded_gate(&log);
    let runner = r.queue.submit(Task::new("runner", mem(2 * GIB), r_cb)).unwrap();
    r.started(runner);
    // 4 GiB free: the head (6 GiB) waits, small1 (2 GiB) passes it.
    let head = r.queue.submit(Task::new("head", mem(6 * GIB), recorded(&log))).unwrap();
    let (gate_s1, s1_cb) = recorded_gate(&log);
    let small1 = r.queue.submit(Task::new("small1", mem(2 * GIB), s1_cb)).unwrap();
    r.started(small1);
    // Past the bound: the head gets a hold; small2 (2 GiB, and 2 GiB free)
    // is held back for it.
    r.clock.advance(Duration::from_secs(31));
    let small2 = r.queue.submit(Task::new("small2", mem(2 * GIB), recorded(&log))).unwrap();
    r.until(
        "small2 held",
        |e| matches!(e, QueueEvent::Decision { id, reason: ReasonCode::HeldForHead, .. } if *id == small2),
    );
    // runner ends: 4 GiB free, the head still cannot start; the hand-off
    // keeps its room, so small2 must not start either.
    gate_r.send(()).unwrap();
    assert_eq!(r.finished(runner), TaskState::Completed);
    // (`get` takes the queue lock, which the worker holds until its
    // hand-off scan is done.)
    assert_eq!(r.queue.get(small2).unwrap().state, TaskState::Pending, "small2 held at the hand-off");
    // small1 ends: 6 GiB free, the head starts.
    gate_s1.send(()).unwrap();
    r.started(head);
    gate_big.send(()).unwrap();
    assert_eq!(r.finished(small2), TaskState::Completed);
    let order: Vec<TaskId> = starts
        .try_iter()
        .filter_map(|e| match e {
            QueueEvent::Started { id, .. } => Some(id),
            _ => None,
        })
        .collect();
    let pos = |id| order.iter().position(|&x| x == id).unwrap();
    assert!(pos(small1) < pos(head), "small1 bypassed the waiting head: {order:?}");
    assert!(pos(head) < pos(small2), "small2 waited for the starving head: {order:?}");
    r.queue.wait_idle();
    assert_eq!(r.reserved(), (0, 0));
}

/// A hand-off that leaves a task waiting on host state hands the
/// re-sampling to the dispatcher: asleep untimed (nothing waited on the
/// host), it is woken and sleeps with the sample interval, so the task
/// starts once the host clears, with no other event. Here `a` holds every
/// CPU of the pool, so `b` first waits for a CPU (not a host wait); the
/// host's 1-minute load is 4.5, all of it `a`'s own. When `a` ends, the
/// same sample reads as 4.5 of foreign load, so `b` waits on the load
/// gate (a host wait) — with no new sample and a quiet release, only the
/// hand-off can tell the dispatcher.
///
/// To see it fail, drop the dispatcher wake at the end of
/// `dispatch::end_and_hand_off`: the dispatcher sleeps on untimed and `b`
/// never starts.
#[test]
fn a_hand_off_leaving_a_host_wait_starts_the_dispatchers_timer() {
    let r =
        rig_with(QueueConfig { sample_interval: Duration::from_millis(1), ..QueueConfig::default() }, |p| {
            p.max_load_ratio = Some(1.0)
        });
    let every_cpu = Estimate::builder().memory(GIB).cpus(4).cpus_exact().build();
    let (gate, a_cb) = gated();
    let a = r.queue.submit(Task::new("a", every_cpu, a_cb)).unwrap();
    r.started(a);
    let b =
        r.queue.submit(Task::new("b", Estimate::builder().memory(GIB).cpus(1).build(), |_| Ok(()))).unwrap();
    r.until(
        "b waits for a CPU",
        |e| matches!(e, QueueEvent::Decision { id, reason: ReasonCode::Cpu, .. } if *id == b),
    );
    // The load `a` causes shows up; a fresh sample sees it, but as ours.
    r.probe.update(|s| s.load.one = 4.5);
    r.queue.resources_changed();
    r.dispatcher_settled();
    assert_eq!(r.queue.get(b).unwrap().last_decision.unwrap().reason, ReasonCode::Cpu);
    gate.send(()).unwrap();
    r.until(
        "b waits on the load gate",
        |e| matches!(e, QueueEvent::Decision { id, reason: ReasonCode::CpuLoad, .. } if *id == b),
    );
    let inner = &r.queue.inner;
    eventually("the dispatcher re-samples on its timer", || inner.dispatch.asleep() == Some(true));
    r.probe.update(|s| s.load.one = 0.0);
    assert_eq!(r.finished(b), TaskState::Completed);
    r.queue.wait_idle();
}

/// A task's scratch lease is cleaned up before the task is seen to end:
/// when its `Finished` event arrives, its lease directory is gone and a
/// drain it was the last lease of is complete (SAFE_TO_UNPLUG), hand-off
/// or not.
///
/// To see it fail, let `dispatch::end_and_hand_off` release a reservation
/// with a scratch lease inside its scan like any other: the cleanup then
/// runs after the task ended, and the volume is still DRAINING here.
#[test]
fn a_scratch_lease_is_settled_before_its_task_is_seen_to_end() {
    let r = rig();
    let volume = Arc::new(crate::FakeVolume::new("/mnt/fast", 42, 100 << 20));
    r.queue.governor().add_volume("fast", volume.clone(), None).unwrap();
    let (gate, rx) = channel::<()>();
    let (entered_tx, entered) = channel::<()>();
    let task = Task::new("leases", Estimate::builder().memory(GIB).scratch(1 << 20).build(), move |_| {
        entered_tx.send(()).unwrap();
        let _ = rx.recv();
        Ok(())
    });
    let id = r.queue.submit(task).unwrap();
    // The callback runs once its lease directory exists.
    entered.recv().unwrap();
    assert_eq!(volume.lease_dirs().len(), 1);
    assert_eq!(r.queue.governor().drain("fast").unwrap().state, crate::VolumeState::Draining);
    gate.send(()).unwrap();
    assert_eq!(r.finished(id), TaskState::Completed);
    assert!(volume.lease_dirs().is_empty(), "the lease directory is gone");
    assert_eq!(r.queue.governor().volume("fast").unwrap().state, crate::VolumeState::SafeToUnplug);
    r.queue.wait_idle();
}
