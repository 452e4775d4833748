//! std/loom switch: under `--cfg loom` the engine's locks, condition
//! variables, atomics and threads (the Governor's, the queue's, its
//! dispatcher and worker pool) are loom's, so the models explore every
//! interleaving of the real code.
//!
//! Poisoning is ignored on purpose: the ledger is updated in one step
//! under the lock and checked by `debug_assert!`s, so a panic elsewhere
//! (a user callback) cannot leave it half-written.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::{Arc, Condvar, Mutex, MutexGuard};

#[cfg(loom)]
pub(crate) use loom::thread;

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::{Arc, Condvar, Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::thread;

/// Locks `mutex`, ignoring poison.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
