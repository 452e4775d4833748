//! The per-task actions: `Pause`, `Resume`, `Cancel`, `Remove`, `Clean`
//! and `Progress`. Each decodes the ids, calls one engine action per id
//! (which replies once its change is durable) and encodes the results.

use std::time::Duration;

use lardon_proto::pb;
use tonic::Status;

use super::convert::{id_arg, state_to_pb, states_arg};
use super::status;
use crate::engine::{ActionError, Engine};
use crate::spec::{TaskId, TaskState};

/// Per-id results of an action: a refusal for one id does not stop the others.
fn per_id(
    engine: &Engine,
    ids: &[String],
    act: impl Fn(&Engine, TaskId) -> Result<TaskState, ActionError>,
) -> pb::TaskActionResponse {
    let results = ids
        .iter()
        .map(|text| {
            let result = id_arg("ids", text)
                .map_err(|s| s.message().to_owned())
                .and_then(|id| act(engine, id).map_err(|e| e.to_string()));
            match result {
                Ok(state) => pb::TaskActionResult {
                    id: text.clone(),
                    ok: true,
                    error: String::new(),
                    state: state_to_pb(state) as i32,
                },
                Err(error) => {
                    tracing::warn!("request refused for task {text}: {error}");
                    let state = crate::ids::parse_id(text)
                        .and_then(|id| engine.task(id).ok().flatten())
                        .map_or(pb::TaskState::Unspecified, |r| state_to_pb(r.state));
                    pb::TaskActionResult { id: text.clone(), ok: false, error, state: state as i32 }
                }
            }
        })
        .collect();
    pb::TaskActionResponse { results }
}

/// The request's ids followed by every task of `group` (if given) in one
/// of `states` that is not among them, as the ids the client would send.
fn with_group(
    engine: &Engine,
    mut ids: Vec<String>,
    group: &str,
    states: &[TaskState],
) -> Result<Vec<String>, Status> {
    let Some(group) = super::convert::group_arg("group", group)? else { return Ok(ids) };
    let filter = crate::store::TaskFilter {
        group: Some(group.to_string()),
        states: states.to_vec(),
        ..Default::default()
    };
    for rec in engine.tasks(&filter).map_err(super::store_status)? {
        let id = crate::ids::format_id(rec.id);
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    Ok(ids)
}

pub(super) fn pause(engine: &Engine, req: pb::PauseRequest) -> Result<pb::TaskActionResponse, Status> {
    let ids = with_group(engine, req.ids, &req.group, &[TaskState::Pending, TaskState::Running])?;
    Ok(per_id(engine, &ids, Engine::pause))
}

pub(super) fn resume(engine: &Engine, req: pb::ResumeRequest) -> Result<pb::TaskActionResponse, Status> {
    let ids = with_group(engine, req.ids, &req.group, &[TaskState::Paused])?;
    Ok(per_id(engine, &ids, Engine::resume))
}

/// `restart ID…`, and with `failed` (`cancelled`) every FAILED
/// (CANCELLED) task, of `group` when given: each through the one restart
/// path (same spec, a new attempt).
pub(super) fn restart(engine: &Engine, req: pb::RestartRequest) -> Result<pb::TaskActionResponse, Status> {
    let mut states = Vec::new();
    if req.failed {
        states.push(TaskState::Failed);
    }
    if req.cancelled {
        states.push(TaskState::Cancelled);
    }
    let group = super::convert::group_arg("group", &req.group)?;
    if group.is_some() && states.is_empty() {
        return Err(Status::invalid_argument(
            "group: restart selects a group's tasks only with failed or cancelled",
        ));
    }
    let mut ids = req.ids;
    if !states.is_empty() {
        let filter =
            crate::store::TaskFilter { group: group.map(|g| g.to_string()), states, ..Default::default() };
        for rec in engine.tasks(&filter).map_err(super::store_status)? {
            let id = crate::ids::format_id(rec.id);
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
    }
    Ok(per_id(engine, &ids, Engine::restart))
}

pub(super) fn cancel(engine: &Engine, req: pb::CancelRequest) -> Result<pb::TaskActionResponse, Status> {
    let grace = req.grace_ms.map(Duration::from_millis);
    let live = [TaskState::Pending, TaskState::Running, TaskState::Paused];
    let ids = with_group(engine, req.ids, &req.group, &live)?;
    Ok(per_id(engine, &ids, |e, id| e.cancel(id, grace)))
}

pub(super) fn remove(engine: &Engine, req: pb::RemoveRequest) -> pb::TaskActionResponse {
    per_id(engine, &req.ids, Engine::remove)
}

pub(super) fn clean(engine: &Engine, req: pb::CleanRequest) -> Result<pb::CleanResponse, Status> {
    let states = if req.successful_only { vec![TaskState::Completed] } else { states_arg(&req.states)? };
    let removed = engine.clean(&states).map_err(status)?;
    Ok(pb::CleanResponse { removed: removed.into_iter().map(crate::ids::format_id).collect() })
}

pub(super) fn progress(engine: &Engine, req: pb::ProgressRequest) -> Result<pb::ProgressResponse, Status> {
    let id = id_arg("task_id", &req.task_id)?;
    engine.progress(id, req.done, req.total, &req.message).map_err(status)?;
    Ok(pb::ProgressResponse {})
}
