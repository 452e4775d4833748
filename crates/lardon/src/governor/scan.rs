//! # Implementation details
//!
//! A queue scan: several admissions, and the releases of tasks that just
//! ended, under one hold of the Governor's lock, so that no release lands
//! between two evaluations of one scan (a task behind a waiting one could
//! otherwise overtake it in FIFO order).

use std::task::Waker;

use crate::decision::{Decision, ReasonCode};
use crate::envelope::{Envelope, Ramp};
use crate::reservation::Reservation;
use crate::snapshot::Snapshot;
use crate::sync::MutexGuard;

use super::ledger::Ledger;
use super::{Governor, Hold, envelopes, fast, volumes};

/// A queue scan: several admissions under one hold of the Governor's lock.
/// Reservations made here must not be dropped before the scan ends.
pub(crate) struct Scan<'a> {
    governor: &'a Governor,
    guard: Option<MutexGuard<'a, Ledger>>,
    /// Read before locking: the clock is outside code.
    now: crate::MonoTime,
    /// The queue dispatcher's waker: the changes of this scan are not news
    /// to it (see [`Shared::publish_except`]).
    scanner: Option<&'a Waker>,
}

/// A reservation released inside a [`Scan`]: the scratch lease it ended, if
/// any, is cleaned up by [`Governor::after_release`] once no lock is held
/// (the volume's controller is outside code).
#[must_use = "hand it to Governor::after_release once the locks are dropped"]
pub(crate) struct Released(Option<Box<volumes::LeaseEnd>>);

impl Scan<'_> {
    /// Releases `reservation` under this scan's lock, so the evaluations
    /// that follow count its resources as free (a worker handing its
    /// thread to the next task). A reservation of another Governor, or one
    /// already released, is simply dropped.
    /// The reservation is taken boxed, as a started task's travels: it is
    /// released in place and the box freed, never moved out (a `memcpy`
    /// of its ~200 bytes).
    pub(crate) fn release(&mut self, mut reservation: Box<Reservation>) -> Released {
        let Some(guard) = self.guard.as_mut() else {
            drop(reservation);
            return Released(None);
        };
        if reservation.released || !reservation.belongs_to(&self.governor.shared) {
            drop(reservation);
            return Released(None);
        }
        // Marked before the ledger call: the handle's drop must not release
        // a second time (it would re-lock the ledger this scan holds).
        reservation.released = true;
        Released(guard.release(reservation.id.key()).flatten())
    }

    /// Whether every GPU of the host is unified-memory.
    pub(crate) fn gpus_unified(&self) -> bool {
        self.guard.as_ref().is_some_and(|g| g.profile.gpus_unified())
    }

    /// The policy's `max_running` cap as of now, under the scan's lock (it
    /// cannot change while the scan lasts): with at least that many tasks
    /// running, no evaluation of this scan can grant.
    pub(crate) fn max_running(&self) -> Option<u32> {
        self.guard.as_ref().and_then(|g| g.policy.max_running)
    }

    /// The generation as of now, under the scan's lock: every change up to
    /// it has been seen by this scan's evaluations.
    pub(crate) fn generation(&self) -> Option<u64> {
        self.guard.as_ref().map(|g| g.generation())
    }

    /// Evaluates `envelope` with the queue's own count of running tasks (a
    /// task between sequences holds no reservation but still runs) and an
    /// optional hold for a starved head; reserves on a grant.
    pub(crate) fn reserve(
        &mut self,
        envelope: &Envelope,
        snapshot: &Snapshot,
        running: usize,
        hold: Option<&Hold>,
    ) -> Result<Reservation, Decision> {
        let now = self.now;
        let Some(guard) = self.guard.as_mut() else {
            return Err(Decision::wait(ReasonCode::ProbeFailed, "scan already finished"));
        };
        // The common task, one fixed alternative granted in full
        // (`fast.rs`): held straight from the grant's figures, its contract
        // built once, in the handle, as `Governor::reserve` does (no
        // `Decision` built, moved and unwrapped).
        if let Some(alt) = envelope.only().filter(|alt| !Ramp::ramps(alt))
            && let Some(grant) = fast::grant(guard, &alt.estimate, snapshot, now, running, hold)
        {
            let mut contract = grant.contract(&alt.estimate);
            // What `envelopes::evaluate` writes into a fixed alternative's
            // contract.
            contract.alternative = Some(0);
            contract.inflight = alt.inflight.1;
            #[cfg(debug_assertions)]
            {
                // The envelope's whole evaluation on the same state (the
                // grant's ledger effects are idempotent): it must agree.
                let full = envelopes::evaluate(guard, envelope, snapshot, now, running, hold);
                debug_assert_eq!(
                    full,
                    Decision::Admit(contract.clone()),
                    "the scan's fast grant differs from the envelope's evaluation"
                );
            }
            let key = guard.hold_plain(
                grant.batch,
                grant.charged_memory,
                grant.cpu_millis,
                grant.io_slots,
                alt.estimate.group.clone(),
            );
            return Ok(Reservation::held(
                &self.governor.shared,
                key,
                contract,
                crate::DecisionKind::Admit,
                ReasonCode::Admitted,
            ));
        }
        let mut decision = envelopes::evaluate(guard, envelope, snapshot, now, running, hold);
        if hold.is_some() && decision.kind() == crate::DecisionKind::Wait {
            let free = envelopes::evaluate(guard, envelope, snapshot, now, running, None);
            if free.is_granted() {
                decision = Decision::wait(
                    ReasonCode::HeldForHead,
                    "held back to leave room for a long-waiting task ahead in the queue",
                );
            }
        }
        super::hold_granted(&self.governor.shared, guard, decision)
    }
}

impl Drop for Scan<'_> {
    fn drop(&mut self) {
        if let Some(guard) = self.guard.take() {
            self.governor.shared.publish_except(guard, self.scanner);
        }
    }
}

impl Governor {
    /// Queue admission of one envelope (see [`Scan::reserve`]).
    pub(crate) fn reserve_queued(
        &self,
        envelope: &Envelope,
        snapshot: &Snapshot,
        running: usize,
        hold: Option<&Hold>,
    ) -> Result<Reservation, Decision> {
        let reservation = self.scan().reserve(envelope, snapshot, running, hold)?;
        if let Some(grant) = &reservation.contract.scratch
            && let Err(message) = self.prepare_scratch(grant)
        {
            drop(reservation);
            return Err(Decision::wait(ReasonCode::Scratch, message));
        }
        Ok(reservation)
    }

    /// Holds the Governor's lock for a whole queue scan, so that no
    /// release lands between two evaluations of one scan (a task behind a
    /// waiting one could otherwise overtake it in FIFO order).
    pub(crate) fn scan(&self) -> Scan<'_> {
        let now = self.shared.clock.now();
        Scan { governor: self, guard: Some(self.shared.lock()), now, scanner: None }
    }

    /// [`Governor::scan`] on behalf of the queue whose dispatcher waits with
    /// `scanner`: the changes this scan makes (its releases and grants) do
    /// not wake that dispatcher, whose next scan would find nothing new.
    pub(crate) fn scan_for<'a>(&'a self, scanner: &'a Waker) -> Scan<'a> {
        let now = self.shared.clock.now();
        Scan { governor: self, guard: Some(self.shared.lock()), now, scanner: Some(scanner) }
    }

    /// Cleans up after a release made inside a scan: ends its scratch lease
    /// (and finishes a drain it was the last lease of). Call with no lock
    /// held.
    pub(crate) fn after_release(&self, released: Released) {
        if let Some(end) = released.0 {
            volumes::after_lease_end(&self.shared, *end);
        }
    }
}
