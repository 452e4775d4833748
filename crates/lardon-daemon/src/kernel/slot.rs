//! The control slot of a running task: its live run (if a process is up),
//! and the pause/cancel intents that the runner honours when it starts the
//! next run.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::runner::{Run, RunSignal};

/// The control slot of one running task: the run it has up (if any) and
/// the pause/cancel intents, under one lock so that a run started after a
/// pause or cancel honours it.
#[derive(Debug, Default)]
pub(crate) struct Slot {
    state: Mutex<SlotState>,
}

#[derive(Debug, Default)]
pub(crate) struct SlotState {
    pub(crate) run: Option<Arc<dyn Run>>,
    pub(crate) paused: bool,
    pub(crate) cancelled: bool,
}

impl Slot {
    pub(crate) fn lock(&self) -> MutexGuard<'_, SlotState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// SIGSTOP the live run (and any run started later).
    pub(crate) fn pause(&self) {
        let mut st = self.lock();
        st.paused = true;
        if let Some(run) = &st.run {
            let _ = run.signal(RunSignal::Stop);
        }
    }

    /// SIGCONT the live run.
    pub(crate) fn resume(&self) {
        let mut st = self.lock();
        st.paused = false;
        if let Some(run) = &st.run {
            let _ = run.signal(RunSignal::Continue);
        }
    }

    /// Cancel: SIGTERM (and SIGCONT, so a stopped group can act on it),
    /// then SIGKILL after `grace` if the same run is still up.
    pub(crate) fn cancel(&self, grace: Duration) {
        self.lock().cancelled = true;
        self.terminate(grace);
    }

    /// SIGTERM now, SIGKILL after `grace`.
    pub(crate) fn terminate(&self, grace: Duration) {
        let Some(run) = self.lock().run.clone() else { return };
        let _ = run.signal(RunSignal::Terminate);
        let _ = run.signal(RunSignal::Continue);
        let spawned = std::thread::Builder::new().name("lardon-kill".into()).spawn(move || {
            std::thread::sleep(grace);
            // Harmless when the group is already gone (ESRCH is ignored).
            let _ = run.signal(RunSignal::Kill);
        });
        if spawned.is_err() {
            tracing::warn!("cannot start the grace timer; killing at once");
        }
    }
}
