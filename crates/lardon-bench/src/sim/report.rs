//! The markdown table of outcomes.

use std::fmt::Write as _;

use super::Outcome;

/// One markdown table, one row per outcome.
pub fn markdown(outcomes: &[Outcome]) -> String {
    let mut s = String::from(
        "| workload | strategy | makespan | lower bound | makespan ÷ LB | peak reserved ÷ budget | peak real ÷ budget | time over budget | OOM events | kills | sequences | not GREEN |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for o in outcomes {
        let reserved = o.reserved_ratio().map_or_else(|| "n/a".to_owned(), |r| format!("{r:.3}"));
        let _ = writeln!(
            s,
            "| {} | {} | {:.1} s | {:.1} s | {:.3} | {} | {:.3} | {:.1} s | {} | {} | {} | {} |",
            o.workload,
            o.strategy,
            o.makespan_ms as f64 / 1e3,
            o.lower_bound_ms / 1e3,
            o.makespan_ratio(),
            reserved,
            o.usage_ratio(),
            o.over_budget_ms as f64 / 1e3,
            o.oom_events,
            o.kills.map_or_else(|| "n/a".to_owned(), |k| k.to_string()),
            o.sequences,
            o.not_green_ms.map_or_else(|| "n/a".to_owned(), |ms| format!("{:.1} s", ms as f64 / 1e3)),
        );
    }
    s
}

/// Per workload and governed strategy, over several seeds' runs of the same
/// strategies (`runs[seed][i]` is the same workload × strategy for every
/// seed): mean and worst makespan ÷ lower bound, kills in all (hard
/// enforcement) and the largest peak reserved ÷ budget. Fixed-N rows are
/// left out: they ignore memory, and their figures say nothing of
/// admission.
pub fn across_seeds(runs: &[Vec<Outcome>]) -> String {
    let mut s = String::from(
        "| workload | strategy | mean makespan ÷ LB | worst | kills (all seeds) | largest peak reserved ÷ budget |\n\
         |---|---|---|---|---|---|\n",
    );
    let Some(first) = runs.first() else { return s };
    for (i, o) in first.iter().enumerate() {
        if o.peak_reserved.is_none() {
            continue;
        }
        let same: Vec<&Outcome> = runs.iter().filter_map(|r| r.get(i)).collect();
        let ratios: Vec<f64> = same.iter().map(|o| o.makespan_ratio()).collect();
        let mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
        let worst = ratios.iter().copied().fold(0.0, f64::max);
        let kills = if o.kills.is_some() {
            same.iter().map(|o| o.kills.unwrap_or(0)).sum::<u64>().to_string()
        } else {
            "n/a".to_owned()
        };
        let reserved = same.iter().filter_map(|o| o.reserved_ratio()).fold(0.0, f64::max);
        let _ = writeln!(
            s,
            "| {} | {} | {mean:.3} | {worst:.3} | {kills} | {reserved:.3} |",
            o.workload, o.strategy
        );
    }
    s
}
