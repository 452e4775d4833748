//! Scratch volumes (docs/DESIGN.md §7): registration is durable in the
//! store, state lives in the Governor, and a `DirVolume` does the disk
//! work. The business of adding, draining and removing a volume (the
//! store write, the Governor change, the rollback when the second step
//! fails) lives here, below the RPC layer, which only decodes the request
//! and encodes the answer; the hub uses [`controller`] at start.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use lardon::{ScratchError, VolumeView};
use lardon_host::DirVolume;

use crate::kernel::Shared;
use crate::store::{ScratchVolumeRow, StoreError};

/// How long a drain hook (unmount, swapoff…) may run.
pub(crate) const HOOK_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a scratch operation was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ScratchOpError {
    /// The request is malformed (names the field).
    #[error("{0}")]
    Invalid(String),
    /// The Governor refused it (unknown, duplicate, leased, wrong state).
    #[error(transparent)]
    Volume(#[from] ScratchError),
    /// The store refused it or failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The controller for a registered row.
pub(crate) fn controller(row: &ScratchVolumeRow) -> Arc<DirVolume> {
    Arc::new(DirVolume::new(&row.path).with_hook(row.hook.clone(), HOOK_TIMEOUT))
}

/// What to register: `path` (an existing absolute directory) under `name`
/// (its last component when empty), with an optional capacity and hook.
#[derive(Debug, Clone)]
pub(crate) struct NewVolume {
    pub(crate) name: String,
    pub(crate) path: String,
    pub(crate) capacity: Option<u64>,
    /// The drain hook's argv (empty: none).
    pub(crate) hook: Vec<String>,
}

/// Every volume, with its registration.
pub(crate) fn list(shared: &Shared) -> Result<Vec<(VolumeView, Option<ScratchVolumeRow>)>, StoreError> {
    let rows = shared.reader().scratch_volumes()?;
    Ok(shared
        .governor
        .volumes()
        .into_iter()
        .map(|v| {
            let row = rows.iter().find(|r| r.name == v.name).cloned();
            (v, row)
        })
        .collect())
}

/// One volume's view with its registration.
fn one(shared: &Shared, view: VolumeView) -> Result<(VolumeView, Option<ScratchVolumeRow>), StoreError> {
    let row = shared.reader().scratch_volumes()?.into_iter().find(|r| r.name == view.name);
    Ok((view, row))
}

/// Registers a volume: durable first, then in the Governor; a Governor
/// refusal takes the registration back.
///
/// # Errors
/// [`ScratchOpError::Invalid`] naming the field; the store's or the
/// Governor's refusal.
pub(crate) fn add(shared: &Shared, new: NewVolume) -> Result<(VolumeView, ScratchVolumeRow), ScratchOpError> {
    if new.path.is_empty() {
        return Err(ScratchOpError::Invalid("path: a directory is required".into()));
    }
    let path = Path::new(&new.path);
    if !path.is_absolute() {
        return Err(ScratchOpError::Invalid(format!("path: `{}` must be absolute", new.path)));
    }
    if !path.is_dir() {
        return Err(ScratchOpError::Invalid(format!("path: `{}` is not a directory", new.path)));
    }
    let name = if new.name.is_empty() {
        path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "scratch".to_owned())
    } else {
        new.name
    };
    if name.is_empty() || name.len() > 64 || name.chars().any(|c| c.is_control() || c == '/') {
        return Err(ScratchOpError::Invalid(format!("name: `{name}` must be 1-64 characters without `/`")));
    }
    if new.capacity == Some(0) {
        return Err(ScratchOpError::Invalid("capacity: must be more than 0".into()));
    }
    let row = ScratchVolumeRow {
        name: name.clone(),
        path: new.path.clone(),
        capacity: new.capacity,
        hook: new.hook,
        draining: false,
        added_ms: 0,
    };
    let stored = row.clone();
    shared.writer.call(move |s| s.add_scratch(&stored))?;
    match shared.governor.add_volume(name.clone(), controller(&row), row.capacity) {
        Ok(view) => Ok((view, row)),
        Err(e) => {
            let _ = shared.writer.call(move |s| s.remove_scratch(&name));
            Err(e.into())
        }
    }
}

/// Starts draining `name` (durable: a restart keeps refusing leases).
///
/// # Errors
/// The Governor's or the store's refusal.
pub(crate) fn drain(
    shared: &Shared,
    name: &str,
) -> Result<(VolumeView, Option<ScratchVolumeRow>), ScratchOpError> {
    let view = shared.governor.drain(name)?;
    let owned = name.to_owned();
    shared.writer.call(move |s| s.set_scratch_draining(&owned, true))?;
    Ok(one(shared, view)?)
}

/// Returns `name` to service.
///
/// # Errors
/// The Governor's or the store's refusal.
pub(crate) fn cancel_drain(
    shared: &Shared,
    name: &str,
) -> Result<(VolumeView, Option<ScratchVolumeRow>), ScratchOpError> {
    let view = shared.governor.cancel_drain(name)?;
    let owned = name.to_owned();
    shared.writer.call(move |s| s.set_scratch_draining(&owned, false))?;
    Ok(one(shared, view)?)
}

/// Forgets `name` (refused while leases exist).
///
/// # Errors
/// The Governor's or the store's refusal.
pub(crate) fn remove(shared: &Shared, name: &str) -> Result<(), ScratchOpError> {
    shared.governor.remove_volume(name)?;
    let owned = name.to_owned();
    shared.writer.call(move |s| s.remove_scratch(&owned))?;
    Ok(())
}
