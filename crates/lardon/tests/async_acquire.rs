//! The async face (`--features async`): `Governor::acquire(estimate).await`
//! woken by the generation, tested with a hand-written executor.
#![cfg(feature = "async")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};

use lardon::{
    Acquire, Alternative, DecisionKind, Envelope, Estimate, FakeClock, FakeProbe, Governor, HostPolicy,
    HostProfile, MonoTime, ReasonCode,
};

const GIB: u64 = 1 << 30;

/// Unparks the blocked thread and counts wake-ups.
struct ThreadWaker {
    thread: Thread,
    wakes: AtomicUsize,
}

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
        self.thread.unpark();
    }
}

/// A minimal executor: polls on this thread, parks between wake-ups.
/// Returns the output and how many times the future was polled.
fn block_on<F: Future>(future: F) -> (F::Output, usize) {
    let waker = Arc::new(ThreadWaker { thread: thread::current(), wakes: AtomicUsize::new(0) });
    let as_waker = Waker::from(waker.clone());
    let mut cx = Context::from_waker(&as_waker);
    let mut future = pin!(future);
    let mut polls = 0;
    loop {
        polls += 1;
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return (out, polls);
        }
        // park() may return spuriously; the loop just polls again.
        thread::park();
    }
}

/// Polls once with `waker`.
fn poll_once<F: Future + Unpin>(future: &mut F, waker: &Waker) -> Poll<F::Output> {
    Pin::new(future).poll(&mut Context::from_waker(waker))
}

/// 16 GiB, 8 CPUs, custom policy with a 2 GiB reserve: 14 GiB to reserve.
fn governor() -> Governor {
    let profile = HostProfile::new(16 * GIB, 8);
    let clock = Arc::new(FakeClock::new(MonoTime(1_000_000_000)));
    let probe = FakeProbe::new(profile.clone()).stamped_by(clock.clone());
    let mut policy = HostPolicy::default_for(&profile);
    policy.memory_reserve = 2 * GIB;
    policy.emergency_floor = GIB;
    policy.memory_caution = None;
    Governor::with_clock(policy, probe, clock).unwrap()
}

fn memory(bytes: u64) -> Estimate {
    Estimate::builder().memory(bytes).build()
}

#[test]
fn acquire_is_send_and_unpin() {
    fn check<T: Send + Unpin + 'static>() {}
    check::<Acquire>();
}

#[test]
fn a_fitting_estimate_resolves_at_once() {
    let gov = governor();
    let (r, polls) = block_on(gov.acquire(memory(4 * GIB)));
    let r = r.unwrap();
    assert_eq!((r.contract().memory, polls), (4 * GIB, 1));
    assert_eq!(gov.availability().memory_reserved, 4 * GIB);
    drop(r);
    assert_eq!(gov.availability().reservations, 0);
}

#[test]
fn a_rejected_estimate_resolves_at_once_with_the_reject() {
    let gov = governor();
    gov.sample().unwrap();
    let g = gov.generation();
    let (invalid, polls) = block_on(gov.acquire(Estimate::builder().batch(0, 1).build()));
    let d = invalid.unwrap_err();
    assert_eq!((d.kind(), d.reason(), polls), (DecisionKind::Reject, ReasonCode::InvalidEstimate, 1));
    let (impossible, _) = block_on(gov.acquire(memory(15 * GIB)));
    let d = impossible.unwrap_err();
    assert_eq!((d.kind(), d.reason()), (DecisionKind::Reject, ReasonCode::Impossible));
    assert_eq!(gov.availability().reservations, 0);
    assert_eq!(gov.generation(), g, "REJECT never moves the generation");
}

/// A waiting acquire completes after another reservation is released from
/// another thread; the release (not a poll loop) wakes it.
#[test]
fn a_waiting_acquire_completes_after_a_release_on_another_thread() {
    let gov = governor();
    let held = gov.reserve_available(&memory(10 * GIB)).unwrap();
    let (pending_tx, pending_rx) = mpsc::channel();
    let waiter = {
        let gov = gov.clone();
        thread::spawn(move || {
            // Tell the releaser once the first poll has returned Pending.
            let mut first = true;
            let mut acquire = gov.acquire(memory(8 * GIB));
            let future = std::future::poll_fn(move |cx| {
                let poll = Pin::new(&mut acquire).poll(cx);
                if first {
                    first = false;
                    assert!(poll.is_pending(), "8 GiB cannot fit next to 10 GiB of 14");
                    pending_tx.send(()).unwrap();
                }
                poll
            });
            block_on(future)
        })
    };
    pending_rx.recv().unwrap();
    assert_eq!(gov.availability().reservations, 1, "a pending acquire reserves nothing");
    let releaser = thread::spawn(move || drop(held));
    releaser.join().unwrap();
    let (r, polls) = waiter.join().unwrap();
    let r = r.unwrap();
    assert_eq!(r.contract().memory, 8 * GIB);
    assert!(polls >= 2);
    let a = gov.availability();
    assert_eq!((a.reservations, a.memory_reserved), (1, 8 * GIB));
}

/// Dropping a pending future reserves nothing and leaks nothing: its waker
/// is released at the next generation change.
#[test]
fn dropping_a_pending_acquire_leaks_nothing() {
    let gov = governor();
    let held = gov.reserve_available(&memory(10 * GIB)).unwrap();
    let before = gov.availability();
    let waker = Arc::new(ThreadWaker { thread: thread::current(), wakes: AtomicUsize::new(0) });
    let as_waker = Waker::from(waker.clone());
    let mut acquire = gov.acquire(memory(8 * GIB));
    assert!(poll_once(&mut acquire, &as_waker).is_pending());
    assert!(poll_once(&mut acquire, &as_waker).is_pending(), "re-polling registers no second waker");
    drop(acquire);
    drop(as_waker);
    assert_eq!(gov.availability(), before, "nothing reserved, generation unchanged");
    assert_eq!(Arc::strong_count(&waker), 2, "ours and the Governor's registration");
    drop(held);
    assert_eq!(waker.wakes.load(Ordering::SeqCst), 1, "one spurious wake-up, then forgotten");
    assert_eq!(Arc::strong_count(&waker), 1, "the Governor keeps no waker");
    let a = gov.availability();
    assert_eq!((a.reservations, a.memory_reserved), (0, 0));
}

/// Many concurrent acquires against a budget for two at a time all
/// complete, one by one, as the holders release.
#[test]
fn queued_acquires_all_complete() {
    let gov = governor();
    let done = Arc::new(Mutex::new(Vec::new()));
    let handles: Vec<_> = (0..6)
        .map(|i| {
            let gov = gov.clone();
            let done = done.clone();
            thread::spawn(move || {
                let (r, _) = block_on(gov.acquire(memory(6 * GIB)));
                let r = r.unwrap();
                let a = gov.availability();
                assert!(a.memory_reserved <= 14 * GIB && a.reservations <= 2, "{a:?}");
                done.lock().unwrap().push(i);
                drop(r);
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(done.lock().unwrap().len(), 6);
    assert_eq!(gov.availability().reservations, 0);
}

#[test]
fn acquire_envelope_falls_back_and_waits() {
    let gov = governor();
    let envelope = Envelope::new(vec![
        Alternative::new("gpu", Estimate::builder().gpu_slots(1).build()),
        Alternative::new("cpu", memory(8 * GIB)),
    ])
    .unwrap();
    let (r, _) = block_on(gov.acquire_envelope(envelope.clone()));
    let r = r.unwrap();
    assert_eq!(r.contract().alternative, Some(1), "no GPU here: the CPU fallback");
    let waiter = {
        let gov = gov.clone();
        thread::spawn(move || block_on(gov.acquire_envelope(envelope)).0.unwrap().contract().memory)
    };
    drop(r);
    assert_eq!(waiter.join().unwrap(), 8 * GIB);
}
