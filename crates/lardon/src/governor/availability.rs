//! A consistent picture of budgets for `explain`, `resources` and the
//! dashboard.

use crate::clock::MonoTime;
use crate::pressure::PressureLevel;

use super::ledger::Ledger;

/// One GPU's budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuAvailability {
    /// Device index.
    pub index: u32,
    /// Dedicated VRAM, when known.
    pub vram_total: Option<u64>,
    /// Memory kept back.
    pub reserve: u64,
    /// Reserved by tasks.
    pub reserved: u64,
    /// Free for a new task now, when known.
    pub available: Option<u64>,
    /// Unified memory (charged to host RAM).
    pub unified: bool,
    /// Slots held / slots per GPU.
    pub slots_used: u32,
    /// Slots per GPU.
    pub slots: u32,
}

/// Budgets, what is reserved and what is available, taken under one lock.
#[derive(Debug, Clone, PartialEq)]
pub struct Availability {
    /// Generation when taken.
    pub generation: u64,
    /// Physical RAM.
    pub memory_total: u64,
    /// Memory reserve of the policy.
    pub memory_reserve: u64,
    /// Host memory reserved by tasks (GPU bytes included on unified hosts).
    pub memory_reserved: u64,
    /// Memory a new task could get now (0 before the first sample).
    pub memory_available: u64,
    /// `MemAvailable` (cgroup-lowered) of the last sample.
    pub memory_host_available: Option<u64>,
    /// Compute pool in thousandths of a CPU.
    pub cpu_pool_millis: u64,
    /// CPUs reserved, thousandths.
    pub cpu_reserved_millis: u64,
    /// CPUs free now, thousandths.
    pub cpu_available_millis: u64,
    /// IO slots.
    pub io_slots: u32,
    /// IO slots held.
    pub io_reserved: u32,
    /// Per-GPU budgets.
    pub gpus: Vec<GpuAvailability>,
    /// Pressure level.
    pub pressure: PressureLevel,
    /// Why (empty when healthy).
    pub pressure_reason: String,
    /// The batch target pressure sets (halved on entering YELLOW, 1 on
    /// entering RED, doubling back in GREEN), `None` when it does not limit.
    pub slow_start: Option<u64>,
    /// Active reservations.
    pub reservations: usize,
    /// Capture time of the last host sample.
    pub last_sample_at: Option<MonoTime>,
    /// Lardon's own share of the 1-minute load at the last sample: the
    /// CPUs its tasks hold, or its recent CPU use (its tasks and itself)
    /// averaged like the load, whichever is larger (docs/DESIGN.md §3).
    /// The load gate compares the rest, the foreign load, with its
    /// threshold. 0 before the first sample.
    pub own_load: f64,
}

impl Availability {
    pub(crate) fn of(l: &Ledger) -> Self {
        let snap = l.last_sample();
        Availability {
            generation: l.generation(),
            memory_total: l.profile.total_memory,
            memory_reserve: l.policy.memory_reserve,
            memory_reserved: l.totals().memory,
            memory_available: snap.map_or(0, |s| l.memory_available(s)),
            memory_host_available: snap.map(|s| s.effective_memory_available()),
            cpu_pool_millis: l.cpu_pool_millis(),
            cpu_reserved_millis: l.totals().cpu_millis,
            cpu_available_millis: l.cpu_available_millis(),
            io_slots: l.policy.io_slots,
            io_reserved: l.totals().io_slots,
            gpus: l
                .profile
                .gpus
                .iter()
                .map(|g| GpuAvailability {
                    index: g.index,
                    vram_total: g.vram_total,
                    reserve: l.gpu_reserve(g.index),
                    reserved: l.totals().gpu_memory.get(g.index as usize).copied().unwrap_or(0),
                    available: snap.and_then(|s| l.gpu_available(g.index, s)),
                    unified: g.unified,
                    slots_used: l.totals().gpu_slots.get(g.index as usize).copied().unwrap_or(0),
                    slots: l.policy.gpu_slots,
                })
                .collect(),
            pressure: l.pressure.level(),
            pressure_reason: l.pressure.reason().to_owned(),
            slow_start: l.pressure.batch_target(),
            reservations: l.reservations(),
            last_sample_at: snap.map(|s| s.captured_at),
            own_load: snap.map_or(0.0, |s| l.load_figures(s).own),
        }
    }
}
