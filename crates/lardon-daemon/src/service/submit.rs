//! `Submit` and `SubmitMany`: decode the specs, hand them to the engine
//! (which validates, stores durably and queues), encode the ids.
//!
//! Unlike the other handlers, an `id_only` `Submit` of a task that runs
//! here is async: it awaits its group commit on the runtime rather than
//! holding a blocking thread for it, which spares two thread wake-ups per
//! call.

use std::sync::Arc;

use lardon_proto::pb;
use tonic::Status;

use super::convert::spec_from_pb;
use super::{status, store_status, views};
use crate::engine::Engine;

/// The most tasks one `SubmitMany` call may carry (a client splits larger
/// inputs into several calls; each is one transaction).
pub(crate) const MAX_SUBMIT_MANY: usize = 10_000;

/// One task; the reply carries it as stored unless the request was
/// `id_only`. An `id_only` submit of a task that runs here awaits its
/// commit on the runtime, in a task of its own; any other is submitted
/// from a blocking thread (queueing a task for Slurm or a broker may run
/// `sbatch` or call the broker, and reading the task back is a store read).
pub(super) async fn submit(
    engine: Arc<Engine>,
    req: pb::SubmitRequest,
) -> Result<pb::SubmitResponse, Status> {
    let spec = spec_from_pb(req.spec).inspect_err(|s| tracing::warn!("submit refused: {}", s.message()))?;
    let (paused, id_only) = (req.paused, req.id_only);
    if id_only && Engine::submits_without_blocking(std::slice::from_ref(&spec)) {
        let ids = detached(engine, vec![spec], paused, "").await?;
        let id = ids.into_iter().next().ok_or_else(|| Status::internal("no id for a stored task"))?;
        return Ok(pb::SubmitResponse { id: crate::ids::format_id(id), task: None });
    }
    blocking(move || {
        let id = engine.submit(spec, paused).map_err(status)?;
        let task = if id_only {
            None
        } else {
            engine.task(id).map_err(store_status)?.map(|r| views::task_pb(&engine, &r))
        };
        Ok(pb::SubmitResponse { id: crate::ids::format_id(id), task })
    })
    .await
}

/// Many tasks in one transaction (all or none), from a blocking thread:
/// queueing up to 10 000 tasks after the commit would hold the runtime's
/// one worker (and every other RPC) for tens of milliseconds, and one
/// thread hand-off per call is nothing spread over its tasks.
pub(super) async fn submit_many(
    engine: Arc<Engine>,
    req: pb::SubmitManyRequest,
) -> Result<pb::SubmitManyResponse, Status> {
    if req.specs.len() > MAX_SUBMIT_MANY {
        let m = format!("specs: {} tasks in one call; at most {MAX_SUBMIT_MANY}", req.specs.len());
        tracing::warn!("submit refused: {m}");
        return Err(Status::invalid_argument(m));
    }
    // Decoded once and shared by every spec that has none of its own.
    let shared_env = req
        .submit_env
        .map(crate::submit_env::SubmitEnv::from_blob)
        .transpose()
        .map_err(|e| Status::invalid_argument(e.to_string()))?;
    let specs = req
        .specs
        .into_iter()
        .enumerate()
        .map(|(i, spec)| {
            let mut spec = spec_from_pb(Some(spec))
                .map_err(|s| Status::invalid_argument(format!("specs[{i}].{}", s.message())))?;
            if spec.submit_env.is_none() {
                spec.submit_env.clone_from(&shared_env);
            }
            Ok::<_, Status>(spec)
        })
        .collect::<Result<Vec<_>, _>>()
        .inspect_err(|s| tracing::warn!("submit refused: {}", s.message()))?;
    let (paused, own_group) = (req.paused, req.own_group);
    let (ids, group) = blocking(move || {
        if own_group {
            let (ids, group) = engine.submit_each(specs, paused, "specs").map_err(status)?;
            Ok((ids, group.to_string()))
        } else {
            Ok((engine.submit_many(specs, paused, "specs").map_err(status)?, String::new()))
        }
    })
    .await?;
    Ok(pb::SubmitManyResponse { ids: ids.into_iter().map(crate::ids::format_id).collect(), group })
}

/// [`Engine::submit_many_async`] in a task of its own: a client that hangs
/// up drops this handler's future, but a submission whose insert was sent
/// must still be queued once it commits (as a blocking thread would go on
/// to do), or the stored task would wait for the next start.
async fn detached(
    engine: Arc<Engine>,
    specs: Vec<crate::spec::TaskSpec>,
    paused: bool,
    prefix: &'static str,
) -> Result<Vec<crate::spec::TaskId>, Status> {
    tokio::spawn(async move { engine.submit_many_async(specs, paused, prefix).await })
        .await
        .map_err(|e| Status::internal(format!("request handler failed: {e}")))?
        .map_err(status)
}

/// Runs `f` on a blocking thread.
async fn blocking<A: Send + 'static>(
    f: impl FnOnce() -> Result<A, Status> + Send + 'static,
) -> Result<A, Status> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Status::internal(format!("request handler failed: {e}")))?
}
