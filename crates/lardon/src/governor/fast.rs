//! # Implementation details
//!
//! The fast path of admission (docs/DESIGN.md §4, "Fast path"): the common
//! request granted in full, in a few steps instead of eleven. It answers
//! only ADMIT, and only for a request that
//! - wants no GPU and no scratch space (no device choice, no lease),
//! - comes with a fresh snapshot the ledger has already observed (no
//!   pressure-state update to make) and pressure below RED;
//!
//! and that every step of the full order would pass at the full target:
//! valid, possible on this host, no gate reached, memory for the whole
//! target batch, every CPU and IO slot it wants, room under `max_running`
//! and under its group's limits.
//! Anything else — a WAIT, a REJECT, a reduced batch or fewer CPUs, a GPU,
//! scratch, a new sample — is left to the full order in `admission.rs`,
//! which decides it, message and all. The fast path changes nothing while
//! it checks, so falling back costs only the checks.
//!
//! # Invariants
//! - a fast grant is exactly the decision the full order gives for the same
//!   ledger, estimate, snapshot, time, running count and hold: debug builds
//!   (every test, the loom models included) run the full order after each
//!   fast grant and assert it, and a property test compares both on random
//!   ledgers, estimates and snapshots (`fast_tests.rs`);
//! - a fast grant leaves the ledger as the full order's grant does: the
//!   largest `batch_max` noted and the estimate no longer counted as
//!   waiting for memory.

use crate::clock::MonoTime;
use crate::contract::Contract;
use crate::estimate::Estimate;
use crate::learned::{self, Declared};
use crate::pressure::PressureLevel;
use crate::snapshot::Snapshot;

use super::admission::{self, Hold, MAX_SNAPSHOT_AGE, fits_at_least};
use super::ledger::Ledger;

/// The figures of a full grant found by the fast path; the rest of its
/// contract follows from the estimate (no GPU, no scratch, no envelope).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Grant {
    /// The batch: the full target.
    pub(crate) batch: u64,
    /// Host memory granted (`fixed + batch × per_item` at the learned sizes).
    pub(crate) memory: u64,
    /// Host RAM charged to the ledger (no GPU bytes to add).
    pub(crate) charged_memory: u64,
    /// Every CPU wanted, in thousandths.
    pub(crate) cpu_millis: u32,
    /// Every IO slot wanted.
    pub(crate) io_slots: u32,
}

impl Grant {
    /// The contract of this grant for `est`: what step 11 of the full
    /// order builds for an ADMIT without GPU or scratch.
    #[inline]
    pub(crate) fn contract(&self, est: &Estimate) -> Contract {
        Contract {
            batch: self.batch,
            memory: self.memory,
            gpu_memory: 0,
            gpu_devices: Vec::new(),
            cpu_millis: self.cpu_millis,
            io_slots: self.io_slots,
            scratch: None,
            class: est.class.clone(),
            alternative: None,
            inflight: 1,
            charged_memory: self.charged_memory,
            ramp_ticket: None,
            group: est.group.clone(),
        }
    }
}

/// Grants `est` in full if the fast path can (see the module doc), and
/// records it as admission's grant (largest `batch_max`, contention); the
/// caller holds it. `None`: the full order must decide, and nothing
/// changed.
#[inline]
pub(crate) fn grant(
    ledger: &mut Ledger,
    est: &Estimate,
    snap: &Snapshot,
    now: MonoTime,
    running: usize,
    hold: Option<&Hold>,
) -> Option<Grant> {
    let grant = check(ledger, est, snap, now, running, hold)?;
    #[cfg(debug_assertions)]
    {
        // The full order on the same state, before any of the grant's
        // effects (contention decides the target): it must say the same.
        let full = admission::evaluate_in_order(ledger, est, snap, now, running, hold);
        debug_assert_eq!(
            full,
            crate::decision::Decision::Admit(grant.contract(est)),
            "the fast path granted what the full order does not"
        );
    }
    // What the full order's grant records (both are idempotent, so after
    // the debug check above they change nothing more).
    ledger.note_batch_max(est.batch_max);
    ledger.contention.note_grant(est);
    Some(grant)
}

/// The fast path's checks, changing nothing: the grant the full order
/// would make at its full target, or `None` when the full order must
/// decide (see the module doc for what it leaves there).
#[inline]
pub(crate) fn check(
    ledger: &Ledger,
    est: &Estimate,
    snap: &Snapshot,
    now: MonoTime,
    running: usize,
    hold: Option<&Hold>,
) -> Option<Grant> {
    // Left to the full order: device choice and scratch leases.
    if est.wants_gpu() || est.scratch_bytes > 0 {
        return None;
    }
    // 1. Valid estimate.
    if !est.is_valid() {
        return None;
    }
    // 2–3. Fresh, valid, already observed, not RED.
    let age = now.checked_since(snap.captured_at)?;
    if age > MAX_SNAPSHOT_AGE
        || !(snap.plainly_valid() || snap.validate().is_ok())
        || ledger.is_new_sample(snap)
        || ledger.pressure.level() == PressureLevel::Red
    {
        return None;
    }
    // 4–5. No GPU wanted, so no GPU bytes to fold; sized by history.
    let (fixed, per_item, history_target, samples) = match ledger.history.class(&est.class) {
        None => (est.memory_fixed, est.memory_per_item, est.batch_max, 0),
        Some(history) => {
            let declared = Declared {
                fixed: est.memory_fixed,
                per_item: est.memory_per_item,
                batch_min: est.batch_min,
                batch_max: est.batch_max,
            };
            let sizing = learned::size(Some(history), declared, ledger.static_memory_budget());
            (sizing.fixed, sizing.per_item, sizing.batch_target, sizing.samples)
        }
    };
    // 6. Possible on the idle host.
    if !fits_at_least(ledger.static_memory_budget(), fixed, per_item, est.batch_min)
        || (!est.cpus_reducible && u64::from(est.cpus) > ledger.cpu_pool_millis())
    {
        return None;
    }
    // 8, before 7: the batch memory allows now. Below `batch_min` it is a
    // WAIT for memory whatever the gates say (the common answer of a
    // queue scan), so the gates are not computed for it here.
    let hold = hold.copied().unwrap_or_default();
    // 7b. The group's limits (`admission::group_room`): at its running
    // limit nothing is granted; its memory and CPU room cap the grant.
    let room = match ledger.limited_group(est) {
        None => admission::GroupRoom::UNLIMITED,
        Some((_, book)) => {
            if book.limits.max_running.is_some_and(|cap| book.running >= cap) {
                return None;
            }
            admission::GroupRoom {
                memory: book.limits.memory.map_or(u64::MAX, |cap| cap.saturating_sub(book.memory)),
                cpu_millis: book
                    .limits
                    .cpu_millis
                    .map_or(u64::MAX, |cap| cap.saturating_sub(book.cpu_millis)),
            }
        }
    };
    let available = ledger.memory_available(snap).saturating_sub(hold.memory).min(room.memory);
    if !fits_at_least(available, fixed, per_item, est.batch_min) {
        return None;
    }
    // 7. No gate reached (IO PSI counts only for IO-slot work).
    if ledger.any_gate(snap, est.io_slots > 0) {
        return None;
    }
    // 9. Memory for the whole target (a smaller batch is a REDUCE_BATCH
    // or a WAIT, with a message: the full order's).
    // As `admission::step9_target`: contended cap, pressure, then the
    // critical floor.
    let target = admission::pressure_target(
        ledger,
        est,
        samples,
        admission::packed_target_of(ledger, est, fixed, per_item, history_target, now),
    )
    .max(super::packing::critical_floor(est, samples, history_target));
    if !fits_at_least(available, fixed, per_item, target) {
        return None;
    }
    let batch = target;
    // 10–11. Every CPU and IO slot wanted (fewer is a REDUCE_BATCH), and
    // room under the running cap.
    let cpu_free = ledger.cpu_available_millis().saturating_sub(hold.cpu_millis).min(room.cpu_millis);
    let io_free =
        ledger.policy.io_slots.saturating_sub(ledger.totals().io_slots).saturating_sub(hold.io_slots);
    if cpu_free < u64::from(est.cpus)
        || io_free < est.io_slots
        || ledger.policy.max_running.is_some_and(|cap| running >= cap as usize)
    {
        return None;
    }
    let charged_memory = per_item.saturating_mul(batch).saturating_add(fixed);
    Some(Grant {
        batch,
        memory: charged_memory.max(est.memory_for(batch).unwrap_or(u64::MAX)),
        charged_memory,
        cpu_millis: est.cpus,
        io_slots: est.io_slots,
    })
}
