//! The real-host tests: a `lardon daemon` on this machine (no
//! `--simulate-host`) inside a memory cgroup, measuring the machine. They
//! refuse a loaded machine rather than pass, and never run at once: every
//! one holds `support::realhost`'s lock through its `RealHost` (cargo
//! runs this binary alone, after or before the others).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

#[path = "../support/mod.rs"]
mod support;

mod realhost_cpu_default;
mod realhost_learning;
mod realhost_load;
mod realhost_memory;
mod realhost_mixed;
mod realhost_own_load;
mod realhost_pool;
