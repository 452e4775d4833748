//! A leaf wake-up primitive: an epoch counter with a condition variable.
//!
//! Waiters read the epoch *before* checking their condition and sleep only
//! while it is unchanged, so a wake between the check and the sleep is
//! never lost. Its lock is a leaf: nothing else is locked while it is held,
//! so it may be poked from anywhere — including a Governor waker fired
//! while the queue lock is held.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::task::Wake;
use std::time::{Duration, Instant};

#[derive(Debug, Default)]
pub(crate) struct Signal {
    epoch: Mutex<u64>,
    cv: Condvar,
}

impl Signal {
    pub(crate) fn epoch(&self) -> u64 {
        *self.epoch.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn bump(&self) {
        let mut e = self.epoch.lock().unwrap_or_else(PoisonError::into_inner);
        *e = e.wrapping_add(1);
        self.cv.notify_all();
    }

    /// Sleeps while the epoch equals `seen`, at most `timeout` (`None`:
    /// no limit). Returns whether it changed.
    pub(crate) fn wait(&self, seen: u64, timeout: Option<Duration>) -> bool {
        let mut e = self.epoch.lock().unwrap_or_else(PoisonError::into_inner);
        let deadline = timeout.map(|t| Instant::now() + t);
        while *e == seen {
            match deadline {
                None => e = self.cv.wait(e).unwrap_or_else(PoisonError::into_inner),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return false;
                    }
                    e = self.cv.wait_timeout(e, left).map(|(g, _)| g).unwrap_or_else(|p| p.into_inner().0);
                }
            }
        }
        true
    }
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.bump();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.bump();
    }
}
