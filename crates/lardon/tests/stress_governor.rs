//! Stress test of the Governor (docs/DESIGN.md §13): many threads hammering
//! reserve / release against one budget leave exact totals. Not timed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use lardon::{
    Class, DecisionKind, Estimate, FakeClock, FakeProbe, Governor, HostPolicy, HostProfile, MonoTime,
    Reservation,
};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
const THREADS: u64 = 8;
const ITERATIONS: u64 = 2_000;

/// A tiny deterministic PRNG (xorshift64*), one per thread.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Default)]
struct Tally {
    grants: u64,
    waits: u64,
    batches: u64,
}

fn worker(gov: &Governor, seed: u64) -> Tally {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut held: Vec<Reservation> = Vec::new();
    let mut tally = Tally::default();
    for _ in 0..ITERATIONS {
        let min = 1 + rng.below(4);
        let estimate = Estimate::builder()
            .memory(rng.below(3 * GIB))
            .memory_per_item(rng.below(64 * MIB))
            .batch(min, min + rng.below(8))
            .cpu_millis(100 + u32::try_from(rng.below(900)).unwrap())
            .io_slots(u32::from(rng.below(4) == 0))
            .class(["a", "b", "c"][usize::try_from(rng.below(3)).unwrap()])
            .build();
        match gov.reserve_available(&estimate) {
            Ok(r) => {
                assert!(r.contract().batch >= min);
                tally.grants += 1;
                held.push(r);
            }
            Err(d) => {
                assert_eq!(d.kind(), DecisionKind::Wait, "{d}");
                tally.waits += 1;
            }
        }
        // Hold up to three at a time, releasing in every supported way.
        while held.len() > usize::try_from(rng.below(4)).unwrap() {
            let r = held.swap_remove(usize::try_from(rng.below(held.len() as u64)).unwrap());
            match rng.below(3) {
                0 => drop(r),
                1 => r.release().expect("active"),
                _ => {
                    let id = r.id();
                    gov.release_id(id).expect("active");
                    assert!(gov.release_id(id).is_err(), "second release refused");
                    assert!(r.release().is_err(), "released by id already");
                }
            }
        }
        if rng.below(50) == 0 {
            let class = Class::new(["a", "b", "c"][usize::try_from(rng.below(3)).unwrap()]);
            // A known peak: a record without one would change nothing.
            let peak = Some(1 + rng.below(1 << 20));
            assert!(gov.record_batch(&class, 1 + rng.below(8), Duration::from_millis(rng.below(100)), peak));
            tally.batches += 1;
        }
    }
    drop(held);
    tally
}

#[test]
fn many_threads_leave_exact_totals() {
    // 32 GiB and 16 CPUs: 29 GiB and a 12-CPU pool, so both memory and CPUs run short.
    let profile = HostProfile::new(32 * GIB, 16);
    let clock = Arc::new(FakeClock::new(MonoTime(1_000_000_000)));
    let probe = FakeProbe::new(profile.clone()).stamped_by(clock.clone());
    let mut policy = HostPolicy::default_for(&profile);
    policy.io_slots = 2;
    let budget = profile.total_memory - policy.memory_reserve;
    let pool = u64::from(policy.compute_cpus(&profile)) * 1000;
    let gov = Governor::with_clock(policy, probe, clock.clone()).unwrap();
    assert_eq!(gov.generation(), 0);

    let done = Arc::new(AtomicBool::new(false));
    let (tallies, ticks, peeks) = thread::scope(|s| {
        let gov = &gov;
        let workers: Vec<_> = (0..THREADS).map(|i| s.spawn(move || worker(gov, i + 1))).collect();
        // The clock moves on under the workers (0.1 ms steps, 2 s in all: snapshots
        // are re-stamped and observed as new samples, and stay fresh).
        let ticker = s.spawn(|| {
            let mut ticks = 0u64;
            while !done.load(Ordering::SeqCst) && ticks < 20_000 {
                clock.advance(Duration::from_micros(100));
                ticks += 1;
                thread::yield_now();
            }
            ticks
        });
        // An observer checks the budget from outside while the workers run.
        let observer = s.spawn(|| {
            let mut peeks = 0u64;
            while !done.load(Ordering::SeqCst) {
                let a = gov.availability();
                assert!(a.memory_reserved <= budget, "memory over budget: {a:?}");
                assert!(a.cpu_reserved_millis <= pool, "CPUs over the pool: {a:?}");
                assert!(a.io_reserved <= a.io_slots, "IO over slots: {a:?}");
                peeks += 1;
                thread::yield_now();
            }
            peeks
        });
        let tallies: Vec<Tally> = workers.into_iter().map(|w| w.join().unwrap()).collect();
        done.store(true, Ordering::SeqCst);
        (tallies, ticker.join().unwrap(), observer.join().unwrap())
    });

    let grants: u64 = tallies.iter().map(|t| t.grants).sum();
    let waits: u64 = tallies.iter().map(|t| t.waits).sum();
    let batches: u64 = tallies.iter().map(|t| t.batches).sum();
    assert_eq!(grants + waits, THREADS * ITERATIONS);
    assert!(grants > 0 && waits > 0, "contention expected: {grants} grants, {waits} waits");

    let a = gov.availability();
    assert_eq!(a.reservations, 0);
    assert_eq!(a.memory_reserved, 0);
    assert_eq!(a.cpu_reserved_millis, 0);
    assert_eq!(a.io_reserved, 0);
    // The host never changes (healthy, same MemAvailable), so only the
    // first sample changes budgets: +1, then +1 per grant, +1 per release,
    // +1 per recorded batch; WAITs never move it.
    assert_eq!(gov.generation(), 1 + 2 * grants + batches, "{grants} grants, {batches} batches");
    eprintln!("{grants} grants, {waits} waits, {batches} batches, {ticks} clock ticks, {peeks} observations");
}
