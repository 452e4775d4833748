//! Scratch volumes over RPC (docs/DESIGN.md §7): registration is durable in the
//! store, state lives in the Governor, and a `DirVolume` does the disk work.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use lardon::{ScratchError, VolumeState, VolumeView};
use lardon_host::DirVolume;
use lardon_proto::pb;
use tonic::Status;

use crate::engine::Engine;
use crate::store::ScratchVolumeRow;

/// How long a drain hook (unmount, swapoff…) may run.
pub(crate) const HOOK_TIMEOUT: Duration = Duration::from_secs(30);

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

/// The controller for a registered row.
pub(crate) fn controller(row: &ScratchVolumeRow) -> Arc<DirVolume> {
    Arc::new(DirVolume::new(&row.path).with_hook(row.hook.clone(), HOOK_TIMEOUT))
}

/// Every volume, with its registration.
pub(crate) fn list(engine: &Engine) -> Result<Vec<pb::ScratchVolume>, Status> {
    let rows = engine.shared.reader().scratch_volumes().map_err(store_status)?;
    Ok(engine
        .shared
        .governor
        .volumes()
        .iter()
        .map(|v| to_pb(v, rows.iter().find(|r| r.name == v.name)))
        .collect())
}

fn one(engine: &Engine, view: &VolumeView) -> Result<pb::ScratchVolume, Status> {
    let rows = engine.shared.reader().scratch_volumes().map_err(store_status)?;
    Ok(to_pb(view, rows.iter().find(|r| r.name == view.name)))
}

/// Registers `path` (must be an existing directory) under `name`.
pub(crate) fn add(engine: &Engine, req: pb::ScratchAddRequest) -> Result<pb::ScratchVolume, Status> {
    if req.path.is_empty() {
        return Err(Status::invalid_argument("path: a directory is required"));
    }
    let path = Path::new(&req.path);
    if !path.is_absolute() {
        return Err(Status::invalid_argument(format!("path: `{}` must be absolute", req.path)));
    }
    if !path.is_dir() {
        return Err(Status::invalid_argument(format!("path: `{}` is not a directory", req.path)));
    }
    let name = if req.name.is_empty() {
        path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "scratch".to_owned())
    } else {
        req.name
    };
    if name.is_empty() || name.len() > 64 || name.chars().any(|c| c.is_control() || c == '/') {
        return Err(Status::invalid_argument(format!("name: `{name}` must be 1-64 characters without `/`")));
    }
    if req.capacity == Some(0) {
        return Err(Status::invalid_argument("capacity: must be more than 0"));
    }
    let row = ScratchVolumeRow {
        name: name.clone(),
        path: req.path.clone(),
        capacity: req.capacity,
        hook: req.hook,
        draining: false,
        added_ms: 0,
    };
    let stored = row.clone();
    engine.shared.writer.call(move |s| s.add_scratch(&stored)).map_err(store_status)?;
    match engine.shared.governor.add_volume(name.clone(), controller(&row), row.capacity) {
        Ok(view) => Ok(to_pb(&view, Some(&row))),
        Err(e) => {
            let _ = engine.shared.writer.call(move |s| s.remove_scratch(&name));
            Err(scratch_status(e))
        }
    }
}

/// Starts draining `name` (durable: a restart keeps refusing leases).
pub(crate) fn drain(engine: &Engine, name: &str) -> Result<pb::ScratchVolume, Status> {
    let view = engine.shared.governor.drain(name).map_err(scratch_status)?;
    let owned = name.to_owned();
    engine.shared.writer.call(move |s| s.set_scratch_draining(&owned, true)).map_err(store_status)?;
    one(engine, &view)
}

/// Returns `name` to service.
pub(crate) fn cancel_drain(engine: &Engine, name: &str) -> Result<pb::ScratchVolume, Status> {
    let view = engine.shared.governor.cancel_drain(name).map_err(scratch_status)?;
    let owned = name.to_owned();
    engine.shared.writer.call(move |s| s.set_scratch_draining(&owned, false)).map_err(store_status)?;
    one(engine, &view)
}

/// Forgets `name` (refused while leases exist).
pub(crate) fn remove(engine: &Engine, name: &str) -> Result<(), Status> {
    engine.shared.governor.remove_volume(name).map_err(scratch_status)?;
    let owned = name.to_owned();
    engine.shared.writer.call(move |s| s.remove_scratch(&owned)).map_err(store_status)
}
