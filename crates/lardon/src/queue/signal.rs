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

/// The epoch and the threads asleep on it, under one lock.
#[derive(Debug, Default)]
struct State {
    epoch: u64,
    /// Threads in `wait` now. They count themselves in and out under the
    /// lock `bump` takes, so `bump` knows exactly whether anyone sleeps:
    /// a condition variable's notify is a futex system call even with no
    /// sleeper, and the queue bumps on every submit and every task end.
    sleepers: usize,
}

#[derive(Debug, Default)]
pub(crate) struct Signal {
    state: Mutex<State>,
    cv: Condvar,
    /// Threads asleep in `wait` now, without and with a timeout (a test
    /// hook: lets a test see whether the dispatcher sleeps untimed, i.e.
    /// does not re-sample the host). Plain std atomics: an observation,
    /// never used to synchronise.
    #[cfg(test)]
    parked: [std::sync::atomic::AtomicUsize; 2],
    /// The epoch the last sleeper went to sleep on (test hook).
    #[cfg(test)]
    seen: std::sync::atomic::AtomicU64,
}

impl Signal {
    pub(crate) fn epoch(&self) -> u64 {
        sync::lock(&self.state).epoch
    }

    pub(crate) fn bump(&self) {
        let mut st = sync::lock(&self.state);
        st.epoch = st.epoch.wrapping_add(1);
        if st.sleepers > 0 {
            self.cv.notify_all();
        }
    }

    /// Sleeps while the epoch equals `seen`, at most `timeout` (`None`:
    /// no limit). Returns whether it changed.
    pub(crate) fn wait(&self, seen: u64, timeout: Option<Duration>) -> bool {
        let mut st = sync::lock(&self.state);
        #[cfg(test)]
        let _parked = {
            self.seen.store(seen, std::sync::atomic::Ordering::SeqCst);
            Parked::new(&self.parked[usize::from(timeout.is_some())])
        };
        st.sleepers += 1;
        let (mut st, changed) = self.wait_locked(st, seen, timeout);
        st.sleepers -= 1;
        changed
    }

    fn wait_locked<'a>(
        &self,
        mut st: sync::MutexGuard<'a, State>,
        seen: u64,
        timeout: Option<Duration>,
    ) -> (sync::MutexGuard<'a, State>, bool) {
        match timeout {
            None => {
                while st.epoch == seen {
                    st = self.cv.wait(st).unwrap_or_else(std::sync::PoisonError::into_inner);
                }
                (st, true)
            }
            #[cfg(not(loom))]
            Some(timeout) => {
                let deadline = std::time::Instant::now() + timeout;
                while st.epoch == seen {
                    let left = deadline.saturating_duration_since(std::time::Instant::now());
                    if left.is_zero() {
                        return (st, false);
                    }
                    st = self.cv.wait_timeout(st, left).map(|(g, _)| g).unwrap_or_else(|p| p.into_inner().0);
                }
                (st, true)
            }
            // loom has no time: a timed wait is a spurious wake-up.
            #[cfg(loom)]
            Some(_) => {
                let changed = st.epoch != seen;
                (st, changed)
            }
        }
    }

    /// For a signal with one sleeper (the dispatcher's): `Some(timed)`
    /// when it sleeps now with no wake pending (it went to sleep on the
    /// current epoch; read under the epoch lock, so no bump is in
    /// between), `None` while it is awake or about to wake.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn asleep(&self) -> Option<bool> {
        use std::sync::atomic::Ordering::SeqCst;
        let st = sync::lock(&self.state);
        let (untimed, timed) = (self.parked[0].load(SeqCst), self.parked[1].load(SeqCst));
        (untimed + timed == 1 && self.seen.load(SeqCst) == st.epoch).then_some(timed == 1)
    }
}

/// Counts one sleeper for as long as it lives.
#[cfg(test)]
struct Parked<'a>(&'a std::sync::atomic::AtomicUsize);

#[cfg(test)]
impl<'a> Parked<'a> {
    fn new(count: &'a std::sync::atomic::AtomicUsize) -> Self {
        count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Parked(count)
    }
}

#[cfg(test)]
impl Drop for Parked<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
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
