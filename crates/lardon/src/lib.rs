//! # Lardon: a resource-governed task runtime
//!
//! Every task declares what it needs ([`Estimate`]); the [`Governor`], sole
//! owner of the host's budgets, admits it, makes it wait, shrinks its batch
//! or rejects it with a reason ([`Decision`]). Admitted work holds a
//! [`Reservation`] until it ends.
//!
//! The engine is synchronous and does no I/O: host state comes from a
//! [`Probe`] and time from a [`Clock`], both injectable so that every rule
//! has a deterministic test.
#![warn(missing_docs)]

/// The README's library example, compiled and run as a doctest so that it
/// cannot drift from the API (`cargo test -p lardon --doc`).
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;

#[cfg(feature = "async")]
mod acquire;
mod clock;
mod contract;
mod decision;
mod envelope;
mod estimate;
mod fake;
mod governor;
mod group;
mod history;
mod idhash;
mod learned;
pub mod parallel;
mod phrase;
mod policy;
mod pressure;
pub mod progress;
mod queue;
mod reservation;
mod scratch;
mod snapshot;
mod sync;
mod units;

#[cfg(feature = "async")]
pub use acquire::Acquire;
pub use clock::{Clock, FakeClock, MonoTime, SystemClock};
pub use contract::Contract;
pub use decision::{Decision, DecisionKind, Reason, ReasonCode, ReasonScope};
pub use envelope::{Alternative, Dimension, Envelope, EnvelopeError, MAX_ALTERNATIVES, RampLimits};
pub use estimate::{Class, Estimate, EstimateBuilder, EstimateError, MILLIS_PER_CPU};
pub use fake::FakeProbe;
pub use governor::{Availability, Governor, GpuAvailability, MAX_SNAPSHOT_AGE};
pub use group::{GroupLimits, GroupName, GroupNameError, GroupUsage, MAX_GROUP_NAME};
pub use history::{BatchSample, MAX_CLASSES, RunOutcome, RunRecord, RunShape, SAMPLES_PER_CLASS};
pub use learned::{Figure, ItemTimes, Learned, Source};
pub use phrase::{LearnedPhrase, format_duration_ms};
pub use policy::{GpuDevice, HostPolicy, HostProfile, PolicyError};
pub use pressure::PressureLevel;
pub use queue::{
    DecisionRecord, HISTORY, QueueConfig, QueueError, QueueEvent, QueueSnapshot, SubmitError, Task,
    TaskContext, TaskError, TaskId, TaskQueue, TaskResult, TaskState, TaskView,
};
pub use reservation::{ReleaseError, Reservation, ReservationId};
pub use scratch::{
    FakeVolume, ScratchError, ScratchGrant, VolumeController, VolumeIdentity, VolumeState, VolumeView,
};
pub use snapshot::{
    CgroupSample, GpuSample, LoadAverage, Pressure, Probe, ProbeError, Snapshot, SnapshotError, SwapCounters,
};
pub use units::{UnitError, format_bytes, format_cpus, parse_bytes, parse_cpus};
