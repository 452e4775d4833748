//! loom models of the Governor's reserve / release / wait_for_change /
//! set_policy (docs/DESIGN.md §13). Under `--cfg loom` the Governor's lock, condition
//! variable, `Arc` and generation atomic are loom's, so every interleaving
//! of the real engine code is explored.
//!
//! Run with (debug assertions on, so the ledger's `debug_assert!`
//! invariants are checked in every interleaving, as `scripts/test.sh` does):
//! `RUSTFLAGS="--cfg loom -C debug-assertions" CARGO_TARGET_DIR=target/loom
//! cargo test -p lardon --release --test loom_governor`
//!
//! The fake probe and clock use std primitives; they are not modelled and
//! never block, which is fine.
#![cfg(loom)]
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Threads hand back `Result<Reservation, Decision>` as the Governor does.
#![allow(clippy::result_large_err)]

use std::sync::Arc as StdArc;

use lardon::{
    DecisionKind, Estimate, FakeClock, FakeProbe, Governor, HostPolicy, HostProfile, MonoTime, PolicyError,
    ReasonCode, ReleaseError, Reservation,
};
use loom::thread;

const GIB: u64 = 1 << 30;

/// 16 GiB, 8 CPUs (pool 4), custom policy with a 2 GiB reserve: 14 GiB can
/// ever be reserved. The host sample is observed once, so later snapshots
/// (same capture time) are not new samples and only reservations, releases
/// and policy changes move the generation.
fn governor() -> Governor {
    let profile = HostProfile::new(16 * GIB, 8);
    let clock = StdArc::new(FakeClock::new(MonoTime(1_000_000_000)));
    let probe = FakeProbe::new(profile.clone()).stamped_by(clock.clone());
    let gov = Governor::with_clock(policy(&profile, 2 * GIB), probe, clock).unwrap();
    gov.sample().unwrap();
    assert_eq!(gov.generation(), 1);
    gov
}

fn policy(profile: &HostProfile, reserve: u64) -> HostPolicy {
    let mut p = HostPolicy::default_for(profile);
    p.memory_reserve = reserve;
    p.emergency_floor = GIB;
    p.memory_caution = None;
    p
}

fn memory(bytes: u64) -> Estimate {
    Estimate::builder().memory(bytes).build()
}

/// Runs `f` under loom. `preemptions: None` explores every interleaving
/// (cheap here: the Governor has one lock and one atomic); the larger
/// models bound preemptions to stay well under a second.
fn model(preemptions: Option<usize>, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = preemptions;
    builder.check(f);
}

fn assert_idle(gov: &Governor) {
    let a = gov.availability();
    assert_eq!((a.reservations, a.memory_reserved, a.cpu_reserved_millis), (0, 0, 0));
}

/// Two threads reserve 8 GiB each against a 14 GiB budget: exactly one
/// wins, the other WAITs on memory; totals are exact, and zero after both
/// handles drop.
#[test]
fn two_reservers_one_budget() {
    model(None, || {
        let gov = governor();
        let spawn = |gov: Governor| thread::spawn(move || gov.reserve_available(&memory(8 * GIB)));
        let a = spawn(gov.clone());
        let b = spawn(gov.clone());
        let results = [a.join().unwrap(), b.join().unwrap()];
        let granted: Vec<&Reservation> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
        assert_eq!(granted.len(), 1, "exactly one of two 8 GiB reservations fits 14 GiB");
        for r in &results {
            if let Err(d) = r {
                assert_eq!((d.kind(), d.reason()), (DecisionKind::Wait, ReasonCode::Memory));
            }
        }
        let a = gov.availability();
        assert_eq!((a.reservations, a.memory_reserved), (1, 8 * GIB));
        assert_eq!(gov.generation(), 2, "one grant, WAIT leaves the generation");
        drop(results);
        assert_idle(&gov);
        assert_eq!(gov.generation(), 3);
    });
}

/// A waiter blocked in `wait_for_change(seen, None)` is woken by a release
/// on another thread (no lost wake-up: loom reports a deadlock otherwise).
#[test]
fn release_wakes_a_waiter() {
    model(None, || {
        let gov = governor();
        let held = gov.reserve_available(&memory(GIB)).unwrap();
        let seen = gov.generation();
        let waiter = {
            let gov = gov.clone();
            thread::spawn(move || gov.wait_for_change(seen, None))
        };
        let releaser = thread::spawn(move || drop(held));
        releaser.join().unwrap();
        assert_eq!(waiter.join().unwrap(), seen + 1);
        assert_idle(&gov);
    });
}

/// The queue's pattern: read the generation, try, and on WAIT block until
/// it moves. A task waiting for memory gets it once the holder releases it,
/// however the release interleaves with the attempt.
#[test]
fn waiting_reserver_gets_in_after_a_release() {
    model(None, || {
        let gov = governor();
        let held = gov.reserve_available(&memory(8 * GIB)).unwrap();
        let waiter = {
            let gov = gov.clone();
            thread::spawn(move || {
                let mut waits = 0;
                loop {
                    let seen = gov.generation();
                    match gov.reserve_available(&memory(8 * GIB)) {
                        Ok(r) => return (r.contract().memory, waits),
                        Err(d) => {
                            assert_eq!((d.kind(), d.reason()), (DecisionKind::Wait, ReasonCode::Memory));
                            waits += 1;
                            gov.wait_for_change(seen, None);
                        }
                    }
                }
            })
        };
        let releaser = thread::spawn(move || drop(held));
        releaser.join().unwrap();
        let (granted, waits) = waiter.join().unwrap();
        assert_eq!(granted, 8 * GIB);
        assert!(waits <= 1, "one release, at most one wait");
        assert_idle(&gov);
    });
}

/// `set_policy` (budget down to 8 GiB) races a 10 GiB reservation: either
/// the reservation wins and the policy is refused because it no longer
/// covers it, or the policy wins and the reservation is refused under it.
/// Never both.
#[test]
fn set_policy_races_a_reserve() {
    model(None, || {
        let gov = governor();
        let tight = policy(&gov.profile(), 8 * GIB);
        let reserver = {
            let gov = gov.clone();
            thread::spawn(move || gov.reserve_available(&memory(10 * GIB)))
        };
        let setter = {
            let gov = gov.clone();
            thread::spawn(move || gov.set_policy(tight))
        };
        let reserved = reserver.join().unwrap();
        let set = setter.join().unwrap();
        match (&reserved, &set) {
            (Ok(r), Err(PolicyError::DoesNotCover(_))) => {
                assert_eq!(r.contract().memory, 10 * GIB);
                assert_eq!(gov.policy().memory_reserve, 2 * GIB);
            }
            (Err(d), Ok(())) => {
                assert_eq!((d.kind(), d.reason()), (DecisionKind::Reject, ReasonCode::Impossible));
                assert_eq!(gov.policy().memory_reserve, 8 * GIB);
            }
            other => panic!("reserve and set_policy must not both succeed or both fail: {other:?}"),
        }
        let a = gov.availability();
        assert!(a.memory_reserved <= a.memory_total - a.memory_reserve, "over budget: {a:?}");
        assert_eq!(gov.generation(), 2, "exactly one of grant / policy change moved it");
        drop(reserved);
        assert_idle(&gov);
    });
}

/// `release_id` races the handle's drop: released exactly once (the
/// generation moves once, totals return to zero).
#[test]
fn release_id_races_a_drop() {
    model(None, || {
        let gov = governor();
        let r = gov.reserve_available(&memory(GIB)).unwrap();
        let id = r.id();
        let before = gov.generation();
        let by_id = {
            let gov = gov.clone();
            thread::spawn(move || gov.release_id(id))
        };
        let dropper = thread::spawn(move || drop(r));
        dropper.join().unwrap();
        let result = by_id.join().unwrap();
        if let Err(e) = &result {
            assert!(matches!(e, ReleaseError::NotActive(got) if *got == id));
        }
        assert_eq!(gov.generation(), before + 1, "released exactly once");
        assert_idle(&gov);
        assert!(gov.release_id(id).is_err());
    });
}

/// `release_id` races the explicit `release()`: exactly one of them
/// reports success.
#[test]
fn release_id_races_an_explicit_release() {
    model(None, || {
        let gov = governor();
        let r = gov.reserve_available(&memory(GIB)).unwrap();
        let id = r.id();
        let before = gov.generation();
        let by_id = {
            let gov = gov.clone();
            thread::spawn(move || gov.release_id(id).is_ok())
        };
        let explicit = thread::spawn(move || r.release().is_ok());
        let (a, b) = (by_id.join().unwrap(), explicit.join().unwrap());
        assert!(a ^ b, "exactly one release succeeds (by id: {a}, explicit: {b})");
        assert_eq!(gov.generation(), before + 1);
        assert_idle(&gov);
    });
}

/// Two waiters for 7 GiB each, while two 7 GiB reservations fill the
/// 14 GiB budget and another thread releases both: each waiter is woken
/// (`notify_all`, no lost wake-up) and both end up admitted.
#[test]
fn two_waiters_both_admitted_after_two_releases() {
    model(Some(3), || {
        let gov = governor();
        let held = [
            gov.reserve_available(&memory(7 * GIB)).unwrap(),
            gov.reserve_available(&memory(7 * GIB)).unwrap(),
        ];
        let start = gov.generation();
        let waiter = |gov: Governor| {
            thread::spawn(move || {
                loop {
                    let seen = gov.generation();
                    match gov.reserve_available(&memory(7 * GIB)) {
                        Ok(r) => return r,
                        Err(d) => {
                            assert_eq!(d.kind(), DecisionKind::Wait);
                            gov.wait_for_change(seen, None);
                        }
                    }
                }
            })
        };
        let a = waiter(gov.clone());
        let b = waiter(gov.clone());
        let releaser = thread::spawn(move || drop(held));
        releaser.join().unwrap();
        let (a, b) = (a.join().unwrap(), b.join().unwrap());
        let av = gov.availability();
        assert_eq!((av.reservations, av.memory_reserved), (2, 14 * GIB));
        assert_eq!(gov.generation(), start + 4, "two releases, two grants, no other move");
        drop((a, b));
        assert_idle(&gov);
    });
}

/// A minimal executor for loom: parks on a loom `Notify` between polls.
#[cfg(feature = "async")]
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    use std::task::{Context, Poll, Wake, Waker};
    struct Notifier(loom::sync::Notify);
    impl Wake for Notifier {
        fn wake(self: StdArc<Self>) {
            self.0.notify();
        }
    }
    let notifier = StdArc::new(Notifier(loom::sync::Notify::new()));
    let waker = Waker::from(notifier.clone());
    let mut cx = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        notifier.0.wait();
    }
}

/// `acquire(..).await` pending on memory is woken by a release on another
/// thread (run with `--features async`). `Shared::wakers` is a loom mutex
/// under `--cfg loom`, so the registration racing a publish is explored.
#[cfg(feature = "async")]
#[test]
fn acquire_is_woken_by_a_release() {
    model(Some(3), || {
        let gov = governor();
        let held = gov.reserve_available(&memory(8 * GIB)).unwrap();
        let waiter = {
            let gov = gov.clone();
            thread::spawn(move || block_on(gov.acquire(memory(8 * GIB))).map(|r| r.contract().memory))
        };
        let releaser = thread::spawn(move || drop(held));
        releaser.join().unwrap();
        assert_eq!(waiter.join().unwrap().unwrap(), 8 * GIB);
        assert_idle(&gov);
    });
}
