//! Composite views: a task as the API shows it, the Governor's
//! availability, and the explanation of a task's admission.

use lardon::Estimate;
use lardon_host::BackendKind;
use lardon_proto::pb;

use super::convert::{pressure_to_pb, task_to_pb};
use crate::engine::Engine;
use crate::kernel::qid;
use crate::spec::{TaskSpec, TaskState};
use crate::store::{CourseEntry, HookRow, StoreError, TaskRecord};

/// A task with its live view.
pub(crate) fn task_pb(engine: &Engine, rec: &TaskRecord) -> pb::Task {
    let live = if rec.state.is_terminal() { None } else { engine.queue.get(qid(rec.id)) };
    let mut task = task_to_pb(rec, live.as_ref(), &engine.shared.info.host);
    task.learned = learned(&rec.spec, engine);
    task
}

/// One hook row as the API shows it: `pending` (not started), `running`
/// (started, no outcome yet; after a crash, until it runs again) or `done`.
pub(crate) fn hook_pb(row: &HookRow) -> pb::HookRun {
    let status = match (&row.result, row.tries) {
        (Some(_), _) => "done",
        (None, 0) => "pending",
        (None, _) => "running",
    };
    let r = row.result.as_ref();
    pb::HookRun {
        command: row.command.clone(),
        status: status.to_owned(),
        outcome: r.map(|r| r.end.as_str().to_owned()).unwrap_or_default(),
        exit_code: r.and_then(|r| r.end.code()),
        duration_ms: r.map_or(0, |r| r.duration_ms),
        attempt: row.tries,
        output: r.map(|r| r.output.clone()).unwrap_or_default(),
        output_dropped: r.map_or(0, |r| r.output_dropped),
        task_state: row.task_state.as_str().to_owned(),
        ended_unix_ms: row.ended_ms,
        finished_unix_ms: row.finished_ms,
        error: match r.map(|r| &r.end) {
            Some(crate::store::HookEnd::FailedToStart(why)) => why.clone(),
            _ => String::new(),
        },
    }
}

/// A hook's run as a history entry (`explain --history`): kind `hook`,
/// at the task's end, its outcome as the reason code.
pub(crate) fn hook_entry(row: &HookRow) -> pb::HistoryEntry {
    let h = hook_pb(row);
    let what = h.outcome_phrase();
    let again = if h.attempt > 1 { format!(", attempt {}", h.attempt) } else { String::new() };
    pb::HistoryEntry {
        kind: "hook".to_owned(),
        from_unix_ms: row.ended_ms,
        to_unix_ms: row.finished_ms,
        reason_code: if h.outcome.is_empty() { h.status.clone() } else { h.outcome.clone() },
        message: format!("on_end after {}: `{}` {what}{again}", h.task_state, h.command),
        ..Default::default()
    }
}

/// The Governor's availability as the API shows it (exportable as is
/// to a cluster scheduler).
pub(crate) fn availability_pb(engine: &Engine) -> Result<pb::Availability, StoreError> {
    let gov = &engine.shared.governor;
    let info = &engine.shared.info;
    // Load and PSI from the viewing probe (not fed to the Governor).
    let snap = engine.shared.viewer.snapshot().ok();
    let av = gov.availability();
    let policy = gov.policy();
    let profile = gov.profile();
    let counts = engine.shared.reader().count_by_state()?;
    let count = |s: TaskState| counts.iter().find(|(st, _)| *st == s).map_or(0, |(_, n)| *n);
    let to_u32 = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
    let captured = av.last_sample_at.map_or(0, |at| {
        let age = gov.now().saturating_since(at);
        crate::now_ms() - i64::try_from(age.as_millis()).unwrap_or(0)
    });
    let settings = engine.shared.settings();
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
            pool: engine.shared.compute.current().map(|m| m.0.into_iter().collect()).unwrap_or_default(),
            reserved_millis: to_u32(av.cpu_reserved_millis),
            available_millis: to_u32(av.cpu_available_millis),
            load1: snap.as_ref().map_or(0.0, |s| s.load.one),
            // 0 when the load gate is off (a ratio is always above 0).
            max_load_ratio: policy.max_load_ratio.unwrap_or(0.0),
            own_load: av.own_load,
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
        enforcement: Some(enforcement_view(info.backend, &info.backend_why, settings.enforce)),
        scratch: super::scratch::list(engine).unwrap_or_default(),
        running: to_u32(count(TaskState::Running)),
        pending: to_u32(count(TaskState::Pending)),
        max_running: policy.max_running,
    })
}

/// What enforcement applies, as `lardon resources` shows it: the mode is
/// the one in effect, so it is `hard` (or `soft`) only where a cgroup takes
/// the limit; without one, the policy's hard limit is an RSS watchdog and
/// a soft one applies nothing.
pub(crate) fn enforcement_view(
    backend: BackendKind,
    why: &str,
    policy: crate::EnforceMode,
) -> pb::EnforcementView {
    use crate::EnforceMode;
    let (backend, mode) = match (backend, policy) {
        (_, EnforceMode::Off) => (backend, pb::EnforceMode::Off),
        (BackendKind::None, EnforceMode::Soft) => (backend, pb::EnforceMode::Off),
        (BackendKind::None, EnforceMode::Hard) => (backend, pb::EnforceMode::Watchdog),
        (_, EnforceMode::Soft) => (backend, pb::EnforceMode::Soft),
        (_, EnforceMode::Hard) => (backend, pb::EnforceMode::Hard),
    };
    let backend = match backend {
        BackendKind::V2 => pb::EnforcementBackend::CgroupV2,
        BackendKind::V1 => pb::EnforcementBackend::CgroupV1,
        BackendKind::None => pb::EnforcementBackend::None,
    };
    pb::EnforcementView { backend: backend as i32, why: why.to_owned(), mode: mode as i32 }
}

/// The estimate at its batch bounds as admission sizes it (declared or
/// learned, whichever is larger: fixed + batch × per item), and the batch
/// target admission applies now ([`lardon::Governor::batch_target`]) —
/// asked of the Governor, never recomputed here.
pub(crate) fn needs(spec: &TaskSpec, engine: &Engine) -> pb::EstimateNeeds {
    let est: Estimate = spec.to_estimate();
    let (min, max) = (est.batch_min(), est.batch_max());
    let learned = engine.shared.governor.learned(&est);
    let memory_for = |b: u64| match &learned {
        Some(l) => l.memory_for(b),
        None => est.memory_for(b).unwrap_or(u64::MAX),
    };
    pb::EstimateNeeds {
        memory_at_batch_min: memory_for(min),
        memory_at_batch_max: memory_for(max),
        gpu_memory_at_batch_min: est.gpu_memory_for(min).unwrap_or(u64::MAX),
        gpu_memory_at_batch_max: est.gpu_memory_for(max).unwrap_or(u64::MAX),
        // The Governor's own target (history, then slow start and
        // pressure): what the next admission would grant at most.
        adaptive_batch_max: Some(engine.shared.governor.batch_target(&est)).filter(|a| *a < max),
        estimate_error: est.validate().err().map(|e| e.to_string()).unwrap_or_default(),
    }
}

/// What the task's class learned, sized for its estimate
/// ([`lardon::Governor::learned`]); `None` when the class has nothing.
pub(crate) fn learned(spec: &TaskSpec, engine: &Engine) -> Option<pb::LearnedFigures> {
    let est: Estimate = spec.to_estimate();
    let l = engine.shared.governor.learned(&est)?;
    let mut sources: Vec<String> = Vec::new();
    if let Some(f) = l.learned_fixed {
        sources.push(format!("fixed: {}", f.source));
    }
    if let Some(f) = l.learned_per_item {
        sources.push(format!("per item: {}", f.source));
    }
    let phrase = l.phrase(spec.items.is_some());
    Some(pb::LearnedFigures {
        samples: phrase.samples,
        fixed: phrase.fixed,
        per_item: phrase.per_item,
        lower_bound: phrase.lower_bound,
        batch_target: phrase.batch_target,
        source: sources.join("; "),
        key: est.class().as_str().to_owned(),
    })
}

/// A task's course as the API shows it.
pub(crate) fn course_pb(entries: Vec<CourseEntry>) -> Vec<pb::HistoryEntry> {
    entries
        .into_iter()
        .map(|e| pb::HistoryEntry {
            kind: e.kind.as_str().to_owned(),
            from_unix_ms: e.from_ms,
            to_unix_ms: e.to_ms,
            batch: e.grant.map(|g| g.batch),
            memory: e.grant.map(|g| g.memory),
            cpu_millis: e.grant.map(|g| g.cpu_millis),
            reason_code: e.reason_code,
            message: e.message,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EnforceMode;

    #[test]
    fn hard_is_claimed_only_where_a_cgroup_takes_the_limit() {
        for policy in [EnforceMode::Off, EnforceMode::Soft, EnforceMode::Hard] {
            let v = enforcement_view(BackendKind::None, "no cgroup", policy);
            assert_eq!(v.backend(), pb::EnforcementBackend::None);
            assert_ne!(v.mode(), pb::EnforceMode::Hard, "{policy:?}");
            assert_ne!(v.mode(), pb::EnforceMode::Soft, "{policy:?}: the watchdog has no soft limit");
            assert_eq!(v.why, "no cgroup");
        }
        let v = enforcement_view(BackendKind::None, "x", EnforceMode::Hard);
        assert_eq!(v.mode(), pb::EnforceMode::Watchdog);
        for backend in [BackendKind::V1, BackendKind::V2] {
            assert_eq!(enforcement_view(backend, "", EnforceMode::Hard).mode(), pb::EnforceMode::Hard);
            assert_eq!(enforcement_view(backend, "", EnforceMode::Soft).mode(), pb::EnforceMode::Soft);
            assert_eq!(enforcement_view(backend, "", EnforceMode::Off).mode(), pb::EnforceMode::Off);
        }
    }
}
