//! State shared by a [`Governor`](super::Governor) and its reservations:
//! the ledger behind its lock, the generation mirror and the wake-ups that
//! follow a change, and the one place a granted decision becomes a held
//! reservation.

use std::task::Waker;

use super::ledger::Ledger;
use super::{Key, volumes};
use crate::clock::Clock;
use crate::decision::Decision;
use crate::reservation::Reservation;
use crate::snapshot::Probe;
use crate::sync::{self, Arc, AtomicU64, Condvar, Mutex, MutexGuard, Ordering};

/// Process-wide source of Governor ids (to refuse foreign reservations).
pub(super) static NEXT_GOVERNOR: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// State shared by a Governor and its reservations.
pub(crate) struct Shared {
    pub(super) id: u64,
    pub(super) ledger: Mutex<Ledger>,
    pub(super) changed: Condvar,
    /// Mirror of `ledger.generation`, readable without the lock.
    pub(super) generation: AtomicU64,
    pub(super) probe: Box<dyn Probe>,
    pub(super) clock: std::sync::Arc<dyn Clock>,
}

impl Shared {
    pub(super) fn lock(&self) -> MutexGuard<'_, Ledger> {
        sync::lock(&self.ledger)
    }

    /// Publishes a generation change made under `guard`, then drops the
    /// lock before waking async waiters (their wake code is not ours).
    #[inline]
    pub(super) fn publish(&self, guard: MutexGuard<'_, Ledger>) {
        self.publish_except(guard, None);
    }

    /// [`Shared::publish`], except that a registered waker that wakes the
    /// same task as `scanner` is neither woken nor unregistered: that
    /// waiter's own scan (or one on its behalf) already saw this change
    /// under the same lock hold, and waking it would only send it to scan
    /// again for nothing. It stays registered for the next change.
    #[inline]
    pub(super) fn publish_except(&self, mut guard: MutexGuard<'_, Ledger>, scanner: Option<&Waker>) {
        // The ledger remembers what it last mirrored, so an unchanged
        // generation (a WAIT) costs no atomic, and a changed one a plain
        // release store rather than a locked read-modify-write: the mirror
        // is only written under the lock. Readers only use it as a hint
        // that they re-check under the lock (`register_waker`,
        // `wait_for_change`), so acquire/release suffices; the loom models
        // check that no wake-up is lost.
        let Some(generation) = guard.unpublished() else {
            drop(guard);
            return;
        };
        self.generation.store(generation, Ordering::Release);
        // Waiters register under the lock, so this count is exact; skipping
        // the notify when nobody waits saves a futex syscall per change.
        if guard.waiters() > 0 {
            self.changed.notify_all();
        }
        // Wakers register under this lock too, so looking here misses
        // none, and with none registered (the common case outside a
        // queue) this is one compare; with only the scanner's registered
        // (a queue's dispatcher, at the end of every scan) a few more.
        if guard.has_wakers_besides(scanner) {
            Self::wake(guard, scanner);
        }
    }

    /// Takes the registered wakers (but `scanner`'s, see
    /// [`Shared::publish_except`]) and wakes them after the unlock.
    #[cold]
    #[inline(never)]
    fn wake(mut guard: MutexGuard<'_, Ledger>, scanner: Option<&Waker>) {
        let fire = guard.take_wakers(scanner);
        drop(guard);
        for w in fire {
            w.wake();
        }
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    pub(crate) fn is_active(&self, key: Key) -> bool {
        self.lock().is_active(key)
    }

    #[inline]
    pub(crate) fn release(&self, key: Key) -> bool {
        let mut guard = self.lock();
        let released = guard.release(key);
        self.publish(guard);
        match released {
            None => false,
            Some(lease) => {
                if let Some(end) = lease {
                    volumes::after_lease_end(self, *end);
                }
                true
            }
        }
    }

    pub(crate) fn report_usage(&self, key: Key, bytes: u64) -> bool {
        let mut guard = self.lock();
        let ok = guard.report_usage(key, bytes);
        self.publish(guard);
        ok
    }
}

/// Holds a granted `decision` in `ledger` and returns its handle, or hands
/// a WAIT/REJECT back untouched. The contract is held where the decision
/// keeps it and moved once, into the handle: every move of a contract is
/// a `memcpy` of its ~180 bytes (BENCHMARKS.md "Fast path II"). The caller
/// publishes the change once it is done with the lock, and must not drop
/// the handle before it has let the lock go.
#[inline]
pub(crate) fn hold_granted(
    shared: &Arc<Shared>,
    ledger: &mut Ledger,
    mut decision: Decision,
) -> Result<Reservation, Decision> {
    let Some(contract) = decision.contract_mut() else { return Err(decision) };
    let key = ledger.hold(contract);
    let (kind, reason) = (decision.kind(), decision.reason());
    match decision {
        Decision::Admit(contract) | Decision::ReduceBatch(contract, _) => {
            Ok(Reservation::held(shared, key, contract, kind, reason))
        }
        refused @ (Decision::Wait(_) | Decision::Reject(_)) => Err(refused),
    }
}
