//! # Implementation details
//!
//! The admission order of docs/DESIGN.md §4, one step at a time, over the
//! ledger (called with the Governor's lock held; calls nothing outside the
//! engine).

use std::time::Duration;

use crate::clock::MonoTime;
use crate::contract::Contract;
use crate::decision::{Decision, Reason, ReasonCode};
use crate::estimate::Estimate;
use crate::learned::Learned;
use crate::pressure::PressureLevel;
use crate::snapshot::Snapshot;
use crate::units::{format_bytes, format_cpus};

pub(crate) use super::group_limits::{GroupRoom, group_room};
use super::ledger::Ledger;
use super::packing;
pub(crate) use super::targets::{packed_target_of, pressure_target, sizing, step9_target};

/// Snapshots older than this (inclusive bound: exactly this old is fresh).
pub const MAX_SNAPSHOT_AGE: Duration = Duration::from_millis(1000);

/// `capacity(avail, fixed, per)` of docs/DESIGN.md §4 step 6.
#[inline]
pub(crate) fn capacity(available: u64, fixed: u64, per_item: u64) -> u64 {
    match available.checked_sub(fixed) {
        None => 0,
        Some(room) => room.checked_div(per_item).unwrap_or(u64::MAX),
    }
}

/// Whether `capacity(available, fixed, per_item) >= n`, without its
/// division (`floor(room / per) >= n` iff `n × per <= room`; a product
/// past `u64` is more than any room). The fast path asks this three
/// times per grant, and a 64-bit division costs tens of cycles.
#[inline]
pub(crate) fn fits_at_least(available: u64, fixed: u64, per_item: u64, n: u64) -> bool {
    match available.checked_sub(fixed) {
        None => n == 0,
        Some(room) => per_item.checked_mul(n).is_some_and(|need| need <= room),
    }
}

/// Resources kept free for a long-bypassed head of the queue
/// (anti-starvation): later tasks are admitted only if they leave this.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Hold {
    pub(crate) memory: u64,
    pub(crate) cpu_millis: u64,
    pub(crate) io_slots: u32,
}

impl Hold {
    /// The minimum the head needs: its memory at `batch_min`, its CPUs (a
    /// whole one at most when reducible) and one IO slot if it wants any.
    pub(crate) fn for_estimate(est: &Estimate, unified_gpus: bool) -> Self {
        let gpu = if unified_gpus { est.gpu_memory_for(est.batch_min).unwrap_or(0) } else { 0 };
        Hold {
            memory: est.memory_for(est.batch_min).unwrap_or(u64::MAX).saturating_add(gpu),
            cpu_millis: u64::from(if est.cpus_reducible { est.cpus.min(1000) } else { est.cpus }),
            io_slots: est.io_slots.min(1),
        }
    }
}

/// Steps 2–3: freshness and validity, then the pressure state machine on a
/// new sample (the ledger moves the generation when it changed a budget).
/// Returns a WAIT decision when admission must stop here.
pub(crate) fn observe(ledger: &mut Ledger, snap: &Snapshot, now: MonoTime) -> Option<Decision> {
    match now.checked_since(snap.captured_at) {
        None => {
            return Some(Decision::wait(
                ReasonCode::StaleSnapshot,
                format!("snapshot taken at {} is in the future (now {now})", snap.captured_at),
            ));
        }
        Some(age) if age > MAX_SNAPSHOT_AGE => {
            return Some(Decision::wait(
                ReasonCode::StaleSnapshot,
                format!("snapshot is {} ms old (limit {} ms)", age.as_millis(), MAX_SNAPSHOT_AGE.as_millis()),
            ));
        }
        Some(_) => {}
    }
    // A figure no host produces says the probe is broken: like a stale
    // sample, it must neither admit nor move the pressure state.
    if let Err(e) = snap.validate() {
        return Some(Decision::wait(ReasonCode::InvalidSnapshot, format!("invalid snapshot: {e}")));
    }
    if ledger.is_new_sample(snap) {
        ledger.observe_sample(snap);
    }
    if ledger.pressure.level() == PressureLevel::Red {
        let why = ledger.pressure.reason().to_owned();
        return Some(Decision::wait(ReasonCode::PressureRed, format!("host pressure is RED: {why}")));
    }
    None
}

/// Admission of one estimate (docs/DESIGN.md §4), with `hold` kept free
/// for a starving head of the queue: the fast path's full grant when it
/// finds one (`fast.rs`, the same decision in fewer steps), else the whole
/// order.
pub(crate) fn evaluate(
    ledger: &mut Ledger,
    est: &Estimate,
    snap: &Snapshot,
    now: MonoTime,
    running: usize,
    hold: Option<&Hold>,
) -> Decision {
    match super::fast::grant(ledger, est, snap, now, running, hold) {
        Some(grant) => Decision::Admit(grant.contract(est)),
        None => evaluate_in_order(ledger, est, snap, now, running, hold),
    }
}

/// The whole admission order for one estimate (docs/DESIGN.md §4), step
/// by step, with `hold` kept free for a starving head of the queue.
pub(crate) fn evaluate_in_order(
    ledger: &mut Ledger,
    est: &Estimate,
    snap: &Snapshot,
    now: MonoTime,
    running: usize,
    hold: Option<&Hold>,
) -> Decision {
    // 1. Invalid estimate.
    if let Err(e) = est.validate() {
        return Decision::reject(ReasonCode::InvalidEstimate, format!("invalid estimate: {e}"));
    }
    ledger.note_batch_max(est.batch_max);
    // 2–3. Freshness and pressure.
    if let Some(stop) = observe(ledger, snap, now) {
        return stop;
    }
    let decision = admit(ledger, est, snap, now, running, hold);
    // Packing (step 9) caps batches while some estimate waits for memory.
    if decision.kind() == crate::DecisionKind::Wait && decision.reason() == ReasonCode::Memory {
        ledger.contention.note_memory_wait(est, now);
    } else if decision.contract().is_some() {
        ledger.contention.note_grant(est);
    }
    decision
}

/// Steps 4–11 for a valid estimate against a fresh, observed snapshot:
/// one function per step, each either passing what the next step needs or
/// answering WAIT/REJECT.
fn admit(
    ledger: &Ledger,
    est: &Estimate,
    snap: &Snapshot,
    now: MonoTime,
    running: usize,
    hold: Option<&Hold>,
) -> Decision {
    let hold = hold.copied().unwrap_or_default();
    // The grant is built in the return slot, not wrapped in a `Result` and
    // unwrapped again: each move of a decision is a `memcpy` of a contract.
    match admit_steps(ledger, est, snap, now, running, &hold) {
        Ok(Granted { sizing, fit, batch, target, slots }) => {
            grant(ledger, est, &sizing, fit, batch, target, slots)
        }
        Err(refused) => refused,
    }
}

/// What steps 4–10 found, for step 11 to grant.
struct Granted {
    sizing: Learned,
    fit: Fit,
    batch: u64,
    target: u64,
    slots: Slots,
}

/// Steps 4–10, each either passing what the next step needs or answering
/// WAIT/REJECT.
fn admit_steps(
    ledger: &Ledger,
    est: &Estimate,
    snap: &Snapshot,
    now: MonoTime,
    running: usize,
    hold: &Hold,
) -> Result<Granted, Decision> {
    let sizing = gpu_and_sizing(ledger, est)?;
    never_fits(ledger, est, &sizing)?;
    host_gates(ledger, est, snap)?;
    let room = group_room(ledger, est, &sizing)?;
    let fit = memory_fit(ledger, est, snap, &sizing, hold, &room)?;
    // Capped while memory is contended, then pressure, then the critical
    // floor (packing.rs).
    let target = step9_target(ledger, est, &sizing, now);
    let batch = batch_within_target(ledger, est, &sizing, &fit, target)?;
    let slots = slots(ledger, est, hold, running, &room)?;
    Ok(Granted { sizing, fit, batch, target, slots })
}

/// Steps 4–5: a GPU wanted on a host without one is REJECTed; on a
/// unified-memory host GPU bytes are host bytes; then what the class
/// learned sizes the memory (docs/DESIGN.md §6, `learned.rs`).
fn gpu_and_sizing(ledger: &Ledger, est: &Estimate) -> Result<Learned, Decision> {
    if est.wants_gpu() && ledger.profile.gpus.is_empty() {
        return Err(Decision::reject(ReasonCode::NoGpu, "the task wants a GPU and this host has none"));
    }
    sizing(ledger, est).ok_or_else(|| {
        Decision::reject(
            ReasonCode::InvalidEstimate,
            "invalid estimate: memory plus GPU memory overflows on this unified-memory host",
        )
    })
}

/// Whether `est` wants GPU bytes of its own (dedicated VRAM, not folded
/// into host memory).
fn wants_gpu_bytes(ledger: &Ledger, est: &Estimate) -> bool {
    !ledger.profile.gpus_unified() && (est.gpu_memory_fixed > 0 || est.gpu_memory_per_item > 0)
}

/// Step 6: could never fit, even on the idle host → REJECT.
fn never_fits(ledger: &Ledger, est: &Estimate, sizing: &Learned) -> Result<(), Decision> {
    let (profile, policy) = (&ledger.profile, &ledger.policy);
    let idle = capacity(ledger.static_memory_budget(), sizing.fixed, sizing.per_item);
    if idle < est.batch_min {
        return Err(Decision::reject(
            ReasonCode::Impossible,
            format!(
                "impossible on this host: {} for {} item(s){} but at most {} can ever be reserved ({} RAM − {} reserve)",
                format_bytes(sizing.memory_for(est.batch_min)),
                est.batch_min,
                learned_note(sizing),
                format_bytes(ledger.static_memory_budget()),
                format_bytes(profile.total_memory),
                format_bytes(policy.memory_reserve),
            ),
        ));
    }
    if wants_gpu_bytes(ledger, est) {
        let mut dedicated = profile.gpus.iter().filter(|g| !g.unified);
        let fits = dedicated.any(|g| {
            g.vram_total.is_none_or(|v| {
                capacity(
                    v.saturating_sub(ledger.gpu_reserve(g.index)),
                    est.gpu_memory_fixed,
                    est.gpu_memory_per_item,
                ) >= est.batch_min
            })
        });
        if !fits {
            return Err(Decision::reject(
                ReasonCode::Impossible,
                format!(
                    "impossible on this host: {} of GPU memory for {} item(s) exceeds every GPU's VRAM minus its reserve",
                    format_bytes(est.gpu_memory_for(est.batch_min).unwrap_or(u64::MAX)),
                    est.batch_min
                ),
            ));
        }
    }
    let pool = ledger.cpu_pool_millis();
    if !est.cpus_reducible && u64::from(est.cpus) > pool {
        return Err(Decision::reject(
            ReasonCode::Impossible,
            format!(
                "impossible on this host: wants exactly {} CPUs, the compute pool has {}",
                format_cpus(est.cpus),
                format_cpus(pool as u32)
            ),
        ));
    }
    Ok(())
}

/// Step 7: load and PSI gates → WAIT. Only foreign load counts: Lardon's
/// own running tasks are never the reason the next one waits.
fn host_gates(ledger: &Ledger, est: &Estimate, snap: &Snapshot) -> Result<(), Decision> {
    let policy = &ledger.policy;
    let [load, cpu_psi, mem_psi, io_psi] = ledger.gates(snap);
    if load {
        let f = ledger.load_figures(snap);
        return Err(Decision::wait(
            ReasonCode::CpuLoad,
            format!(
                "foreign load {:.2} (1-minute load {:.2} − {:.2} CPUs of Lardon's own: its tasks and itself) ≥ {:.2} (max_load_ratio {} × {}-CPU pool)",
                f.foreign,
                f.load,
                f.own,
                f.threshold.unwrap_or(0.0),
                policy.max_load_ratio.unwrap_or(0.0),
                policy.compute_cpus(&ledger.profile),
            ),
        ));
    }
    if cpu_psi {
        return Err(Decision::wait(
            ReasonCode::CpuPressure,
            format!("CPU PSI {:.1} ≥ {}", snap.pressure.cpu.unwrap_or(0.0), policy.psi_cpu),
        ));
    }
    if mem_psi {
        return Err(Decision::wait(
            ReasonCode::MemoryPressure,
            format!("memory PSI {:.1} ≥ {}", snap.pressure.memory.unwrap_or(0.0), policy.psi_memory),
        ));
    }
    if io_psi && est.io_slots > 0 {
        return Err(Decision::wait(
            ReasonCode::IoPressure,
            format!("IO PSI {:.1} ≥ {}", snap.pressure.io.unwrap_or(0.0), policy.psi_io),
        ));
    }
    Ok(())
}

/// What memory and GPU memory allow now (step 8).
struct Fit {
    /// Memory available to this task (after a starving head's hold).
    memory_available: u64,
    /// The largest batch memory and the chosen GPUs allow.
    batch: u64,
    /// What bounds `batch`: `Memory` or `GpuMemory`.
    short: ReasonCode,
    /// Whether the group's memory room, not the host's, bounds the
    /// memory available: the sliver rule (which waits for the host's
    /// memory to come back, reason `memory`) does not apply then, or a
    /// group's room would read as the host's shortage to the queue's scan.
    group_bound: bool,
    /// Chosen GPUs (index, capacity in items), most free first.
    devices: Vec<(u32, u64)>,
}

/// Step 8: the batch available memory allows, and per GPU likewise
/// (unknown GPU availability → WAIT).
fn memory_fit(
    ledger: &Ledger,
    est: &Estimate,
    snap: &Snapshot,
    sizing: &Learned,
    hold: &Hold,
    room: &GroupRoom,
) -> Result<Fit, Decision> {
    // A group's memory limit is a budget of its own: the batch fits both.
    let host = ledger.memory_available(snap).saturating_sub(hold.memory);
    let memory_available = host.min(room.memory);
    let mut fit = Fit {
        memory_available,
        batch: capacity(memory_available, sizing.fixed, sizing.per_item),
        short: ReasonCode::Memory,
        group_bound: room.memory < host,
        devices: Vec::new(),
    };
    if est.gpu_slots == 0 {
        return Ok(fit);
    }
    let gpu_bytes = wants_gpu_bytes(ledger, est);
    let gpus = &ledger.profile.gpus;
    let any_dedicated = gpus.iter().any(|g| !g.unified);
    for gpu in gpus.iter().filter(|g| !any_dedicated || !g.unified) {
        if !ledger.gpu_slot_free(gpu.index) {
            continue;
        }
        let cap = if gpu_bytes {
            let Some(free) = ledger.gpu_available(gpu.index, snap) else {
                return Err(Decision::wait(
                    ReasonCode::GpuMemoryUnknown,
                    format!("free memory of GPU {} is unknown", gpu.index),
                ));
            };
            capacity(free, est.gpu_memory_fixed, est.gpu_memory_per_item)
        } else {
            u64::MAX
        };
        if cap >= est.batch_min {
            fit.devices.push((gpu.index, cap));
        }
    }
    // Most free first: the batch is bounded by the tightest chosen device.
    fit.devices.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    fit.devices.truncate(est.gpu_slots as usize);
    if let Some(&(_, tightest)) = fit.devices.last()
        && tightest < fit.batch
    {
        fit.batch = tightest;
        fit.short = ReasonCode::GpuMemory;
    }
    Ok(fit)
}

/// Step 9: the batch within the target (history, then the target
/// pressure sets: YELLOW halved it, RED dropped it to 1, GREEN regrows it,
/// never below `batch_min`); below `batch_min` → WAIT, as is a GPU task
/// with no GPU chosen.
fn batch_within_target(
    ledger: &Ledger,
    est: &Estimate,
    sizing: &Learned,
    fit: &Fit,
    target: u64,
) -> Result<u64, Decision> {
    let batch = fit.batch.min(target);
    if batch < est.batch_min {
        let message = if fit.short == ReasonCode::GpuMemory {
            format!("not enough free GPU memory for {} item(s)", est.batch_min)
        } else {
            format!(
                "needs {} for {} item(s){}, {} available now ({} reserved by running tasks)",
                format_bytes(sizing.memory_for(est.batch_min)),
                est.batch_min,
                learned_note(sizing),
                format_bytes(fit.memory_available),
                format_bytes(ledger.totals().memory),
            )
        };
        return Err(Decision::wait(fit.short, message));
    }
    if est.gpu_slots > 0 && fit.devices.is_empty() {
        let why = if wants_gpu_bytes(ledger, est) { ReasonCode::GpuMemory } else { ReasonCode::GpuSlot };
        return Err(Decision::wait(why, "no GPU has a free slot and enough memory"));
    }
    // The sliver rule (packing.rs): below the least memory × time per item,
    // wait for our own reservations to come back.
    if batch < target
        && !fit.group_bound
        && ledger.totals().memory > 0
        && let Some(times) = sizing.times
        && let Some(best) = packing::sliver(sizing.fixed, sizing.per_item, times, est, target, batch)
    {
        return Err(Decision::wait(
            ReasonCode::Memory,
            format!(
                "{} available now fits {batch} item(s), below the {best} whose memory × time per item is least \
                 (learned: {:.1} s per sequence + {:.2} s per item); waits for the {} reserved by running tasks",
                format_bytes(fit.memory_available),
                times.fixed.as_secs_f64(),
                times.per_item.as_secs_f64(),
                format_bytes(ledger.totals().memory),
            ),
        ));
    }
    Ok(batch)
}

/// What step 10 found free.
struct Slots {
    cpu_free: u64,
    io_free: u32,
    scratch: Option<crate::scratch::ScratchGrant>,
}

/// Step 10: a free CPU (all of them for a non-reducible task), a wanted IO
/// slot, a scratch lease, and room under the running cap → else WAIT.
fn slots(
    ledger: &Ledger,
    est: &Estimate,
    hold: &Hold,
    running: usize,
    room: &GroupRoom,
) -> Result<Slots, Decision> {
    let policy = &ledger.policy;
    let cpu_free = ledger.cpu_available_millis().saturating_sub(hold.cpu_millis).min(room.cpu_millis);
    let cpu_needed = if est.cpus_reducible { u64::from(est.cpus.min(1000)) } else { u64::from(est.cpus) };
    if cpu_free < cpu_needed {
        return Err(Decision::wait(
            ReasonCode::Cpu,
            format!(
                "needs {} CPU(s), {} free of a {}-CPU pool",
                format_cpus(cpu_needed as u32),
                format_cpus(cpu_free as u32),
                format_cpus(ledger.cpu_pool_millis() as u32)
            ),
        ));
    }
    let io_free = policy.io_slots.saturating_sub(ledger.totals().io_slots).saturating_sub(hold.io_slots);
    if est.io_slots > 0 && io_free == 0 {
        return Err(Decision::wait(
            ReasonCode::IoSlot,
            format!("all {} IO slot(s) are taken", policy.io_slots),
        ));
    }
    let scratch = if est.scratch_bytes > 0 { Some(scratch_lease(ledger, est)?) } else { None };
    if let Some(cap) = policy.max_running
        && running >= cap as usize
    {
        // The message is written only if someone reads it: a queue scan
        // meets this answer for every waiting task.
        return Err(Decision::Wait(crate::decision::Reason::max_running(running, cap)));
    }
    Ok(Slots { cpu_free, io_free, scratch })
}

/// Step 10, scratch: the volume to lease from (the path is filled in when
/// the lease is taken), or WAIT.
fn scratch_lease(ledger: &Ledger, est: &Estimate) -> Result<crate::scratch::ScratchGrant, Decision> {
    if let Some(vol) = ledger.scratch_candidate(est.scratch_bytes) {
        return Ok(crate::scratch::ScratchGrant {
            volume: vol.name.clone(),
            path: std::path::PathBuf::new(),
            bytes: est.scratch_bytes,
        });
    }
    let message = if ledger.volumes.is_empty() {
        format!(
            "needs {} of scratch space and no scratch volume is registered",
            format_bytes(est.scratch_bytes)
        )
    } else {
        let best = ledger.volumes.iter().map(|v| v.room()).max().unwrap_or(0);
        format!(
            "needs {} of scratch space; the roomiest volume taking leases has {}",
            format_bytes(est.scratch_bytes),
            format_bytes(best)
        )
    };
    Err(Decision::wait(ReasonCode::Scratch, message))
}

/// Step 11: grant CPUs/slots up to what is desired. REDUCE_BATCH when the
/// batch is below the target or a grant is below what was desired, else
/// ADMIT. The grant is what was learned: fixed + batch × per-item at the
/// learned sizes; on a unified-memory host the GPU bytes are charged to
/// host RAM but are not part of the host-memory grant.
fn grant(
    ledger: &Ledger,
    est: &Estimate,
    sizing: &Learned,
    fit: Fit,
    batch: u64,
    target: u64,
    slots: Slots,
) -> Decision {
    let cpu_millis = u32::try_from(slots.cpu_free.min(u64::from(est.cpus))).unwrap_or(est.cpus);
    let io_slots = est.io_slots.min(slots.io_free);
    let gpu_devices: Vec<u32> = fit.devices.iter().map(|d| d.0).collect();
    let reduced_resources =
        cpu_millis < est.cpus || io_slots < est.io_slots || gpu_devices.len() < est.gpu_slots as usize;
    let charged_memory = sizing.memory_for(batch);
    let gpu_folded =
        if ledger.profile.gpus_unified() { est.gpu_memory_for(batch).unwrap_or(u64::MAX) } else { 0 };
    let memory = charged_memory.saturating_sub(gpu_folded).max(est.memory_for(batch).unwrap_or(u64::MAX));
    let gpu_memory = if gpu_devices.is_empty() { 0 } else { est.gpu_memory_for(batch).unwrap_or(u64::MAX) };
    let reduction = if batch < target {
        Some(Reason::new(
            ReasonCode::BatchReduced,
            format!("batch {batch} of {target}: only {} available", format_bytes(fit.memory_available)),
        ))
    } else if reduced_resources {
        Some(Reason::new(
            ReasonCode::ResourcesReduced,
            format!(
                "granted {} of {} CPUs, {} of {} IO slots, {} of {} GPUs",
                format_cpus(cpu_millis),
                format_cpus(est.cpus),
                io_slots,
                est.io_slots,
                gpu_devices.len(),
                est.gpu_slots
            ),
        ))
    } else {
        // No message: the contract says it all, and formatting figures
        // would triple the cost of the hottest path (see BENCHMARKS.md).
        None
    };
    let contract = Contract {
        batch,
        memory,
        gpu_memory,
        gpu_devices,
        cpu_millis,
        io_slots,
        scratch: slots.scratch,
        class: est.class.clone(),
        alternative: None,
        inflight: 1,
        charged_memory,
        ramp_ticket: None,
        group: est.group.clone(),
    };
    match reduction {
        None => Decision::Admit(contract),
        Some(why) => Decision::ReduceBatch(contract, why),
    }
}

/// " (learned: …)" when history raised the sizing, for WAIT/REJECT
/// messages; empty otherwise.
fn learned_note(sizing: &Learned) -> String {
    let figures = [sizing.learned_fixed, sizing.learned_per_item];
    let raised: Vec<String> = figures.iter().flatten().map(|f| f.source.to_string()).collect();
    if raised.is_empty() {
        String::new()
    } else {
        format!(" (learned from the {})", raised.join(" and the "))
    }
}

#[cfg(test)]
mod tests {
    use super::capacity;

    #[test]
    fn capacity_rules() {
        assert_eq!(capacity(10, 11, 1), 0);
        assert_eq!(capacity(10, 10, 0), u64::MAX);
        assert_eq!(capacity(10, 4, 0), u64::MAX);
        assert_eq!(capacity(10, 4, 3), 2);
        assert_eq!(capacity(u64::MAX, 0, 1), u64::MAX);
    }
}
