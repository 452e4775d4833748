//! Lardon and strict FIFO: the real [`lardon::Governor`] driven by a
//! discrete-event loop in virtual time.
//!
//! What is real: every admission is `Governor::reserve` (FakeProbe +
//! FakeClock moved to the event's time), against a snapshot whose
//! `MemAvailable` is the simulated host's (`RAM − real use of running
//! sequences`); running reservations report their real use
//! (`report_usage`, as the daemon does from cgroups) once a snapshot
//! reflects it; a batched task is admitted with the items it has left
//! (`Estimate::items_left`, as the daemon passes `--items` minus those
//! done); every finished sequence is recorded with its measured
//! peak (`record_batch`), so learning shrinks liars' batches; the
//! pressure state machine sees one sample per event.
//!
//! What is re-implemented: the queue's order rules, in virtual time (the
//! real `TaskQueue` runs callbacks on OS threads and cannot be driven by a
//! virtual clock). At each event: tasks between sequences are re-admitted
//! first (in the real queue they re-admit from their own thread, racing
//! the dispatcher), then pending tasks are scanned by priority, then most
//! items left, then FIFO (the queue's `order_key`);
//! every admitted task starts; a WAIT keeps its place and the scan goes on
//! (WAIT bypass) — or, for strict FIFO, stops the scan. While something
//! waits on host state the host is re-sampled every 250 ms (the queue's
//! `sample_interval`). The real dispatcher reuses a snapshot younger than
//! that interval; the simulation samples at every event. Not modelled:
//! the anti-starvation hold, dependencies, pause/cancel.
//!
//! Also re-implemented: the daemon's *class probe* (docs/DESIGN.md §6):
//! while a named class has no completed run, its first task is its probe
//! and every sibling waits until the probe has ended (through its memory
//! retries), then is sized by what the probe taught. Siblings waiting on a
//! probe are not admissible (a queue dependency in the daemon), so they
//! never block strict FIFO's scan.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use lardon::{
    Class, DecisionKind, Estimate, FakeClock, FakeProbe, Governor, HostPolicy, HostProfile, MonoTime,
    PressureLevel, Reservation, RunOutcome, RunRecord,
};

use super::tracker::Tracker;
use super::workload::SimTask;
use super::{Host, Outcome, SimError};

/// The queue's host re-sampling period while something waits on the host.
pub const SAMPLE_INTERVAL_MS: u64 = 250;
/// CPUs each simulated task asks for (a tenth: memory is what binds).
const TASK_CPU_MILLIS: u32 = 100;

/// Memory allowed above a grant before hard enforcement kills: the
/// daemon's defaults (`memory_slack` 64 MiB + `memory_slack_percent` 10).
pub fn kill_limit(grant: u64) -> u64 {
    grant.saturating_add(64 << 20).saturating_add(grant / 100 * 10)
}

struct Running {
    task: usize,
    items: u64,
    /// Real use while it runs (at most the kill limit when killed).
    real: u64,
    reserved: u64,
    started: u64,
    /// `Some(limit)` when hard enforcement kills it at that limit.
    killed: Option<u64>,
    reservation: Reservation,
}

/// How the governed loop runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// WAIT bypass (Lardon) or not (strict FIFO).
    pub bypass: bool,
    /// Record each sequence's measured peak (`record_run`), as the
    /// daemon does. `false` is an ablation that shows what learning costs
    /// or saves (kills are still recorded under hard enforcement: without
    /// their lower bound a killed task would be re-run at the same size
    /// forever).
    pub learn: bool,
    /// Hard enforcement: a sequence whose real use exceeds its grant plus
    /// the daemon's slack ([`kill_limit`]) is killed when its use reaches
    /// the limit (use grows linearly over the sequence, so at
    /// `duration × limit ÷ real`), costs the time it ran, processes no
    /// item, is recorded as killed at its limit and is re-admitted (a
    /// batch re-runs smaller, an unbatched task at its learned size).
    pub hard: bool,
    /// The daemon's class probe (see the module documentation): siblings
    /// of an unproven class wait for its first task to end.
    pub probe: bool,
}

impl Options {
    /// The standard strategies' options: the class probe goes with
    /// learning (it exists so that a class learns before its siblings
    /// run; without learning there is nothing to wait for).
    pub fn lardon(bypass: bool, learn: bool, hard: bool) -> Self {
        Options { bypass, learn, hard, probe: learn }
    }
}

/// One admitted sequence, as [`run_traced`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitted {
    /// Virtual time of the admission, ms.
    pub at_ms: u64,
    /// Index of the task in the workload.
    pub task: usize,
    /// Items the sequence processes.
    pub items: u64,
    /// The batch target the Governor applied (history, the cap while
    /// memory is contended, slow start and YELLOW;
    /// [`Governor::batch_target`]).
    pub target: u64,
    /// The pressure level at the admission.
    pub level: PressureLevel,
    /// Items the task had left before this sequence.
    pub remaining: u64,
    /// Bytes reserved for the sequence.
    pub reserved: u64,
}

/// Runs `tasks` on `host` through the real Governor.
///
/// # Errors
/// [`SimError`] when the Governor cannot be built or the loop stalls.
pub fn run(host: &Host, tasks: &[SimTask], options: Options) -> Result<Outcome, SimError> {
    run_traced(host, tasks, options, &mut |_| {})
}

/// [`run`], calling `trace` for every admitted sequence (how batch sizes
/// are chosen over time: `simulate --trace WORKLOAD`).
///
/// # Errors
/// As [`run`].
pub fn run_traced(
    host: &Host,
    tasks: &[SimTask],
    options: Options,
    trace: &mut dyn FnMut(&Admitted),
) -> Result<Outcome, SimError> {
    let Options { bypass, learn, hard, probe: probe_first } = options;
    let profile = HostProfile::new(host.total_memory, host.cpus);
    let policy = HostPolicy::default_for(&profile);
    let budget = profile.total_memory - policy.memory_reserve;
    let clock = Arc::new(FakeClock::new(MonoTime(0)));
    let probe = Arc::new(FakeProbe::new(profile.clone()).stamped_by(Arc::clone(&clock)));
    let governor = Governor::with_clock(policy, Arc::clone(&probe), Arc::clone(&clock) as Arc<_>)
        .map_err(|e| SimError(format!("governor: {e}")))?;
    let estimates: Vec<Estimate> = tasks.iter().map(estimate).collect();
    let classes: Vec<Class> = tasks.iter().map(|t| Class::new(t.class_name())).collect();

    let mut remaining: Vec<u64> = tasks.iter().map(|t| t.items.max(1)).collect();
    let mut pending: Vec<usize> = (0..tasks.len()).collect();
    // The queue's order (`queue/state.rs`, `Entry::order_key`): priority,
    // then the most items left, then FIFO.
    pending.sort_by_key(|&i| (Reverse(tasks[i].priority), Reverse(items_left(&tasks[i], remaining[i])), i));
    let mut between: Vec<usize> = Vec::new();
    let mut running: Vec<Option<Running>> = Vec::new();
    let mut ends: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
    let mut resample: Option<u64> = None;
    let mut track = Tracker::new(host.total_memory, budget);
    let (mut now, mut makespan, mut sequences, mut rejected) = (0u64, 0u64, 0u64, 0usize);
    let mut not_green_ms = 0u64;
    let mut kills = 0u64;
    // The live probe of each class that had no completed run when one of
    // its tasks was first scanned.
    let mut probes: HashMap<&str, usize> = HashMap::new();

    loop {
        // 1. Sequences ending now.
        while let Some(&Reverse((t, slot))) = ends.peek() {
            if t != now {
                break;
            }
            ends.pop();
            let Some(r) = running.get_mut(slot).and_then(Option::take) else { continue };
            let took = Duration::from_millis(now - r.started);
            let unbatched = tasks[r.task].batch_max <= 1 && tasks[r.task].est_per_item == 0;
            let record = |outcome| {
                if unbatched {
                    RunRecord::unbatched(took, outcome)
                } else {
                    RunRecord::batch(r.items, took, outcome)
                }
            };
            match r.killed {
                Some(limit) => {
                    kills += 1;
                    governor.record_run(&classes[r.task], record(RunOutcome::KilledAtLimit { limit }));
                }
                None if learn => {
                    governor
                        .record_run(&classes[r.task], record(RunOutcome::Completed { peak: Some(r.real) }));
                }
                None => {}
            }
            drop(r.reservation);
            track.end(r.real, r.reserved);
            if r.killed.is_none() {
                remaining[r.task] -= r.items;
            }
            if remaining[r.task] > 0 {
                between.push(r.task);
            }
            makespan = makespan.max(now);
        }
        if resample == Some(now) {
            resample = None;
        }
        // 2. One host sample per event, then the real use of running
        // sequences becomes visible to the Governor.
        clock.set(MonoTime(now.saturating_mul(1_000_000)));
        let available = host.total_memory.saturating_sub(track.usage);
        probe.update(|s| {
            s.memory_available = available;
            s.memory_free = available;
        });
        let snapshot = governor.sample().map_err(|e| SimError(format!("probe: {e}")))?;
        let green = governor.pressure().0 == PressureLevel::Green;
        for r in running.iter().flatten() {
            let _ = r.reservation.report_usage(r.real);
        }
        // 3. The scan.
        let mut host_wait = false;
        let mut still_between = Vec::new();
        let mut still_pending = Vec::new();
        let mut blocked = false;
        let order: Vec<(usize, bool)> = std::mem::take(&mut between)
            .into_iter()
            .map(|i| (i, true))
            .chain(std::mem::take(&mut pending).into_iter().map(|i| (i, false)))
            .collect();
        for (i, is_between) in order {
            if blocked && !is_between {
                still_pending.push(i);
                continue;
            }
            // The daemon probes named classes only: the default class and
            // its command-shape keys gather unrelated commands.
            let named = !tasks[i].class_name().starts_with("default");
            if probe_first && !is_between && named {
                let class = tasks[i].class_name();
                let proven = governor.learned(&estimates[i]).is_some_and(|l| l.samples > 0);
                match probes.get(class) {
                    _ if proven => {}
                    Some(&p) if p != i && remaining[p] > 0 => {
                        still_pending.push(i);
                        continue;
                    }
                    _ => {
                        probes.insert(class, i);
                    }
                }
            }
            // The target admission applies, read before the grant: a grant
            // can end the contention that capped it.
            // What the daemon passes: the items a batched task has left.
            let est_i = match items_left(&tasks[i], remaining[i]) {
                0 => estimates[i].clone(),
                left => estimates[i].with_items_left(left),
            };
            let target = governor.batch_target(&est_i);
            match governor.reserve(&est_i, &snapshot) {
                Ok(reservation) => {
                    let items = reservation.contract().batch.min(remaining[i]);
                    let reserved = reservation.contract().memory;
                    let level = governor.pressure().0;
                    trace(&Admitted {
                        at_ms: now,
                        task: i,
                        items,
                        target,
                        level,
                        remaining: remaining[i],
                        reserved,
                    });
                    let need = tasks[i].real_memory(items);
                    let limit = kill_limit(reserved);
                    let killed = (hard && need > limit).then_some(limit);
                    let real = killed.unwrap_or(need);
                    track.start(real, reserved);
                    if track.reserved > budget {
                        return Err(SimError(format!("reserved {} > budget {budget}", track.reserved)));
                    }
                    sequences += 1;
                    let slot = running.iter().position(Option::is_none).unwrap_or(running.len());
                    let entry = Running { task: i, items, real, reserved, started: now, killed, reservation };
                    if slot == running.len() {
                        running.push(Some(entry));
                    } else {
                        running[slot] = Some(entry);
                    }
                    let full = tasks[i].duration(items).max(1);
                    let ran = match killed {
                        // Use grows linearly to `need`: it reaches the limit at this share.
                        Some(limit) => {
                            let share = u128::from(full) * u128::from(limit) / u128::from(need.max(1));
                            u64::try_from(share).unwrap_or(full).max(1)
                        }
                        None => full,
                    };
                    ends.push(Reverse((now + ran, slot)));
                }
                Err(d) if d.kind() == DecisionKind::Wait => {
                    host_wait |= d.reason().scope().waits_on_host();
                    if is_between {
                        still_between.push(i);
                    } else {
                        still_pending.push(i);
                        blocked = !bypass;
                    }
                }
                Err(_) => rejected += 1,
            }
        }
        between = still_between;
        pending = still_pending;
        if host_wait && resample.is_none() && !(between.is_empty() && pending.is_empty()) {
            resample = Some(now + SAMPLE_INTERVAL_MS);
        }
        // 4. The next event.
        let next_end = ends.peek().map(|Reverse((t, _))| *t);
        let next = match (next_end, resample) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) if between.is_empty() && pending.is_empty() => break,
            (None, None) => {
                return Err(SimError(format!("stalled at {now} ms with {} task(s) waiting", pending.len())));
            }
        };
        track.advance(next);
        if !green {
            not_green_ms += next - now;
        }
        now = next;
    }
    Ok(Outcome {
        strategy: format!(
            "{}{}{}",
            if bypass { "lardon" } else { "strict FIFO" },
            if learn { "" } else { ", peaks not recorded (ablation)" },
            if hard { ", hard enforcement" } else { "" },
        ),
        kills: hard.then_some(kills),
        makespan_ms: makespan,
        budget,
        peak_reserved: Some(track.peak_reserved),
        peak_usage: track.peak_usage,
        over_budget_ms: track.over_budget_ms,
        over_physical_ms: track.over_physical_ms,
        oom_events: track.oom_events,
        sequences,
        rejected,
        not_green_ms: Some(not_green_ms),
        lower_bound_ms: 0.0,
        workload: String::new(),
    })
}

/// The items a task has left as the daemon passes them to admission
/// (`--items` minus those done): `remaining` for a batched task, 0
/// (not passed) for an unbatched one.
pub fn items_left(t: &SimTask, remaining: u64) -> u64 {
    if t.batch_max > 1 { remaining } else { 0 }
}

/// The estimate a simulated task declares.
pub fn estimate(t: &SimTask) -> Estimate {
    Estimate::builder()
        .memory(t.est_fixed)
        .memory_per_item(t.est_per_item)
        .batch(t.batch_min.max(1), t.batch_max.max(t.batch_min).max(1))
        .cpu_millis(TASK_CPU_MILLIS)
        .class(t.class_name())
        .build()
}
