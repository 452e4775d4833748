//! `Submit` and `SubmitMany`: decode the specs, hand them to the engine
//! (which validates, stores durably and queues), encode the ids.

use lardon_proto::pb;
use tonic::Status;

use super::convert::spec_from_pb;
use super::{status, store_status};
use crate::engine::Engine;

/// The most tasks one `SubmitMany` call may carry (a client splits larger
/// inputs into several calls; each is one transaction).
pub(crate) const MAX_SUBMIT_MANY: usize = 10_000;

/// One task; the reply carries it as stored.
pub(super) fn submit(engine: &Engine, req: pb::SubmitRequest) -> Result<pb::SubmitResponse, Status> {
    let spec = spec_from_pb(req.spec).inspect_err(|s| tracing::warn!("submit refused: {}", s.message()))?;
    let id = engine.submit(spec, req.paused).map_err(status)?;
    let task = engine.task(id).map_err(store_status)?.map(|r| engine.task_pb(&r));
    Ok(pb::SubmitResponse { id: crate::ids::format_id(id), task })
}

/// Many tasks in one transaction (all or none).
pub(super) fn submit_many(
    engine: &Engine,
    req: pb::SubmitManyRequest,
) -> Result<pb::SubmitManyResponse, Status> {
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
    let ids = engine.submit_many(specs, req.paused, "specs").map_err(status)?;
    Ok(pb::SubmitManyResponse { ids: ids.into_iter().map(crate::ids::format_id).collect() })
}
