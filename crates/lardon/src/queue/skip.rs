//! # Implementation details
//!
//! What a scan may conclude without asking the Governor: which later tasks
//! earlier waits of the same scan prove would wait too (`Blocked`), and
//! when a fresh task may share the answer the task evaluated just before
//! it got (`Reuse`). Both only ever spare admissions whose answer is
//! known; fresh tasks are always answered, so an impossible task is
//! rejected at once.

use crate::decision::{Reason, ReasonCode};

use super::task::TaskId;

/// What earlier waits in this scan prove about later tasks: a task that
/// was already evaluated once and needs at least as much of a resource that
/// made an earlier task wait would wait too, so it is not evaluated again
/// (this keeps a scan over a long backlog cheap). Fresh tasks are always
/// evaluated, so an impossible task is rejected at once.
#[derive(Default)]
pub(super) struct Blocked {
    /// A host-wide or queue-wide reason: every later evaluated task waits
    /// (and keeps its last decision: re-recording it would cost a pass over
    /// the whole backlog).
    pub(super) all: bool,
    memory: Option<u64>,
    cpu: Option<u64>,
    io: bool,
    /// Some task waited for a GPU slot: every GPU task would.
    gpu_slot: bool,
    /// The smallest per-device GPU memory that waited.
    gpu_memory: Option<u64>,
    scratch: Option<u64>,
}

/// The minimum a single-alternative task needs to start.
pub(super) struct Need {
    memory: u64,
    cpu: u64,
    io: bool,
    gpu: bool,
    /// Per-device GPU memory at `batch_min` (0 on unified hosts: folded).
    gpu_memory: u64,
    scratch: u64,
}

impl Need {
    pub(super) fn of(envelope: &crate::envelope::Envelope, unified: bool) -> Option<Need> {
        let [alt] = envelope.alternatives() else { return None };
        let e = alt.estimate();
        let gpu_bytes = if unified { e.gpu_memory_for(e.batch_min()).unwrap_or(u64::MAX) } else { 0 };
        Some(Need {
            memory: e.memory_for(e.batch_min()).unwrap_or(u64::MAX).saturating_add(gpu_bytes),
            cpu: u64::from(if e.cpus_reducible() { e.cpus().min(1000) } else { e.cpus() }),
            io: e.io_slots() > 0,
            gpu: e.gpu_slots() > 0,
            gpu_memory: if unified { 0 } else { e.gpu_memory_for(e.batch_min()).unwrap_or(u64::MAX) },
            scratch: e.scratch_bytes(),
        })
    }
}

/// The scan's last evaluation, when it answered a queue-wide WAIT: a task
/// with an equal envelope evaluated right after it, with the same running
/// count and hold, would get the same answer (admission is a function of
/// the ledger, the estimate, the snapshot, the clock, the running count
/// and the hold, and none of them changed in between), so it is given
/// that answer without a second admission. A burst of equal tasks
/// submitted while the queue is full (`lardon submit --each`, the queue
/// bench) then costs one admission, not one per task.
pub(super) struct Reuse {
    /// The task that was evaluated (still pending: it waited).
    pub(super) id: TaskId,
    pub(super) why: Reason,
    pub(super) running: usize,
    pub(super) held: bool,
}

impl Blocked {
    pub(super) fn covers(&self, need: &Need) -> bool {
        self.all
            || self.memory.is_some_and(|m| need.memory >= m)
            || self.cpu.is_some_and(|c| need.cpu >= c)
            || (self.io && need.io)
            || (self.gpu_slot && need.gpu)
            || self.gpu_memory.is_some_and(|g| need.gpu && need.gpu_memory >= g)
            || self.scratch.is_some_and(|b| need.scratch >= b && need.scratch > 0)
    }

    pub(super) fn learn(&mut self, reason: ReasonCode, need: Option<&Need>) {
        if reason.scope().queue_wide() {
            self.all = true;
            return;
        }
        match (reason, need) {
            (ReasonCode::Memory, Some(n)) => {
                self.memory = Some(self.memory.map_or(n.memory, |m| m.min(n.memory)))
            }
            (ReasonCode::Cpu, Some(n)) => self.cpu = Some(self.cpu.map_or(n.cpu, |c| c.min(n.cpu))),
            (ReasonCode::IoSlot | ReasonCode::IoPressure, Some(_)) => self.io = true,
            (ReasonCode::GpuSlot, Some(_)) => self.gpu_slot = true,
            (ReasonCode::GpuMemory, Some(n)) => {
                self.gpu_memory = Some(self.gpu_memory.map_or(n.gpu_memory, |g| g.min(n.gpu_memory)));
            }
            (ReasonCode::Scratch, Some(n)) => {
                self.scratch = Some(self.scratch.map_or(n.scratch, |b| b.min(n.scratch)));
            }
            _ => {}
        }
    }
}
