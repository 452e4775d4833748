//! # lardon-cluster: the broker and its agents
//!
//! Cluster mode (docs/DESIGN.md §14) routes tasks from submitters
//! (offloading daemons, `lardon cluster submit`) to agents that an existing
//! engine (Slurm, Kubernetes, systemd) places and limits.
//!
//! It sits on two crates below it: `lardon-cluster-core` (ids,
//! capabilities, messages, wire validation, the router, learned figures:
//! pure, no I/O) and `lardon-submit` (the submitter client, dialling, blob
//! transfer, back-off), which the offloading daemon uses without linking
//! anything here.
//!
//! * [`broker`] is `lardon broker`: the gRPC service
//!   (`lardon.cluster.v1.Broker`) around one owner task that drives the
//!   core's `Router`, with its state in SQLite ([`store`]) so a restart
//!   loses nothing.
//! * [`agent`] is `lardon agent`: it dials out, runs assignments as child
//!   processes (argv only) after its own Governor admits them, and pushes
//!   its availability.
//! * [`cache`], [`optimizer`], [`provision`] and [`keda`] are the result
//!   cache and its hook chain, the token-bound controller (run by each
//!   agent, [`agent::tuning`]), the Provisioner's decision and its loop,
//!   and the KEDA scaler.
//!
//! The core's names that the broker's and the agent's APIs take are
//! re-exported at the root; nothing here is re-exported below.
#![warn(missing_docs)]

pub mod agent;
pub mod broker;
pub mod cache;
pub mod keda;
pub mod optimizer;
pub mod provision;
pub mod store;

pub use lardon_cluster_core::{
    AgentId, AgentView, Availability, Capability, CapabilityError, Delivery, Event, Hello, IdError, Need,
    Outcome, Report, Request, Submitted, SubmitterId, TaskId, TaskPlace,
};
