//! The gRPC service `lardon.v1.Lardon`: a thin async face over the
//! synchronous engine. Each RPC is one handler, grouped by family as pueue
//! does (one file each: [`submit`], [`query`], [`control`], [`policy`],
//! [`scratch`], [`streams`]); a handler decodes the request, calls the
//! engine and encodes the answer, on a blocking thread. Nothing a client
//! sends can panic the daemon: every field is checked and every error
//! becomes a status naming the field.

mod control;
mod convert;
mod groups;
mod logread;
mod logwatch;
mod policy;
mod query;
pub(crate) mod scratch;
mod streams;
mod submit;
mod views;

use std::pin::Pin;
use std::sync::Arc;

use lardon_proto::pb;
use tokio::sync::watch;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use crate::engine::{ActionError, Engine};

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// The service over one engine.
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

    /// Runs handler `f` on the request's message, on a blocking thread
    /// (the engine is synchronous; its writes wait for their commit).
    async fn handle<Q: Send + 'static, A: Send + 'static>(
        &self,
        req: Request<Q>,
        f: impl FnOnce(&Engine, Q) -> Result<A, Status> + Send + 'static,
    ) -> Result<Response<A>, Status> {
        let engine = Arc::clone(&self.engine);
        let req = req.into_inner();
        tokio::task::spawn_blocking(move || f(&engine, req))
            .await
            .map_err(|e| Status::internal(format!("request handler failed: {e}")))?
            .map(Response::new)
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
        submit::submit(Arc::clone(&self.engine), req.into_inner()).await.map(Response::new)
    }

    async fn submit_many(
        &self,
        req: Request<pb::SubmitManyRequest>,
    ) -> Result<Response<pb::SubmitManyResponse>, Status> {
        submit::submit_many(Arc::clone(&self.engine), req.into_inner()).await.map(Response::new)
    }

    async fn list(&self, req: Request<pb::ListRequest>) -> Result<Response<pb::ListResponse>, Status> {
        self.handle(req, query::list).await
    }

    async fn get(&self, req: Request<pb::GetRequest>) -> Result<Response<pb::GetResponse>, Status> {
        self.handle(req, query::get).await
    }

    async fn explain(
        &self,
        req: Request<pb::ExplainRequest>,
    ) -> Result<Response<pb::ExplainResponse>, Status> {
        self.handle(req, query::explain).await
    }

    async fn cancel(
        &self,
        req: Request<pb::CancelRequest>,
    ) -> Result<Response<pb::TaskActionResponse>, Status> {
        self.handle(req, control::cancel).await
    }

    async fn pause(
        &self,
        req: Request<pb::PauseRequest>,
    ) -> Result<Response<pb::TaskActionResponse>, Status> {
        self.handle(req, control::pause).await
    }

    async fn resume(
        &self,
        req: Request<pb::ResumeRequest>,
    ) -> Result<Response<pb::TaskActionResponse>, Status> {
        self.handle(req, control::resume).await
    }

    async fn restart(
        &self,
        req: Request<pb::RestartRequest>,
    ) -> Result<Response<pb::TaskActionResponse>, Status> {
        self.handle(req, control::restart).await
    }

    async fn remove(
        &self,
        req: Request<pb::RemoveRequest>,
    ) -> Result<Response<pb::TaskActionResponse>, Status> {
        self.handle(req, |e, r| Ok(control::remove(e, r))).await
    }

    async fn clean(&self, req: Request<pb::CleanRequest>) -> Result<Response<pb::CleanResponse>, Status> {
        self.handle(req, control::clean).await
    }

    async fn wait(&self, req: Request<pb::WaitRequest>) -> Result<Response<Self::WaitStream>, Status> {
        streams::wait(Arc::clone(&self.engine), self.stop.clone(), req.into_inner()).await
    }

    async fn log(&self, req: Request<pb::LogRequest>) -> Result<Response<Self::LogStream>, Status> {
        streams::log(Arc::clone(&self.engine), self.stop.clone(), req.into_inner()).await
    }

    async fn resources(
        &self,
        req: Request<pb::ResourcesRequest>,
    ) -> Result<Response<pb::ResourcesResponse>, Status> {
        self.handle(req, |e, _| query::resources(e)).await
    }

    async fn get_policy(
        &self,
        req: Request<pb::GetPolicyRequest>,
    ) -> Result<Response<pb::PolicyResponse>, Status> {
        self.handle(req, |e, _| policy::get(e)).await
    }

    async fn set_policy(
        &self,
        req: Request<pb::SetPolicyRequest>,
    ) -> Result<Response<pb::PolicyResponse>, Status> {
        self.handle(req, policy::set).await
    }

    async fn progress(
        &self,
        req: Request<pb::ProgressRequest>,
    ) -> Result<Response<pb::ProgressResponse>, Status> {
        self.handle(req, control::progress).await
    }

    async fn watch(&self, req: Request<pb::WatchRequest>) -> Result<Response<Self::WatchStream>, Status> {
        streams::watch(Arc::clone(&self.engine), self.stop.clone(), req.into_inner()).await
    }

    async fn scratch_add(
        &self,
        req: Request<pb::ScratchAddRequest>,
    ) -> Result<Response<pb::ScratchVolume>, Status> {
        self.handle(req, scratch::add).await
    }

    async fn scratch_drain(
        &self,
        req: Request<pb::ScratchDrainRequest>,
    ) -> Result<Response<pb::ScratchVolume>, Status> {
        self.handle(req, |e, r| scratch::drain(e, &r.name)).await
    }

    async fn scratch_cancel_drain(
        &self,
        req: Request<pb::ScratchCancelDrainRequest>,
    ) -> Result<Response<pb::ScratchVolume>, Status> {
        self.handle(req, |e, r| scratch::cancel_drain(e, &r.name)).await
    }

    async fn scratch_remove(
        &self,
        req: Request<pb::ScratchRemoveRequest>,
    ) -> Result<Response<pb::ScratchRemoveResponse>, Status> {
        self.handle(req, |e, r| scratch::remove(e, &r.name).map(|()| pb::ScratchRemoveResponse {})).await
    }

    async fn scratch_status(
        &self,
        req: Request<pb::ScratchStatusRequest>,
    ) -> Result<Response<pb::ScratchStatusResponse>, Status> {
        self.handle(req, |e, _| scratch::list(e).map(|volumes| pb::ScratchStatusResponse { volumes })).await
    }

    async fn group_set(&self, req: Request<pb::GroupSetRequest>) -> Result<Response<pb::GroupInfo>, Status> {
        self.handle(req, groups::set).await
    }

    async fn group_list(
        &self,
        req: Request<pb::GroupListRequest>,
    ) -> Result<Response<pb::GroupListResponse>, Status> {
        self.handle(req, groups::list).await
    }

    async fn group_remove(
        &self,
        req: Request<pb::GroupRemoveRequest>,
    ) -> Result<Response<pb::GroupRemoveResponse>, Status> {
        self.handle(req, groups::remove).await
    }
}
