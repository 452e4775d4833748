//! # lardon-cluster-core: the cluster's pure core
//!
//! What every side of cluster mode (docs/DESIGN.md §14) shares, as plain
//! data and pure state transitions, below the broker, the agent, the
//! submitter and the offloading daemon. No runtime, no I/O, no clock: the
//! caller passes the time in.
//!
//! * [`TaskId`], [`SubmitterId`], [`AgentId`] and [`Capability`]: the
//!   checked names.
//! * The router's messages ([`Request`], [`Hello`], [`Availability`],
//!   [`Report`], [`Event`], …).
//! * [`Router`]: the routing core — routes by [`Capability`], deficit round
//!   robin across submitters, power of two choices among agents, WAIT and
//!   agent loss handled without losing or repeating work — so that every
//!   rule has a deterministic test.
//! * [`wire`] validates every field a peer sends (`lardon.cluster.v1`) and
//!   turns it into these types; the daemon's task spec uses its path rule
//!   ([`wire::relative_path`]) so that what it accepts, the broker accepts.
//! * [`learned`] is what the broker learned of each task class (peak
//!   memory, wall time), which walltime-aware dispatch reads.
//!
//! Its one internal dependency is `lardon-proto`, for the message types
//! that [`wire`] checks and [`learned::class_of`] reads.
#![warn(missing_docs)]

mod capability;
mod ids;
pub mod learned;
mod messages;
mod router;
pub mod wire;

pub use capability::{Capability, CapabilityError};
pub use ids::{AgentId, IdError, SubmitterId, TaskId};
pub use messages::{
    AgentView, Availability, Delivery, Event, Hello, Need, Outcome, Report, Request, Submitted, TaskPlace,
};
pub use router::Router;
