//! Scratch volumes over RPC: decode the request, one call into
//! [`crate::scratch`] (which owns the business: store, Governor,
//! rollback), encode the answer or the refusal.

use lardon::{ScratchError, VolumeState, VolumeView};
use lardon_proto::pb;
use tonic::Status;

use crate::engine::Engine;
use crate::scratch::{self, ScratchOpError};
use crate::store::ScratchVolumeRow;

fn state_to_pb(s: VolumeState) -> pb::ScratchState {
    match s {
        VolumeState::Absent => pb::ScratchState::Absent,
        VolumeState::Available => pb::ScratchState::Available,
        VolumeState::InUse => pb::ScratchState::InUse,
        VolumeState::Draining => pb::ScratchState::Draining,
        VolumeState::SafeToUnplug => pb::ScratchState::SafeToUnplug,
        VolumeState::Error => pb::ScratchState::Error,
    }
}

fn scratch_status(e: ScratchError) -> Status {
    match e {
        ScratchError::NotFound(_) => Status::not_found(e.to_string()),
        ScratchError::Duplicate(_) => Status::already_exists(e.to_string()),
        ScratchError::Leased(..) | ScratchError::WrongState { .. } => {
            Status::failed_precondition(e.to_string())
        }
    }
}

fn store_status(e: crate::store::StoreError) -> Status {
    match e {
        crate::store::StoreError::ScratchNotFound(name) => {
            Status::not_found(format!("no scratch volume named `{name}`"))
        }
        crate::store::StoreError::ScratchExists(name) => {
            Status::already_exists(format!("a scratch volume named `{name}` or at that path exists"))
        }
        other => super::store_status(other),
    }
}

fn to_pb(view: &VolumeView, row: Option<&ScratchVolumeRow>) -> pb::ScratchVolume {
    pb::ScratchVolume {
        name: view.name.clone(),
        path: row.map(|r| r.path.clone()).unwrap_or_else(|| {
            view.identity.as_ref().map(|i| i.path.to_string_lossy().into_owned()).unwrap_or_default()
        }),
        state: state_to_pb(view.state) as i32,
        capacity: view.capacity,
        free: Some(view.free),
        leased: view.leased,
        leases: u32::try_from(view.leases).unwrap_or(u32::MAX),
        hook: row.map(|r| r.hook.clone()).unwrap_or_default(),
        message: view.reason.clone().unwrap_or_default(),
    }
}

fn op_status(e: ScratchOpError) -> Status {
    match e {
        ScratchOpError::Invalid(m) => Status::invalid_argument(m),
        ScratchOpError::Volume(e) => scratch_status(e),
        ScratchOpError::Store(e) => store_status(e),
    }
}

fn pair_pb((view, row): (VolumeView, Option<ScratchVolumeRow>)) -> pb::ScratchVolume {
    to_pb(&view, row.as_ref())
}

/// Every volume, with its registration.
pub(crate) fn list(engine: &Engine) -> Result<Vec<pb::ScratchVolume>, Status> {
    Ok(scratch::list(&engine.shared).map_err(store_status)?.into_iter().map(pair_pb).collect())
}

/// Registers `path` (must be an existing directory) under `name`.
pub(crate) fn add(engine: &Engine, req: pb::ScratchAddRequest) -> Result<pb::ScratchVolume, Status> {
    let new = scratch::NewVolume { name: req.name, path: req.path, capacity: req.capacity, hook: req.hook };
    let (view, row) = scratch::add(&engine.shared, new).map_err(op_status)?;
    Ok(to_pb(&view, Some(&row)))
}

/// Starts draining `name` (durable: a restart keeps refusing leases).
pub(crate) fn drain(engine: &Engine, name: &str) -> Result<pb::ScratchVolume, Status> {
    scratch::drain(&engine.shared, name).map(pair_pb).map_err(op_status)
}

/// Returns `name` to service.
pub(crate) fn cancel_drain(engine: &Engine, name: &str) -> Result<pb::ScratchVolume, Status> {
    scratch::cancel_drain(&engine.shared, name).map(pair_pb).map_err(op_status)
}

/// Forgets `name` (refused while leases exist).
pub(crate) fn remove(engine: &Engine, name: &str) -> Result<(), Status> {
    scratch::remove(&engine.shared, name).map_err(op_status)
}
