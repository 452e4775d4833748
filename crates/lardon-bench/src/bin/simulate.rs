//! Prints the packing table (docs/DESIGN.md §12 "Packing") for every standard
//! workload × strategy, deterministic for a seed.
//!
//! `cargo run -p lardon-bench --release --bin simulate [-- --seed N] [--smoke]`
//!
//! `--smoke` runs only the tiny workload (seconds even in a debug build).
//! `--trace WORKLOAD` prints instead every sequence the `lardon` strategy
//! admits on that standard workload (time, task, batch, target, pressure),
//! to see how batch sizes are chosen over time.
//! `--seeds N` prints instead, per workload and governed strategy, the mean
//! and worst makespan ÷ lower bound and the kills over seeds 1..=N: one
//! seed's figures move by ±10 % with the seed, so a change to admission
//! is judged on the means. `--from S` starts those seeds at S instead of 1
//! (`--from 16 --seeds 30`: the held-out seeds 16–45). Both tables are
//! followed by one against the perfect-knowledge oracle
//! (`sim::oracle`) and the best safe fixed N (`sim::best_safe_fixed`), in
//! the same run.

use std::io::Write as _;

use lardon_bench::sim::governed::{self, Options};
use lardon_bench::sim::{self, Host, Outcome, workload};

fn main() {
    let mut seed = 42u64;
    let mut smoke = false;
    let mut trace: Option<String> = None;
    let mut seeds: Option<u64> = None;
    let mut from = 1u64;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--smoke" => smoke = true,
            "--trace" => match args.next() {
                Some(w) => trace = Some(w),
                None => usage("--trace needs a workload name"),
            },
            "--seeds" => match args.next().and_then(|s| s.parse().ok()).filter(|&n: &u64| n > 0) {
                Some(n) => seeds = Some(n),
                None => usage("--seeds needs a number ≥ 1"),
            },
            "--from" => match args.next().and_then(|s| s.parse().ok()) {
                Some(s) => from = s,
                None => usage("--from needs a number"),
            },
            "--seed" => match args.next().and_then(|s| s.parse().ok()) {
                Some(s) => seed = s,
                None => usage("--seed needs a number"),
            },
            other => usage(&format!("unknown argument {other}")),
        }
    }
    let host = Host::default();
    if let Some(name) = trace {
        print_trace(&host, seed, &name);
        return;
    }
    if let Some(n) = seeds {
        let last = from + n - 1;
        let all: Vec<Vec<workload::Workload>> = (from..=last).map(workload::standard).collect();
        let runs: Vec<Vec<Outcome>> = all.iter().map(|w| run_all(&host, w)).collect();
        let safe: Vec<Vec<(usize, Outcome)>> =
            all.iter().map(|ws| ws.iter().map(|w| sim::best_safe_fixed(&host, w)).collect()).collect();
        println!(
            "Host: {} GiB RAM, {} CPUs, default policy. Seeds {from} to {last}.",
            host.total_memory >> 30,
            host.cpus
        );
        println!();
        print!("{}", sim::report::across_seeds(&runs));
        println!();
        print!("{}", sim::report::against_oracle(&runs, &safe));
        return;
    }
    let workloads = if smoke { vec![workload::tiny(seed)] } else { workload::standard(seed) };
    let outcomes = run_all(&host, &workloads);
    println!(
        "Host: {} GiB RAM, {} CPUs, default policy (budget {} GiB). Seed {seed}.",
        host.total_memory >> 30,
        host.cpus,
        outcomes.first().map_or(0, |o| o.budget >> 30)
    );
    println!();
    print!("{}", sim::report::markdown(&outcomes));
    let safe: Vec<(usize, Outcome)> = workloads.iter().map(|w| sim::best_safe_fixed(&host, w)).collect();
    println!();
    print!("{}", sim::report::markdown(&safe.iter().map(|(_, o)| o.clone()).collect::<Vec<_>>()));
    println!();
    print!("{}", sim::report::against_oracle(std::slice::from_ref(&outcomes), std::slice::from_ref(&safe)));
    // The tighter bound, for reading the ratios above: how close any
    // schedule could come (the table's ratios stay against the standard one).
    let budget = outcomes.first().map_or(0, |o| o.budget);
    println!();
    println!("| workload | lower bound | joint lower bound | joint ÷ lower bound |");
    println!("|---|---|---|---|");
    for w in &workloads {
        let lb = sim::bounds::lower_bound(&w.tasks, budget);
        let joint = sim::bounds::joint_lower_bound(&w.tasks, budget);
        println!("| {} | {:.1} s | {:.1} s | {:.3} |", w.name, lb / 1e3, joint / 1e3, joint / lb);
    }
}

/// Every standard strategy on every workload, in order; exits on a failed
/// simulation.
fn run_all(host: &Host, workloads: &[workload::Workload]) -> Vec<Outcome> {
    let mut outcomes = Vec::new();
    for w in workloads {
        for s in sim::standard_strategies() {
            match sim::simulate(host, w, s) {
                Ok(o) => outcomes.push(o),
                Err(e) => {
                    eprintln!("simulate: {} / {s:?}: {e}", w.name);
                    std::process::exit(1);
                }
            }
        }
    }
    outcomes
}

/// One line per admitted sequence of the `lardon` strategy on `name`.
fn print_trace(host: &Host, seed: u64, name: &str) {
    let all = workload::standard(seed);
    let Some(w) = all.iter().find(|w| w.name == name) else {
        let names: Vec<&str> = all.iter().map(|w| w.name.as_str()).collect();
        usage(&format!("--trace: unknown workload {name:?} (one of: {})", names.join(", ")));
    };
    let mut out = std::io::stdout().lock();
    // A closed pipe (`| head`) ends the output, not the process with a panic.
    let mut open = writeln!(out, "time_s\ttask\tbatch\ttarget\tpressure\tremaining\treserved_mib").is_ok();
    let mut line = |a: &governed::Admitted| {
        open = open
            && writeln!(
                out,
                "{:.1}\t{}\t{}\t{}\t{}\t{}\t{}",
                a.at_ms as f64 / 1e3,
                w.tasks[a.task].name,
                a.items,
                a.target,
                a.level.as_str(),
                a.remaining,
                a.reserved >> 20
            )
            .is_ok();
    };
    if let Err(e) = governed::run_traced(host, &w.tasks, Options::lardon(true, true, false), &mut line) {
        eprintln!("simulate: {name}: {e}");
        std::process::exit(1);
    }
}

fn usage(msg: &str) -> ! {
    eprintln!(
        "simulate: {msg}\nusage: simulate [--seed N] [--smoke | --trace WORKLOAD] | [--from S] --seeds N"
    );
    std::process::exit(2);
}
