//! Composite views: a task as the API shows it, the Governor's
//! availability, and the explanation of a task's admission.

use lardon::{Class, Estimate};
use lardon_host::BackendKind;
use lardon_proto::pb;

use super::convert::{pressure_to_pb, task_to_pb};
use crate::engine::{Engine, qid};
use crate::spec::{TaskSpec, TaskState};
use crate::store::{StoreError, TaskRecord};

impl Engine {
    /// A task with its live view.
    pub(crate) fn task_pb(&self, rec: &TaskRecord) -> pb::Task {
        let live = if rec.state.is_terminal() { None } else { self.queue.get(qid(rec.id)) };
        task_to_pb(rec, live.as_ref(), &self.shared.info.host)
    }

    /// The Governor's availability as the API shows it (exportable as is
    /// to a cluster scheduler).
    pub(crate) fn availability_pb(&self) -> Result<pb::Availability, StoreError> {
        let gov = &self.shared.governor;
        let info = &self.shared.info;
        // Load and PSI from the viewing probe (not fed to the Governor).
        let snap = self.shared.viewer.snapshot().ok();
        let av = gov.availability();
        let policy = gov.policy();
        let profile = gov.profile();
        let counts = self.shared.store().count_by_state()?;
        let count = |s: TaskState| counts.iter().find(|(st, _)| *st == s).map_or(0, |(_, n)| *n);
        let to_u32 = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
        let captured = av.last_sample_at.map_or(0, |at| {
            let age = gov.now().saturating_since(at);
            crate::now_ms() - i64::try_from(age.as_millis()).unwrap_or(0)
        });
        let settings = self.shared.settings();
        let backend = match info.backend {
            BackendKind::V2 => pb::EnforcementBackend::CgroupV2,
            BackendKind::V1 => pb::EnforcementBackend::CgroupV1,
            BackendKind::None => pb::EnforcementBackend::None,
        };
        let mode = match settings.enforce {
            crate::EnforceMode::Off => pb::EnforceMode::Off,
            crate::EnforceMode::Soft => pb::EnforceMode::Soft,
            crate::EnforceMode::Hard => pb::EnforceMode::Hard,
        };
        Ok(pb::Availability {
            host: info.host.clone(),
            captured_unix_ms: captured,
            generation: av.generation,
            memory: Some(pb::MemoryAvailability {
                total: av.memory_total,
                reserve: av.memory_reserve,
                reserved: av.memory_reserved,
                available: av.memory_available,
                mem_available: av.memory_host_available.unwrap_or(0),
                emergency_floor: policy.emergency_floor,
            }),
            cpus: Some(pb::CpuAvailability {
                logical: profile.logical_cpus,
                reserve: policy.cpu_reserve,
                pool: self.shared.compute.current().map(|m| m.0.into_iter().collect()).unwrap_or_default(),
                reserved_millis: to_u32(av.cpu_reserved_millis),
                available_millis: to_u32(av.cpu_available_millis),
                load1: snap.as_ref().map_or(0.0, |s| s.load.one),
                // 0 when the load gate is off (a ratio is always above 0).
                max_load_ratio: policy.max_load_ratio.unwrap_or(0.0),
            }),
            gpus: av
                .gpus
                .iter()
                .map(|g| pb::GpuAvailability {
                    index: g.index,
                    name: profile
                        .gpus
                        .iter()
                        .find(|d| d.index == g.index)
                        .map(|d| d.name.clone())
                        .unwrap_or_default(),
                    memory_total: g.vram_total.unwrap_or(0),
                    memory_reserve: g.reserve,
                    memory_reserved: g.reserved,
                    memory_available: g.available,
                    unified: g.unified,
                    slots_total: g.slots,
                    slots_used: g.slots_used,
                })
                .collect(),
            io: Some(pb::SlotAvailability { total: av.io_slots, used: av.io_reserved }),
            pressure: Some(pb::PressureView {
                state: pressure_to_pb(av.pressure) as i32,
                reason: av.pressure_reason.clone(),
                psi_cpu: snap.as_ref().and_then(|s| s.pressure.cpu),
                psi_memory: snap.as_ref().and_then(|s| s.pressure.memory),
                psi_io: snap.as_ref().and_then(|s| s.pressure.io),
            }),
            slow_start_target: av.slow_start,
            enforcement: Some(pb::EnforcementView {
                backend: backend as i32,
                why: info.backend_why.clone(),
                mode: mode as i32,
            }),
            scratch: super::scratch::list(self).unwrap_or_default(),
            running: to_u32(count(TaskState::Running)),
            pending: to_u32(count(TaskState::Pending)),
            max_running: policy.max_running,
        })
    }
}

/// The estimate at its batch bounds, and the batch learning allows.
pub(crate) fn needs(spec: &TaskSpec, engine: &Engine) -> pb::EstimateNeeds {
    let est: Estimate = spec.estimate.to_estimate();
    let (min, max) = (est.batch_min(), est.batch_max());
    let adaptive =
        adaptive_max(&est, &engine.shared.governor.history(&Class::new(spec.estimate.class.clone())));
    pb::EstimateNeeds {
        memory_at_batch_min: est.memory_for(min).unwrap_or(u64::MAX),
        memory_at_batch_max: est.memory_for(max).unwrap_or(u64::MAX),
        gpu_memory_at_batch_min: est.gpu_memory_for(min).unwrap_or(u64::MAX),
        gpu_memory_at_batch_max: est.gpu_memory_for(max).unwrap_or(u64::MAX),
        adaptive_batch_max: adaptive.filter(|a| *a < max),
        estimate_error: est.validate().err().map(|e| e.to_string()).unwrap_or_default(),
    }
}

/// docs/DESIGN.md §6: the worst measured per-item cost lowers the batch.
fn adaptive_max(est: &Estimate, history: &[lardon::BatchSample]) -> Option<u64> {
    let per_item = est.memory_per_item();
    if per_item == 0 {
        return None;
    }
    let worst = history
        .iter()
        .filter_map(|s| s.peak_memory.filter(|_| s.items > 0).map(|p| p.div_ceil(s.items)))
        .max()?;
    (worst > per_item).then(|| {
        let scaled = u128::from(est.batch_max()) * u128::from(per_item) / u128::from(worst);
        u64::try_from(scaled).unwrap_or(u64::MAX).max(est.batch_min())
    })
}
