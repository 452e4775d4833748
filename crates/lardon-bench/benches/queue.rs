//! Queue throughput (docs/DESIGN.md §12): N no-op tasks through a `TaskQueue`
//! (submit all, `wait_idle`) against a plain crossbeam-channel pool with
//! the same number of worker threads doing the same no-op work; and the
//! same tasks submitted as one batch (`TaskQueue::submit_many`).
//!
//! `CARGO_TARGET_DIR=target/bench cargo bench -p lardon-bench --bench queue`
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use divan::{Bencher, black_box};
use lardon::{Estimate, FakeClock, FakeProbe, Governor, HostPolicy, HostProfile, MonoTime, Task, TaskQueue};

const GIB: u64 = 1 << 30;
/// Worker threads on both sides (the build machine has 2 CPUs).
const WORKERS: u32 = 2;
/// The sizes of the figures in BENCHMARKS.md ("Queue throughput" and the
/// "Fast path" sections). They were lowered from 10 000 when a scan cost
/// O(pending); a task's cost is flat in the backlog since, but the sizes
/// stay so that figures compare across rounds.
const TASKS: &[usize] = &[100, 1_000];

fn main() {
    divan::main();
}

/// A queue whose Governor lets exactly `WORKERS` no-op tasks run at once
/// (`max_running`), on a clock that never moves (snapshots stay fresh).
fn queue() -> TaskQueue {
    let clock = Arc::new(FakeClock::new(MonoTime(1_000_000_000)));
    let profile = HostProfile::new(64 * GIB, 16);
    let probe = FakeProbe::new(profile.clone()).stamped_by(Arc::clone(&clock));
    let mut policy = HostPolicy::default_for(&profile);
    policy.max_running = Some(WORKERS);
    TaskQueue::new(Governor::with_clock(policy, probe, clock).unwrap())
}

#[divan::bench(args = TASKS, sample_count = 10)]
fn lardon_task_queue(bencher: Bencher, n: usize) {
    let q = queue();
    let estimate = Estimate::builder().memory(1 << 20).cpu_millis(100).class("noop").build();
    let done = Arc::new(AtomicU64::new(0));
    bencher.counter(divan::counter::ItemsCount::new(n)).bench_local(|| {
        for _ in 0..n {
            let done = Arc::clone(&done);
            q.submit(Task::new("noop", estimate.clone(), move |_| {
                done.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }))
            .unwrap();
        }
        q.wait_idle();
    });
    black_box(done.load(Ordering::Relaxed));
    q.close();
}

/// The same tasks through one `submit_many` per sample (one queue lock and
/// one dispatcher wake for the batch, as `lardon submit --each` sends
/// them); not the figure of issue #12, which submits one at a time.
#[divan::bench(args = TASKS, sample_count = 10)]
fn lardon_task_queue_submit_many(bencher: Bencher, n: usize) {
    let q = queue();
    let estimate = Estimate::builder().memory(1 << 20).cpu_millis(100).class("noop").build();
    let done = Arc::new(AtomicU64::new(0));
    bencher.counter(divan::counter::ItemsCount::new(n)).bench_local(|| {
        let tasks = (0..n)
            .map(|_| {
                let done = Arc::clone(&done);
                Task::new("noop", estimate.clone(), move |_| {
                    done.fetch_add(1, Ordering::Relaxed);
                    Ok(())
                })
            })
            .collect();
        for answer in q.submit_many(tasks) {
            answer.unwrap();
        }
        q.wait_idle();
    });
    black_box(done.load(Ordering::Relaxed));
    q.close();
}

type Job = Box<dyn FnOnce() + Send>;

#[divan::bench(args = TASKS, sample_count = 10)]
fn crossbeam_pool(bencher: Bencher, n: usize) {
    let (job_tx, job_rx) = crossbeam_channel::unbounded::<Job>();
    let (done_tx, done_rx) = crossbeam_channel::unbounded::<()>();
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let rx = job_rx.clone();
            let done = done_tx.clone();
            std::thread::spawn(move || {
                for job in rx {
                    job();
                    let _ = done.send(());
                }
            })
        })
        .collect();
    let count = Arc::new(AtomicU64::new(0));
    bencher.counter(divan::counter::ItemsCount::new(n)).bench_local(|| {
        for _ in 0..n {
            let count = Arc::clone(&count);
            job_tx
                .send(Box::new(move || {
                    count.fetch_add(1, Ordering::Relaxed);
                }))
                .unwrap();
        }
        for _ in 0..n {
            done_rx.recv().unwrap();
        }
    });
    drop(job_tx);
    for w in workers {
        w.join().unwrap();
    }
    black_box(count.load(Ordering::Relaxed));
}
