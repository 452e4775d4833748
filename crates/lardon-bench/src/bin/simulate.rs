//! Prints the packing table (docs/DESIGN.md §12 "Packing") for every standard
//! workload × strategy, deterministic for a seed.
//!
//! `cargo run -p lardon-bench --release --bin simulate [-- --seed N] [--smoke]`
//!
//! `--smoke` runs only the tiny workload (seconds even in a debug build).

use lardon_bench::sim::{self, Host, Outcome, workload};

fn main() {
    let mut seed = 42u64;
    let mut smoke = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--smoke" => smoke = true,
            "--seed" => match args.next().and_then(|s| s.parse().ok()) {
                Some(s) => seed = s,
                None => usage("--seed needs a number"),
            },
            other => usage(&format!("unknown argument {other}")),
        }
    }
    let host = Host::default();
    let workloads = if smoke { vec![workload::tiny(seed)] } else { workload::standard(seed) };
    let mut outcomes: Vec<Outcome> = Vec::new();
    for w in &workloads {
        for s in sim::standard_strategies() {
            match sim::simulate(&host, w, s) {
                Ok(o) => outcomes.push(o),
                Err(e) => {
                    eprintln!("simulate: {} / {s:?}: {e}", w.name);
                    std::process::exit(1);
                }
            }
        }
    }
    println!(
        "Host: {} GiB RAM, {} CPUs, default policy (budget {} GiB). Seed {seed}.",
        host.total_memory >> 30,
        host.cpus,
        outcomes.first().map_or(0, |o| o.budget >> 30)
    );
    println!();
    print!("{}", sim::report::markdown(&outcomes));
}

fn usage(msg: &str) -> ! {
    eprintln!("simulate: {msg}\nusage: simulate [--seed N] [--smoke]");
    std::process::exit(2);
}
