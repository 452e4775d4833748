//! A leaf wake-up primitive: an epoch counter with a condition variable.
//!
//! Waiters read the epoch *before* checking their condition and sleep only
//! while it is unchanged, so a wake between the check and the sleep is
//! never lost. Its lock is a leaf: nothing else is locked while it is held,
//! so it may be poked from anywhere — including a Governor waker fired
//! while the queue lock is held. Under `--cfg loom` it is built on loom's
//! primitives (see `loom_tests.rs`).

use std::task::Wake;
use std::time::Duration;

use crate::sync::{self, Condvar, Mutex};

#[derive(Debug, Default)]
pub(crate) struct Signal {
    epoch: Mutex<u64>,
    cv: Condvar,
}

impl Signal {
    pub(crate) fn epoch(&self) -> u64 {
        *sync::lock(&self.epoch)
    }

    pub(crate) fn bump(&self) {
        let mut e = sync::lock(&self.epoch);
        *e = e.wrapping_add(1);
        self.cv.notify_all();
    }

    /// Sleeps while the epoch equals `seen`, at most `timeout` (`None`:
    /// no limit). Returns whether it changed.
    pub(crate) fn wait(&self, seen: u64, timeout: Option<Duration>) -> bool {
        let mut e = sync::lock(&self.epoch);
        match timeout {
            None => {
                while *e == seen {
                    e = self.cv.wait(e).unwrap_or_else(std::sync::PoisonError::into_inner);
                }
                true
            }
            #[cfg(not(loom))]
            Some(timeout) => {
                let deadline = std::time::Instant::now() + timeout;
                while *e == seen {
                    let left = deadline.saturating_duration_since(std::time::Instant::now());
                    if left.is_zero() {
                        return false;
                    }
                    e = self.cv.wait_timeout(e, left).map(|(g, _)| g).unwrap_or_else(|p| p.into_inner().0);
                }
                true
            }
            // loom has no time: a timed wait is a spurious wake-up.
            #[cfg(loom)]
            Some(_) => *e != seen,
        }
    }
}

impl Wake for Signal {
    fn wake(self: std::sync::Arc<Self>) {
        self.bump();
    }
    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        self.bump();
    }
}
