//! Fixed parallelism (`xargs -P N`): at most N tasks at once in
//! submission order, memory ignored. A batched task runs its items in
//! sequences of `batch_max` back to back in its slot (a script looping
//! over chunks). Nothing is killed: time above physical RAM is counted
//! (and each sequence start that takes usage there is an "OOM" event),
//! as if the host swapped instead.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use lardon::{HostPolicy, HostProfile};

use super::tracker::Tracker;
use super::workload::SimTask;
use super::{Host, Outcome};

/// Runs `tasks` on `host` with at most `n` at once.
pub fn run(host: &Host, tasks: &[SimTask], n: usize) -> Outcome {
    let profile = HostProfile::new(host.total_memory, host.cpus);
    let budget = host.total_memory - HostPolicy::default_for(&profile).memory_reserve;
    let mut track = Tracker::new(host.total_memory, budget);
    let mut remaining: Vec<u64> = tasks.iter().map(|t| t.items.max(1)).collect();
    let mut next_task = 0usize;
    // (end time, task, items, real bytes)
    let mut ends: BinaryHeap<Reverse<(u64, usize, u64, u64)>> = BinaryHeap::new();
    let (mut now, mut sequences) = (0u64, 0u64);
    let start = |i: usize, now: u64, remaining: &mut [u64], track: &mut Tracker, ends: &mut BinaryHeap<_>| {
        let items = tasks[i].batch_max.max(1).min(remaining[i]);
        let real = tasks[i].real_memory(items);
        track.start(real, 0);
        ends.push(Reverse((now + tasks[i].duration(items).max(1), i, items, real)));
    };
    while next_task < tasks.len() && ends.len() < n.max(1) {
        start(next_task, now, &mut remaining, &mut track, &mut ends);
        sequences += 1;
        next_task += 1;
    }
    while let Some(Reverse((t, i, items, real))) = ends.pop() {
        track.advance(t);
        now = t;
        track.end(real, 0);
        remaining[i] -= items;
        if remaining[i] > 0 {
            start(i, now, &mut remaining, &mut track, &mut ends);
            sequences += 1;
        } else if next_task < tasks.len() {
            start(next_task, now, &mut remaining, &mut track, &mut ends);
            sequences += 1;
            next_task += 1;
        }
    }
    Outcome {
        strategy: format!("fixed -P {n}"),
        makespan_ms: now,
        budget,
        peak_reserved: None,
        peak_usage: track.peak_usage,
        over_budget_ms: track.over_budget_ms,
        over_physical_ms: track.over_physical_ms,
        oom_events: track.oom_events,
        sequences,
        rejected: 0,
        kills: None,
        not_green_ms: None,
        lower_bound_ms: 0.0,
        workload: String::new(),
    }
}
