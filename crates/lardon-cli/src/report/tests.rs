//! The report's arithmetic: percentiles, GiB·h, waits, memory held.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use lardon::{RunOutcome, RunRecord};
use lardon_daemon::spec::{TaskId, TaskSpec, TaskState};
use lardon_daemon::store::{
    CourseEntry, CourseKind, Grant, HistorySample, Progress, ReportTask, RunUsage, TaskRecord,
};

use super::*;

const MIB: u64 = 1 << 20;

fn task(id: u64, class: &str, state: TaskState, mem: u64) -> ReportTask {
    let mut spec = TaskSpec::command(["prog"]);
    spec.estimate.class = class.to_owned();
    spec.estimate.memory_fixed = mem;
    ReportTask {
        record: TaskRecord {
            id: TaskId(id),
            spec,
            state,
            paused_running: false,
            state_reason: None,
            attempts: 0,
            created_ms: 0,
            started_ms: None,
            finished_ms: None,
            exit_code: None,
            progress: Progress::default(),
            cursor: 0,
            last_decision: None,
            run_handle: None,
            memory_retries: 0,
            overrun_note: None,
        },
        usage: RunUsage::default(),
        course: Vec::new(),
    }
}

fn wait(reason: &str, from_ms: i64, to_ms: Option<i64>) -> CourseEntry {
    CourseEntry {
        kind: CourseKind::Waited,
        from_ms,
        to_ms,
        grant: None,
        reason_code: reason.to_owned(),
        message: String::new(),
    }
}

#[test]
fn percentiles_are_nearest_rank_values_that_occurred() {
    assert_eq!(percentile(&[], 50.0), None);
    assert_eq!(percentile(&[7], 50.0), Some(7));
    assert_eq!(percentile(&[7], 95.0), Some(7));
    assert_eq!(percentile(&[4, 1, 3, 2], 50.0), Some(2), "rank ceil(0.5 × 4) = 2");
    assert_eq!(percentile(&[5, 1, 4, 2, 3], 50.0), Some(3));
    let hundred: Vec<u64> = (1..=100).rev().collect();
    assert_eq!(percentile(&hundred, 95.0), Some(95));
    assert_eq!(percentile(&hundred, 100.0), Some(100));
    assert_eq!(percentile(&[1, 2, 3], 95.0), Some(3), "rank ceil(2.85) = 3");
}

#[test]
fn gib_hours_of_byte_seconds() {
    let gib = (1u64 << 30) as f64;
    assert!((gib_h(gib * 3600.0) - 1.0).abs() < 1e-12);
    assert!((gib_h(2.0 * gib * 1800.0) - 1.0).abs() < 1e-12, "2 GiB for half an hour");
    assert_eq!(gib_h(0.0), 0.0);
}

#[test]
fn memory_held_sums_the_bars_running_at_each_step() {
    let bar = |start_ms, end_ms, held| Bar {
        id: 1,
        key: "k".into(),
        state: TaskState::Completed,
        start_ms,
        end_ms,
        held,
    };
    let steps = held_over_time(&[bar(0, 10, 100), bar(5, 20, 50), bar(10, 15, 30), bar(30, 30, 999)]);
    // At 10 one ends as another starts: one step; the empty bar adds none.
    assert_eq!(steps, [(0, 100), (5, 150), (10, 80), (15, 50), (20, 0)]);
    assert!(held_over_time(&[]).is_empty());
}

#[test]
fn figures_count_states_waits_waste_and_learned() {
    let mut honest = task(1, "honest", TaskState::Completed, 200 * MIB);
    honest.usage = RunUsage {
        runs: 1,
        memory_kills: 0,
        peak_bytes: Some(50 * MIB),
        run_ms: 3_600_000,
        // 1 GiB for an hour reserved, 0.25 GiB used.
        reserved_byte_s: (1u64 << 30) as f64 * 3600.0,
        used_byte_s: (1u64 << 28) as f64 * 3600.0,
    };
    honest.record.started_ms = Some(1_000);
    honest.record.finished_ms = Some(5_000);
    honest.course = vec![
        wait("memory", 0, Some(400)),
        wait("cpu_load", 400, Some(1_000)),
        CourseEntry {
            kind: CourseKind::Admitted,
            from_ms: 1_000,
            to_ms: None,
            grant: Some(Grant { batch: 1, memory: 300 * MIB, cpu_millis: 1000 }),
            reason_code: String::new(),
            message: String::new(),
        },
    ];
    let mut liar = task(2, "liar", TaskState::Failed, 100 * MIB);
    liar.usage.memory_kills = 2;
    liar.usage.runs = 2;
    liar.record.memory_retries = 1;
    let mut waiting = task(3, "honest", TaskState::Pending, 400 * MIB);
    // An open wait lasts until the report's time.
    waiting.course = vec![wait("memory", 9_000, None)];
    let history = [HistorySample {
        class: "honest".into(),
        record: RunRecord::unbatched(Duration::from_secs(1), RunOutcome::Completed { peak: Some(50 * MIB) }),
        at_ms: 5_000,
    }];
    let r = aggregate(&[honest, liar, waiting], &history, Some(1 << 30), &Query::default(), 10_000);
    assert_eq!(r.classes.iter().map(|c| c.key.as_str()).collect::<Vec<_>>(), ["honest", "liar"]);
    let h = &r.classes[0].figures;
    assert_eq!((h.tasks, h.completed, h.unfinished, h.runs), (2, 1, 1, 1));
    assert_eq!(h.declared, Some(Spread { p50: 200 * MIB, max: 400 * MIB }));
    assert_eq!(h.peak, Some(Spread { p50: 50 * MIB, max: 50 * MIB }));
    assert_eq!(h.waits_ms, BTreeMap::from([("cpu_load".into(), 600), ("memory".into(), 1_400)]));
    assert!((h.reserved_gib_h - 1.0).abs() < 1e-9 && (h.waste_gib_h - 0.75).abs() < 1e-9, "{h:?}");
    assert_eq!(h.run_ms, Some(RunTimes { p50: 3_600_000, p95: 3_600_000 }));
    let learned = r.classes[0].learned.as_ref().expect("honest learned from its history");
    assert_eq!((learned.samples, learned.fixed), (1, Some(50 * MIB)));
    assert!(r.classes[1].learned.is_none(), "no history for liar");
    let l = &r.classes[1].figures;
    assert_eq!((l.failed, l.memory_kills, l.memory_retries, l.peak), (1, 2, 1, None));
    assert_eq!((r.totals.tasks, r.totals.completed, r.totals.failed, r.totals.unfinished), (3, 1, 1, 1));
    // The timeline: only started tasks, held at their last grant.
    assert_eq!(r.timeline.len(), 1);
    assert_eq!((r.timeline[0].start_ms, r.timeline[0].end_ms, r.timeline[0].held), (1_000, 5_000, 300 * MIB));
    let only = Query { class: Some("liar".into()), ..Query::default() };
    let r = aggregate(
        &[task(2, "liar", TaskState::Failed, 1), task(4, "x", TaskState::Failed, 1)],
        &[],
        None,
        &only,
        0,
    );
    assert_eq!((r.classes.len(), r.totals.tasks), (1, 1));
}

#[test]
fn an_overrun_is_not_negative_waste() {
    let mut t = task(1, "soft", TaskState::Completed, MIB);
    t.usage = RunUsage { runs: 1, reserved_byte_s: 10.0, used_byte_s: 40.0, ..RunUsage::default() };
    let r = aggregate(&[t], &[], None, &Query::default(), 0);
    assert_eq!(r.totals.waste_gib_h, 0.0);
}
