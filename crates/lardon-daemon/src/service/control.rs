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

/// The ids an action applies to: those the client named, then those a
/// selection (a group, or `restart --failed`) found in one of `states`.
struct Selection {
    named: Vec<String>,
    from_group: Vec<String>,
    states: Vec<TaskState>,
}

impl Selection {
    /// Only the ids the client named.
    fn named(ids: Vec<String>) -> Self {
        Selection { named: ids, from_group: Vec::new(), states: Vec::new() }
    }

    /// The request's ids followed by every task of `group` (if given) in
    /// one of `states` that is not among them.
    fn with_group(
        engine: &Engine,
        ids: Vec<String>,
        group: &str,
        states: &[TaskState],
    ) -> Result<Self, Status> {
        match super::convert::group_arg("group", group)? {
            Some(group) => Self::with_found(engine, ids, Some(group.as_str()), states),
            None => Ok(Self::named(ids)),
        }
    }

    /// The request's ids followed by every task in one of `states` (of
    /// `group` when given) that is not among them.
    fn with_found(
        engine: &Engine,
        ids: Vec<String>,
        group: Option<&str>,
        states: &[TaskState],
    ) -> Result<Self, Status> {
        let mut selection = Selection { named: ids, from_group: Vec::new(), states: states.to_vec() };
        let filter = crate::store::TaskFilter {
            group: group.map(str::to_owned),
            states: states.to_vec(),
            ..Default::default()
        };
        for rec in engine.tasks(&filter).map_err(super::store_status)? {
            let id = crate::ids::format_id(rec.id);
            if !selection.named.contains(&id) && !selection.from_group.contains(&id) {
                selection.from_group.push(id);
            }
        }
        Ok(selection)
    }
}

/// Per-id results of an action: a refusal for one id does not stop the
/// others. A task the group selection found that left the selected states
/// before its turn (a queued task that completed meanwhile) is not a
/// refusal: it is no longer the group's to act on, and is left out.
fn per_id(
    engine: &Engine,
    selection: &Selection,
    act: impl Fn(&Engine, TaskId) -> Result<TaskState, ActionError>,
) -> pb::TaskActionResponse {
    let named = selection.named.iter().map(|id| (id, false));
    let found = selection.from_group.iter().map(|id| (id, true));
    let results = named
        .chain(found)
        .filter_map(|(text, from_group)| {
            let result = id_arg("ids", text)
                .map_err(|s| s.message().to_owned())
                .and_then(|id| act(engine, id).map_err(|e| e.to_string()));
            match result {
                Ok(state) => Some(pb::TaskActionResult {
                    id: text.clone(),
                    ok: true,
                    error: String::new(),
                    state: state_to_pb(state) as i32,
                }),
                Err(error) => {
                    let now = crate::ids::parse_id(text).and_then(|id| engine.task(id).ok().flatten());
                    if from_group && now.as_ref().is_some_and(|r| !selection.states.contains(&r.state)) {
                        return None;
                    }
                    tracing::warn!("request refused for task {text}: {error}");
                    let state = now.map_or(pb::TaskState::Unspecified, |r| state_to_pb(r.state));
                    Some(pb::TaskActionResult { id: text.clone(), ok: false, error, state: state as i32 })
                }
            }
        })
        .collect();
    pb::TaskActionResponse { results }
}

pub(super) fn pause(engine: &Engine, req: pb::PauseRequest) -> Result<pb::TaskActionResponse, Status> {
    let ids = Selection::with_group(engine, req.ids, &req.group, &[TaskState::Pending, TaskState::Running])?;
    Ok(per_id(engine, &ids, Engine::pause))
}

pub(super) fn resume(engine: &Engine, req: pb::ResumeRequest) -> Result<pb::TaskActionResponse, Status> {
    let ids = Selection::with_group(engine, req.ids, &req.group, &[TaskState::Paused])?;
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
    let selection = if states.is_empty() {
        Selection::named(req.ids)
    } else {
        Selection::with_found(engine, req.ids, group.as_ref().map(|g| g.as_str()), &states)?
    };
    Ok(per_id(engine, &selection, Engine::restart))
}

pub(super) fn cancel(engine: &Engine, req: pb::CancelRequest) -> Result<pb::TaskActionResponse, Status> {
    let grace = req.grace_ms.map(Duration::from_millis);
    let live = [TaskState::Pending, TaskState::Running, TaskState::Paused];
    let ids = Selection::with_group(engine, req.ids, &req.group, &live)?;
    Ok(per_id(engine, &ids, |e, id| e.cancel(id, grace)))
}

pub(super) fn remove(engine: &Engine, req: pb::RemoveRequest) -> pb::TaskActionResponse {
    per_id(engine, &Selection::named(req.ids), Engine::remove)
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
