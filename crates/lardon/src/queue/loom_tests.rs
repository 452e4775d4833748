//! loom models of the real queue: under `--cfg loom` the queue's lock and
//! condition variable, its [`Signal`](super::signal::Signal)s, the
//! Governor, the dispatcher thread and the worker pool all run on loom's
//! primitives (`crate::sync`), so each model drives the actual
//! `TaskQueue::submit` / `cancel` / `close`, `dispatch::run` and
//! `run_callback` code through every interleaving loom explores. A lost
//! wake-up shows up as a loom deadlock, a broken rule as a failed
//! assertion.
//!
//! Run (as `scripts/test.sh` does, debug assertions on so the engine's
//! `debug_assert!` invariants are checked too):
//! `RUSTFLAGS="--cfg loom -C debug-assertions" CARGO_TARGET_DIR=target/loom
//! cargo test -p lardon --release --lib loom_tests`.
//!
//! The fake probe and clock use std primitives; they are not modelled and
//! never block. loom allows 5 threads: the test's own, the dispatcher, and
//! at most three more (workers or racing callers).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc as StdArc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::Receiver;

use loom::thread;

use super::{QueueEvent, Task, TaskError, TaskId, TaskQueue, TaskState};
use crate::{Estimate, FakeClock, FakeProbe, Governor, HostPolicy, HostProfile, MonoTime};

const GIB: u64 = 1 << 30;

/// Bounded exploration: the real queue takes many locks per step, so an
/// unbounded search would not finish; two preemptions cover the races
/// these models are about (each needs at most two forced switches).
fn model(f: impl Fn() + Sync + Send + 'static) {
    // The engine's `debug_assert!` invariants are part of what is checked.
    assert!(cfg!(debug_assertions), "run the loom models with RUSTFLAGS=\"--cfg loom -C debug-assertions\"");
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.max_branches = 100_000;
    builder.check(f);
}

/// A queue over a 16 GiB / 8 CPU fake host with a 3 GiB reserve: 13 GiB
/// to hand out. The clock never moves and the probe's snapshot is taken
/// at time 0, so every sample is fresh and the host never changes.
fn queue() -> TaskQueue {
    let profile = HostProfile::new(16 * GIB, 8);
    let mut policy = HostPolicy::default_for(&profile);
    policy.memory_reserve = 3 * GIB;
    policy.emergency_floor = GIB;
    policy.memory_caution = None;
    // The 4-CPU pool these models are written against (4 of 8 reserved),
    // whatever the default reserve.
    policy.cpu_reserve = 4;
    let clock = StdArc::new(FakeClock::new(MonoTime(0)));
    let governor = Governor::with_clock(policy, FakeProbe::new(profile), clock).unwrap();
    TaskQueue::new(governor)
}

fn mem(bytes: u64) -> Estimate {
    Estimate::builder().memory(bytes).build()
}

/// `n` whole CPUs, not reducible (the pool has 4).
fn cpus(n: u32) -> Estimate {
    Estimate::builder().memory(GIB).cpus(n).cpus_exact().build()
}

/// Counts its drops: a task's callback (and what it owns) must be dropped
/// exactly once, whether it ran or not.
struct DropCounter(StdArc<AtomicUsize>);
impl Drop for DropCounter {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn finished_events(events: &Receiver<QueueEvent>, id: TaskId) -> usize {
    events.try_iter().filter(|e| matches!(e, QueueEvent::Finished { id: x, .. } if *x == id)).count()
}

/// A cancel on another thread racing the dispatcher's admission of the
/// task: whichever wins, the task ends exactly once, its callback is
/// dropped exactly once, and after `close` the Governor holds nothing.
///
/// To see it fail, make `TaskQueue::cancel` read `started` under one lock
/// and `finish` the task under a second one (so the dispatcher can start it
/// in between): the task is then ended while its callback still runs, and
/// `close` returns with the reservation still held.
#[test]
fn cancel_racing_an_admission_releases_exactly_once() {
    model(|| {
        let q = StdArc::new(queue());
        let events = q.subscribe();
        let drops = StdArc::new(AtomicUsize::new(0));
        let ran = StdArc::new(AtomicUsize::new(0));
        let (guard, counter) = (DropCounter(StdArc::clone(&drops)), StdArc::clone(&ran));
        let id = q
            .submit(Task::new("t", mem(4 * GIB), move |ctx| {
                let _guard = guard;
                counter.fetch_add(1, Ordering::SeqCst);
                ctx.checkpoint()
            }))
            .unwrap();
        let canceller = {
            let q = StdArc::clone(&q);
            thread::spawn(move || q.cancel(id))
        };
        let view = q.wait(id).unwrap();
        let cancelled = canceller.join().unwrap();
        q.close();
        assert_eq!(q.governor().availability().reservations, 0, "close returns only after the release");
        assert_eq!(drops.load(Ordering::SeqCst), 1, "the callback is dropped exactly once");
        assert_eq!(finished_events(&events, id), 1, "the task ends exactly once");
        let runs = ran.load(Ordering::SeqCst);
        match view.state {
            TaskState::Cancelled => assert!(runs <= 1),
            // The callback got past its checkpoint before the cancel landed
            // (the cancel then finds the task ended, or running).
            TaskState::Completed => assert_eq!(runs, 1),
            other => panic!("ended {other}"),
        }
        // A refused cancel means the task had already ended: completed.
        if cancelled.is_err() {
            assert_eq!(view.state, TaskState::Completed);
        }
    });
}

/// `withdraw` on another thread racing the dispatcher's admission of the
/// task (a daemon shipping a waiting task elsewhere): exactly one of "it
/// ran here" and "it was withdrawn" happens. Withdrawn, it never runs and
/// ends no way here (no event); otherwise it runs once and ends once. Its
/// callback is dropped exactly once, and after `close` the Governor holds
/// nothing.
///
/// To see it fail, make `TaskQueue::withdraw` read `started` under one
/// lock and remove the entry under a second one (so the dispatcher can
/// start it in between): the task then runs although it was withdrawn.
#[test]
fn withdraw_racing_an_admission_runs_it_here_or_takes_it_never_both() {
    model(|| {
        let q = StdArc::new(queue());
        let events = q.subscribe();
        let drops = StdArc::new(AtomicUsize::new(0));
        let ran = StdArc::new(AtomicUsize::new(0));
        let (guard, counter) = (DropCounter(StdArc::clone(&drops)), StdArc::clone(&ran));
        let id = q
            .submit(Task::new("t", mem(4 * GIB), move |_| {
                let _guard = guard;
                counter.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }))
            .unwrap();
        let taker = {
            let q = StdArc::clone(&q);
            thread::spawn(move || q.withdraw(id))
        };
        let withdrawn = taker.join().unwrap();
        q.close();
        assert_eq!(q.governor().availability().reservations, 0, "close returns only after the release");
        assert_eq!(drops.load(Ordering::SeqCst), 1, "the callback is dropped exactly once");
        let (runs, ends) = (ran.load(Ordering::SeqCst), finished_events(&events, id));
        match withdrawn {
            Ok(_) => assert_eq!((runs, ends), (0, 0), "withdrawn: never run, never ended here"),
            // Started (or already ended) first: it ran here, once.
            Err(e) => assert_eq!((runs, ends), (1, 1), "{e}"),
        }
    });
}

/// `close` racing the admission and the run of a task: close cancels it
/// if still pending, otherwise waits for its callback to return; when
/// `close` returns every reservation is released and the callback, if it
/// started, has returned.
///
/// To see it fail, drop the `self.wait_idle()` call from
/// `TaskQueue::close`: close then returns while the callback may still
/// run and hold its reservation.
#[test]
fn close_racing_a_running_task_waits_for_its_end() {
    model(|| {
        let q = queue();
        let events = q.subscribe();
        let drops = StdArc::new(AtomicUsize::new(0));
        let returned = StdArc::new(AtomicUsize::new(0));
        let (guard, done) = (DropCounter(StdArc::clone(&drops)), StdArc::clone(&returned));
        let id = q
            .submit(Task::new("t", mem(4 * GIB), move |ctx| {
                let _guard = guard;
                let result = ctx.checkpoint();
                done.fetch_add(1, Ordering::SeqCst);
                result
            }))
            .unwrap();
        q.close();
        let after = q.governor().availability();
        assert_eq!(after.reservations, 0, "close returns only after the release");
        let started = events
            .try_iter()
            .fold(false, |seen, e| seen || matches!(e, QueueEvent::Started { id: x, .. } if x == id));
        assert_eq!(returned.load(Ordering::SeqCst), usize::from(started), "a started callback has returned");
        assert_eq!(drops.load(Ordering::SeqCst), 1, "the callback is dropped exactly once");
        let view = q.get(id).unwrap();
        assert!(matches!(view.state, TaskState::Cancelled | TaskState::Completed), "{view:?}");
        assert!(q.submit(Task::new("late", mem(GIB), |_| Ok(()))).is_err(), "closed: refused");
    });
}

/// CPUs held outside the queue (a daemon's reservation, another queue's)
/// are released on another thread while the dispatcher scans, records the
/// task's WAIT and goes to sleep: the release is never lost, the waiting
/// task is admitted and completes. (CPUs, not memory: a memory wait also
/// re-samples the host on a timer, which would hide a lost wake-up.)
///
/// To see it fail (a loom deadlock), make `dispatch::run` ignore the
/// Governor waker (`let _ = inner.governor.register_waker(generation,
/// &waker);` and always sleep): a release after the scan wakes nobody.
#[test]
fn release_racing_the_dispatcher_sleep_is_never_lost() {
    model(|| {
        let q = queue();
        let held = q.governor().reserve_available(&cpus(3)).unwrap();
        let id = q.submit(Task::new("waits", cpus(3), |_| Ok(()))).unwrap();
        let releaser = thread::spawn(move || drop(held));
        let view = q.wait(id).unwrap();
        releaser.join().unwrap();
        assert_eq!(view.state, TaskState::Completed, "{view:?}");
        q.close();
        assert_eq!(q.governor().availability().reservations, 0);
    });
}

/// A submit from another thread racing the dispatcher's first scan and
/// sleep: the task is always seen and run.
///
/// To see it fail (a loom deadlock), drop the `wake_dispatcher()` call at
/// the end of `TaskQueue::submit_inner`.
#[test]
fn submit_racing_the_dispatcher_is_never_lost() {
    model(|| {
        let q = StdArc::new(queue());
        let submitter = {
            let q = StdArc::clone(&q);
            thread::spawn(move || q.submit(Task::new("t", mem(GIB), |_| Ok(()))).unwrap())
        };
        let id = submitter.join().unwrap();
        assert_eq!(q.wait(id).unwrap().state, TaskState::Completed);
        q.close();
    });
}

/// Two submits racing each other and the dispatcher: the second one,
/// finding the first still fresh, sends no wake of its own (the first's
/// wake brings a scan that sees both), and both tasks always run.
///
/// To see it fail (a loom deadlock), let a submit skip the wake whenever
/// any task is pending (`st.pending.len() > 0` instead of the fresh list
/// being empty in `insert_locked`): a second submit arriving after the
/// dispatcher's scan, with the first task still pending, is never seen.
#[test]
fn a_second_submit_rides_the_first_ones_wake() {
    model(|| {
        let q = StdArc::new(queue());
        let submitter = {
            let q = StdArc::clone(&q);
            thread::spawn(move || q.submit(Task::new("a", mem(GIB), |_| Ok(()))).unwrap())
        };
        let b = q.submit(Task::new("b", mem(GIB), |_| Ok(()))).unwrap();
        let a = submitter.join().unwrap();
        for id in [a, b] {
            assert_eq!(q.wait(id).unwrap().state, TaskState::Completed);
        }
        q.close();
    });
}

/// A running task paused and then cancelled: the callback's checkpoint,
/// sleeping on the pause (the task keeps its reservation), races the
/// cancel; it is always woken, returns `Cancelled`, and the reservation is
/// released exactly once.
///
/// To see it fail (a loom deadlock), drop the `self.inner.tasks_left(idle)`
/// call from `TaskQueue::cancel`: a checkpoint about to sleep on the pause
/// is never told about the cancel.
#[test]
fn cancel_wakes_a_paused_checkpoint() {
    model(|| {
        let q = queue();
        let (entered_tx, entered_rx) = loom::sync::mpsc::channel::<()>();
        let (paused_tx, paused_rx) = loom::sync::mpsc::channel::<()>();
        let id = q
            .submit(Task::new("paused", mem(GIB), move |ctx| {
                entered_tx.send(()).unwrap();
                paused_rx.recv().unwrap();
                // Paused now: held here until the cancel.
                ctx.checkpoint()?;
                Err(TaskError::failed("the checkpoint returned without a cancel"))
            }))
            .unwrap();
        entered_rx.recv().unwrap();
        q.pause(id).unwrap();
        paused_tx.send(()).unwrap();
        q.cancel(id).unwrap();
        let view = q.wait(id).unwrap();
        assert_eq!(view.state, TaskState::Cancelled, "{view:?}");
        q.close();
        assert_eq!(q.governor().availability().reservations, 0);
    });
}

/// The hand-off: a task waiting for CPUs the running task holds starts only
/// through that task's worker, which releases its reservation and runs the
/// scan itself (no dispatcher round trip), racing the dispatcher's own scan
/// and sleep. The waiting task always runs, on the finishing task's thread,
/// and nothing stays reserved.
///
/// To see it fail, make `dispatch::end_and_hand_off` skip its scan
/// (`Ok(_) if !st.closing => Outcome::nothing(false)`): the release wakes
/// nobody (the scan's publish spares the dispatcher's waker) and loom
/// reports a deadlock.
#[test]
fn a_finishing_worker_hands_its_thread_to_the_waiting_task() {
    model(|| {
        let q = queue();
        let (go_tx, go_rx) = loom::sync::mpsc::channel::<()>();
        let first_thread = StdArc::new(std::sync::Mutex::new(None));
        let (seen_first, seen_next) = (StdArc::clone(&first_thread), StdArc::clone(&first_thread));
        let running = q
            .submit(Task::new("runs", cpus(3), move |_| {
                *seen_first.lock().unwrap() = Some(thread::current().id());
                go_rx.recv().unwrap();
                Ok(())
            }))
            .unwrap();
        let waits = q
            .submit(Task::new("waits", cpus(3), move |_| {
                let first = *seen_next.lock().unwrap();
                assert_eq!(first, Some(thread::current().id()), "started by the hand-off, on its thread");
                Ok(())
            }))
            .unwrap();
        go_tx.send(()).unwrap();
        assert_eq!(q.wait(waits).unwrap().state, TaskState::Completed);
        assert_eq!(q.get(running).unwrap().state, TaskState::Completed);
        q.close();
        assert_eq!(q.governor().availability().reservations, 0);
    });
}

/// A hand-off racing a release by another thread (a reservation held
/// outside the queue): whichever comes first, the waiting task is started
/// — by the hand-off if the outside release landed before its scan, else
/// by the dispatcher, whose waker the hand-off's quiet publish kept
/// registered. A lost wake-up is a loom deadlock.
///
/// To see it fail, make `Ledger::take_wakers` drop the spared waker
/// instead of keeping it registered (`self.wakers.clear()` after taking
/// the others): the outside release then wakes nobody (a loom deadlock).
#[test]
fn hand_off_racing_an_outside_release_loses_no_wake() {
    model(|| {
        let q = queue();
        let held = q.governor().reserve_available(&cpus(2)).unwrap();
        let (go_tx, go_rx) = loom::sync::mpsc::channel::<()>();
        let running = q
            .submit(Task::new("runs", cpus(2), move |_| {
                go_rx.recv().unwrap();
                Ok(())
            }))
            .unwrap();
        // Needs 3 of the 4 CPUs: both the task and the outside holder must go.
        let waits = q.submit(Task::new("waits", cpus(3), |_| Ok(()))).unwrap();
        let releaser = thread::spawn(move || drop(held));
        go_tx.send(()).unwrap();
        assert_eq!(q.wait(waits).unwrap().state, TaskState::Completed);
        releaser.join().unwrap();
        assert_eq!(q.get(running).unwrap().state, TaskState::Completed);
        q.close();
        assert_eq!(q.governor().availability().reservations, 0);
    });
}
