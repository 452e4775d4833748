//! # Implementation details
//!
//! The scratch registry (docs/DESIGN.md §7): volumes and their leases live in
//! the ledger, under the Governor's lock; every controller call (statvfs,
//! mkdir, sync, hook) happens with the lock released, on the calling
//! thread, and its outcome is applied under the lock afterwards. Each state
//! change bumps the generation.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc as StdArc;

use crate::scratch::{ScratchError, ScratchGrant, VolumeController, VolumeIdentity, VolumeState, VolumeView};

use super::Governor;
use super::ledger::{Change, Ledger};

/// Why a volume is latched in ERROR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fault {
    /// It vanished while leased: only the same volume, drained, clears it.
    Vanished(String),
    /// A drain step failed: `cancel_drain` or a new drain clears it.
    DrainFailed(String),
}

#[derive(Debug)]
pub(crate) struct Volume {
    pub(crate) name: String,
    pub(crate) controller: StdArc<dyn VolumeController>,
    pub(crate) known: Option<VolumeIdentity>,
    pub(crate) present: Option<VolumeIdentity>,
    pub(crate) free: u64,
    pub(crate) capacity: Option<u64>,
    /// Reservation seq → (bytes, lease directory).
    pub(crate) leases: HashMap<u64, (u64, PathBuf)>,
    pub(crate) draining: bool,
    pub(crate) finishing: bool,
    pub(crate) drained: bool,
    pub(crate) fault: Option<Fault>,
}

impl Volume {
    pub(crate) fn state(&self) -> VolumeState {
        if self.fault.is_some() {
            VolumeState::Error
        } else if self.draining && self.drained {
            VolumeState::SafeToUnplug
        } else if self.draining {
            VolumeState::Draining
        } else if self.present.is_none() {
            VolumeState::Absent
        } else if self.leases.is_empty() {
            VolumeState::Available
        } else {
            VolumeState::InUse
        }
    }

    pub(crate) fn leased(&self) -> u64 {
        self.leases.values().map(|(b, _)| *b).sum()
    }

    /// Bytes a new lease may take now.
    pub(crate) fn room(&self) -> u64 {
        self.free.min(self.capacity.unwrap_or(u64::MAX)).saturating_sub(self.leased())
    }

    fn same_volume_back(&self) -> bool {
        self.present.is_some() && self.present == self.known
    }

    fn can_drain(&self) -> bool {
        match self.state() {
            VolumeState::Available | VolumeState::InUse => true,
            VolumeState::Error => !self.draining && self.same_volume_back(),
            _ => false,
        }
    }

    pub(crate) fn view(&self) -> VolumeView {
        let reason = match (&self.fault, self.state()) {
            (Some(Fault::Vanished(m) | Fault::DrainFailed(m)), _) => Some(m.clone()),
            (None, VolumeState::Draining) if !self.leases.is_empty() => {
                Some(format!("waiting for {} lease(s) to end", self.leases.len()))
            }
            _ => None,
        };
        VolumeView {
            name: self.name.clone(),
            state: self.state(),
            identity: self.present.clone().or_else(|| self.known.clone()),
            free: self.free,
            capacity: self.capacity,
            leased: self.leased(),
            leases: self.leases.len(),
            reason,
            can_drain: self.can_drain(),
            can_cancel_drain: self.draining,
        }
    }

    /// Applies a presence/free-space reading; returns whether anything
    /// changed. Only the volume first seen counts as present: another
    /// filesystem at the same path (the bare mount point of an unplugged
    /// disk) is absence.
    pub(crate) fn apply_reading(&mut self, identity: Option<VolumeIdentity>, free: Option<u64>) -> bool {
        let before = (self.state(), self.free, self.present.clone());
        if self.known.is_none() {
            self.known.clone_from(&identity);
        }
        let stranger = identity.as_ref().filter(|now| Some(*now) != self.known.as_ref());
        if let Some(other) = stranger
            && (self.fault.is_some() || !self.leases.is_empty())
        {
            self.fault = Some(Fault::Vanished(format!(
                "a different filesystem (id {}) is at {}: plug the original volume back and drain it",
                other.fs_id,
                other.path.display()
            )));
        }
        let present = if stranger.is_some() { None } else { identity };
        if present.is_none() && !self.leases.is_empty() && self.fault.is_none() {
            self.fault = Some(Fault::Vanished(format!(
                "vanished while {} lease(s) were held: plug the same volume back and drain it",
                self.leases.len()
            )));
        }
        self.present = present;
        if let Some(f) = free
            && self.present.is_some()
        {
            self.free = f;
        }
        before != (self.state(), self.free, self.present.clone())
    }
}

impl Ledger {
    pub(crate) fn volume_mut(&mut self, name: &str) -> Result<&mut Volume, ScratchError> {
        self.volumes
            .iter_mut()
            .find(|v| v.name == name)
            .ok_or_else(|| ScratchError::NotFound(name.to_owned()))
    }

    /// Picks a volume with room for `bytes` (most room first).
    pub(crate) fn scratch_candidate(&self, bytes: u64) -> Option<&Volume> {
        self.volumes
            .iter()
            .filter(|v| matches!(v.state(), VolumeState::Available | VolumeState::InUse))
            .filter(|v| v.room() >= bytes)
            .max_by_key(|v| v.room())
    }

    /// Records the lease of reservation `seq`; returns its directory path.
    pub(crate) fn take_lease(&mut self, grant: &ScratchGrant, seq: u64) -> Option<PathBuf> {
        let vol = self.volumes.iter_mut().find(|v| v.name == grant.volume)?;
        let root = vol.present.as_ref().or(vol.known.as_ref())?.path.clone();
        let path = root.join(lease_dir_name(seq));
        vol.leases.insert(seq, (grant.bytes, path.clone()));
        Some(path)
    }

    /// Ends the lease of `seq`, if any: what to clean up outside the lock,
    /// and whether the volume's drain can now finish.
    pub(crate) fn end_lease(&mut self, seq: u64) -> Option<LeaseEnd> {
        let vol = self.volumes.iter_mut().find(|v| v.leases.contains_key(&seq))?;
        let (_, path) = vol.leases.remove(&seq)?;
        let finish_drain = vol.draining && vol.leases.is_empty() && !vol.finishing && !vol.drained;
        if finish_drain {
            vol.finishing = true;
        }
        Some(LeaseEnd {
            controller: StdArc::clone(&vol.controller),
            path,
            volume: vol.name.clone(),
            finish_drain,
        })
    }
}

pub(crate) struct LeaseEnd {
    pub(crate) controller: StdArc<dyn VolumeController>,
    pub(crate) path: PathBuf,
    pub(crate) volume: String,
    pub(crate) finish_drain: bool,
}

pub(crate) fn lease_dir_name(seq: u64) -> String {
    format!("lardon-lease-{seq}")
}

impl Governor {
    /// Registers a scratch volume (its controller is asked for presence and
    /// free space first, outside the lock). RAM availability is unchanged.
    ///
    /// # Errors
    /// [`ScratchError::Duplicate`] when the name is taken.
    pub fn add_volume(
        &self,
        name: impl Into<String>,
        controller: StdArc<dyn VolumeController>,
        capacity: Option<u64>,
    ) -> Result<VolumeView, ScratchError> {
        let name = name.into();
        let identity = controller.identify().ok().flatten();
        let free = controller.free_bytes().unwrap_or(0);
        let mut guard = self.shared.lock();
        if guard.volumes.iter().any(|v| v.name == name) {
            return Err(ScratchError::Duplicate(name));
        }
        let volume = Volume {
            name,
            controller,
            known: identity.clone(),
            present: identity,
            free,
            capacity,
            leases: HashMap::new(),
            draining: false,
            finishing: false,
            drained: false,
            fault: None,
        };
        let view = volume.view();
        guard.volumes.push(volume);
        guard.changed(Change::Volume);
        self.shared.publish(guard);
        Ok(view)
    }

    /// Unregisters a volume.
    ///
    /// # Errors
    /// [`ScratchError::Leased`] while leases exist; [`ScratchError::NotFound`].
    pub fn remove_volume(&self, name: &str) -> Result<(), ScratchError> {
        let mut guard = self.shared.lock();
        let vol = guard.volume_mut(name)?;
        if !vol.leases.is_empty() {
            return Err(ScratchError::Leased(name.to_owned(), vol.leases.len()));
        }
        guard.volumes.retain(|v| v.name != name);
        guard.changed(Change::Volume);
        self.shared.publish(guard);
        Ok(())
    }

    /// Starts draining: new leases are refused at once; when the last lease
    /// ends the drain goes on by itself (sync, hook, verification) and the
    /// volume becomes SAFE_TO_UNPLUG (or ERROR with the failing step's
    /// message). With no lease held, the drain completes before returning.
    ///
    /// # Errors
    /// [`ScratchError::WrongState`] when draining is not possible now.
    pub fn drain(&self, name: &str) -> Result<VolumeView, ScratchError> {
        let mut guard = self.shared.lock();
        let vol = guard.volume_mut(name)?;
        if !vol.can_drain() {
            return Err(ScratchError::WrongState {
                name: name.to_owned(),
                state: vol.state(),
                what: "drain",
            });
        }
        vol.draining = true;
        vol.drained = false;
        if matches!(vol.fault, Some(Fault::DrainFailed(_))) {
            vol.fault = None;
        }
        let finish = vol.leases.is_empty();
        if finish {
            vol.finishing = true;
        }
        let controller = StdArc::clone(&vol.controller);
        guard.changed(Change::Volume);
        self.shared.publish(guard);
        if finish {
            self.finish_drain(name, &controller);
        }
        self.volume(name).ok_or_else(|| ScratchError::NotFound(name.to_owned()))
    }

    /// Returns a draining (or drained) volume to service.
    ///
    /// # Errors
    /// [`ScratchError::WrongState`] when it is not draining.
    pub fn cancel_drain(&self, name: &str) -> Result<VolumeView, ScratchError> {
        let mut guard = self.shared.lock();
        let vol = guard.volume_mut(name)?;
        if !vol.draining {
            return Err(ScratchError::WrongState {
                name: name.to_owned(),
                state: vol.state(),
                what: "cancel-drain",
            });
        }
        vol.draining = false;
        vol.drained = false;
        if matches!(vol.fault, Some(Fault::DrainFailed(_))) {
            vol.fault = None;
        }
        let view = vol.view();
        guard.changed(Change::Volume);
        self.shared.publish(guard);
        Ok(view)
    }

    /// The volume `name`, if registered.
    pub fn volume(&self, name: &str) -> Option<VolumeView> {
        self.shared.lock().volumes.iter().find(|v| v.name == name).map(Volume::view)
    }

    /// Every registered volume.
    pub fn volumes(&self) -> Vec<VolumeView> {
        self.shared.lock().volumes.iter().map(Volume::view).collect()
    }

    /// Re-reads every volume's presence and free space (controllers called
    /// outside the lock); a volume that vanished while leased latches ERROR.
    pub fn refresh_volumes(&self) {
        let controllers: Vec<(String, StdArc<dyn VolumeController>)> = {
            let guard = self.shared.lock();
            guard.volumes.iter().map(|v| (v.name.clone(), StdArc::clone(&v.controller))).collect()
        };
        if controllers.is_empty() {
            return;
        }
        let readings: Vec<_> = controllers
            .into_iter()
            .map(|(n, c)| (n, c.identify().ok().flatten(), c.free_bytes().ok()))
            .collect();
        let mut guard = self.shared.lock();
        let mut changed = false;
        for (name, identity, free) in readings {
            if let Ok(vol) = guard.volume_mut(&name) {
                changed |= vol.apply_reading(identity, free);
            }
        }
        if changed {
            guard.changed(Change::Volume);
        }
        self.shared.publish(guard);
    }

    /// Creates the lease directory of a freshly granted contract (outside
    /// the lock). On failure the volume latches ERROR and the message is
    /// returned; the caller releases the reservation.
    pub(crate) fn prepare_scratch(&self, grant: &ScratchGrant) -> Result<(), String> {
        let controller = {
            let guard = self.shared.lock();
            guard.volumes.iter().find(|v| v.name == grant.volume).map(|v| StdArc::clone(&v.controller))
        };
        let Some(controller) = controller else {
            return Err(format!("scratch volume {} is gone", grant.volume));
        };
        let name = grant.path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
        match controller.create_lease_dir(&name) {
            Ok(_) => Ok(()),
            Err(e) => {
                let message = format!("cannot create {}: {e}", grant.path.display());
                let mut guard = self.shared.lock();
                if let Ok(vol) = guard.volume_mut(&grant.volume) {
                    vol.fault = Some(Fault::DrainFailed(message.clone()));
                }
                guard.changed(Change::Volume);
                self.shared.publish(guard);
                Err(message)
            }
        }
    }

    /// Runs sync, hook and verification for `name`, then records the result.
    fn finish_drain(&self, name: &str, controller: &StdArc<dyn VolumeController>) {
        finish_drain(&self.shared, name, controller);
    }
}

/// Cleans up after a lease ended (lock released): removes its directory
/// and, if it was the last lease of a draining volume, finishes the drain.
pub(crate) fn after_lease_end(shared: &super::Shared, end: LeaseEnd) {
    let removed = end.controller.remove_lease_dir(&end.path);
    if let Err(e) = removed {
        let mut guard = shared.lock();
        if let Ok(vol) = guard.volume_mut(&end.volume) {
            vol.fault = Some(Fault::DrainFailed(format!("cannot remove {}: {e}", end.path.display())));
            vol.finishing = false;
        }
        guard.changed(Change::Volume);
        shared.publish(guard);
        return;
    }
    if end.finish_drain {
        finish_drain(shared, &end.volume, &end.controller);
    }
}

fn finish_drain(shared: &super::Shared, name: &str, controller: &StdArc<dyn VolumeController>) {
    let outcome = controller
        .sync()
        .map_err(|e| format!("sync failed: {e}"))
        .and_then(|()| controller.run_hook().map_err(|e| format!("hook failed: {e}")))
        .and_then(|()| controller.verify().map_err(|e| format!("verification failed: {e}")));
    let mut guard = shared.lock();
    if let Ok(vol) = guard.volume_mut(name) {
        vol.finishing = false;
        if vol.draining {
            match outcome {
                Ok(()) => {
                    vol.drained = true;
                    vol.fault = None;
                }
                Err(message) => vol.fault = Some(Fault::DrainFailed(message)),
            }
        }
    }
    guard.changed(Change::Volume);
    shared.publish(guard);
}
