//! # Implementation details
//!
//! Step 9's batch target (history, then the contended cap, pressure and
//! the critical floor) and the sizing admission works from (declared
//! figures raised by what the class learned): shared by the full order
//! (`admission.rs`), the fast path (`fast.rs`) and
//! [`Governor::batch_target`](super::Governor::batch_target), so that
//! `lardon explain` and a grant can never disagree.

use crate::clock::MonoTime;
use crate::estimate::Estimate;
use crate::learned::{self, Declared, Learned};

use super::ledger::Ledger;
use super::packing;

/// Step 9, history and contention: the history target of `sizing`, capped
/// at the contended target (`packing.rs`) while memory is contended at
/// `now`.
pub(crate) fn packed_target(ledger: &Ledger, est: &Estimate, sizing: &Learned, now: MonoTime) -> u64 {
    packed_target_of(ledger, est, sizing.fixed, sizing.per_item, sizing.batch_target, now)
}

/// [`packed_target`] from the figures alone: `target` (the history
/// target) capped while memory is contended at `now`, for an estimate
/// sized at `fixed + per_item × batch`.
#[inline]
pub(crate) fn packed_target_of(
    ledger: &Ledger,
    est: &Estimate,
    fixed: u64,
    per_item: u64,
    target: u64,
    now: MonoTime,
) -> u64 {
    if ledger.contention.is_contended(now) {
        packing::contended_target(fixed, per_item, est.batch_min, target)
    } else {
        target
    }
}

/// Step 9: the history target, capped while memory is contended
/// ([`packed_target`]), lowered by pressure ([`pressure_target`]), then
/// raised to the critical floor of a task with much work left
/// (`packing::critical_floor`), never above the history target.
pub(crate) fn step9_target(ledger: &Ledger, est: &Estimate, sizing: &Learned, now: MonoTime) -> u64 {
    let target = pressure_target(ledger, est, sizing.samples, packed_target(ledger, est, sizing, now));
    target.max(packing::critical_floor(est, sizing.samples, sizing.batch_target))
}

/// Step 9 after history: `target` lowered by slow start and halved under
/// YELLOW, never below `batch_min`. A class with a measured run
/// (`samples` completed runs, more than 0) is not lowered while the YELLOW
/// comes from the caution band alone (docs/DESIGN.md §5): its batch size
/// is known, and a host packed to its budget sits in the band nearly all
/// the time; memory PSI, swap and the floors still lower it.
#[inline]
pub(crate) fn pressure_target(ledger: &Ledger, est: &Estimate, samples: usize, target: u64) -> u64 {
    let mut target = target;
    let spared = samples > 0 && ledger.pressure.caution_band_only();
    if let Some(limit) = ledger.pressure.batch_target()
        && !spared
    {
        target = target.min(limit);
    }
    target.max(est.batch_min)
}

/// The estimate's declared memory in admission's terms (step 5: GPU bytes
/// folded into host bytes on a unified-memory host); `None` on overflow.
pub(crate) fn declared(ledger: &Ledger, est: &Estimate) -> Option<Declared> {
    let (fixed, per_item) = if ledger.profile.gpus_unified() {
        (
            est.memory_fixed.checked_add(est.gpu_memory_fixed)?,
            est.memory_per_item.checked_add(est.gpu_memory_per_item)?,
        )
    } else {
        (est.memory_fixed, est.memory_per_item)
    };
    Some(Declared { fixed, per_item, batch_min: est.batch_min, batch_max: est.batch_max })
}

/// The memory sizing and history target admission uses for `est`: the
/// declared figures raised by what its class learned (docs/DESIGN.md §6).
/// `None` when the declared figures overflow (step 5).
pub(crate) fn sizing(ledger: &Ledger, est: &Estimate) -> Option<Learned> {
    let declared = declared(ledger, est)?;
    Some(learned::size(ledger.history.class(&est.class), declared, ledger.static_memory_budget()))
}
