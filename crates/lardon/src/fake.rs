//! A scriptable [`Probe`] for deterministic tests, demos and simulations.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::clock::{Clock, FakeClock};
use crate::policy::HostProfile;
use crate::snapshot::{Probe, ProbeError, Snapshot};

/// A probe that returns whatever snapshot the test set, optionally
/// stamped with a [`FakeClock`]'s current time, and counts its calls.
#[derive(Debug)]
pub struct FakeProbe {
    profile: Mutex<HostProfile>,
    snapshot: Mutex<Result<Snapshot, ProbeError>>,
    clock: Option<Arc<FakeClock>>,
    calls: AtomicU64,
}

impl FakeProbe {
    /// A probe for `profile` whose snapshots are healthy, with all the
    /// host's memory available, captured at time 0.
    pub fn new(profile: HostProfile) -> Self {
        let mut snapshot = Snapshot::healthy(Default::default(), profile.total_memory);
        snapshot.gpus = profile
            .gpus
            .iter()
            .map(|g| crate::snapshot::GpuSample { index: g.index, free: g.vram_total })
            .collect();
        FakeProbe {
            profile: Mutex::new(profile),
            snapshot: Mutex::new(Ok(snapshot)),
            clock: None,
            calls: AtomicU64::new(0),
        }
    }

    /// Stamps every snapshot with `clock`'s time when it is taken.
    #[must_use]
    pub fn stamped_by(mut self, clock: Arc<FakeClock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Replaces the snapshot returned from now on.
    pub fn set(&self, snapshot: Snapshot) {
        *self.snapshot.lock().unwrap_or_else(PoisonError::into_inner) = Ok(snapshot);
    }

    /// Edits the snapshot returned from now on (an error becomes healthy).
    pub fn update(&self, edit: impl FnOnce(&mut Snapshot)) {
        let mut guard = self.snapshot.lock().unwrap_or_else(PoisonError::into_inner);
        let profile_mem = self.profile().total_memory;
        let mut snap = match &*guard {
            Ok(s) => s.clone(),
            Err(_) => Snapshot::healthy(Default::default(), profile_mem),
        };
        edit(&mut snap);
        *guard = Ok(snap);
    }

    /// Makes every later `snapshot()` fail with `error`.
    pub fn fail_with(&self, error: ProbeError) {
        *self.snapshot.lock().unwrap_or_else(PoisonError::into_inner) = Err(error);
    }

    /// Replaces the profile.
    pub fn set_profile(&self, profile: HostProfile) {
        *self.profile.lock().unwrap_or_else(PoisonError::into_inner) = profile;
    }

    /// How many snapshots were taken.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }
}

impl Probe for FakeProbe {
    fn profile(&self) -> HostProfile {
        self.profile.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn snapshot(&self) -> Result<Snapshot, ProbeError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let mut snap = self.snapshot.lock().unwrap_or_else(PoisonError::into_inner).clone()?;
        if let Some(clock) = &self.clock {
            snap.captured_at = clock.now();
        }
        Ok(snap)
    }
}

impl<P: Probe + ?Sized> Probe for Arc<P> {
    fn profile(&self) -> HostProfile {
        (**self).profile()
    }
    fn snapshot(&self) -> Result<Snapshot, ProbeError> {
        (**self).snapshot()
    }
}
