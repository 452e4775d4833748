//! Between protobuf messages and the daemon's types. Everything from a
//! client is checked here; errors name the field.

use lardon::progress::EtaState;
use lardon::{MILLIS_PER_CPU, PressureLevel, TaskView};
use lardon_proto::pb;
use tonic::Status;

use crate::ids::{format_id, parse_id};
use crate::spec::{DecisionKind, EnvVar, EstimateSpec, TaskId, TaskSpec, TaskState};
use crate::store::{DecisionRecord, TaskRecord};

/// Parses an API id, naming `field` when it is not one.
pub(crate) fn id_arg(field: &str, text: &str) -> Result<TaskId, Status> {
    parse_id(text).ok_or_else(|| Status::invalid_argument(format!("{field}: `{text}` is not a task id")))
}

pub(crate) fn state_to_pb(s: TaskState) -> pb::TaskState {
    match s {
        TaskState::Pending => pb::TaskState::Pending,
        TaskState::Running => pb::TaskState::Running,
        TaskState::Paused => pb::TaskState::Paused,
        TaskState::Completed => pb::TaskState::Completed,
        TaskState::Failed => pb::TaskState::Failed,
        TaskState::Cancelled => pb::TaskState::Cancelled,
    }
}

/// A client's state filter value; `None` for UNSPECIFIED or unknown numbers.
pub(crate) fn state_from_pb(v: i32) -> Option<TaskState> {
    Some(match pb::TaskState::try_from(v).ok()? {
        pb::TaskState::Unspecified => return None,
        pb::TaskState::Pending => TaskState::Pending,
        pb::TaskState::Running => TaskState::Running,
        pb::TaskState::Paused => TaskState::Paused,
        pb::TaskState::Completed => TaskState::Completed,
        pb::TaskState::Failed => TaskState::Failed,
        pb::TaskState::Cancelled => TaskState::Cancelled,
    })
}

pub(crate) fn states_arg(values: &[i32]) -> Result<Vec<TaskState>, Status> {
    values
        .iter()
        .map(|v| {
            state_from_pb(*v)
                .ok_or_else(|| Status::invalid_argument(format!("states: {v} is not a task state")))
        })
        .collect()
}

fn kind_to_pb(k: DecisionKind) -> pb::DecisionKind {
    match k {
        DecisionKind::Admit => pb::DecisionKind::Admit,
        DecisionKind::ReduceBatch => pb::DecisionKind::ReduceBatch,
        DecisionKind::Wait => pb::DecisionKind::Wait,
        DecisionKind::Reject => pb::DecisionKind::Reject,
    }
}

pub(crate) fn decision_to_pb(d: &DecisionRecord) -> pb::Decision {
    pb::Decision {
        kind: kind_to_pb(d.kind) as i32,
        reason_code: d.reason_code.clone(),
        message: d.message.clone(),
        batch: d.batch.unwrap_or(0),
        at_unix_ms: d.at_ms,
    }
}

pub(crate) fn pressure_to_pb(p: PressureLevel) -> pb::PressureState {
    match p {
        PressureLevel::Green => pb::PressureState::Green,
        PressureLevel::Yellow => pb::PressureState::Yellow,
        PressureLevel::Red => pb::PressureState::Red,
    }
}

fn eta_to_pb(s: EtaState) -> pb::EtaState {
    match s {
        EtaState::Complete => pb::EtaState::Complete,
        // Shown with `integrity_error`; never as complete.
        EtaState::IntegrityError | EtaState::Indeterminate => pb::EtaState::Indeterminate,
        EtaState::Throttled => pb::EtaState::Throttled,
        EtaState::Stalled => pb::EtaState::Stalled,
        EtaState::Calculating => pb::EtaState::Calculating,
        EtaState::Known => pb::EtaState::Known,
    }
}

/// A client's spec, decoded: ids parsed and defaults applied. The spec's
/// validation is the engine's, at submit.
pub(crate) fn spec_from_pb(spec: Option<pb::TaskSpec>) -> Result<TaskSpec, Status> {
    let spec = spec.ok_or_else(|| Status::invalid_argument("spec: missing"))?;
    let ids = |field: &str, list: &[String]| -> Result<Vec<TaskId>, Status> {
        list.iter().enumerate().map(|(i, s)| id_arg(&format!("{field}[{i}]"), s)).collect()
    };
    let e = spec.estimate.unwrap_or_default();
    let estimate = EstimateSpec {
        memory_fixed: e.memory_fixed,
        memory_per_item: e.memory_per_item,
        gpu_memory_fixed: e.gpu_memory_fixed,
        gpu_memory_per_item: e.gpu_memory_per_item,
        batch_min: e.batch_min.unwrap_or(1),
        batch_max: e.batch_max,
        cpu_millis: e.cpu_millis.unwrap_or(MILLIS_PER_CPU),
        cpus_exact: e.cpus_exact,
        gpu_slots: e.gpu_slots,
        io_slots: e.io_slots,
        scratch_bytes: e.scratch_bytes,
        class: if e.class.is_empty() { lardon::Class::DEFAULT.to_owned() } else { e.class },
    };
    let out = TaskSpec {
        name: spec.name,
        argv: spec.argv,
        cwd: (!spec.cwd.is_empty()).then_some(spec.cwd),
        env: spec.env.into_iter().map(|v| EnvVar { key: v.key, value: v.value }).collect(),
        estimate,
        priority: spec.priority,
        after: ids("after", &spec.after)?,
        after_any: ids("after_any", &spec.after_any)?,
        items: spec.items,
        retry_on_interrupt: spec.retry_on_interrupt.unwrap_or(true),
        oom_retry: spec.oom_retry.unwrap_or(true),
        engine: spec
            .engine
            .parse()
            .map_err(|e: crate::spec::SpecError| Status::invalid_argument(e.to_string()))?,
        offload: offload_from_pb(&spec.capability, spec.deadline_unix_ms, spec.inputs, spec.outputs)?,
        submit_env: spec
            .submit_env
            .map(crate::submit_env::SubmitEnv::from_blob)
            .transpose()
            .map_err(|e| Status::invalid_argument(e.to_string()))?,
        timeout_ms: spec.timeout_ms,
        retry_on_timeout: spec.retry_on_timeout,
        on_end: (!spec.on_end.is_empty()).then_some(spec.on_end),
        group: group_arg("group", &spec.group)?,
    };
    // Validated once, by the engine's submit (`Engine::submit_many`).
    Ok(out)
}

/// A shippable task's capability (canonical key), deadline and files;
/// `None` without a capability. A deadline or files without a capability
/// are refused: only a shipped task needs them.
fn offload_from_pb(
    capability: &str,
    deadline_unix_ms: i64,
    inputs: Vec<String>,
    outputs: Vec<String>,
) -> Result<Option<crate::spec::Offload>, Status> {
    if capability.is_empty() {
        if deadline_unix_ms != 0 {
            return Err(Status::invalid_argument(
                "deadline_unix_ms: only a shippable task (with a capability) has a deadline",
            ));
        }
        if !inputs.is_empty() || !outputs.is_empty() {
            let field = if inputs.is_empty() { "outputs" } else { "inputs" };
            return Err(Status::invalid_argument(format!(
                "{field}: only a shippable task (with a capability) names files to move"
            )));
        }
        return Ok(None);
    }
    let cap = lardon_cluster_core::Capability::parse(capability)
        .map_err(|e| Status::invalid_argument(format!("capability: {e}")))?;
    if deadline_unix_ms < 0 {
        return Err(Status::invalid_argument("deadline_unix_ms: must not be negative"));
    }
    Ok(Some(crate::spec::Offload {
        capability: cap.key(),
        deadline_unix_ms: (deadline_unix_ms > 0).then_some(deadline_unix_ms),
        inputs,
        outputs,
    }))
}

pub(crate) fn estimate_to_pb(e: &EstimateSpec) -> pb::Estimate {
    pb::Estimate {
        memory_fixed: e.memory_fixed,
        memory_per_item: e.memory_per_item,
        gpu_memory_fixed: e.gpu_memory_fixed,
        gpu_memory_per_item: e.gpu_memory_per_item,
        batch_min: Some(e.batch_min),
        batch_max: Some(e.batch_max()),
        cpu_millis: Some(e.cpu_millis),
        cpus_exact: e.cpus_exact,
        gpu_slots: e.gpu_slots,
        io_slots: e.io_slots,
        scratch_bytes: e.scratch_bytes,
        class: e.class.clone(),
    }
}

pub(crate) fn spec_to_pb(s: &TaskSpec) -> pb::TaskSpec {
    pb::TaskSpec {
        name: s.name.clone(),
        argv: s.argv.clone(),
        cwd: s.cwd.clone().unwrap_or_default(),
        env: s.env.iter().map(|v| pb::EnvVar { key: v.key.clone(), value: v.value.clone() }).collect(),
        estimate: Some(estimate_to_pb(&s.estimate)),
        priority: s.priority,
        after: s.after.iter().map(|i| format_id(*i)).collect(),
        after_any: s.after_any.iter().map(|i| format_id(*i)).collect(),
        items: s.items,
        retry_on_interrupt: Some(s.retry_on_interrupt),
        oom_retry: Some(s.oom_retry),
        engine: if s.engine.is_local() { String::new() } else { s.engine.as_str().to_owned() },
        capability: s.offload.as_ref().map(|o| o.capability.clone()).unwrap_or_default(),
        deadline_unix_ms: s.offload.as_ref().and_then(|o| o.deadline_unix_ms).unwrap_or(0),
        inputs: s.offload.as_ref().map(|o| o.inputs.clone()).unwrap_or_default(),
        outputs: s.offload.as_ref().map(|o| o.outputs.clone()).unwrap_or_default(),
        // Never sent back: `status` shows what differs from the daemon's.
        submit_env: None,
        timeout_ms: s.timeout_ms,
        retry_on_timeout: s.retry_on_timeout,
        on_end: s.on_end.clone().unwrap_or_default(),
        group: s.group.as_ref().map(|g| g.as_str().to_owned()).unwrap_or_default(),
    }
}

/// A request's group name: `None` when empty, else checked (a refusal
/// names `field`).
pub(crate) fn group_arg(field: &str, text: &str) -> Result<Option<lardon::GroupName>, Status> {
    if text.is_empty() {
        return Ok(None);
    }
    lardon::GroupName::new(text).map(Some).map_err(|e| Status::invalid_argument(format!("{field}: {e}")))
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The queue's view of a pending task's wait when it names another reason
/// than the store: a task the dispatcher skipped because a queue- or
/// host-wide reason held every later task emits no decision event, and its
/// stored reason would be stale.
fn live_wait(rec: &TaskRecord, live: Option<&TaskView>) -> Option<pb::Decision> {
    let d = live?.last_decision.as_ref()?;
    let stale = rec.last_decision.as_ref().is_none_or(|s| s.reason_code != d.reason.as_str());
    (rec.state == TaskState::Pending && d.kind == lardon::DecisionKind::Wait && stale).then(|| pb::Decision {
        kind: pb::DecisionKind::Wait as i32,
        reason_code: d.reason.as_str().to_owned(),
        message: d.message.clone(),
        batch: 0,
        at_unix_ms: crate::now_ms(),
    })
}

/// Why a pending task is held back before admission: the tasks it waits
/// for (its `--after` dependencies, or its class's first run, the probe
/// whose measured peak sizes it), in one line; empty when none.
fn waiting_for(rec: &TaskRecord, live: Option<&TaskView>) -> String {
    let Some(view) = live.filter(|_| rec.state == TaskState::Pending) else { return String::new() };
    let named = |q: &lardon::TaskId| rec.spec.after.iter().chain(&rec.spec.after_any).any(|d| d.0 == q.0);
    let parts: Vec<String> = view
        .waiting_for
        .iter()
        .map(|q| {
            let id = format_id(TaskId(q.0));
            if named(q) {
                format!("task {id} (--after)")
            } else {
                format!(
                    "task {id} (the first run of class {}: its measured peak sizes this one)",
                    rec.spec.estimate.class
                )
            }
        })
        .collect();
    if parts.is_empty() { String::new() } else { format!("waiting for {}", parts.join(", ")) }
}

/// The durable record, with the live view (contract, ETA) when the queue
/// holds the task.
pub(crate) fn task_to_pb(rec: &TaskRecord, live: Option<&TaskView>, host: &str) -> pb::Task {
    let view = live.map(|v| v.progress);
    let progress = pb::TaskProgress {
        done: rec.progress.done,
        total: rec.progress.total,
        message: rec.progress.message.clone(),
        eta_state: view.map_or(
            if rec.state == TaskState::Completed {
                pb::EtaState::Complete
            } else {
                pb::EtaState::Indeterminate
            },
            |p| eta_to_pb(p.state),
        ) as i32,
        eta_ms: view.and_then(|p| p.eta).map(millis),
        items_per_sec: view.and_then(|p| p.rate_per_sec),
        elapsed_ms: view.and_then(|p| p.elapsed).map_or(0, millis),
        integrity_error: rec.state == TaskState::Completed
            && rec.progress.total > 0
            && rec.progress.done < rec.progress.total,
    };
    let running = matches!(rec.state, TaskState::Running | TaskState::Paused);
    let contract = live.and_then(|v| v.contract.as_ref()).filter(|_| running).map(|c| pb::Contract {
        batch: c.batch,
        memory: c.memory,
        gpu_memory: c.gpu_memory,
        gpu_devices: c.gpu_devices.clone(),
        cpu_millis: c.cpu_millis,
        io_slots: c.io_slots,
        scratch_dir: c.scratch.as_ref().map(|g| g.path.to_string_lossy().into_owned()).unwrap_or_default(),
        item_offset: rec.cursor,
    });
    let failure_reason = match rec.state {
        TaskState::Completed => String::new(),
        _ => rec.state_reason.clone().unwrap_or_default(),
    };
    pb::Task {
        id: format_id(rec.id),
        spec: Some(spec_to_pb(&rec.spec)),
        state: state_to_pb(rec.state) as i32,
        paused_while_running: rec.state == TaskState::Paused && rec.paused_running,
        attempts: rec.attempts,
        created_unix_ms: rec.created_ms,
        started_unix_ms: rec.started_ms,
        finished_unix_ms: rec.finished_ms,
        exit_code: rec.exit_code,
        failure_reason,
        progress: Some(progress),
        cursor: rec.cursor,
        last_decision: live_wait(rec, live).or_else(|| rec.last_decision.as_ref().map(decision_to_pb)),
        contract,
        host: host.to_owned(),
        memory_retries: rec.memory_retries,
        overrun_note: rec.overrun_note.clone().unwrap_or_default(),
        // Filled by the engine's view (it needs the Governor).
        learned: None,
        // Filled by Get and Explain (a read of the task's hook rows).
        hook: None,
        waiting_for: waiting_for(rec, live),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::offload_from_pb;

    #[test]
    fn files_travel_only_with_a_capability_and_are_kept_in_order() {
        let files = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let o = offload_from_pb("sh@1", 0, files(&["a", "b/c"]), files(&["x.o"])).unwrap().unwrap();
        assert_eq!(
            (o.capability.as_str(), o.inputs, o.outputs),
            ("sh@1:*", files(&["a", "b/c"]), files(&["x.o"]))
        );
        let e = offload_from_pb("", 0, files(&["a"]), Vec::new()).unwrap_err();
        assert!(e.message().starts_with("inputs: only a shippable task"), "{}", e.message());
        let e = offload_from_pb("", 0, Vec::new(), files(&["x.o"])).unwrap_err();
        assert!(e.message().starts_with("outputs: only a shippable task"), "{}", e.message());
        assert_eq!(offload_from_pb("", 0, Vec::new(), Vec::new()).unwrap(), None);
    }
}
