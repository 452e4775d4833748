//! What every real-Slurm test checks first: a Slurm that answers, and
//! the cluster to itself as far as the other mode goes.

use std::process::Command;
use std::sync::{Condvar, Mutex, PoisonError};

/// The two ways the tests use the one test cluster. Tests of one mode
/// share it, as they did when each mode was its own test binary; the two
/// modes never use it at once (a native test's jobs would take the nodes
/// a pilot test waits to be allocated, and the other way round).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// `lardon daemon` submitting a job per task (`--engine slurm`).
    Native,
    /// A broker's Provisioner asking for agent allocations.
    Pilot,
}

/// The mode using the cluster and how many of its tests run.
static USING: Mutex<(Option<Mode>, usize)> = Mutex::new((None, 0));
static CHANGED: Condvar = Condvar::new();

/// Held by a real-Slurm test while it runs: see [`Mode`].
#[derive(Debug)]
pub(crate) struct Using(Mode);

impl Using {
    fn enter(mode: Mode) -> Using {
        let mut using = USING.lock().unwrap_or_else(PoisonError::into_inner);
        while using.0.is_some_and(|m| m != mode) {
            using = CHANGED.wait(using).unwrap_or_else(PoisonError::into_inner);
        }
        *using = (Some(mode), using.1 + 1);
        Using(mode)
    }
}

impl Drop for Using {
    fn drop(&mut self) {
        let mut using = USING.lock().unwrap_or_else(PoisonError::into_inner);
        debug_assert_eq!(using.0, Some(self.0));
        using.1 -= 1;
        if using.1 == 0 {
            using.0 = None;
            CHANGED.notify_all();
        }
    }
}

/// Fails (never skips) unless a Slurm answers with idle or busy nodes;
/// then waits until tests of the other mode are done with it. Keep the
/// guard for the whole test.
#[must_use = "the guard keeps the other mode's tests off the cluster"]
pub(crate) fn require_slurm(mode: Mode) -> Using {
    let how = "start one with `eval \"$(scripts/slurm-up.sh /tmp/lardon-slurm | tail -n 1)\"` \
               (what .ci/run does before the tests)";
    let conf = std::env::var("SLURM_CONF").unwrap_or_else(|_| {
        panic!("SLURM_CONF is not set: the slurm-tests feature needs a running Slurm; {how}")
    });
    let o = Command::new("sinfo")
        .args(["-h", "-o", "%T"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run sinfo ({e}): Slurm is not installed; {how}"));
    let states = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && states.lines().any(|l| matches!(l.trim(), "idle" | "mixed" | "allocated")),
        "Slurm (SLURM_CONF={conf}) has no usable node (sinfo: {} {}); {how}",
        states.trim(),
        String::from_utf8_lossy(&o.stderr).trim()
    );
    Using::enter(mode)
}
