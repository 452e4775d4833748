//! CI smoke run of the packing simulator on a tiny workload, so it cannot
//! rot. Invariants only; the figures live in BENCHMARKS.md.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use lardon_bench::sim::{self, Host, Strategy, workload};

#[test]
fn tiny_workload_invariants() {
    let host = Host::default();
    for seed in [1, 2, 3] {
        let w = workload::tiny(seed);
        for s in sim::standard_strategies() {
            let a = sim::simulate(&host, &w, s).unwrap();
            let b = sim::simulate(&host, &w, s).unwrap();
            assert_eq!(a, b, "seed {seed} {s:?}: not reproducible");
            assert_eq!(a.rejected, 0, "seed {seed} {s:?}");
            if a.over_budget_ms == 0 {
                // The bound holds for every schedule that keeps the budget.
                assert!(a.makespan_ms as f64 >= a.lower_bound_ms, "seed {seed} {s:?}: {a:?}");
            }
            if matches!(s, Strategy::Lardon | Strategy::StrictFifo) {
                // Reservations never exceed the budget (the simulator also
                // fails the run the moment they would).
                // (A liar's real use can still exceed it: that is what
                // learning from measured peaks is for.)
                assert!(a.peak_reserved.unwrap() <= a.budget, "seed {seed} {s:?}: {a:?}");
            }
        }
        // Without the liar, Lardon's real use stays within the budget too.
        let honest = workload::Workload {
            name: "honest".into(),
            tasks: w.tasks.iter().filter(|t| !t.is_liar()).cloned().collect(),
        };
        let o = sim::simulate(&host, &honest, Strategy::Lardon).unwrap();
        assert_eq!(o.over_budget_ms, 0, "seed {seed}: {o:?}");
        assert!(o.peak_usage <= o.budget);
        assert!(o.makespan_ms as f64 >= o.lower_bound_ms);
    }
}
