//! [`HookSignal`]: how an end that queued a hook wakes the hook runner.

use std::sync::{Condvar, Mutex, PoisonError};

/// A generation counter the hook runner sleeps on: bumped once an end that
/// queued a hook is durable (never before: the runner reads the store),
/// and a stop flag. A spurious wake costs one read of the store; a missed
/// one cannot happen (the runner compares generations under the lock).
#[derive(Debug, Default)]
pub(crate) struct HookSignal {
    state: Mutex<(u64, bool)>,
    moved: Condvar,
}

impl HookSignal {
    /// Something was queued: wake every waiter.
    pub(crate) fn wake(&self) {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        s.0 = s.0.wrapping_add(1);
        self.moved.notify_all();
    }

    /// The daemon stops: every waiter returns `None` from now on.
    pub(crate) fn stop(&self) {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).1 = true;
        self.moved.notify_all();
    }

    /// The current generation (`None`: stopped).
    pub(crate) fn now(&self) -> Option<u64> {
        let s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        (!s.1).then_some(s.0)
    }

    /// Blocks until the generation moves past `seen`; the new one, or
    /// `None` once stopped.
    pub(crate) fn wait_past(&self, seen: u64) -> Option<u64> {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        while !s.1 && s.0 == seen {
            s = self.moved.wait(s).unwrap_or_else(PoisonError::into_inner);
        }
        (!s.1).then_some(s.0)
    }
}
