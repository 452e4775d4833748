//! Cluster mode with real processes on loopback: brokers, agents,
//! offloading daemons, `lardon cc`, `lardon top --cluster`. Each test
//! starts its own processes on free ports; they run in parallel.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

#[path = "../support/mod.rs"]
mod support;

mod agent_permit;
mod cache_restart;
mod cc;
mod cluster_drain;
mod cluster_faults;
mod cluster_keda_zero;
mod cluster_partition;
mod cluster_pilot;
mod cluster_secure;
mod cluster_soft;
mod cluster_stop;
mod cluster_submit;
mod cluster_watch;
mod hostile;
mod offload;
mod offload_files;
mod offload_speed;
mod secure_default;
mod top_cluster_pty;
