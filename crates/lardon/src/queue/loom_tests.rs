//! loom models of the dispatcher hand-off, on the real primitives: the
//! queue's [`Signal`] epoch protocol and the Governor's generation and
//! wakers. Each model is the protocol one queue path follows, cut to the
//! steps that race (the full queue runs on OS threads, which loom cannot
//! drive): a lost wake-up shows up as a loom deadlock, a double release as
//! a failed assertion.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p lardon --release --lib loom_tests`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc as StdArc;
use std::task::Waker;

use loom::sync::Arc;
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::thread;

use super::signal::Signal;
use crate::{Estimate, FakeProbe, Governor, HostPolicy, HostProfile};

const GIB: u64 = 1 << 30;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.check(f);
}

fn governor() -> Governor {
    // 16 GiB − 3 GiB reserve = 13 GiB to hand out; the FakeProbe's
    // snapshot is taken at time 0 and the system clock is past it but
    // well within a second in a model run.
    let profile = HostProfile::new(16 * GIB, 8);
    let mut policy = HostPolicy::default_for(&profile);
    policy.memory_caution = None;
    let clock = StdArc::new(crate::FakeClock::new(crate::MonoTime(0)));
    Governor::with_clock(policy, FakeProbe::new(profile), clock).unwrap()
}

fn mem(bytes: u64) -> Estimate {
    Estimate::builder().memory(bytes).build()
}

/// The dispatcher's sleep (read epoch and generation, scan, register the
/// waker, wait) racing a release on another thread: the waiting task is
/// always admitted in the end.
#[test]
fn release_racing_the_dispatcher_sleep_is_never_lost() {
    model(|| {
        let gov = governor();
        let held = gov.reserve_available(&mem(8 * GIB)).unwrap();
        let signal = StdArc::new(Signal::default());
        let releaser = thread::spawn(move || drop(held));
        let waker = Waker::from(StdArc::clone(&signal));
        loop {
            let epoch = signal.epoch();
            let generation = gov.generation();
            if let Ok(r) = gov.reserve_available(&mem(8 * GIB)) {
                drop(r);
                break;
            }
            if gov.register_waker(generation, &waker) {
                signal.wait(epoch, None);
            }
        }
        releaser.join().unwrap();
        assert_eq!(gov.availability().reservations, 0);
    });
}

/// A submit (state change under a lock, then a bump) racing the
/// dispatcher's check-then-sleep: the epoch read before the check means the
/// dispatcher never sleeps through the submit.
#[test]
fn submit_racing_the_dispatcher_check_is_never_lost() {
    model(|| {
        let signal = StdArc::new(Signal::default());
        let pending = Arc::new(AtomicUsize::new(0));
        let submitter = {
            let (signal, pending) = (StdArc::clone(&signal), Arc::clone(&pending));
            thread::spawn(move || {
                pending.fetch_add(1, Ordering::SeqCst);
                signal.bump();
            })
        };
        loop {
            let epoch = signal.epoch();
            if pending.load(Ordering::SeqCst) == 1 {
                break;
            }
            signal.wait(epoch, None);
        }
        submitter.join().unwrap();
    });
}

/// A cancel racing an admission: the admitted reservation is released
/// exactly once whichever wins, and the Governor ends with nothing held.
#[test]
fn cancel_racing_an_admission_releases_exactly_once() {
    model(|| {
        let gov = governor();
        let cancelled = Arc::new(AtomicBool::new(false));
        let canceller = {
            let cancelled = Arc::clone(&cancelled);
            thread::spawn(move || cancelled.store(true, Ordering::SeqCst))
        };
        let admitted = gov.reserve_available(&mem(4 * GIB)).unwrap();
        let id = admitted.id();
        if cancelled.load(Ordering::SeqCst) {
            // Cancelled before start: the dispatcher drops the grant.
            drop(admitted);
        } else {
            // Started: the task releases at its end; a second release by id
            // (a daemon's cancel) is refused.
            admitted.release().unwrap();
        }
        assert!(gov.release_id(id).is_err(), "released exactly once");
        canceller.join().unwrap();
        assert_eq!(gov.availability().reservations, 0);
    });
}

/// `close` racing a running task: close sets the cancel flag and bumps the
/// task signal, then waits (epoch protocol) for the running count to reach
/// zero; the task's checkpoint sees the flag, releases and ends.
#[test]
fn close_racing_a_running_task_waits_for_its_end() {
    model(|| {
        let gov = governor();
        let reservation = gov.reserve_available(&mem(GIB)).unwrap();
        let signal = StdArc::new(Signal::default());
        let cancel = Arc::new(AtomicBool::new(false));
        let running = Arc::new(AtomicUsize::new(1));
        let task = {
            let (signal, cancel, running) =
                (StdArc::clone(&signal), Arc::clone(&cancel), Arc::clone(&running));
            thread::spawn(move || {
                // The callback's loop: checkpoint until cancelled.
                loop {
                    let epoch = signal.epoch();
                    if cancel.load(Ordering::SeqCst) {
                        break;
                    }
                    signal.wait(epoch, None);
                }
                drop(reservation);
                running.fetch_sub(1, Ordering::SeqCst);
                signal.bump();
            })
        };
        // close()
        cancel.store(true, Ordering::SeqCst);
        signal.bump();
        loop {
            let epoch = signal.epoch();
            if running.load(Ordering::SeqCst) == 0 {
                break;
            }
            signal.wait(epoch, None);
        }
        assert_eq!(gov.availability().reservations, 0, "close returns only after the release");
        task.join().unwrap();
    });
}
