//! What admission answers: a [`Decision`] of one of four kinds, always
//! with a machine-readable [`ReasonCode`] and a human message.

use std::fmt;
use std::sync::OnceLock;

use crate::contract::Contract;

/// The four answers of admission (docs/DESIGN.md §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DecisionKind {
    /// Start with everything the target asks for.
    Admit,
    /// Start, but with a smaller batch or fewer CPUs/slots than wanted.
    ReduceBatch,
    /// Not now; try again when something changes.
    Wait,
    /// Never on this host (or the estimate is invalid).
    Reject,
}

impl DecisionKind {
    /// `admit`, `reduce_batch`, `wait` or `reject`.
    pub fn as_str(self) -> &'static str {
        match self {
            DecisionKind::Admit => "admit",
            DecisionKind::ReduceBatch => "reduce_batch",
            DecisionKind::Wait => "wait",
            DecisionKind::Reject => "reject",
        }
    }

    /// True for `Admit` and `ReduceBatch`: a contract was granted.
    pub fn is_granted(self) -> bool {
        matches!(self, DecisionKind::Admit | DecisionKind::ReduceBatch)
    }
}

impl fmt::Display for DecisionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a decision was taken; stable snake_case codes for scripts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReasonCode {
    /// Granted in full.
    Admitted,
    /// Granted with a smaller batch than the target (memory was short).
    BatchReduced,
    /// Granted with fewer CPUs or slots than wanted.
    ResourcesReduced,
    /// Granted at minimum because the host is under pressure (envelopes).
    PressureDecrease,
    /// The estimate broke a rule (§2).
    InvalidEstimate,
    /// The snapshot is older than 1000 ms or from the future.
    StaleSnapshot,
    /// The snapshot holds a negative or non-finite load or PSI figure.
    InvalidSnapshot,
    /// The probe could not take a snapshot.
    ProbeFailed,
    /// Pressure is RED.
    PressureRed,
    /// The task wants a GPU and the host has none.
    NoGpu,
    /// The task could not fit even on the idle host.
    Impossible,
    /// Foreign load (the 1-minute load minus Lardon's own tasks) at or
    /// above `max_load_ratio` × the compute pool.
    CpuLoad,
    /// CPU PSI at or above its threshold.
    CpuPressure,
    /// Memory PSI at or above its threshold.
    MemoryPressure,
    /// IO PSI at or above its threshold (IO-slot work only).
    IoPressure,
    /// Not enough free memory for `batch_min`.
    Memory,
    /// Not enough free GPU memory for `batch_min`.
    GpuMemory,
    /// GPU free memory is unknown.
    GpuMemoryUnknown,
    /// No free CPU (or not all CPUs of a non-reducible task).
    Cpu,
    /// No free GPU slot.
    GpuSlot,
    /// No free IO slot.
    IoSlot,
    /// No scratch lease available.
    Scratch,
    /// The cap on running tasks is reached.
    MaxRunning,
    /// The task's group is at one of its limits (running tasks, memory or
    /// CPUs held by the group, `Governor::set_group_limits`).
    GroupLimit,
    /// Held back so a long-bypassed head can start (anti-starvation).
    HeldForHead,
    /// Every alternative of a capability envelope waits.
    AllAlternativesWait,
}

impl ReasonCode {
    /// The stable snake_case code.
    pub fn as_str(self) -> &'static str {
        match self {
            ReasonCode::Admitted => "admitted",
            ReasonCode::BatchReduced => "batch_reduced",
            ReasonCode::ResourcesReduced => "resources_reduced",
            ReasonCode::PressureDecrease => "pressure_decrease",
            ReasonCode::InvalidEstimate => "invalid_estimate",
            ReasonCode::StaleSnapshot => "stale_snapshot",
            ReasonCode::InvalidSnapshot => "invalid_snapshot",
            ReasonCode::ProbeFailed => "probe_failed",
            ReasonCode::PressureRed => "pressure_red",
            ReasonCode::NoGpu => "no_gpu",
            ReasonCode::Impossible => "impossible",
            ReasonCode::CpuLoad => "cpu_load",
            ReasonCode::CpuPressure => "cpu_pressure",
            ReasonCode::MemoryPressure => "memory_pressure",
            ReasonCode::IoPressure => "io_pressure",
            ReasonCode::Memory => "memory",
            ReasonCode::GpuMemory => "gpu_memory",
            ReasonCode::GpuMemoryUnknown => "gpu_memory_unknown",
            ReasonCode::Cpu => "cpu",
            ReasonCode::GpuSlot => "gpu_slot",
            ReasonCode::IoSlot => "io_slot",
            ReasonCode::Scratch => "scratch",
            ReasonCode::MaxRunning => "max_running",
            ReasonCode::GroupLimit => "group_limit",
            ReasonCode::HeldForHead => "held_for_head",
            ReasonCode::AllAlternativesWait => "all_alternatives_wait",
        }
    }

    /// How far the reason reaches and what clears it: the one
    /// classification the queue's scan and its host re-sampling both read
    /// (an exhaustive match, so a new code must be placed).
    pub fn scope(self) -> ReasonScope {
        match self {
            ReasonCode::StaleSnapshot
            | ReasonCode::InvalidSnapshot
            | ReasonCode::ProbeFailed
            | ReasonCode::PressureRed
            | ReasonCode::CpuLoad
            | ReasonCode::CpuPressure
            | ReasonCode::MemoryPressure => ReasonScope::Host,
            ReasonCode::MaxRunning => ReasonScope::Queue,
            ReasonCode::IoPressure
            | ReasonCode::Memory
            | ReasonCode::GpuMemory
            | ReasonCode::GpuMemoryUnknown
            | ReasonCode::AllAlternativesWait => ReasonScope::TaskOnHost,
            ReasonCode::Admitted
            | ReasonCode::BatchReduced
            | ReasonCode::ResourcesReduced
            | ReasonCode::PressureDecrease
            | ReasonCode::InvalidEstimate
            | ReasonCode::NoGpu
            | ReasonCode::Impossible
            | ReasonCode::Cpu
            | ReasonCode::GpuSlot
            | ReasonCode::IoSlot
            | ReasonCode::Scratch
            // Cleared by a release of another task of the group (or new
            // limits); other groups' tasks are not held by it.
            | ReasonCode::GroupLimit
            | ReasonCode::HeldForHead => ReasonScope::Task,
        }
    }
}

/// What a [`ReasonCode`] says about the tasks after the one it was given
/// to, and what clears it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReasonScope {
    /// Every task waits alike, whatever it needs, until the host's state
    /// changes (a fresh or valid snapshot, pressure, load).
    Host,
    /// Every task waits alike, whatever it needs, until a running task
    /// ends (`max_running`).
    Queue,
    /// This task's need waits on what the host has free (memory, GPU
    /// memory, IO pressure), which changes with the host's state.
    TaskOnHost,
    /// This task alone: an admission, a rejection, or a wait that only a
    /// release by another task clears (CPUs, slots, scratch, the hold).
    Task,
}

impl ReasonScope {
    /// True when the reason clears only when host state changes (as
    /// opposed to a release by another task): the queue re-samples the
    /// host while a task waits for one of these.
    pub fn waits_on_host(self) -> bool {
        matches!(self, ReasonScope::Host | ReasonScope::TaskOnHost)
    }

    /// True when the reason makes every later task of a scan wait alike
    /// (host- or queue-wide), whatever it needs.
    pub fn queue_wide(self) -> bool {
        matches!(self, ReasonScope::Host | ReasonScope::Queue)
    }
}

impl fmt::Display for ReasonCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a decision was taken: a machine-readable code and a human message
/// with the figures behind it.
///
/// Equal when the codes and the messages are. The message of the reasons
/// a queue scan meets for every waiting task (`max_running`) is kept as
/// its figures and written when first read, so a scan that only compares
/// or records it formats nothing.
#[derive(Clone)]
pub struct Reason {
    code: ReasonCode,
    text: Text,
}

/// A reason's message: written when decided, or figures written on first
/// read (into the cell, so `message` can lend it).
#[derive(Clone)]
enum Text {
    Written(String),
    MaxRunning { running: usize, cap: u32, written: OnceLock<String> },
}

impl Reason {
    /// `code` with `message`.
    pub fn new(code: ReasonCode, message: impl Into<String>) -> Self {
        Reason { code, text: Text::Written(message.into()) }
    }

    /// `max_running`: `running` tasks run and the cap is `cap` (the
    /// message is written when first read).
    pub(crate) fn max_running(running: usize, cap: u32) -> Self {
        Reason {
            code: ReasonCode::MaxRunning,
            text: Text::MaxRunning { running, cap, written: OnceLock::new() },
        }
    }

    /// The stable code.
    pub fn code(&self) -> ReasonCode {
        self.code
    }

    /// The human explanation.
    pub fn message(&self) -> &str {
        match &self.text {
            Text::Written(message) => message,
            Text::MaxRunning { running, cap, written } => {
                written.get_or_init(|| format!("{running} task(s) running, the cap is {cap}"))
            }
        }
    }

    /// Whether `self` says the same as `other`, comparing figures where
    /// both keep them (no message written).
    pub(crate) fn same_as(&self, other: &Reason) -> bool {
        self.code == other.code
            && match (&self.text, &other.text) {
                (
                    Text::MaxRunning { running: a, cap: b, .. },
                    Text::MaxRunning { running: c, cap: d, .. },
                ) => (a, b) == (c, d),
                _ => self.message() == other.message(),
            }
    }
}

impl PartialEq for Reason {
    fn eq(&self, other: &Self) -> bool {
        self.same_as(other)
    }
}

impl Eq for Reason {}

impl fmt::Debug for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reason").field("code", &self.code).field("message", &self.message()).finish()
    }
}

/// The answer of admission for one estimate and one snapshot
/// (docs/DESIGN.md §4). A contract exists exactly when one was granted:
/// ADMIT and REDUCE_BATCH carry it, WAIT and REJECT carry only why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Start with everything the target asks for (reason `admitted`; the
    /// contract says it all, so there is no message).
    Admit(Contract),
    /// Start with a smaller batch, or fewer CPUs/slots, than wanted.
    ReduceBatch(Contract, Reason),
    /// Not now; try again when something changes.
    Wait(Reason),
    /// Never on this host (or the estimate is invalid).
    Reject(Reason),
}

impl Decision {
    pub(crate) fn wait(reason: ReasonCode, message: impl Into<String>) -> Self {
        Decision::Wait(Reason::new(reason, message))
    }

    pub(crate) fn reject(reason: ReasonCode, message: impl Into<String>) -> Self {
        Decision::Reject(Reason::new(reason, message))
    }

    /// Admit, reduce, wait or reject.
    pub fn kind(&self) -> DecisionKind {
        match self {
            Decision::Admit(_) => DecisionKind::Admit,
            Decision::ReduceBatch(..) => DecisionKind::ReduceBatch,
            Decision::Wait(_) => DecisionKind::Wait,
            Decision::Reject(_) => DecisionKind::Reject,
        }
    }

    /// The machine-readable reason (`admitted` for ADMIT).
    pub fn reason(&self) -> ReasonCode {
        match self {
            Decision::Admit(_) => ReasonCode::Admitted,
            Decision::ReduceBatch(_, r) | Decision::Wait(r) | Decision::Reject(r) => r.code,
        }
    }

    /// The human explanation, with figures; empty for ADMIT, whose
    /// contract says it all (`Display` then summarises the contract).
    pub fn message(&self) -> &str {
        match self {
            Decision::Admit(_) => "",
            Decision::ReduceBatch(_, r) | Decision::Wait(r) | Decision::Reject(r) => r.message(),
        }
    }

    /// The contract granted, for ADMIT and REDUCE_BATCH.
    pub fn contract(&self) -> Option<&Contract> {
        match self {
            Decision::Admit(c) | Decision::ReduceBatch(c, _) => Some(c),
            Decision::Wait(_) | Decision::Reject(_) => None,
        }
    }

    pub(crate) fn contract_mut(&mut self) -> Option<&mut Contract> {
        match self {
            Decision::Admit(c) | Decision::ReduceBatch(c, _) => Some(c),
            Decision::Wait(_) | Decision::Reject(_) => None,
        }
    }

    /// True when a contract was granted.
    pub fn is_granted(&self) -> bool {
        matches!(self, Decision::Admit(_) | Decision::ReduceBatch(..))
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Decision::Admit(c) => write!(
                f,
                "{} ({}): batch {}, {} memory, {} CPUs",
                self.kind(),
                self.reason(),
                c.batch,
                crate::format_bytes(c.memory),
                crate::format_cpus(c.cpu_millis)
            ),
            _ => write!(f, "{} ({}): {}", self.kind(), self.reason(), self.message()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{ReasonCode as C, ReasonScope as S};

    /// Every code, with the scope the queue reads: host-wide reasons stop
    /// the scan and make it re-sample the host; `max_running` stops the
    /// scan only; a task's own memory-like wait re-samples only; the rest
    /// do neither.
    const TABLE: [(C, S); 25] = [
        (C::Admitted, S::Task),
        (C::BatchReduced, S::Task),
        (C::ResourcesReduced, S::Task),
        (C::PressureDecrease, S::Task),
        (C::InvalidEstimate, S::Task),
        (C::StaleSnapshot, S::Host),
        (C::InvalidSnapshot, S::Host),
        (C::ProbeFailed, S::Host),
        (C::PressureRed, S::Host),
        (C::NoGpu, S::Task),
        (C::Impossible, S::Task),
        (C::CpuLoad, S::Host),
        (C::CpuPressure, S::Host),
        (C::MemoryPressure, S::Host),
        (C::IoPressure, S::TaskOnHost),
        (C::Memory, S::TaskOnHost),
        (C::GpuMemory, S::TaskOnHost),
        (C::GpuMemoryUnknown, S::TaskOnHost),
        (C::Cpu, S::Task),
        (C::GpuSlot, S::Task),
        (C::IoSlot, S::Task),
        (C::Scratch, S::Task),
        (C::MaxRunning, S::Queue),
        (C::HeldForHead, S::Task),
        (C::AllAlternativesWait, S::TaskOnHost),
    ];

    #[test]
    fn every_reason_code_has_one_scope() {
        let codes: std::collections::HashSet<&str> = TABLE.iter().map(|(c, _)| c.as_str()).collect();
        assert_eq!(codes.len(), TABLE.len(), "a code is listed twice");
        for (code, scope) in TABLE {
            assert_eq!(code.scope(), scope, "{code}");
        }
    }

    #[test]
    fn host_rescans_and_scan_stops_follow_from_the_scope() {
        let rescans: Vec<&str> =
            TABLE.iter().filter(|(c, _)| c.scope().waits_on_host()).map(|(c, _)| c.as_str()).collect();
        let stops: Vec<&str> =
            TABLE.iter().filter(|(c, _)| c.scope().queue_wide()).map(|(c, _)| c.as_str()).collect();
        assert_eq!(
            rescans,
            [
                "stale_snapshot",
                "invalid_snapshot",
                "probe_failed",
                "pressure_red",
                "cpu_load",
                "cpu_pressure",
                "memory_pressure",
                "io_pressure",
                "memory",
                "gpu_memory",
                "gpu_memory_unknown",
                "all_alternatives_wait",
            ]
        );
        assert_eq!(
            stops,
            [
                "stale_snapshot",
                "invalid_snapshot",
                "probe_failed",
                "pressure_red",
                "cpu_load",
                "cpu_pressure",
                "memory_pressure",
                "max_running",
            ]
        );
    }
}
