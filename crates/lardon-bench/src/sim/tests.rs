//! Hand-computed tiny workloads for every metric and strategy.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::workload::{SimTask, Workload};
use super::*;

const SMALL: Host = Host { total_memory: 16 * GIB, cpus: 16 };
// 16 GiB host: default reserve 1 GiB (total/16), budget 15 GiB.
const BUDGET: u64 = 15 * GIB;

fn wl(tasks: Vec<SimTask>) -> Workload {
    Workload { name: "hand".into(), tasks }
}

fn three_eights() -> Workload {
    wl((0..3).map(|i| SimTask::simple(format!("t{i}"), 8 * GIB, 10_000)).collect())
}

#[test]
fn fixed_two_goes_over_budget_but_not_physical() {
    let o = simulate(&SMALL, &three_eights(), Strategy::Fixed(2)).unwrap();
    assert_eq!(o.budget, BUDGET);
    assert_eq!(o.makespan_ms, 20_000);
    // 3 × 8 GiB × 10 s ÷ 15 GiB.
    assert!((o.lower_bound_ms - 240_000.0 / 15.0).abs() < 1e-6);
    assert_eq!((o.over_budget_ms, o.over_physical_ms, o.oom_events), (10_000, 0, 0));
    assert_eq!(o.peak_usage, 16 * GIB);
    assert_eq!(o.peak_reserved, None);
    assert!((o.usage_ratio() - 16.0 / 15.0).abs() < 1e-9);
}

#[test]
fn fixed_three_overcommits_physical_memory() {
    let o = simulate(&SMALL, &three_eights(), Strategy::Fixed(3)).unwrap();
    assert_eq!(o.makespan_ms, 10_000);
    assert_eq!((o.over_budget_ms, o.over_physical_ms, o.oom_events), (10_000, 10_000, 1));
    // Cheating on memory beats the bound, which assumes the budget holds.
    assert!((o.makespan_ms as f64) < o.lower_bound_ms);
}

#[test]
fn lardon_runs_one_eight_at_a_time() {
    let o = simulate(&SMALL, &three_eights(), Strategy::Lardon).unwrap();
    assert_eq!(o.makespan_ms, 30_000);
    assert_eq!(o.peak_reserved, Some(8 * GIB));
    assert_eq!((o.over_budget_ms, o.oom_events, o.sequences, o.rejected), (0, 0, 3, 0));
    assert!((o.makespan_ratio() - 30_000.0 * 15.0 / 240_000.0).abs() < 1e-9);
    assert!((o.reserved_ratio().unwrap() - 8.0 / 15.0).abs() < 1e-9);
}

#[test]
fn wait_bypass_beats_strict_fifo() {
    // A 8, B 8, C 4, D 4 GiB, 10 s each, budget 15 GiB.
    // Lardon: A+C at 0, B+D at 10 → 20 s. FIFO: A; B blocks C; B+C at 10; D at 20 → 30 s.
    let w = wl(vec![
        SimTask::simple("a", 8 * GIB, 10_000),
        SimTask::simple("b", 8 * GIB, 10_000),
        SimTask::simple("c", 4 * GIB, 10_000),
        SimTask::simple("d", 4 * GIB, 10_000),
    ]);
    let lardon = simulate(&SMALL, &w, Strategy::Lardon).unwrap();
    let fifo = simulate(&SMALL, &w, Strategy::StrictFifo).unwrap();
    assert_eq!(lardon.makespan_ms, 20_000);
    assert_eq!(fifo.makespan_ms, 30_000);
    assert_eq!(lardon.peak_reserved, Some(12 * GIB));
    assert_eq!(fifo.peak_reserved, Some(12 * GIB));
    assert!((lardon.lower_bound_ms - 240_000.0 / 15.0).abs() < 1e-6);
}

#[test]
fn learning_halves_a_liars_batches() {
    // Declares 256 MiB per item, really uses 512 MiB. First sequence: 64
    // items (32 GiB real); learning then gives 64 × 256/512 = 32 items.
    let liar = SimTask {
        items: 128,
        batch_max: 64,
        est_fixed: 0,
        est_per_item: 256 << 20,
        real_fixed: 0,
        real_per_item: 512 << 20,
        time_per_item: 100,
        ..SimTask::simple("liar", 0, 1_000)
    };
    let honest = SimTask { name: "honest".into(), real_per_item: 256 << 20, ..liar.clone() };
    let host = Host::default();
    let o = simulate(&host, &wl(vec![liar]), Strategy::Lardon).unwrap();
    assert_eq!(o.sequences, 3);
    assert_eq!(o.peak_usage, 32 * GIB);
    assert_eq!(o.makespan_ms, 3 * 1_000 + 128 * 100);
    let o = simulate(&host, &wl(vec![honest]), Strategy::Lardon).unwrap();
    assert_eq!(o.sequences, 2);
    // Fixed-N never learns: 64, 64.
    let o = simulate(&host, &wl(vec![SimTask { name: "l".into(), ..o_liar() }]), Strategy::Fixed(1)).unwrap();
    assert_eq!(o.sequences, 2);
}

fn o_liar() -> SimTask {
    SimTask {
        items: 128,
        batch_max: 64,
        real_per_item: 1 << 20,
        est_per_item: 1 << 20,
        ..SimTask::simple("x", 0, 10)
    }
}

#[test]
fn same_seed_same_outcomes() {
    let host = Host::default();
    let w = workload::tiny(9);
    for s in standard_strategies() {
        assert_eq!(simulate(&host, &w, s).unwrap(), simulate(&host, &w, s).unwrap(), "{s:?}");
    }
}

#[test]
fn ablation_without_learning_keeps_full_batches_and_pressure_is_timed() {
    let liar = SimTask {
        items: 128,
        batch_max: 64,
        est_per_item: 256 << 20,
        real_per_item: 512 << 20,
        time_per_item: 100,
        ..SimTask::simple("liar", 0, 1_000)
    };
    let o = simulate(&Host::default(), &wl(vec![liar]), Strategy::LardonNoLearning).unwrap();
    assert_eq!(o.sequences, 2);
    assert_eq!(o.makespan_ms, 2 * 1_000 + 128 * 100);
    // 32 GiB of real use leaves 32 GiB available: GREEN throughout.
    assert_eq!(o.not_green_ms, Some(0));
    // Fixed-N has no pressure state.
    assert_eq!(simulate(&SMALL, &three_eights(), Strategy::Fixed(1)).unwrap().not_green_ms, None);
}

#[test]
fn hard_enforcement_kills_an_unbatched_liar_and_regrows_its_size_until_it_completes() {
    use super::governed::kill_limit;
    // Declares 1 GiB, really uses 4 GiB for 10 s.
    let liar = SimTask { real_fixed: 4 * GIB, ..SimTask::simple("liar", GIB, 10_000) };
    let o = simulate(&Host::default(), &wl(vec![liar]), Strategy::LardonHard).unwrap();
    // Killed at 1 GiB + slack, then at twice that + slack; the third grant
    // (twice the second limit) holds 4 GiB.
    let first = kill_limit(GIB);
    let second = kill_limit(2 * first);
    assert!(2 * second >= 4 * GIB);
    assert_eq!((o.kills, o.sequences), (Some(2), 3));
    // Each killed run cost the time it ran: until its use reached the limit.
    let ran = |limit: u64| (10_000u128 * u128::from(limit) / u128::from(4 * GIB)) as u64;
    assert_eq!(o.makespan_ms, ran(first) + ran(second) + 10_000);
    assert!(o.peak_usage <= 4 * GIB);
    // Without hard enforcement it runs once, over its grant.
    let liar = SimTask { real_fixed: 4 * GIB, ..SimTask::simple("liar", GIB, 10_000) };
    let o = simulate(&Host::default(), &wl(vec![liar]), Strategy::Lardon).unwrap();
    assert_eq!((o.kills, o.sequences, o.makespan_ms), (None, 1, 10_000));
}

#[test]
fn a_killed_batch_reruns_smaller_and_learning_stops_the_kills() {
    // 2 GiB fixed + 256 MiB per item declared, 1 GiB per item real: a
    // batch of 64 is granted 18 GiB and killed; items are processed once.
    let liar = SimTask {
        items: 256,
        batch_max: 64,
        est_fixed: 2 * GIB,
        est_per_item: 256 << 20,
        real_fixed: 2 * GIB,
        real_per_item: GIB,
        time_per_item: 100,
        ..SimTask::simple("liar", 0, 1_000)
    };
    let learned = simulate(&Host::default(), &wl(vec![liar.clone()]), Strategy::LardonHard).unwrap();
    let ablation = simulate(&Host::default(), &wl(vec![liar]), Strategy::LardonHardNoLearning).unwrap();
    // Two doublings of the per-item bound reach 4× the estimate; after the
    // first completion the measured peak sizes every batch.
    assert_eq!(learned.kills, Some(2));
    // The ablation keeps the kill's bound (its completions are not
    // recorded), an over-estimate: smaller batches, a longer makespan.
    assert!(ablation.kills >= learned.kills, "{ablation:?}");
    assert!(ablation.makespan_ms > learned.makespan_ms, "{ablation:?} vs {learned:?}");
    for o in [&learned, &ablation] {
        assert!(o.peak_reserved.unwrap() <= o.budget);
        assert!(o.peak_usage <= o.budget, "hard enforcement keeps real use within the budget");
    }
}

#[test]
fn siblings_of_an_unproven_class_wait_for_its_probe() {
    use super::governed::kill_limit;
    // Three tasks of one class declare 1 GiB and really use 4 GiB for 10 s;
    // an unrelated honest task comes last.
    let liar = |i: u32| SimTask {
        class: Some("k".into()),
        real_fixed: 4 * GIB,
        ..SimTask::simple(format!("k{i}"), GIB, 10_000)
    };
    let w = wl(vec![liar(0), liar(1), liar(2), SimTask::simple("other", GIB, 25_000)]);
    let o = simulate(&Host::default(), &w, Strategy::LardonHard).unwrap();
    // Only the probe is killed (twice, as alone); its siblings start when
    // it completes, at its measured peak, and run side by side.
    assert_eq!((o.kills, o.sequences), (Some(2), 6));
    let ran = |limit: u64| (10_000u128 * u128::from(limit) / u128::from(4 * GIB)) as u64;
    let first = kill_limit(GIB);
    let probe_done = ran(first) + ran(kill_limit(2 * first)) + 10_000;
    assert_eq!(o.makespan_ms, (probe_done + 10_000).max(25_000));
    // Without learning there is no probe: the three start together and
    // each is killed on its way up.
    let ablation = simulate(&Host::default(), &w, Strategy::LardonHardNoLearning).unwrap();
    assert!(ablation.kills.unwrap() >= 3 * o.kills.unwrap(), "{ablation:?}");
    // A sibling waiting on its probe is not admissible: it never blocks
    // strict FIFO's scan, so the unrelated task runs at once.
    let fifo = simulate(&Host::default(), &w, Strategy::StrictFifo).unwrap();
    assert_eq!(fifo.makespan_ms, 25_000, "the unrelated task started at 0");
    assert_eq!(fifo.sequences, 4);
}

#[test]
fn the_trace_reports_every_admitted_sequence_with_its_target() {
    use super::governed::{self, Admitted, Options};
    // The liar of `learning_halves_a_liars_batches`: 64 items, then the
    // learned target of 32 twice.
    let liar = SimTask {
        items: 128,
        batch_max: 64,
        est_fixed: 0,
        est_per_item: 256 << 20,
        real_fixed: 0,
        real_per_item: 512 << 20,
        time_per_item: 100,
        ..SimTask::simple("liar", 0, 1_000)
    };
    let mut seen: Vec<Admitted> = Vec::new();
    let o = governed::run_traced(&Host::default(), &[liar], Options::lardon(true, true, false), &mut |a| {
        seen.push(a.clone());
    })
    .unwrap();
    let shape: Vec<(u64, u64, u64, u64)> =
        seen.iter().map(|a| (a.at_ms, a.items, a.target, a.remaining)).collect();
    assert_eq!(shape, vec![(0, 64, 64, 128), (7_400, 32, 32, 64), (11_600, 32, 32, 32)]);
    assert_eq!(seen[1].reserved, 32 * (512 << 20), "the grant is the learned per-item cost");
    assert_eq!(o.sequences, seen.len() as u64);
}

#[test]
fn across_seeds_reports_mean_worst_and_total_kills_of_governed_rows() {
    let outcome = |strategy: &str, makespan_ms: u64, kills: Option<u64>, reserved: Option<u64>| Outcome {
        workload: "w".into(),
        strategy: strategy.into(),
        makespan_ms,
        lower_bound_ms: 100.0,
        budget: 10,
        peak_reserved: reserved,
        peak_usage: 0,
        over_budget_ms: 0,
        over_physical_ms: 0,
        oom_events: 0,
        sequences: 1,
        rejected: 0,
        kills,
        not_green_ms: None,
    };
    let runs = vec![
        vec![outcome("hard", 110, Some(2), Some(9)), outcome("fixed", 50, None, None)],
        vec![outcome("hard", 130, Some(3), Some(10)), outcome("fixed", 60, None, None)],
    ];
    let table = report::across_seeds(&runs);
    assert!(table.contains("| w | hard | 1.200 | 1.300 | 5 | 1.000 |"), "{table}");
    assert!(!table.contains("fixed"), "fixed-N rows are left out: {table}");
    assert_eq!(report::across_seeds(&[]).lines().count(), 2, "header only");
}

#[test]
fn the_longest_task_starts_first_and_keeps_a_tenth_of_what_it_has_left_per_batch() {
    use super::governed::{self, Admitted, Options};
    let batched = |name: &str, items: u64, fixed: u64, per_item: u64| SimTask {
        items,
        batch_max: 64,
        est_fixed: fixed,
        real_fixed: fixed,
        est_per_item: per_item,
        real_per_item: per_item,
        time_per_item: 500,
        ..SimTask::simple(name, fixed, 5_000)
    };
    // Three short tasks submitted before the long one; 2 GiB + 200 MiB per
    // item each, so that memory stays contended.
    let mut tasks: Vec<SimTask> = (0..3).map(|i| batched(&format!("s{i}"), 40, 2 * GIB, 200 << 20)).collect();
    tasks.push(batched("long", 400, GIB, 100 << 20));
    let mut seen: Vec<Admitted> = Vec::new();
    governed::run_traced(&SMALL, &tasks, Options::lardon(true, true, false), &mut |a| seen.push(a.clone()))
        .unwrap();
    assert_eq!(seen[0].task, 3, "the most items left start first: {seen:?}");
    let long: Vec<&Admitted> = seen.iter().filter(|a| a.task == 3).collect();
    assert!(long.len() > 2, "{long:?}");
    for a in &long[1..] {
        assert!(a.target >= a.remaining.div_ceil(10).min(64), "proven: the critical floor holds: {a:?}");
    }
    assert!(seen.iter().any(|a| a.task != 3 && a.target < 64), "the others were capped: {seen:?}");
}
