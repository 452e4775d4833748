//! # lardon-cluster: the broker, its agents and its submitters
//!
//! Cluster mode (docs/DESIGN.md §14) routes tasks from submitters
//! (offloading daemons, `lardon cluster submit`) to agents that an existing
//! engine (Slurm, Kubernetes, systemd) places and limits.
//!
//! * [`Router`] is the routing core as pure state transitions — routes by
//!   [`Capability`], deficit round robin across submitters, power of two
//!   choices among agents, WAIT and agent loss handled without losing or
//!   repeating work — so that every rule has a deterministic test. It does
//!   no I/O.
//! * [`broker`] is `lardon broker`: the gRPC service
//!   (`lardon.cluster.v1.Broker`) around one owner task that drives the
//!   router, with its state in SQLite ([`store`]) so a restart loses
//!   nothing.
//! * [`agent`] is `lardon agent`: it dials out, runs assignments as child
//!   processes (argv only) after its own Governor admits them, and pushes
//!   its availability.
//! * [`client`] is the submitter side, a small library the CLI (and later
//!   an offloading daemon) uses.
//! * [`wire`] validates everything a peer sends.
//! * [`cache`], [`optimizer`], [`provision`] and [`keda`] are the result
//!   cache and its hook chain, the token-bound controller, the
//!   Provisioner's decision and the KEDA scaler (not yet wired into the
//!   broker).
#![warn(missing_docs)]

pub mod agent;
pub mod blobs;
pub mod broker;
pub mod cache;
mod capability;
pub mod client;
pub mod dial;
mod ids;
pub mod keda;
pub mod learned;
mod messages;
pub mod optimizer;
pub mod provision;
mod router;
pub mod store;
pub mod wire;

pub use capability::{Capability, CapabilityError};
pub use ids::{AgentId, IdError, SubmitterId, TaskId};
pub use messages::{
    AgentView, Availability, Delivery, Event, Hello, Need, Outcome, Report, Request, Submitted, TaskPlace,
};
pub use router::Router;
