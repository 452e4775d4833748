//! A perfect-knowledge schedule, the reference for packing (issue 31's
//! target: Lardon's makespan within 1.15 × this one's, in the same run).
//!
//! It knows what admission never does: every task's real memory and times
//! and how many items it has. Its rules (the previous round's oracle in
//! BENCHMARKS "Packing simulator", rebuilt): a horizon `H` = the joint
//! lower bound ([`bounds::joint_lower_bound`]) × [`HORIZON_SLACK`]; each
//! batched task runs batches of the smallest size at or above its least
//! memory × time per item (`b* = sqrt(fixed × t_fixed ÷ (per_item ×
//! t_item))` at its real figures) that finishes its items within `H`
//! (`batch_max` when none does); at every event, the tasks with the most
//! work left start first, each whose next sequence's real memory fits what
//! the budget has left (one sequence per task at a time; a task that could
//! never fit starts alone). No caution band, no pressure, no learning: it
//! is a bound to measure against, not a strategy a host could run.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use lardon::{HostPolicy, HostProfile};

use super::bounds;
use super::tracker::Tracker;
use super::workload::SimTask;
use super::{Host, Outcome};

/// How far past the joint lower bound the oracle plans its batches.
pub const HORIZON_SLACK: f64 = 1.08;

/// The oracle's batch for `t` with `horizon_ms` to finish in.
pub fn batch_for(t: &SimTask, horizon_ms: f64) -> u64 {
    let (min, max) = (t.batch_min.max(1), t.batch_max.max(t.batch_min).max(1));
    if max <= 1 || t.items <= 1 {
        return 1.min(max).max(min);
    }
    let ideal = if t.real_per_item == 0 || t.time_per_item == 0 {
        max as f64
    } else {
        ((t.real_fixed as f64 * t.time_fixed as f64) / (t.real_per_item as f64 * t.time_per_item as f64))
            .sqrt()
    };
    let from = (ideal.floor() as u64).clamp(min, max);
    (from..=max).find(|&b| (t.items.div_ceil(b) * t.duration(b)) as f64 <= horizon_ms).unwrap_or(max)
}

/// Runs `tasks` on `host` with perfect knowledge (module docs).
pub fn run(host: &Host, tasks: &[SimTask]) -> Outcome {
    let profile = HostProfile::new(host.total_memory, host.cpus);
    let budget = host.total_memory - HostPolicy::default_for(&profile).memory_reserve;
    let horizon = bounds::joint_lower_bound(tasks, budget) * HORIZON_SLACK;
    let batch: Vec<u64> = tasks.iter().map(|t| batch_for(t, horizon)).collect();
    let mut remaining: Vec<u64> = tasks.iter().map(|t| t.items.max(1)).collect();
    let mut busy = vec![false; tasks.len()];
    let mut track = Tracker::new(host.total_memory, budget);
    // (end, task, items, real bytes)
    let mut ends: BinaryHeap<Reverse<(u64, usize, u64, u64)>> = BinaryHeap::new();
    let (mut now, mut sequences) = (0u64, 0u64);
    let work_left = |i: usize, remaining: &[u64]| {
        let b = batch[i].min(remaining[i]).max(1);
        remaining[i].div_ceil(b) * tasks[i].duration(b)
    };
    loop {
        let mut ready: Vec<usize> = (0..tasks.len()).filter(|&i| !busy[i] && remaining[i] > 0).collect();
        ready.sort_by_key(|&i| (Reverse(work_left(i, &remaining)), i));
        for i in ready {
            let items = batch[i].min(remaining[i]).max(1);
            let real = tasks[i].real_memory(items);
            let fits = track.usage.saturating_add(real) <= budget;
            if fits || (ends.is_empty() && real > budget) {
                track.start(real, real);
                busy[i] = true;
                sequences += 1;
                ends.push(Reverse((now + tasks[i].duration(items).max(1), i, items, real)));
            }
        }
        let Some(Reverse((t, i, items, real))) = ends.pop() else { break };
        track.advance(t);
        now = t;
        track.end(real, real);
        busy[i] = false;
        remaining[i] -= items;
        // Everything else ending at the same instant.
        while let Some(&Reverse((t2, j, items2, real2))) = ends.peek() {
            if t2 != now {
                break;
            }
            ends.pop();
            track.end(real2, real2);
            busy[j] = false;
            remaining[j] -= items2;
        }
    }
    Outcome {
        strategy: "oracle (perfect knowledge)".into(),
        makespan_ms: now,
        budget,
        peak_reserved: Some(track.peak_reserved),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::workload;

    #[test]
    fn the_oracle_never_exceeds_the_budget_and_is_at_or_above_the_lower_bound() {
        let host = Host::default();
        for w in workload::standard(3).into_iter().chain([workload::mixed(3)]) {
            let o = run(&host, &w.tasks);
            let lb = bounds::lower_bound(&w.tasks, o.budget);
            assert_eq!(o.over_budget_ms, 0, "{}", w.name);
            assert!(o.makespan_ms as f64 >= lb * 0.999, "{}: {} < {lb}", w.name, o.makespan_ms);
        }
    }

    #[test]
    fn the_oracle_batch_is_the_least_area_one_that_finishes_in_time() {
        // 1 GiB + 100 MiB per item, 5 s + 0.5 s per item: b* = sqrt(1024 ×
        // 5 ÷ (100 × 0.5)) ≈ 10.1.
        let t = SimTask {
            items: 100,
            batch_max: 64,
            est_per_item: 100 << 20,
            real_per_item: 100 << 20,
            time_per_item: 500,
            ..SimTask::simple("t", 1 << 30, 5_000)
        };
        assert_eq!(batch_for(&t, 1e9), 10, "time to spare: the least memory × time");
        // 100 items in 60 s: 10 sequences of 10 take 100 s; batch 34 takes 3 × 22 s.
        assert_eq!(batch_for(&t, 66_000.0), 34);
        assert_eq!(batch_for(&t, 1.0), 64, "never in time: the largest");
        assert_eq!(batch_for(&SimTask::simple("u", 1, 1), 1.0), 1);
    }
}
