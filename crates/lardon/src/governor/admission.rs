//! # Implementation details
//!
//! The admission order of docs/DESIGN.md §4, one step at a time, over the
//! ledger (called with the Governor's lock held; calls nothing outside the
//! engine).

use std::time::Duration;

use crate::clock::MonoTime;
use crate::contract::Contract;
use crate::decision::{Decision, DecisionKind, ReasonCode};
use crate::estimate::Estimate;
use crate::learned::{self, Declared, Learned};
use crate::pressure::PressureLevel;
use crate::snapshot::Snapshot;
use crate::units::{format_bytes, format_cpus};

use super::ledger::Ledger;
use super::packing;

/// Snapshots older than this (inclusive bound: exactly this old is fresh).
pub const MAX_SNAPSHOT_AGE: Duration = Duration::from_millis(1000);

/// `capacity(avail, fixed, per)` of docs/DESIGN.md §4 step 6.
pub(crate) fn capacity(available: u64, fixed: u64, per_item: u64) -> u64 {
    match available.checked_sub(fixed) {
        None => 0,
        Some(room) => room.checked_div(per_item).unwrap_or(u64::MAX),
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

/// Outcome of evaluation plus whether a new sample changed budgets.
pub(crate) struct Evaluation {
    pub(crate) decision: Decision,
    pub(crate) budgets_changed: bool,
}

/// Steps 2–3: freshness and validity, then the pressure state machine on a
/// new sample.
/// Returns a WAIT decision when admission must stop here.
pub(crate) fn observe(ledger: &mut Ledger, snap: &Snapshot, now: MonoTime) -> (Option<Decision>, bool) {
    match now.checked_since(snap.captured_at) {
        None => {
            return (
                Some(Decision::wait(
                    ReasonCode::StaleSnapshot,
                    format!("snapshot taken at {} is in the future (now {now})", snap.captured_at),
                )),
                false,
            );
        }
        Some(age) if age > MAX_SNAPSHOT_AGE => {
            return (
                Some(Decision::wait(
                    ReasonCode::StaleSnapshot,
                    format!(
                        "snapshot is {} ms old (limit {} ms)",
                        age.as_millis(),
                        MAX_SNAPSHOT_AGE.as_millis()
                    ),
                )),
                false,
            );
        }
        Some(_) => {}
    }
    // A figure no host produces says the probe is broken: like a stale
    // sample, it must neither admit nor move the pressure state.
    if let Err(e) = snap.validate() {
        return (Some(Decision::wait(ReasonCode::InvalidSnapshot, format!("invalid snapshot: {e}"))), false);
    }
    let changed = if ledger.is_new_sample(snap) { ledger.observe_sample(snap) } else { false };
    if ledger.pressure.level() == PressureLevel::Red {
        let why = ledger.pressure.reason().to_owned();
        return (
            Some(Decision::wait(ReasonCode::PressureRed, format!("host pressure is RED: {why}"))),
            changed,
        );
    }
    (None, changed)
}

/// The whole admission order for one estimate. `force_minimum` grants the
/// batch minimum (envelopes under pressure).
pub(crate) fn evaluate(
    ledger: &mut Ledger,
    est: &Estimate,
    snap: &Snapshot,
    now: MonoTime,
    running: usize,
    hold: Option<&Hold>,
) -> Evaluation {
    // 1. Invalid estimate.
    if let Err(e) = est.validate() {
        return Evaluation {
            decision: Decision::reject(ReasonCode::InvalidEstimate, format!("invalid estimate: {e}")),
            budgets_changed: false,
        };
    }
    ledger.largest_batch = ledger.largest_batch.max(est.batch_max);
    // 2–3. Freshness and pressure.
    let (stop, budgets_changed) = observe(ledger, snap, now);
    if let Some(decision) = stop {
        return Evaluation { decision, budgets_changed };
    }
    let decision = admit(ledger, est, snap, now, running, hold);
    if decision.kind == DecisionKind::Wait && decision.reason == ReasonCode::Memory {
        ledger.contention.note_memory_wait(est, now);
    } else if decision.contract.is_some() {
        ledger.contention.note_grant(est);
    }
    Evaluation { decision, budgets_changed }
}

fn admit(
    ledger: &Ledger,
    est: &Estimate,
    snap: &Snapshot,
    now: MonoTime,
    running: usize,
    hold: Option<&Hold>,
) -> Decision {
    let hold = hold.copied().unwrap_or_default();
    let profile = &ledger.profile;
    let policy = &ledger.policy;
    // 4. GPU wanted on a host without one.
    if est.wants_gpu() && profile.gpus.is_empty() {
        return Decision::reject(ReasonCode::NoGpu, "the task wants a GPU and this host has none");
    }
    // 5. Unified memory: GPU bytes are host bytes. Then what the class
    // learned sizes the memory (docs/DESIGN.md §6, `learned.rs`).
    let unified = profile.gpus_unified();
    let Some(sizing) = sizing(ledger, est) else {
        return Decision::reject(
            ReasonCode::InvalidEstimate,
            "invalid estimate: memory plus GPU memory overflows on this unified-memory host",
        );
    };
    let (mem_fixed, mem_per_item) = (sizing.fixed, sizing.per_item);
    let gpu_bytes_wanted = !unified && (est.gpu_memory_fixed > 0 || est.gpu_memory_per_item > 0);
    let dedicated: Vec<_> = profile.gpus.iter().filter(|g| !g.unified).collect();

    // 6. Impossible even on the idle host.
    let idle = capacity(ledger.static_memory_budget(), mem_fixed, mem_per_item);
    if idle < est.batch_min {
        return Decision::reject(
            ReasonCode::Impossible,
            format!(
                "impossible on this host: {} for {} item(s){} but at most {} can ever be reserved ({} RAM − {} reserve)",
                format_bytes(sizing.memory_for(est.batch_min)),
                est.batch_min,
                learned_note(&sizing),
                format_bytes(ledger.static_memory_budget()),
                format_bytes(profile.total_memory),
                format_bytes(policy.memory_reserve),
            ),
        );
    }
    if gpu_bytes_wanted {
        let fits = dedicated.iter().filter(|g| {
            g.vram_total.is_none_or(|v| {
                capacity(
                    v.saturating_sub(ledger.gpu_reserve(g.index)),
                    est.gpu_memory_fixed,
                    est.gpu_memory_per_item,
                ) >= est.batch_min
            })
        });
        if fits.count() == 0 {
            return Decision::reject(
                ReasonCode::Impossible,
                format!(
                    "impossible on this host: {} of GPU memory for {} item(s) exceeds every GPU's VRAM minus its reserve",
                    format_bytes(est.gpu_memory_for(est.batch_min).unwrap_or(u64::MAX)),
                    est.batch_min
                ),
            );
        }
    }
    let pool = ledger.cpu_pool_millis();
    if !est.cpus_reducible && u64::from(est.cpus) > pool {
        return Decision::reject(
            ReasonCode::Impossible,
            format!(
                "impossible on this host: wants exactly {} CPUs, the compute pool has {}",
                format_cpus(est.cpus),
                format_cpus(pool as u32)
            ),
        );
    }

    // 7. Load and PSI gates. Only foreign load counts: Lardon's own
    // running tasks are never the reason the next one waits.
    let [load, cpu_psi, mem_psi, io_psi] = ledger.gates(snap);
    if load {
        let f = ledger.load_figures(snap);
        return Decision::wait(
            ReasonCode::CpuLoad,
            format!(
                "foreign load {:.2} (1-minute load {:.2} − {:.2} CPUs of Lardon's own tasks) ≥ {:.2} (max_load_ratio {} × {}-CPU pool)",
                f.foreign,
                f.load,
                f.own,
                f.threshold.unwrap_or(0.0),
                policy.max_load_ratio.unwrap_or(0.0),
                policy.compute_cpus(profile),
            ),
        );
    }
    if cpu_psi {
        return Decision::wait(
            ReasonCode::CpuPressure,
            format!("CPU PSI {:.1} ≥ {}", snap.pressure.cpu.unwrap_or(0.0), policy.psi_cpu),
        );
    }
    if mem_psi {
        return Decision::wait(
            ReasonCode::MemoryPressure,
            format!("memory PSI {:.1} ≥ {}", snap.pressure.memory.unwrap_or(0.0), policy.psi_memory),
        );
    }
    if io_psi && est.io_slots > 0 {
        return Decision::wait(
            ReasonCode::IoPressure,
            format!("IO PSI {:.1} ≥ {}", snap.pressure.io.unwrap_or(0.0), policy.psi_io),
        );
    }

    // 8. Memory and GPU memory available now.
    let mem_available = ledger.memory_available(snap).saturating_sub(hold.memory);
    let mut batch = capacity(mem_available, mem_fixed, mem_per_item);
    let mut short = ReasonCode::Memory;
    let mut devices: Vec<(u32, u64)> = Vec::new();
    if est.gpu_slots > 0 {
        let candidates: Vec<_> = if dedicated.is_empty() { profile.gpus.iter().collect() } else { dedicated };
        for gpu in candidates {
            if !ledger.gpu_slot_free(gpu.index) {
                continue;
            }
            let cap = if gpu_bytes_wanted {
                match ledger.gpu_available(gpu.index, snap) {
                    Some(free) => capacity(free, est.gpu_memory_fixed, est.gpu_memory_per_item),
                    None => {
                        return Decision::wait(
                            ReasonCode::GpuMemoryUnknown,
                            format!("free memory of GPU {} is unknown", gpu.index),
                        );
                    }
                }
            } else {
                u64::MAX
            };
            if cap >= est.batch_min {
                devices.push((gpu.index, cap));
            }
        }
        // Most free first: the batch is bounded by the tightest chosen device.
        devices.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        devices.truncate(est.gpu_slots as usize);
        if let Some(&(_, tightest)) = devices.last()
            && tightest < batch
        {
            batch = tightest;
            short = ReasonCode::GpuMemory;
        }
    }

    // 9. Target: history, capped while memory is contended, then the
    // target pressure sets (YELLOW halved it, RED dropped it to 1, GREEN
    // regrows it), never below batch_min.
    let target = pressure_target(ledger, est, packed_target(ledger, est, &sizing, now));
    let batch = batch.min(target);
    if batch < est.batch_min {
        let message = if short == ReasonCode::GpuMemory {
            format!("not enough free GPU memory for {} item(s)", est.batch_min)
        } else {
            format!(
                "needs {} for {} item(s){}, {} available now ({} reserved by running tasks)",
                format_bytes(sizing.memory_for(est.batch_min)),
                est.batch_min,
                learned_note(&sizing),
                format_bytes(mem_available),
                format_bytes(ledger.totals.memory),
            )
        };
        return Decision::wait(short, message);
    }
    if est.gpu_slots > 0 && devices.is_empty() {
        let why = if gpu_bytes_wanted { ReasonCode::GpuMemory } else { ReasonCode::GpuSlot };
        return Decision::wait(why, "no GPU has a free slot and enough memory");
    }

    // 10. CPUs, slots, running cap.
    let cpu_free = ledger.cpu_available_millis().saturating_sub(hold.cpu_millis);
    let cpu_needed = if est.cpus_reducible { u64::from(est.cpus.min(1000)) } else { u64::from(est.cpus) };
    if cpu_free < cpu_needed {
        return Decision::wait(
            ReasonCode::Cpu,
            format!(
                "needs {} CPU(s), {} free of a {}-CPU pool",
                format_cpus(cpu_needed as u32),
                format_cpus(cpu_free as u32),
                format_cpus(pool as u32)
            ),
        );
    }
    let io_free = policy.io_slots.saturating_sub(ledger.totals.io_slots).saturating_sub(hold.io_slots);
    if est.io_slots > 0 && io_free == 0 {
        return Decision::wait(ReasonCode::IoSlot, format!("all {} IO slot(s) are taken", policy.io_slots));
    }
    let scratch = if est.scratch_bytes > 0 {
        match ledger.scratch_candidate(est.scratch_bytes) {
            Some(vol) => Some(crate::scratch::ScratchGrant {
                volume: vol.name.clone(),
                path: std::path::PathBuf::new(),
                bytes: est.scratch_bytes,
            }),
            None if ledger.volumes.is_empty() => {
                return Decision::wait(
                    ReasonCode::Scratch,
                    format!(
                        "needs {} of scratch space and no scratch volume is registered",
                        format_bytes(est.scratch_bytes)
                    ),
                );
            }
            None => {
                let best = ledger.volumes.iter().map(|v| v.room()).max().unwrap_or(0);
                return Decision::wait(
                    ReasonCode::Scratch,
                    format!(
                        "needs {} of scratch space; the roomiest volume taking leases has {}",
                        format_bytes(est.scratch_bytes),
                        format_bytes(best)
                    ),
                );
            }
        }
    } else {
        None
    };
    if let Some(cap) = policy.max_running
        && running >= cap as usize
    {
        return Decision::wait(
            ReasonCode::MaxRunning,
            format!("{running} task(s) running, the cap is {cap}"),
        );
    }

    // 11. Grant.
    let cpu_millis = u32::try_from(cpu_free.min(u64::from(est.cpus))).unwrap_or(est.cpus);
    let io_slots = est.io_slots.min(io_free);
    let gpu_devices: Vec<u32> = devices.iter().map(|d| d.0).collect();
    let reduced_resources =
        cpu_millis < est.cpus || io_slots < est.io_slots || gpu_devices.len() < est.gpu_slots as usize;
    // The grant is what was learned: fixed + batch × per-item at the
    // learned sizes. On a unified-memory host the GPU bytes are charged to
    // host RAM but are not part of the host-memory grant.
    let charged_memory = sizing.memory_for(batch);
    let gpu_folded = if unified { est.gpu_memory_for(batch).unwrap_or(u64::MAX) } else { 0 };
    let memory = charged_memory.saturating_sub(gpu_folded).max(est.memory_for(batch).unwrap_or(u64::MAX));
    let gpu_memory = if gpu_devices.is_empty() { 0 } else { est.gpu_memory_for(batch).unwrap_or(u64::MAX) };
    let (kind, reason, message) = if batch < target {
        (
            DecisionKind::ReduceBatch,
            ReasonCode::BatchReduced,
            format!("batch {batch} of {target}: only {} available", format_bytes(mem_available)),
        )
    } else if reduced_resources {
        (
            DecisionKind::ReduceBatch,
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
        )
    } else {
        // No message: the contract says it all, and formatting figures
        // would triple the cost of the hottest path (see BENCHMARKS.md).
        (DecisionKind::Admit, ReasonCode::Admitted, String::new())
    };
    Decision {
        kind,
        reason,
        message,
        contract: Some(Contract {
            batch,
            memory,
            gpu_memory,
            gpu_devices,
            cpu_millis,
            io_slots,
            scratch,
            class: est.class.clone(),
            alternative: None,
            inflight: 1,
            charged_memory,
            ramp_ticket: None,
        }),
    }
}

/// Step 9, history and contention: the history target of `sizing`, capped
/// at the contended target (`packing.rs`) while memory is contended at
/// `now`.
pub(crate) fn packed_target(ledger: &Ledger, est: &Estimate, sizing: &Learned, now: MonoTime) -> u64 {
    if ledger.contention.is_contended(now) {
        packing::contended_target(sizing.fixed, sizing.per_item, est.batch_min, sizing.batch_target)
    } else {
        sizing.batch_target
    }
}

/// Step 9 after history: `target` lowered by slow start and halved under
/// YELLOW, never below `batch_min`.
pub(crate) fn pressure_target(ledger: &Ledger, est: &Estimate, target: u64) -> u64 {
    let mut target = target;
    if let Some(limit) = ledger.pressure.batch_target() {
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
