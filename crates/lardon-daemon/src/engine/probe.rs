//! The Governor's eyes: the real host, or a fake host for tests.

use lardon::{Clock, FakeProbe, HostProfile, Probe, ProbeError, Snapshot, SystemClock};

/// Where host figures come from.
#[derive(Debug, Clone)]
pub enum ProbeChoice {
    /// The real host (`/proc`, PSI, cgroups, GPUs).
    Host,
    /// A fake, always healthy host with this profile (deterministic tests);
    /// task processes still really run, unpinned.
    Fake(HostProfile),
}

/// A [`FakeProbe`] whose snapshots are stamped with the system clock, so
/// that the Governor (on the system clock) never finds them stale.
#[derive(Debug)]
pub(crate) struct StampedFake(pub(crate) FakeProbe);

impl Probe for StampedFake {
    fn profile(&self) -> HostProfile {
        self.0.profile()
    }

    fn snapshot(&self) -> Result<Snapshot, ProbeError> {
        let mut snap = self.0.snapshot()?;
        snap.captured_at = SystemClock.now();
        Ok(snap)
    }
}
