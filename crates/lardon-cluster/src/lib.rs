//! # lardon-cluster: the broker's routing core, sans I/O
//!
//! Cluster mode (docs/DESIGN.md §14) routes tasks from offloading daemons
//! to agents that an existing engine (Slurm, Kubernetes, systemd) places
//! and limits. This crate is its core as pure state transitions — routes by
//! [`Capability`], deficit round robin across submitters, power of two
//! choices among agents, WAIT and agent loss handled without losing or
//! repeating work — so that every rule has a deterministic test. The
//! transport (gRPC streams), the broker's SQLite state and the agent are
//! not built yet; they will drive [`Router`] and carry its [`Event`]s.
#![warn(missing_docs)]

pub mod cache;
mod capability;
mod ids;
pub mod keda;
mod messages;
pub mod optimizer;
pub mod provision;
mod router;

pub use capability::{Capability, CapabilityError};
pub use ids::{AgentId, IdError, SubmitterId, TaskId};
pub use messages::{Availability, Delivery, Event, Hello, Need, Outcome, Report, Request, Submitted};
pub use router::Router;
