//! # lardon-daemon: the durable side of the `lardon` daemon
//!
//! DESIGN.md §10: the daemon owns a durable queue of shell commands
//! governed by the engine. This crate holds, so far:
//!
//! * [`spec`]: what a queued command is ([`spec::TaskSpec`] and its
//!   estimate), serialisable without local handles, with validation;
//! * [`store`]: the SQLite store (WAL, one transaction per state change,
//!   versioned migrations, crash recovery).
//!
//! The runner (spawn, cgroup, logs, peak measurement), the gRPC service
//! and the engine wiring come later and build on these.
#![warn(missing_docs)]

pub mod spec;
pub mod store;
