//! Scratch volumes (docs/DESIGN.md §7): directories on fast, possibly removable
//! disks whose space the Governor leases to tasks. Scratch is never RAM.
//!
//! The Governor owns the registry and the leases; a [`VolumeController`]
//! (outside code: statvfs, mkdir, the unmount hook) is only ever called
//! with the Governor's lock released.

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use thiserror::Error;

/// What makes a volume the same volume: its filesystem id and its path
/// (not a device name, which changes between plug-ins).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct VolumeIdentity {
    /// Filesystem id (`statvfs` `f_fsid`).
    pub fs_id: u64,
    /// The registered directory.
    pub path: PathBuf,
}

/// A volume's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VolumeState {
    /// Registered but not present.
    Absent,
    /// Present, no lease.
    Available,
    /// Present, leases held.
    InUse,
    /// New leases refused; waiting for current leases to end, then sync,
    /// hook and verification.
    Draining,
    /// Drained and verified: it may be unplugged.
    SafeToUnplug,
    /// Vanished while leased, or a drain step failed: latched until the
    /// same volume is present again and drained.
    Error,
}

impl VolumeState {
    /// Lower-case name with underscores.
    pub fn as_str(self) -> &'static str {
        match self {
            VolumeState::Absent => "absent",
            VolumeState::Available => "available",
            VolumeState::InUse => "in_use",
            VolumeState::Draining => "draining",
            VolumeState::SafeToUnplug => "safe_to_unplug",
            VolumeState::Error => "error",
        }
    }
}

impl fmt::Display for VolumeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The hands on one volume. Every method may block (disk I/O, a hook
/// with a timeout); the Governor never calls them under its lock.
pub trait VolumeController: Send + Sync + fmt::Debug {
    /// The volume's identity now, `None` when it is not present.
    ///
    /// # Errors
    /// A message when presence cannot be determined.
    fn identify(&self) -> Result<Option<VolumeIdentity>, String>;
    /// Free bytes on the filesystem now.
    ///
    /// # Errors
    /// A message when it cannot be read.
    fn free_bytes(&self) -> Result<u64, String>;
    /// Creates the private lease directory `name` and returns its path.
    ///
    /// # Errors
    /// A message when it cannot be created.
    fn create_lease_dir(&self, name: &str) -> Result<PathBuf, String>;
    /// Removes a lease directory and everything in it.
    ///
    /// # Errors
    /// A message when it cannot be removed.
    fn remove_lease_dir(&self, path: &Path) -> Result<(), String>;
    /// Flushes the volume's data to the device.
    ///
    /// # Errors
    /// A message when it fails.
    fn sync(&self) -> Result<(), String>;
    /// Runs the user's hook (unmount, swapoff, …), if any, with a timeout.
    ///
    /// # Errors
    /// The hook's failure (exit status, output or timeout).
    fn run_hook(&self) -> Result<(), String>;
    /// Checks that it is safe to unplug (nothing left open, hook effective).
    ///
    /// # Errors
    /// What is not safe.
    fn verify(&self) -> Result<(), String>;
}

/// Why a scratch operation was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ScratchError {
    /// No volume has this name.
    #[error("no scratch volume named `{0}`")]
    NotFound(String),
    /// A volume with this name exists.
    #[error("a scratch volume named `{0}` already exists")]
    Duplicate(String),
    /// The volume still has leases.
    #[error("scratch volume `{0}` has {1} lease(s): drain it and wait for them to end")]
    Leased(String, usize),
    /// The operation does not apply in the volume's state.
    #[error("scratch volume `{name}` is {state}: {what} is not possible now")]
    WrongState {
        /// The volume.
        name: String,
        /// Its state.
        state: VolumeState,
        /// The refused operation.
        what: &'static str,
    },
}

/// A volume as observers see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeView {
    /// Name.
    pub name: String,
    /// State.
    pub state: VolumeState,
    /// Identity when last seen present.
    pub identity: Option<VolumeIdentity>,
    /// Free bytes at the last refresh (before leases).
    pub free: u64,
    /// Optional cap on what may be leased.
    pub capacity: Option<u64>,
    /// Bytes leased now.
    pub leased: u64,
    /// Leases held.
    pub leases: usize,
    /// Why it is in ERROR or still DRAINING.
    pub reason: Option<String>,
    /// Whether `drain` is allowed now.
    pub can_drain: bool,
    /// Whether `cancel_drain` is allowed now.
    pub can_cancel_drain: bool,
}

/// A lease granted with a contract: a private directory for one task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScratchGrant {
    /// The volume's name.
    pub volume: String,
    /// The lease directory (created right after admission, removed when
    /// the reservation ends).
    pub path: PathBuf,
    /// Bytes leased.
    pub bytes: u64,
}

/// A scriptable controller for tests and demos: an in-memory volume.
#[derive(Debug)]
pub struct FakeVolume {
    state: Mutex<FakeVolumeState>,
}

#[derive(Debug)]
struct FakeVolumeState {
    identity: Option<VolumeIdentity>,
    free: u64,
    hook_result: Result<(), String>,
    dirs: BTreeSet<PathBuf>,
    syncs: u32,
    hooks: u32,
}

impl FakeVolume {
    /// A present volume at `path` with filesystem id `fs_id` and `free` bytes.
    pub fn new(path: impl Into<PathBuf>, fs_id: u64, free: u64) -> Self {
        FakeVolume {
            state: Mutex::new(FakeVolumeState {
                identity: Some(VolumeIdentity { fs_id, path: path.into() }),
                free,
                hook_result: Ok(()),
                dirs: BTreeSet::new(),
                syncs: 0,
                hooks: 0,
            }),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut FakeVolumeState) -> R) -> R {
        f(&mut self.state.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Unplugs (`None`) or plugs in (`Some`) a volume.
    pub fn set_identity(&self, identity: Option<VolumeIdentity>) {
        self.with(|s| s.identity = identity);
    }

    /// Sets the free space.
    pub fn set_free(&self, free: u64) {
        self.with(|s| s.free = free);
    }

    /// Makes the hook fail with `message` (or succeed with `None`).
    pub fn fail_hook(&self, message: Option<&str>) {
        self.with(|s| s.hook_result = message.map_or(Ok(()), |m| Err(m.to_owned())));
    }

    /// Lease directories that exist now.
    pub fn lease_dirs(&self) -> Vec<PathBuf> {
        self.with(|s| s.dirs.iter().cloned().collect())
    }

    /// How many times sync and the hook ran.
    pub fn calls(&self) -> (u32, u32) {
        self.with(|s| (s.syncs, s.hooks))
    }
}

impl VolumeController for FakeVolume {
    fn identify(&self) -> Result<Option<VolumeIdentity>, String> {
        Ok(self.with(|s| s.identity.clone()))
    }
    fn free_bytes(&self) -> Result<u64, String> {
        Ok(self.with(|s| s.free))
    }
    fn create_lease_dir(&self, name: &str) -> Result<PathBuf, String> {
        self.with(|s| {
            let root = s.identity.as_ref().ok_or("volume absent")?.path.clone();
            let path = root.join(name);
            s.dirs.insert(path.clone());
            Ok(path)
        })
    }
    fn remove_lease_dir(&self, path: &Path) -> Result<(), String> {
        self.with(|s| {
            s.dirs.remove(path);
            Ok(())
        })
    }
    fn sync(&self) -> Result<(), String> {
        self.with(|s| {
            s.syncs += 1;
            Ok(())
        })
    }
    fn run_hook(&self) -> Result<(), String> {
        self.with(|s| {
            s.hooks += 1;
            s.hook_result.clone()
        })
    }
    fn verify(&self) -> Result<(), String> {
        self.with(|s| if s.dirs.is_empty() { Ok(()) } else { Err("lease directories remain".into()) })
    }
}
