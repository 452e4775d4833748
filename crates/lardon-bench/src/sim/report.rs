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
