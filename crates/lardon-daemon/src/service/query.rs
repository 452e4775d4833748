//! The reads: `List`, `Get`, `Explain` and `Resources`. Each asks the
//! engine (which reads what the store committed) and encodes the answer.

use lardon_proto::pb;
use tonic::Status;

use super::convert::{estimate_to_pb, id_arg, states_arg};
use super::{store_status, views};
use crate::engine::Engine;
use crate::store::TaskFilter;

/// Tasks matching the request's filter.
pub(super) fn list(engine: &Engine, req: pb::ListRequest) -> Result<pb::ListResponse, Status> {
    let ids =
        req.ids.iter().enumerate().map(|(i, s)| id_arg(&format!("ids[{i}]"), s)).collect::<Result<_, _>>()?;
    let (min, only, limit) = (req.min_priority, req.only_min_priority, req.limit);
    let filter = TaskFilter {
        ids,
        states: states_arg(&req.states)?,
        class: (!req.class.is_empty()).then_some(req.class),
        name_contains: (!req.name_contains.is_empty()).then_some(req.name_contains),
        group: super::convert::group_arg("group", &req.group)?.map(|g| g.to_string()),
        limit: (limit > 0 && !only).then_some(limit),
    };
    let recs = engine.tasks(&filter).map_err(store_status)?;
    let mut tasks: Vec<pb::Task> =
        recs.iter().filter(|r| !only || r.spec.priority >= min).map(|r| views::task_pb(engine, r)).collect();
    if only && limit > 0 {
        tasks.truncate(limit as usize);
    }
    Ok(pb::ListResponse { tasks })
}

/// One task.
pub(super) fn get(engine: &Engine, req: pb::GetRequest) -> Result<pb::GetResponse, Status> {
    let id = id_arg("id", &req.id)?;
    let rec =
        engine.task(id).map_err(store_status)?.ok_or_else(|| Status::not_found(format!("no task {id}")))?;
    // Against the daemon's environment as it is now (a run's base when the
    // task has none of its own).
    let env_differs = rec.spec.submit_env.as_ref().map_or_else(Vec::new, |env| {
        crate::submit_env::differing(env, std::env::vars_os())
            .into_iter()
            .map(|(name, value)| pb::EnvDiff {
                name,
                unset: value.is_none(),
                value: value.filter(|_| req.env_values),
            })
            .collect()
    });
    let mut task = views::task_pb(engine, &rec);
    task.hook = engine.shared.reader().hook_runs(id).map_err(store_status)?.last().map(views::hook_pb);
    Ok(pb::GetResponse { task: Some(task), env_differs, submit_env: rec.spec.submit_env.is_some() })
}

/// Why a task is where it is: its course, its needs (with the batch
/// target the Governor would apply now) and the host's availability.
pub(super) fn explain(engine: &Engine, req: pb::ExplainRequest) -> Result<pb::ExplainResponse, Status> {
    let id = id_arg("id", &req.id)?;
    let rec =
        engine.task(id).map_err(store_status)?.ok_or_else(|| Status::not_found(format!("no task {id}")))?;
    let mut history =
        if req.history { views::course_pb(engine.course(id).map_err(store_status)?) } else { Vec::new() };
    // A run killed at its timeout ends the course: said from the row (the
    // end's reason), not a course row of its own.
    if req.history
        && rec.state == crate::spec::TaskState::Failed
        && let (Some(reason), Some(at)) = (&rec.state_reason, rec.finished_ms)
        && reason.starts_with(crate::spec::TIMEOUT)
    {
        history.push(pb::HistoryEntry {
            kind: "timed_out".to_owned(),
            from_unix_ms: at,
            reason_code: crate::spec::TIMEOUT.to_owned(),
            message: reason.clone(),
            ..Default::default()
        });
    }
    let hooks = engine.shared.reader().hook_runs(id).map_err(store_status)?;
    if req.history {
        // Each after the entries of its end (a restarted task has several).
        for row in &hooks {
            let at = history.iter().rposition(|e| e.from_unix_ms <= row.ended_ms).map_or(0, |i| i + 1);
            history.insert(at, views::hook_entry(row));
        }
    }
    let mut task = views::task_pb(engine, &rec);
    task.hook = hooks.last().map(views::hook_pb);
    Ok(pb::ExplainResponse {
        history,
        last_decision: task.last_decision.clone(),
        task: Some(task),
        estimate: Some(estimate_to_pb(&rec.spec.estimate)),
        needs: Some(views::needs(&rec.spec, engine)),
        availability: Some(views::availability_pb(engine).map_err(store_status)?),
    })
}

/// The Governor's availability.
pub(super) fn resources(engine: &Engine) -> Result<pb::ResourcesResponse, Status> {
    Ok(pb::ResourcesResponse { availability: Some(views::availability_pb(engine).map_err(store_status)?) })
}
