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

pub(super) fn pause(engine: &Engine, req: pb::PauseRequest) -> pb::TaskActionResponse {
    per_id(engine, &req.ids, Engine::pause)
}

pub(super) fn resume(engine: &Engine, req: pb::ResumeRequest) -> pb::TaskActionResponse {
    per_id(engine, &req.ids, Engine::resume)
}

pub(super) fn restart(engine: &Engine, req: pb::RestartRequest) -> pb::TaskActionResponse {
    per_id(engine, &req.ids, Engine::restart)
}

pub(super) fn cancel(engine: &Engine, req: pb::CancelRequest) -> pb::TaskActionResponse {
    let grace = req.grace_ms.map(Duration::from_millis);
    per_id(engine, &req.ids, |e, id| e.cancel(id, grace))
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
