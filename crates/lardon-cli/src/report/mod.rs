//! `lardon report`: what ran, per learning key, from the store alone
//! (docs/DESIGN.md §10, "Report").
//!
//! [`build`] reads the store through a reader (one snapshot: the daemon
//! may be running or stopped) and [`aggregate`] turns the rows into the
//! figures; both are pure of the terminal, so the table ([`table`]), the
//! JSON and the page ([`html`]) show one set of numbers. The learned
//! figures are the engine's own: the stored class history is replayed
//! into a Governor sized at the daemon's recorded budget, as the daemon
//! does at start, and asked what it learned ([`lardon::Governor::learned`]).

pub(crate) mod html;
pub(crate) mod table;

use std::collections::BTreeMap;

use lardon::{Class, FakeProbe, Governor, HostPolicy, HostProfile, LearnedPhrase};
use lardon_daemon::spec::TaskState;
use lardon_daemon::store::{CourseKind, HistorySample, ReportFilter, ReportTask, Store, StoreError};
use serde::Serialize;

/// Bytes in a GiB.
const GIB: f64 = (1u64 << 30) as f64;

/// What to report on.
#[derive(Debug, Clone, Default)]
pub(crate) struct Query {
    /// Only tasks not ended before this time (Unix ms).
    pub(crate) since_ms: Option<i64>,
    /// Only this learning key, or this declared class (`default`: every
    /// task that named none).
    pub(crate) class: Option<String>,
    /// Only this group.
    pub(crate) group: Option<String>,
}

/// The report: one row per learning key, and the totals.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Report {
    /// When it was made (Unix ms): open waits and unfinished bars end here.
    pub(crate) generated_ms: i64,
    /// The `--since` bound, if any.
    pub(crate) since_ms: Option<i64>,
    /// The memory budget the daemon last started with (`null` when no
    /// daemon of this build has run on the store).
    pub(crate) memory_budget: Option<u64>,
    /// Per learning key, by key.
    pub(crate) classes: Vec<ClassReport>,
    /// Every selected task together.
    pub(crate) totals: Figures,
    /// What ran when (the page's timeline).
    #[serde(skip)]
    pub(crate) timeline: Vec<Bar>,
}

/// One learning key's row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ClassReport {
    /// The learning key: the class, or `default.<program>.<hash>` for a
    /// command shape of tasks that named none (docs/DESIGN.md §6).
    pub(crate) key: String,
    /// Its figures.
    #[serde(flatten)]
    pub(crate) figures: Figures,
    /// What the class has learned now, sized for its newest task's
    /// estimate (`null`: nothing learned).
    pub(crate) learned: Option<Learned>,
}

/// The learned figures in force, as every view phrases them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Learned {
    /// Recorded runs behind the figures.
    pub(crate) samples: u32,
    /// Learned fixed memory, bytes.
    pub(crate) fixed: Option<u64>,
    /// Learned per-item memory, bytes.
    pub(crate) per_item: Option<u64>,
    /// After a kill at the limit: the need is above this.
    pub(crate) lower_bound: Option<u64>,
    /// The adaptive batch target (batched keys).
    pub(crate) batch_target: Option<u64>,
    /// `fixed 1.0 GiB (3 samples)`.
    pub(crate) phrase: String,
}

/// The figures of a set of tasks.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct Figures {
    /// Tasks.
    pub(crate) tasks: u64,
    /// Runs ended (each batch is one).
    pub(crate) runs: u64,
    /// Tasks completed.
    pub(crate) completed: u64,
    /// Tasks failed.
    pub(crate) failed: u64,
    /// Tasks cancelled.
    pub(crate) cancelled: u64,
    /// Tasks not ended (pending, running, paused).
    pub(crate) unfinished: u64,
    /// Runs killed at their memory limit.
    pub(crate) memory_kills: u64,
    /// Runs started again after a memory kill.
    pub(crate) memory_retries: u64,
    /// Declared memory per task at its largest batch, bytes.
    pub(crate) declared: Option<Spread>,
    /// Measured peak per task (its highest run), bytes.
    pub(crate) peak: Option<Spread>,
    /// Memory reserved × run time, GiB·h.
    pub(crate) reserved_gib_h: f64,
    /// Reserved but not used (reserved − measured peak, × run time), GiB·h.
    pub(crate) waste_gib_h: f64,
    /// Time waiting by reason (`memory`, `cpu_load`, …), ms, summed over
    /// the tasks.
    pub(crate) waits_ms: BTreeMap<String, u64>,
    /// Run time per task (its runs' wall time summed), ms.
    pub(crate) run_ms: Option<RunTimes>,
}

/// The middle and the top of a set of sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct Spread {
    /// Median (nearest rank).
    pub(crate) p50: u64,
    /// Largest.
    pub(crate) max: u64,
}

/// Run time percentiles, ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct RunTimes {
    /// Median (nearest rank).
    pub(crate) p50: u64,
    /// 95th percentile (nearest rank).
    pub(crate) p95: u64,
}

/// One task on the timeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Bar {
    /// The task's number.
    pub(crate) id: u64,
    /// Its learning key.
    pub(crate) key: String,
    /// Its state now.
    pub(crate) state: TaskState,
    /// Start of its latest attempt, Unix ms.
    pub(crate) start_ms: i64,
    /// Its end, or the report's time while it runs.
    pub(crate) end_ms: i64,
    /// Memory it held: its last grant (else its declaration), bytes.
    pub(crate) held: u64,
}

/// The value at percentile `p` (0 < p ≤ 100) of `values` by the nearest-rank
/// method (the smallest value with at least `p`% of the values at or
/// below it: no interpolation, so it is always a value that occurred);
/// `None` for no values.
pub(crate) fn percentile(values: &[u64], p: f64) -> Option<u64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let n = sorted.len();
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]
    let rank = ((p / 100.0) * n as f64).ceil().clamp(1.0, n as f64) as usize;
    sorted.get(rank - 1).copied()
}

/// Byte·seconds in GiB·h.
pub(crate) fn gib_h(byte_s: f64) -> f64 {
    byte_s / GIB / 3600.0
}

/// Memory held over time by `bars`: the steps `(t, bytes)` of the sum of
/// the bars running at `t`, from the first start to the last end (each
/// change once; a bar ending where another starts is one step).
pub(crate) fn held_over_time(bars: &[Bar]) -> Vec<(i64, u64)> {
    let mut changes: BTreeMap<i64, i128> = BTreeMap::new();
    for b in bars.iter().filter(|b| b.end_ms > b.start_ms) {
        *changes.entry(b.start_ms).or_default() += i128::from(b.held);
        *changes.entry(b.end_ms).or_default() -= i128::from(b.held);
    }
    let mut level: i128 = 0;
    changes
        .into_iter()
        .map(|(t, delta)| {
            level += delta;
            (t, u64::try_from(level).unwrap_or(0))
        })
        .collect()
}

/// Reads the store and aggregates (see the module docs).
///
/// # Errors
/// The store's.
pub(crate) fn build(store: &Store, query: &Query, now_ms: i64) -> Result<Report, StoreError> {
    let filter = ReportFilter { since_ms: query.since_ms, group: query.group.clone() };
    let tasks = store.report_tasks(&filter)?;
    let history = store.all_history()?;
    let budget = store.memory_budget()?;
    Ok(aggregate(&tasks, &history, budget, query, now_ms))
}

/// The report of `tasks` (see [`Figures`] for what each figure is).
pub(crate) fn aggregate(
    tasks: &[ReportTask],
    history: &[HistorySample],
    budget: Option<u64>,
    query: &Query,
    now_ms: i64,
) -> Report {
    let keyed: Vec<(String, &ReportTask)> = tasks
        .iter()
        .map(|t| (t.record.spec.learning_class().as_str().to_owned(), t))
        .filter(|(key, t)| {
            query.class.as_deref().is_none_or(|c| c == key || c == t.record.spec.estimate.class)
        })
        .collect();
    let mut by_key: BTreeMap<&str, Vec<&ReportTask>> = BTreeMap::new();
    for (key, t) in &keyed {
        by_key.entry(key.as_str()).or_default().push(t);
    }
    let governor = replay(history, budget);
    let classes = by_key
        .iter()
        .map(|(key, ts)| ClassReport {
            key: (*key).to_owned(),
            figures: figures(ts, now_ms),
            learned: ts.last().and_then(|t| learned(governor.as_ref(), t)),
        })
        .collect();
    let all: Vec<&ReportTask> = keyed.iter().map(|(_, t)| *t).collect();
    let timeline = keyed
        .iter()
        .filter_map(|(key, t)| {
            let r = &t.record;
            let start_ms = r.started_ms?;
            Some(Bar {
                id: r.id.0,
                key: key.clone(),
                state: r.state,
                start_ms,
                end_ms: r.finished_ms.unwrap_or(now_ms).max(start_ms),
                held: held(t),
            })
        })
        .collect();
    Report {
        generated_ms: now_ms,
        since_ms: query.since_ms,
        memory_budget: budget,
        classes,
        totals: figures(&all, now_ms),
        timeline,
    }
}

/// Declared memory at the task's largest batch.
fn declared(t: &ReportTask) -> u64 {
    let e = &t.record.spec.estimate;
    e.memory_per_item.saturating_mul(e.batch_max()).saturating_add(e.memory_fixed)
}

/// The memory a task held: its last grant, else its declaration.
fn held(t: &ReportTask) -> u64 {
    t.course.iter().rev().find_map(|e| e.grant.map(|g| g.memory)).unwrap_or_else(|| declared(t))
}

fn figures(tasks: &[&ReportTask], now_ms: i64) -> Figures {
    let mut f = Figures { tasks: tasks.len() as u64, ..Figures::default() };
    let (mut declared_all, mut peaks, mut runs) = (Vec::new(), Vec::new(), Vec::new());
    let (mut reserved, mut used) = (0.0, 0.0);
    for t in tasks {
        let r = &t.record;
        match r.state {
            TaskState::Completed => f.completed += 1,
            TaskState::Failed => f.failed += 1,
            TaskState::Cancelled => f.cancelled += 1,
            TaskState::Pending | TaskState::Running | TaskState::Paused => f.unfinished += 1,
        }
        f.runs += t.usage.runs;
        f.memory_kills += t.usage.memory_kills;
        f.memory_retries += u64::from(r.memory_retries);
        declared_all.push(declared(t));
        peaks.extend(t.usage.peak_bytes);
        if t.usage.runs > 0 {
            runs.push(t.usage.run_ms);
        }
        reserved += t.usage.reserved_byte_s;
        used += t.usage.used_byte_s;
        let open_end = r.finished_ms.unwrap_or(now_ms);
        for w in t.course.iter().filter(|e| e.kind == CourseKind::Waited) {
            let end = w.to_ms.unwrap_or(open_end);
            let ms = u64::try_from(end.saturating_sub(w.from_ms)).unwrap_or(0);
            let reason = if w.reason_code.is_empty() { "other" } else { w.reason_code.as_str() };
            *f.waits_ms.entry(reason.to_owned()).or_default() += ms;
        }
    }
    let spread = |v: &[u64]| Some(Spread { p50: percentile(v, 50.0)?, max: v.iter().copied().max()? });
    f.declared = spread(&declared_all);
    f.peak = spread(&peaks);
    f.run_ms = percentile(&runs, 50.0).zip(percentile(&runs, 95.0)).map(|(p50, p95)| RunTimes { p50, p95 });
    f.reserved_gib_h = gib_h(reserved);
    // Never below zero: a run's peak above its grant (soft enforcement)
    // is an overrun, not negative waste.
    f.waste_gib_h = gib_h((reserved - used).max(0.0));
    f
}

/// A Governor that learned what the daemon learned: the stored history
/// replayed in order on a host of the recorded budget (no reserve, so its
/// budget is the daemon's). `None` if the engine refuses the host.
fn replay(history: &[HistorySample], budget: Option<u64>) -> Option<Governor> {
    // Without a recorded budget, one that caps nothing.
    let profile = HostProfile::new(budget.unwrap_or(u64::MAX / 4).max(1), 1);
    let policy = HostPolicy {
        memory_reserve: 0,
        emergency_floor: 0,
        memory_caution: None,
        cpu_reserve: 0,
        ..HostPolicy::default_for(&profile)
    };
    let governor = Governor::new(policy, FakeProbe::new(profile)).ok()?;
    for sample in history {
        governor.record_run(&Class::new(sample.class.clone()), sample.record);
    }
    Some(governor)
}

/// What `t`'s key has learned, sized for `t`'s estimate.
fn learned(governor: Option<&Governor>, t: &ReportTask) -> Option<Learned> {
    let spec = &t.record.spec;
    let l = governor?.learned(&spec.to_estimate())?;
    let LearnedPhrase { samples, fixed, per_item, lower_bound, batch_target } =
        l.phrase(spec.items.is_some());
    let phrase = l.phrase(spec.items.is_some()).phrase();
    Some(Learned { samples, fixed, per_item, lower_bound, batch_target, phrase })
}

#[cfg(test)]
mod tests;
