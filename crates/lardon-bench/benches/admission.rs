//! Admission cost (docs/DESIGN.md §12): `Governor::reserve` + release against a
//! warm snapshot, next to `tokio::sync::Semaphore` acquire + release, in
//! the same run.
//!
//! `CARGO_TARGET_DIR=target/bench cargo bench -p lardon-bench --bench admission`
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;

use divan::{Bencher, black_box};
use lardon::{Estimate, FakeClock, FakeProbe, Governor, HostPolicy, HostProfile, MonoTime, Snapshot};

const GIB: u64 = 1 << 30;

fn main() {
    divan::main();
}

/// A 64 GiB, 16-CPU fake host on a clock that never moves, so the one
/// snapshot stays fresh and, after its first observation, is never fed to
/// the pressure state again (the warm path).
fn warm_governor() -> (Governor, Snapshot) {
    let clock = Arc::new(FakeClock::new(MonoTime(1_000_000_000)));
    let profile = HostProfile::new(64 * GIB, 16);
    let probe = FakeProbe::new(profile.clone()).stamped_by(Arc::clone(&clock));
    let governor = Governor::with_clock(HostPolicy::default_for(&profile), probe, clock).unwrap();
    let snapshot = governor.sample().unwrap();
    (governor, snapshot)
}

fn small_estimate() -> Estimate {
    Estimate::builder().memory(GIB).memory_per_item(64 << 20).batch(1, 16).class("bench").build()
}

#[divan::bench]
fn governor_reserve_release(bencher: Bencher) {
    let (governor, snapshot) = warm_governor();
    let estimate = small_estimate();
    bencher.bench_local(|| {
        let r = governor.reserve(black_box(&estimate), black_box(&snapshot)).unwrap();
        drop(black_box(r));
    });
}

#[divan::bench]
fn governor_decide(bencher: Bencher) {
    let (governor, snapshot) = warm_governor();
    let estimate = small_estimate();
    bencher.bench_local(|| black_box(governor.decide(black_box(&estimate), black_box(&snapshot))));
}

/// WAIT: one reservation already holds most of the budget, so the next
/// estimate waits for memory (the common answer during a queue scan).
#[divan::bench]
fn governor_reserve_wait(bencher: Bencher) {
    let (governor, snapshot) = warm_governor();
    let hog = Estimate::builder().memory(58 * GIB).class("hog").build();
    let _held = governor.reserve(&hog, &snapshot).unwrap();
    let estimate = Estimate::builder().memory(8 * GIB).class("bench").build();
    bencher.bench_local(|| {
        let d = governor.reserve(black_box(&estimate), black_box(&snapshot)).unwrap_err();
        black_box(d)
    });
}

#[divan::bench]
fn semaphore_try_acquire_release(bencher: Bencher) {
    let sem = tokio::sync::Semaphore::new(16);
    bencher.bench_local(|| {
        let permit = black_box(&sem).try_acquire().unwrap();
        drop(black_box(permit));
    });
}

/// `acquire().await` driven by `block_on` on a current-thread runtime: the
/// figure includes `block_on`'s own overhead, so it flatters the Governor.
#[divan::bench]
fn semaphore_acquire_await_block_on(bencher: Bencher) {
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let sem = tokio::sync::Semaphore::new(16);
    bencher.bench_local(|| {
        rt.block_on(async {
            let permit = black_box(&sem).acquire().await.unwrap();
            drop(black_box(permit));
        });
    });
}

/// 1 000 `acquire().await` + release inside one `block_on` (divan reports
/// the time per 1 000, so divide by 1 000): no per-call runtime overhead.
#[divan::bench]
fn semaphore_acquire_await_x1000(bencher: Bencher) {
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let sem = tokio::sync::Semaphore::new(16);
    bencher.bench_local(|| {
        rt.block_on(async {
            for _ in 0..1000 {
                let permit = black_box(&sem).acquire().await.unwrap();
                drop(black_box(permit));
            }
        });
    });
}

/// Same shape for the Governor: 1 000 reserve + release (per 1 000).
#[divan::bench]
fn governor_reserve_release_x1000(bencher: Bencher) {
    let (governor, snapshot) = warm_governor();
    let estimate = small_estimate();
    bencher.bench_local(|| {
        for _ in 0..1000 {
            let r = governor.reserve(black_box(&estimate), black_box(&snapshot)).unwrap();
            drop(black_box(r));
        }
    });
}

/// Attribution only: the human message the Governor formats for every
/// ADMIT (`batch N, X memory, Y CPUs`), measured alone, to show how much
/// of `governor_decide` is string formatting.
#[divan::bench]
fn admit_message_format_alone() -> String {
    format!(
        "batch {}, {} memory, {} CPUs",
        black_box(16u64),
        lardon::format_bytes(black_box(2 * GIB)),
        lardon::format_cpus(black_box(1000))
    )
}
