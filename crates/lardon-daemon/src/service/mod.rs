//! The gRPC service `lardon.v1.Lardon`: a thin async face over the
//! synchronous engine (each call runs on a blocking thread). Nothing a
//! client sends can panic the daemon: every field is checked and every
//! error becomes a status naming the field.

mod convert;
mod logwatch;
pub(crate) mod scratch;
mod streams;
mod views;

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use lardon_proto::pb;
use tokio::sync::watch;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use crate::engine::{ActionError, Engine};
use crate::settings;
use crate::spec::TaskState;
use crate::store::TaskFilter;
use convert::{estimate_to_pb, id_arg, spec_from_pb, state_to_pb, states_arg};

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// The service over one engine.
/// The most tasks one `SubmitMany` call may carry (a client splits larger
/// inputs into several calls; each is one transaction).
pub(crate) const MAX_SUBMIT_MANY: usize = 10_000;

#[derive(Debug, Clone)]
pub(crate) struct Service {
    engine: Arc<Engine>,
    /// Flips to true at shutdown: open streams end.
    stop: watch::Receiver<bool>,
}

impl Service {
    pub(crate) fn new(engine: Arc<Engine>, stop: watch::Receiver<bool>) -> Self {
        Service { engine, stop }
    }

    /// Runs `f` on a blocking thread with the engine.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Engine) -> Result<T, Status> + Send + 'static,
    ) -> Result<T, Status> {
        let engine = Arc::clone(&self.engine);
        tokio::task::spawn_blocking(move || f(&engine))
            .await
            .map_err(|e| Status::internal(format!("request handler failed: {e}")))?
    }
}

/// The gRPC status for an action error. A refusal (bad input, a conflict
/// with the task's state) is logged at `warn`: a person reading the log
/// sees every request the daemon turned down and why.
pub(crate) fn status(e: ActionError) -> Status {
    if let ActionError::Invalid(m) | ActionError::Conflict(m) = &e {
        tracing::warn!("request refused: {m}");
    }
    match e {
        ActionError::NotFound(id) => Status::not_found(format!("no task {id}")),
        ActionError::Invalid(m) => Status::invalid_argument(m),
        ActionError::Conflict(m) => Status::failed_precondition(m),
        ActionError::Unavailable => Status::unavailable("the daemon is shutting down"),
        ActionError::Internal(m) => Status::internal(m),
    }
}

pub(crate) fn store_status(e: crate::store::StoreError) -> Status {
    status(ActionError::from(e))
}

/// Per-id results of an action.
fn per_id(
    engine: &Engine,
    ids: &[String],
    act: impl Fn(&Engine, crate::spec::TaskId) -> Result<TaskState, ActionError>,
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
                        .and_then(|id| engine.shared.reader().get_task(id).ok().flatten())
                        .map_or(pb::TaskState::Unspecified, |r| state_to_pb(r.state));
                    pb::TaskActionResult { id: text.clone(), ok: false, error, state: state as i32 }
                }
            }
        })
        .collect();
    pb::TaskActionResponse { results }
}

fn policy_response(engine: &Engine) -> Result<pb::PolicyResponse, Status> {
    let overrides = engine.shared.reader().policy_overrides().map_err(store_status)?;
    let policy = engine.shared.governor.policy();
    let current = engine.shared.settings();
    let defaults = engine.default_policy();
    let default_settings = settings::DaemonSettings::default();
    let rules = lardon::HostPolicy::explain_defaults(&engine.shared.governor.profile());
    let entries = settings::KEYS
        .iter()
        .map(|(key, help)| pb::PolicyEntry {
            key: (*key).to_owned(),
            value: settings::get(&policy, &current, key).unwrap_or_default(),
            overridden: overrides.iter().any(|(k, _)| k == key),
            default_value: settings::get(&defaults, &default_settings, key).unwrap_or_default(),
            help: (*help).to_owned(),
            default_rule: rules.iter().find(|(k, _)| k == key).map(|(_, r)| r.clone()).unwrap_or_default(),
        })
        .collect();
    Ok(pb::PolicyResponse { entries, generation: engine.shared.governor.generation() })
}

#[tonic::async_trait]
impl lardon_proto::Lardon for Service {
    type WaitStream = BoxStream<pb::WaitEvent>;
    type LogStream = BoxStream<pb::LogChunk>;
    type WatchStream = BoxStream<pb::WatchEvent>;

    async fn hello(&self, _: Request<pb::HelloRequest>) -> Result<Response<pb::HelloResponse>, Status> {
        let info = &self.engine.shared.info;
        Ok(Response::new(pb::HelloResponse {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            host: info.host.clone(),
            pid: std::process::id(),
            state_dir: info.state_dir.to_string_lossy().into_owned(),
            started_unix_ms: info.started_ms,
        }))
    }

    async fn submit(&self, req: Request<pb::SubmitRequest>) -> Result<Response<pb::SubmitResponse>, Status> {
        let req = req.into_inner();
        let spec =
            spec_from_pb(req.spec).inspect_err(|s| tracing::warn!("submit refused: {}", s.message()))?;
        let paused = req.paused;
        self.blocking(move |engine| {
            let id = engine.submit(spec, paused).map_err(status)?;
            let task = engine.shared.reader().get_task(id).map_err(store_status)?.map(|r| engine.task_pb(&r));
            Ok(Response::new(pb::SubmitResponse { id: crate::ids::format_id(id), task }))
        })
        .await
    }

    async fn submit_many(
        &self,
        req: Request<pb::SubmitManyRequest>,
    ) -> Result<Response<pb::SubmitManyResponse>, Status> {
        let req = req.into_inner();
        if req.specs.len() > MAX_SUBMIT_MANY {
            let m = format!("specs: {} tasks in one call; at most {MAX_SUBMIT_MANY}", req.specs.len());
            tracing::warn!("submit refused: {m}");
            return Err(Status::invalid_argument(m));
        }
        let specs = req
            .specs
            .into_iter()
            .enumerate()
            .map(|(i, spec)| {
                spec_from_pb(Some(spec))
                    .map_err(|s| Status::invalid_argument(format!("specs[{i}].{}", s.message())))
            })
            .collect::<Result<Vec<_>, _>>()
            .inspect_err(|s| tracing::warn!("submit refused: {}", s.message()))?;
        let paused = req.paused;
        self.blocking(move |engine| {
            let ids = engine.submit_many(specs, paused, "specs").map_err(status)?;
            Ok(Response::new(pb::SubmitManyResponse {
                ids: ids.into_iter().map(crate::ids::format_id).collect(),
            }))
        })
        .await
    }

    async fn list(&self, req: Request<pb::ListRequest>) -> Result<Response<pb::ListResponse>, Status> {
        let req = req.into_inner();
        let ids = req
            .ids
            .iter()
            .enumerate()
            .map(|(i, s)| id_arg(&format!("ids[{i}]"), s))
            .collect::<Result<_, _>>()?;
        let filter = TaskFilter {
            ids,
            states: states_arg(&req.states)?,
            class: (!req.class.is_empty()).then_some(req.class),
            name_contains: (!req.name_contains.is_empty()).then_some(req.name_contains),
            limit: (req.limit > 0 && !req.only_min_priority).then_some(req.limit),
        };
        let (min, only, limit) = (req.min_priority, req.only_min_priority, req.limit);
        self.blocking(move |engine| {
            let recs = engine.shared.reader().list_tasks(&filter).map_err(store_status)?;
            let mut tasks: Vec<pb::Task> =
                recs.iter().filter(|r| !only || r.spec.priority >= min).map(|r| engine.task_pb(r)).collect();
            if only && limit > 0 {
                tasks.truncate(limit as usize);
            }
            Ok(Response::new(pb::ListResponse { tasks }))
        })
        .await
    }

    async fn get(&self, req: Request<pb::GetRequest>) -> Result<Response<pb::GetResponse>, Status> {
        let id = id_arg("id", &req.into_inner().id)?;
        self.blocking(move |engine| {
            let rec = engine.shared.reader().get_task(id).map_err(store_status)?;
            let rec = rec.ok_or_else(|| Status::not_found(format!("no task {id}")))?;
            Ok(Response::new(pb::GetResponse { task: Some(engine.task_pb(&rec)) }))
        })
        .await
    }

    async fn explain(
        &self,
        req: Request<pb::ExplainRequest>,
    ) -> Result<Response<pb::ExplainResponse>, Status> {
        let req = req.into_inner();
        let id = id_arg("id", &req.id)?;
        self.blocking(move |engine| {
            let rec = engine.shared.reader().get_task(id).map_err(store_status)?;
            let rec = rec.ok_or_else(|| Status::not_found(format!("no task {id}")))?;
            let history = if req.history {
                views::course_pb(engine.shared.reader().course(id).map_err(store_status)?)
            } else {
                Vec::new()
            };
            let task = engine.task_pb(&rec);
            Ok(Response::new(pb::ExplainResponse {
                history,
                last_decision: task.last_decision.clone(),
                task: Some(task),
                estimate: Some(estimate_to_pb(&rec.spec.estimate)),
                needs: Some(views::needs(&rec.spec, engine)),
                availability: Some(engine.availability_pb().map_err(store_status)?),
            }))
        })
        .await
    }

    async fn cancel(
        &self,
        req: Request<pb::CancelRequest>,
    ) -> Result<Response<pb::TaskActionResponse>, Status> {
        let req = req.into_inner();
        let grace = req.grace_ms.map(Duration::from_millis);
        self.blocking(move |engine| Ok(Response::new(per_id(engine, &req.ids, |e, id| e.cancel(id, grace)))))
            .await
    }

    async fn pause(
        &self,
        req: Request<pb::PauseRequest>,
    ) -> Result<Response<pb::TaskActionResponse>, Status> {
        let ids = req.into_inner().ids;
        self.blocking(move |engine| Ok(Response::new(per_id(engine, &ids, Engine::pause)))).await
    }

    async fn resume(
        &self,
        req: Request<pb::ResumeRequest>,
    ) -> Result<Response<pb::TaskActionResponse>, Status> {
        let ids = req.into_inner().ids;
        self.blocking(move |engine| Ok(Response::new(per_id(engine, &ids, Engine::resume)))).await
    }

    async fn remove(
        &self,
        req: Request<pb::RemoveRequest>,
    ) -> Result<Response<pb::TaskActionResponse>, Status> {
        let ids = req.into_inner().ids;
        self.blocking(move |engine| {
            Ok(Response::new(per_id(engine, &ids, |e, id| {
                let state = e.shared.reader().get_task(id)?.ok_or(ActionError::NotFound(id))?.state;
                e.remove(id).map(|()| state)
            })))
        })
        .await
    }

    async fn clean(&self, req: Request<pb::CleanRequest>) -> Result<Response<pb::CleanResponse>, Status> {
        let req = req.into_inner();
        let mut states = states_arg(&req.states)?;
        if req.successful_only {
            states = vec![TaskState::Completed];
        }
        self.blocking(move |engine| {
            let removed = engine.clean(&states).map_err(status)?;
            Ok(Response::new(pb::CleanResponse {
                removed: removed.into_iter().map(crate::ids::format_id).collect(),
            }))
        })
        .await
    }

    async fn wait(&self, req: Request<pb::WaitRequest>) -> Result<Response<Self::WaitStream>, Status> {
        streams::wait(Arc::clone(&self.engine), self.stop.clone(), req.into_inner()).await
    }

    async fn log(&self, req: Request<pb::LogRequest>) -> Result<Response<Self::LogStream>, Status> {
        streams::log(Arc::clone(&self.engine), self.stop.clone(), req.into_inner()).await
    }

    async fn resources(
        &self,
        _: Request<pb::ResourcesRequest>,
    ) -> Result<Response<pb::ResourcesResponse>, Status> {
        self.blocking(|engine| {
            let availability = engine.availability_pb().map_err(store_status)?;
            Ok(Response::new(pb::ResourcesResponse { availability: Some(availability) }))
        })
        .await
    }

    async fn get_policy(
        &self,
        _: Request<pb::GetPolicyRequest>,
    ) -> Result<Response<pb::PolicyResponse>, Status> {
        self.blocking(|engine| policy_response(engine).map(Response::new)).await
    }

    async fn set_policy(
        &self,
        req: Request<pb::SetPolicyRequest>,
    ) -> Result<Response<pb::PolicyResponse>, Status> {
        let req = req.into_inner();
        let set: Vec<(String, String)> = req.set.into_iter().map(|e| (e.key, e.value)).collect();
        self.blocking(move |engine| {
            engine.set_policy(&set, &req.reset).map_err(status)?;
            policy_response(engine).map(Response::new)
        })
        .await
    }

    async fn progress(
        &self,
        req: Request<pb::ProgressRequest>,
    ) -> Result<Response<pb::ProgressResponse>, Status> {
        let req = req.into_inner();
        let id = id_arg("task_id", &req.task_id)?;
        self.blocking(move |engine| {
            engine.progress(id, req.done, req.total, &req.message).map_err(status)?;
            Ok(Response::new(pb::ProgressResponse {}))
        })
        .await
    }

    async fn watch(&self, req: Request<pb::WatchRequest>) -> Result<Response<Self::WatchStream>, Status> {
        streams::watch(Arc::clone(&self.engine), self.stop.clone(), req.into_inner()).await
    }

    async fn scratch_add(
        &self,
        req: Request<pb::ScratchAddRequest>,
    ) -> Result<Response<pb::ScratchVolume>, Status> {
        let req = req.into_inner();
        self.blocking(move |engine| scratch::add(engine, req).map(Response::new)).await
    }

    async fn scratch_drain(
        &self,
        req: Request<pb::ScratchDrainRequest>,
    ) -> Result<Response<pb::ScratchVolume>, Status> {
        let name = req.into_inner().name;
        self.blocking(move |engine| scratch::drain(engine, &name).map(Response::new)).await
    }

    async fn scratch_cancel_drain(
        &self,
        req: Request<pb::ScratchCancelDrainRequest>,
    ) -> Result<Response<pb::ScratchVolume>, Status> {
        let name = req.into_inner().name;
        self.blocking(move |engine| scratch::cancel_drain(engine, &name).map(Response::new)).await
    }

    async fn scratch_remove(
        &self,
        req: Request<pb::ScratchRemoveRequest>,
    ) -> Result<Response<pb::ScratchRemoveResponse>, Status> {
        let name = req.into_inner().name;
        self.blocking(move |engine| {
            scratch::remove(engine, &name).map(|()| Response::new(pb::ScratchRemoveResponse {}))
        })
        .await
    }

    async fn scratch_status(
        &self,
        _: Request<pb::ScratchStatusRequest>,
    ) -> Result<Response<pb::ScratchStatusResponse>, Status> {
        self.blocking(|engine| {
            scratch::list(engine).map(|volumes| Response::new(pb::ScratchStatusResponse { volumes }))
        })
        .await
    }
}
