//! The one support module of the `lardon` binary's integration tests,
//! shared by every test binary (`cli`, `cluster`, `realhost`, `slurm`;
//! each includes it with `#[path = "../support/mod.rs"] mod support;`):
//!
//! - [`daemon`]: the `lardon` binary, a daemon on a simulated host, the
//!   `lardon …` command lines and their output (re-exported here);
//! - [`wait`]: every poll with a deadline that only fails (re-exported);
//! - [`procs`]: real `lardon` processes (broker, agents, daemons) with
//!   their logs, free ports;
//! - [`pty`]: what a program writes to a pseudo-terminal;
//! - [`remote`]: the submitter library against a real broker;
//! - [`offload_cluster`]: a broker, an agent and an offloading daemon;
//! - [`pilot`]: a broker with a Provisioner;
//! - [`realhost`]: a daemon on the real host inside a memory cgroup,
//!   one real-host test at a time;
//! - [`slurm`]: what every real-Slurm test checks first.
//!
//! Each binary uses part of it, hence `dead_code` allowed.
#![allow(dead_code, unused_imports, clippy::unwrap_used, clippy::expect_used)]

pub(crate) mod daemon;
pub(crate) mod offload_cluster;
pub(crate) mod pilot;
pub(crate) mod procs;
pub(crate) mod pty;
pub(crate) mod realhost;
pub(crate) mod remote;
pub(crate) mod slurm;
pub(crate) mod wait;

pub(crate) use daemon::*;
pub(crate) use wait::*;
