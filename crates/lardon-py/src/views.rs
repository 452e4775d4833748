//! The daemon's messages as plain Python dicts, keyed as `lardon status
//! --json` keys them; `python/lardon/_types.py` turns them into typed,
//! frozen dataclasses. States and decision kinds are lower-case words.

use lardon_proto::pb;
use pyo3::prelude::*;
use pyo3::types::PyDict;

fn state_word(s: i32) -> &'static str {
    lardon_proto::task_state_word(pb::TaskState::try_from(s).unwrap_or(pb::TaskState::Unspecified))
}

fn decision_word(k: i32) -> &'static str {
    match pb::DecisionKind::try_from(k).unwrap_or(pb::DecisionKind::Unspecified) {
        pb::DecisionKind::Unspecified => "none",
        pb::DecisionKind::Admit => "admit",
        pb::DecisionKind::ReduceBatch => "reduce_batch",
        pb::DecisionKind::Wait => "wait",
        pb::DecisionKind::Reject => "reject",
    }
}

fn decision<'py>(py: Python<'py>, d: Option<&pb::Decision>) -> PyResult<Option<Bound<'py, PyDict>>> {
    let Some(d) = d else { return Ok(None) };
    let out = PyDict::new(py);
    out.set_item("kind", decision_word(d.kind))?;
    out.set_item("reason_code", &d.reason_code)?;
    out.set_item("message", &d.message)?;
    out.set_item("batch", d.batch)?;
    out.set_item("at_unix_ms", d.at_unix_ms)?;
    Ok(Some(out))
}

/// One task.
pub(crate) fn task<'py>(py: Python<'py>, t: &pb::Task) -> PyResult<Bound<'py, PyDict>> {
    let spec = t.spec.clone().unwrap_or_default();
    let out = PyDict::new(py);
    out.set_item("id", &t.id)?;
    out.set_item("name", &spec.name)?;
    out.set_item("state", state_word(t.state))?;
    out.set_item("argv", &spec.argv)?;
    out.set_item("group", (!spec.group.is_empty()).then_some(spec.group.as_str()))?;
    out.set_item("items", spec.items)?;
    out.set_item("attempts", t.attempts)?;
    out.set_item("created_unix_ms", t.created_unix_ms)?;
    out.set_item("started_unix_ms", t.started_unix_ms)?;
    out.set_item("finished_unix_ms", t.finished_unix_ms)?;
    out.set_item("exit_code", t.exit_code)?;
    out.set_item("failure_reason", &t.failure_reason)?;
    out.set_item("cursor", t.cursor)?;
    out.set_item("memory_retries", t.memory_retries)?;
    out.set_item("overrun_note", &t.overrun_note)?;
    out.set_item("waiting_for", &t.waiting_for)?;
    out.set_item("host", &t.host)?;
    out.set_item("last_decision", decision(py, t.last_decision.as_ref())?)?;
    let p = t.progress.clone().unwrap_or_default();
    let progress = PyDict::new(py);
    progress.set_item("done", p.done)?;
    progress.set_item("total", p.total)?;
    progress.set_item("message", &p.message)?;
    progress.set_item("eta_ms", p.eta_ms)?;
    out.set_item("progress", progress)?;
    let contract = match &t.contract {
        Some(c) => {
            let d = PyDict::new(py);
            d.set_item("batch", c.batch)?;
            d.set_item("memory", c.memory)?;
            d.set_item("gpu_memory", c.gpu_memory)?;
            d.set_item("gpu_devices", &c.gpu_devices)?;
            d.set_item("cpu_millis", c.cpu_millis)?;
            d.set_item("io_slots", c.io_slots)?;
            d.set_item("item_offset", c.item_offset)?;
            Some(d)
        }
        None => None,
    };
    out.set_item("contract", contract)?;
    let l = t.learned.clone().unwrap_or_default();
    let learned = PyDict::new(py);
    learned.set_item("samples", l.samples)?;
    learned.set_item("fixed", l.fixed)?;
    learned.set_item("per_item", l.per_item)?;
    learned.set_item("lower_bound", l.lower_bound)?;
    learned.set_item("batch_target", l.batch_target)?;
    learned.set_item("source", &l.source)?;
    learned.set_item("key", &l.key)?;
    out.set_item("learned", learned)?;
    Ok(out)
}

/// `explain`: the task, its last decision, what its estimate needs
/// against what is available, and its decision history.
pub(crate) fn explanation<'py>(py: Python<'py>, e: &pb::ExplainResponse) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    out.set_item("task", e.task.as_ref().map(|t| task(py, t)).transpose()?)?;
    out.set_item("decision", decision(py, e.last_decision.as_ref())?)?;
    let needs = e.needs.clone().unwrap_or_default();
    let n = PyDict::new(py);
    n.set_item("memory_at_batch_min", needs.memory_at_batch_min)?;
    n.set_item("memory_at_batch_max", needs.memory_at_batch_max)?;
    n.set_item("adaptive_batch_max", needs.adaptive_batch_max)?;
    n.set_item("estimate_error", &needs.estimate_error)?;
    out.set_item("needs", n)?;
    out.set_item("available", availability(py, e.availability.as_ref())?)?;
    let mut history = Vec::with_capacity(e.history.len());
    for h in &e.history {
        let d = PyDict::new(py);
        d.set_item("kind", &h.kind)?;
        d.set_item("from_unix_ms", h.from_unix_ms)?;
        d.set_item("to_unix_ms", h.to_unix_ms)?;
        d.set_item("batch", h.batch)?;
        d.set_item("memory", h.memory)?;
        d.set_item("cpu_millis", h.cpu_millis)?;
        d.set_item("reason_code", &h.reason_code)?;
        d.set_item("message", &h.message)?;
        history.push(d);
    }
    out.set_item("history", history)?;
    Ok(out)
}

/// The host's budgets as the Governor counts them.
pub(crate) fn availability<'py>(
    py: Python<'py>,
    a: Option<&pb::Availability>,
) -> PyResult<Bound<'py, PyDict>> {
    let a = a.cloned().unwrap_or_default();
    let m = a.memory.unwrap_or_default();
    let c = a.cpus.unwrap_or_default();
    let out = PyDict::new(py);
    out.set_item("host", &a.host)?;
    out.set_item("memory_total", m.total)?;
    out.set_item("memory_reserve", m.reserve)?;
    out.set_item("memory_reserved", m.reserved)?;
    out.set_item("memory_available", m.available)?;
    out.set_item("cpus_logical", c.logical)?;
    out.set_item("cpu_pool", c.pool.len())?;
    out.set_item("cpu_millis_available", c.available_millis)?;
    out.set_item("running", a.running)?;
    out.set_item("pending", a.pending)?;
    let enf = a.enforcement.unwrap_or_default();
    out.set_item("enforcement", enf.backend().as_str_name())?;
    out.set_item("enforcement_why", &enf.why)?;
    Ok(out)
}
