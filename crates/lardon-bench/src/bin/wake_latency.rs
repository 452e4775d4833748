//! Release → next waiting task's callback start, as a distribution
//! (docs/DESIGN.md §12: p99 ≤ 100 µs).
//!
//! Each task needs 40 GiB of a 61 GiB budget, so exactly one runs at a
//! time and the next one WAITs for memory. A task sleeps 200 µs (so the
//! dispatcher is asleep and its successor is really waiting), stamps
//! `Instant::now()` as the last thing before returning (its reservation is
//! released right after the return), and its successor stamps
//! `Instant::now()` as the first thing in its callback. The latency is the
//! difference: callback return, release, dispatcher wake, scan, hand-off
//! to a worker thread.
//!
//! Two depths: `one` keeps exactly one task waiting (the next is submitted
//! when the previous starts); `backlog` submits every task up front, so
//! each release is followed by a scan over every still-pending task.
//!
//! `CARGO_TARGET_DIR=target/bench cargo run -p lardon-bench --release --bin wake_latency [ITERATIONS]`

use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use lardon::{Estimate, FakeClock, FakeProbe, Governor, HostPolicy, HostProfile, MonoTime, Task, TaskQueue};
use lardon_bench::stats::Distribution;

const GIB: u64 = 1 << 30;
const SETTLE: Duration = Duration::from_micros(200);

type Stamps = Arc<Mutex<Vec<(Option<Instant>, Option<Instant>)>>>;

fn main() {
    let iterations = std::env::args().nth(1).and_then(|a| a.parse::<usize>().ok()).unwrap_or(2000);
    println!("wake latency: release -> next waiting task's callback start, {iterations} iterations");
    println!();
    println!("| depth | n | p50 | p90 | p99 | max |");
    println!("|---|---|---|---|---|---|");
    for (name, backlog) in [("one waiting", false), ("backlog (all submitted up front)", true)] {
        match run(iterations, backlog) {
            Ok(mut d) => println!(
                "| {name} | {} | {} | {} | {} | {} |",
                d.len(),
                fmt(d.quantile(0.50)),
                fmt(d.quantile(0.90)),
                fmt(d.quantile(0.99)),
                fmt(d.max())
            ),
            Err(e) => {
                eprintln!("wake_latency: {e}");
                std::process::exit(1);
            }
        }
    }
    println!();
    println!("Polling, for comparison (arithmetic, not measured): a release lands uniformly");
    println!("within a polling period P, so the wait is uniform on [0, P): p50 = P/2, p99 = 0.99 P.");
    println!();
    println!("| poller | period | p50 | p99 | max |");
    println!("|---|---|---|---|---|");
    for (who, ms) in [("original runtime (fast)", 50.0), ("pueue", 300.0), ("original runtime", 500.0)] {
        println!("| {who} | {ms} ms | {} ms | {} ms | {ms} ms |", ms / 2.0, ms * 0.99);
    }
}

fn fmt(d: Option<Duration>) -> String {
    d.map_or_else(|| "n/a".into(), |d| format!("{:.1} µs", d.as_secs_f64() * 1e6))
}

fn queue() -> Result<TaskQueue, String> {
    let clock = Arc::new(FakeClock::new(MonoTime(1_000_000_000)));
    let profile = HostProfile::new(64 * GIB, 16);
    let probe = FakeProbe::new(profile.clone()).stamped_by(Arc::clone(&clock));
    let governor =
        Governor::with_clock(HostPolicy::default_for(&profile), probe, clock).map_err(|e| e.to_string())?;
    Ok(TaskQueue::new(governor))
}

fn task(i: usize, stamps: &Stamps, started: &mpsc::Sender<usize>) -> Task {
    let estimate = Estimate::builder().memory(40 * GIB).class("wake").build();
    let stamps = Arc::clone(stamps);
    let started = started.clone();
    Task::new(format!("t{i}"), estimate, move |_| {
        let t0 = Instant::now();
        let _ = started.send(i);
        std::thread::sleep(SETTLE);
        let mut s = stamps.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = s.get_mut(i) {
            slot.0 = Some(t0);
            slot.1 = Some(Instant::now());
        }
        Ok(())
    })
}

fn run(iterations: usize, backlog: bool) -> Result<Distribution, String> {
    let q = queue()?;
    let n = iterations + 1;
    let stamps: Stamps = Arc::new(Mutex::new(vec![(None, None); n]));
    let (tx, rx) = mpsc::channel();
    if backlog {
        for i in 0..n {
            q.submit(task(i, &stamps, &tx)).map_err(|e| e.to_string())?;
        }
    } else {
        q.submit(task(0, &stamps, &tx)).map_err(|e| e.to_string())?;
        for i in 0..n - 1 {
            let started = rx.recv().map_err(|e| e.to_string())?;
            debug_assert_eq!(started, i);
            q.submit(task(i + 1, &stamps, &tx)).map_err(|e| e.to_string())?;
        }
    }
    q.wait_idle();
    q.close();
    let s = stamps.lock().unwrap_or_else(PoisonError::into_inner);
    let mut d = Distribution::default();
    for pair in s.windows(2) {
        if let ((_, Some(end)), (Some(start), _)) = (pair[0], pair[1]) {
            d.push(start.saturating_duration_since(end));
        }
    }
    if d.len() != iterations {
        return Err(format!("expected {iterations} samples, got {}", d.len()));
    }
    Ok(d)
}
