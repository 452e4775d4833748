//! What was granted for one sequence: the [`Contract`].

use crate::estimate::Class;

/// The grant of one sequence. Callbacks only ever see a copy; changing it
/// changes nothing in the Governor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contract {
    /// Items to process in this sequence.
    pub batch: u64,
    /// Host memory granted, bytes: `fixed + per_item × batch` at the sizes
    /// admission used, i.e. the declared figures raised by what the class
    /// learned (docs/DESIGN.md §6; [`crate::Governor::learned`] shows them).
    /// A daemon that enforces or exports the grant (`LARDON_MEM_BYTES`)
    /// reads this, so it matches what the class was measured to use.
    pub memory: u64,
    /// GPU memory granted per device, bytes.
    pub gpu_memory: u64,
    /// GPU devices granted (indices).
    pub gpu_devices: Vec<u32>,
    /// CPUs granted, in thousandths.
    pub cpu_millis: u32,
    /// IO slots granted.
    pub io_slots: u32,
    /// Scratch lease granted, when the estimate asked for scratch space.
    pub scratch: Option<crate::scratch::ScratchGrant>,
    /// The learning key of the estimate.
    pub class: Class,
    /// Which alternative of a capability envelope was chosen, if any.
    pub alternative: Option<usize>,
    /// In-flight limit of the chosen alternative (1 when not adaptive).
    pub inflight: u32,
    /// Host RAM charged (memory, plus GPU bytes on unified-memory hosts).
    pub(crate) charged_memory: u64,
    /// Ramp trial this sequence belongs to, for throughput feedback.
    /// Boxed: only adaptive alternatives have one, and every admission
    /// moves the contract several times (a smaller one moves cheaper).
    pub(crate) ramp_ticket: Option<Box<crate::envelope::RampTicket>>,
    /// The group the grant counts against (the estimate's), held with it
    /// in the ledger so its release gives the group's share back.
    pub(crate) group: Option<crate::group::GroupName>,
}

impl Contract {
    /// The group this grant counts against, if any.
    pub fn group(&self) -> Option<&crate::group::GroupName> {
        self.group.as_ref()
    }

    /// Whole CPUs to run with: the granted thousandths rounded up, at
    /// least 1 (what `OMP_NUM_THREADS` and the parallel map use).
    pub fn whole_cpus(&self) -> u32 {
        self.cpu_millis.div_ceil(crate::MILLIS_PER_CPU).max(1)
    }
}
