//! Benchmarks and the deterministic packing simulator for Lardon.
//!
//! - [`sim`]: a discrete-event simulation (virtual clock, no sleeping) of
//!   memory-bound workloads run by the real [`lardon::Governor`], by strict
//!   FIFO and by fixed parallelism (`xargs -P N`), with the packing metrics
//!   of docs/DESIGN.md §12.
//! - [`stats`]: a small latency distribution (quantiles) for the
//!   `wake_latency` binary.
//!
//! The divan benches live in `benches/`; `scripts/bench.sh` runs them all.
#![warn(missing_docs)]

pub mod sim;
pub mod stats;
