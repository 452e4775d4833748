//! JSON views of the daemon's messages (`--json`): stable snake_case keys,
//! states as lower-case words, sizes in bytes, CPUs in thousandths.

use lardon_proto::pb;
use serde_json::{Value, json};

fn state(s: i32) -> &'static str {
    lardon_proto::task_state_word(pb::TaskState::try_from(s).unwrap_or(pb::TaskState::Unspecified))
}

pub(crate) fn decision_kind(k: i32) -> &'static str {
    match pb::DecisionKind::try_from(k).unwrap_or(pb::DecisionKind::Unspecified) {
        pb::DecisionKind::Unspecified => "none",
        pb::DecisionKind::Admit => "admit",
        pb::DecisionKind::ReduceBatch => "reduce_batch",
        pb::DecisionKind::Wait => "wait",
        pb::DecisionKind::Reject => "reject",
    }
}

pub(crate) fn eta_word(s: i32) -> &'static str {
    match pb::EtaState::try_from(s).unwrap_or(pb::EtaState::Unspecified) {
        pb::EtaState::Unspecified | pb::EtaState::Indeterminate => "indeterminate",
        pb::EtaState::Complete => "complete",
        pb::EtaState::Throttled => "throttled",
        pb::EtaState::Stalled => "stalled",
        pb::EtaState::Calculating => "calculating",
        pb::EtaState::Known => "known",
    }
}

pub(crate) fn pressure_word(s: i32) -> &'static str {
    match pb::PressureState::try_from(s).unwrap_or(pb::PressureState::Unspecified) {
        pb::PressureState::Unspecified => "unknown",
        pb::PressureState::Green => "green",
        pb::PressureState::Yellow => "yellow",
        pb::PressureState::Red => "red",
    }
}

pub(crate) fn scratch_word(s: i32) -> &'static str {
    match pb::ScratchState::try_from(s).unwrap_or(pb::ScratchState::Unspecified) {
        pb::ScratchState::Unspecified => "unknown",
        pb::ScratchState::Absent => "absent",
        pb::ScratchState::Available => "available",
        pb::ScratchState::InUse => "in_use",
        pb::ScratchState::Draining => "draining",
        pb::ScratchState::SafeToUnplug => "safe_to_unplug",
        pb::ScratchState::Error => "error",
    }
}

pub(crate) fn state_word(s: i32) -> &'static str {
    state(s)
}

pub(crate) fn decision(d: Option<&pb::Decision>) -> Value {
    match d {
        None => Value::Null,
        Some(d) => json!({
            "kind": decision_kind(d.kind), "reason_code": d.reason_code, "message": d.message,
            "batch": d.batch, "at_unix_ms": d.at_unix_ms,
        }),
    }
}

pub(crate) fn estimate(e: Option<&pb::Estimate>) -> Value {
    let Some(e) = e else { return Value::Null };
    json!({
        "memory_fixed": e.memory_fixed, "memory_per_item": e.memory_per_item,
        "gpu_memory_fixed": e.gpu_memory_fixed, "gpu_memory_per_item": e.gpu_memory_per_item,
        "batch_min": e.batch_min.unwrap_or(1), "batch_max": e.batch_max.or(e.batch_min).unwrap_or(1),
        "cpu_millis": e.cpu_millis.unwrap_or(1000), "cpus_exact": e.cpus_exact,
        "gpu_slots": e.gpu_slots, "io_slots": e.io_slots, "scratch_bytes": e.scratch_bytes,
        "class": if e.class.is_empty() { "default" } else { &e.class },
    })
}

pub(crate) fn task(t: &pb::Task) -> Value {
    let spec = t.spec.clone().unwrap_or_default();
    let p = t.progress.clone().unwrap_or_default();
    json!({
        "id": t.id,
        "name": spec.name,
        "state": state(t.state),
        "paused_while_running": t.paused_while_running,
        "argv": spec.argv,
        "cwd": spec.cwd,
        "env": spec.env.iter().map(|e| json!({"key": e.key, "value": e.value})).collect::<Vec<_>>(),
        "estimate": estimate(spec.estimate.as_ref()),
        "priority": spec.priority,
        "after": spec.after,
        "items": spec.items,
        "retry_on_interrupt": spec.retry_on_interrupt.unwrap_or(true),
        "engine": if spec.engine.is_empty() { "local" } else { spec.engine.as_str() },
        "group": (!spec.group.is_empty()).then_some(spec.group.as_str()),
        "attempts": t.attempts,
        "created_unix_ms": t.created_unix_ms,
        "started_unix_ms": t.started_unix_ms,
        "finished_unix_ms": t.finished_unix_ms,
        "exit_code": t.exit_code,
        "failure_reason": t.failure_reason,
        "progress": {
            "done": p.done, "total": p.total, "message": p.message, "eta_state": eta_word(p.eta_state),
            "eta_ms": p.eta_ms, "items_per_sec": p.items_per_sec, "elapsed_ms": p.elapsed_ms,
            "integrity_error": p.integrity_error,
        },
        "cursor": t.cursor,
        "last_decision": decision(t.last_decision.as_ref()),
        "contract": t.contract.as_ref().map(|c| json!({
            "batch": c.batch, "memory": c.memory, "gpu_memory": c.gpu_memory, "gpu_devices": c.gpu_devices,
            "cpu_millis": c.cpu_millis, "io_slots": c.io_slots, "scratch_dir": c.scratch_dir,
            "item_offset": c.item_offset,
        })),
        "host": t.host,
        "memory_retries": t.memory_retries,
        "overrun_note": t.overrun_note,
        "waiting_for": (!t.waiting_for.is_empty()).then_some(&t.waiting_for),
        "learned": crate::course::learned_json(t.learned.as_ref()),
        "on_end": spec.on_end,
        "hook": t.hook.as_ref().map(hook),
    })
}

/// The hook of a task's latest end (`status ID --json`).
pub(crate) fn hook(h: &pb::HookRun) -> Value {
    json!({
        "command": h.command, "status": h.status, "outcome": h.outcome, "exit_code": h.exit_code,
        "duration_ms": h.duration_ms, "attempt": h.attempt,
        "output": String::from_utf8_lossy(&h.output), "output_dropped": h.output_dropped,
        "task_state": h.task_state, "ended_unix_ms": h.ended_unix_ms,
        "finished_unix_ms": h.finished_unix_ms, "error": h.error,
    })
}

pub(crate) fn scratch(v: &pb::ScratchVolume) -> Value {
    json!({
        "name": v.name, "path": v.path, "state": scratch_word(v.state), "capacity": v.capacity,
        "free": v.free, "leased": v.leased, "leases": v.leases, "hook": v.hook, "message": v.message,
    })
}

pub(crate) fn availability(a: Option<&pb::Availability>) -> Value {
    let Some(a) = a else { return Value::Null };
    let m = a.memory.unwrap_or_default();
    let c = a.cpus.clone().unwrap_or_default();
    let io = a.io.unwrap_or_default();
    let p = a.pressure.clone().unwrap_or_default();
    let enf = a.enforcement.clone().unwrap_or_default();
    json!({
        "host": a.host, "captured_unix_ms": a.captured_unix_ms, "generation": a.generation,
        "memory": {"total": m.total, "reserve": m.reserve, "reserved": m.reserved, "available": m.available,
                   "mem_available": m.mem_available, "emergency_floor": m.emergency_floor},
        "cpus": {"logical": c.logical, "reserve": c.reserve, "pool": c.pool, "reserved_millis": c.reserved_millis,
                 "available_millis": c.available_millis, "load1": c.load1, "own_load": c.own_load, "max_load_ratio": c.max_load_ratio},
        "gpus": a.gpus.iter().map(|g| json!({
            "index": g.index, "name": g.name, "memory_total": g.memory_total, "memory_reserve": g.memory_reserve,
            "memory_reserved": g.memory_reserved, "memory_available": g.memory_available, "unified": g.unified,
            "slots_total": g.slots_total, "slots_used": g.slots_used,
        })).collect::<Vec<_>>(),
        "io": {"total": io.total, "used": io.used},
        "pressure": {"state": pressure_word(p.state), "reason": p.reason, "psi_cpu": p.psi_cpu,
                     "psi_memory": p.psi_memory, "psi_io": p.psi_io},
        "slow_start_target": a.slow_start_target,
        "enforcement": {"backend": enf.backend().as_str_name(), "why": enf.why, "mode": enf.mode().as_str_name(),
                        "line": crate::render::enforcement_line(&enf).trim_start_matches("enforcement ")},
        "scratch": a.scratch.iter().map(scratch).collect::<Vec<_>>(),
        "running": a.running, "pending": a.pending, "max_running": a.max_running,
    })
}

/// Prints a value as pretty JSON on stdout. Rendered first, then written
/// in one piece through [`crate::commands::out`]: `serde_json`'s writer
/// hides the `io::Error` of a closed pipe from the error chain, and `main`
/// must find it there to end quietly with 0 (`lardon status --json | head`).
pub(crate) fn print(value: &Value) -> anyhow::Result<()> {
    let mut text = serde_json::to_string_pretty(value)?;
    text.push('\n');
    crate::commands::out(&text)
}
