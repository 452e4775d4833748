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

/// Per workload, over several seeds' runs (`runs[seed]` as in
/// [`across_seeds`], `safe[seed][w]` the best safe fixed N of workload
/// `w`): the mean over seeds of each governed strategy's makespan ÷ the
/// oracle's in the same run, and of the best safe fixed N's, with the
/// oracle's own mean ÷ lower bound and whether reserved memory ever went
/// above the budget.
pub fn against_oracle(runs: &[Vec<Outcome>], safe: &[Vec<(usize, Outcome)>]) -> String {
    let mut s = String::from(
        "| workload | lardon ÷ oracle | strict FIFO ÷ oracle | ablation ÷ oracle | lardon hard ÷ oracle | best safe fixed N ÷ oracle (N per seed) | oracle ÷ LB | lardon ÷ LB | budget exceeded |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    let Some(first) = runs.first() else { return s };
    let mut workloads: Vec<&str> = Vec::new();
    for o in first {
        if !workloads.contains(&o.workload.as_str()) {
            workloads.push(&o.workload);
        }
    }
    for (w, name) in workloads.iter().enumerate() {
        let find = |run: &[Outcome], strategy: &str| {
            run.iter().find(|o| o.workload == *name && o.strategy.starts_with(strategy)).cloned()
        };
        let exact = |run: &[Outcome], strategy: &str| {
            run.iter().find(|o| o.workload == *name && o.strategy == strategy).cloned()
        };
        let mean_exact = |strategy: &str| {
            let ratios: Vec<f64> = runs
                .iter()
                .filter_map(|r| {
                    let (o, oracle) = (exact(r, strategy)?, find(r, "oracle")?);
                    Some(o.makespan_ms as f64 / oracle.makespan_ms as f64)
                })
                .collect();
            if ratios.is_empty() { f64::NAN } else { ratios.iter().sum::<f64>() / ratios.len() as f64 }
        };
        let safe_ratios: Vec<f64> = runs
            .iter()
            .zip(safe)
            .filter_map(|(r, sf)| {
                let oracle = find(r, "oracle")?;
                Some(sf.get(w)?.1.makespan_ms as f64 / oracle.makespan_ms as f64)
            })
            .collect();
        let safe_mean = safe_ratios.iter().sum::<f64>() / safe_ratios.len().max(1) as f64;
        let ns: Vec<String> = safe.iter().filter_map(|sf| sf.get(w)).map(|(n, _)| n.to_string()).collect();
        let ns = if ns.iter().all(|n| Some(n) == ns.first()) {
            ns.first().cloned().unwrap_or_default()
        } else {
            format!(
                "{}–{}",
                ns.iter().filter_map(|n| n.parse::<usize>().ok()).min().unwrap_or(0),
                ns.iter().filter_map(|n| n.parse::<usize>().ok()).max().unwrap_or(0)
            )
        };
        let per_lb = |strategy: &str| {
            let r: Vec<f64> =
                runs.iter().filter_map(|r| exact(r, strategy)).map(|o| o.makespan_ratio()).collect();
            r.iter().sum::<f64>() / r.len().max(1) as f64
        };
        let exceeded = runs
            .iter()
            .flatten()
            .filter(|o| o.workload == *name)
            .any(|o| o.reserved_ratio().is_some_and(|r| r > 1.0));
        let _ = writeln!(
            s,
            "| {name} | {:.3} | {:.3} | {:.3} | {:.3} | {safe_mean:.3} ({ns}) | {:.3} | {:.3} | {} |",
            mean_exact("lardon"),
            mean_exact("strict FIFO"),
            mean_exact("lardon, peaks not recorded (ablation)"),
            mean_exact("lardon, hard enforcement"),
            per_lb("oracle (perfect knowledge)"),
            per_lb("lardon"),
            if exceeded { "yes" } else { "no" },
        );
    }
    s
}
