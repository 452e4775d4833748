//! The RAII handle of granted resources: [`Reservation`].

use std::fmt;

use thiserror::Error;

use crate::contract::Contract;
use crate::decision::{DecisionKind, ReasonCode};
use crate::governor::{Key, Shared};
use crate::sync::Arc;

/// Identifies a reservation across the process: the Governor's own id and
/// a sequence number that is never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReservationId {
    pub(crate) governor: u64,
    pub(crate) seq: u64,
    /// Where the Governor's ledger keeps it (determined by `seq`, so it
    /// changes neither equality nor order between ids).
    pub(crate) slot: usize,
}

impl ReservationId {
    /// The ledger's key of this reservation.
    pub(crate) fn key(self) -> Key {
        Key { seq: self.seq, slot: self.slot }
    }

    /// The per-Governor sequence number (from 1).
    pub fn seq(self) -> u64 {
        self.seq
    }
}

impl fmt::Display for ReservationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "r{}.{}", self.governor, self.seq)
    }
}

/// Why a release was refused. Nothing changed in either case.
#[derive(Debug, Error)]
pub enum ReleaseError {
    /// The reservation is not active (already released).
    #[error("reservation {0} is not active in this governor (already released?)")]
    NotActive(ReservationId),
    /// The reservation belongs to another Governor; it is handed back.
    #[error("reservation {} belongs to another governor", .0.id())]
    Foreign(Box<Reservation>),
}

/// Resources granted by the Governor for one sequence.
///
/// Released exactly once: by [`Reservation::release`], by
/// [`crate::Governor::release_id`], or when dropped — whichever comes
/// first; the others are refused (explicit calls) or do nothing (drop).
/// Released reservations leave nothing behind in the Governor.
#[must_use = "dropping a Reservation releases it at once"]
pub struct Reservation {
    pub(crate) shared: Arc<Shared>,
    pub(crate) id: ReservationId,
    pub(crate) contract: Contract,
    pub(crate) kind: DecisionKind,
    pub(crate) reason: ReasonCode,
    pub(crate) released: bool,
}

impl Reservation {
    /// The handle of `key`, just held in `shared`'s ledger for `contract`
    /// (granted as `kind` for `reason`).
    #[inline]
    pub(crate) fn held(
        shared: &Arc<Shared>,
        key: Key,
        contract: Contract,
        kind: DecisionKind,
        reason: ReasonCode,
    ) -> Self {
        debug_assert!(kind.is_granted(), "only a granted decision becomes a reservation");
        Reservation {
            shared: Arc::clone(shared),
            id: ReservationId { governor: shared.id(), seq: key.seq, slot: key.slot },
            contract,
            kind,
            reason,
            released: false,
        }
    }

    /// This reservation's id.
    pub fn id(&self) -> ReservationId {
        self.id
    }

    /// A copy of what was granted.
    pub fn contract(&self) -> &Contract {
        &self.contract
    }

    /// `Admit` or `ReduceBatch`.
    pub fn kind(&self) -> DecisionKind {
        self.kind
    }

    /// Why it was granted as it was.
    pub fn reason(&self) -> ReasonCode {
        self.reason
    }

    /// Whether the Governor still holds it active.
    pub fn is_valid(&self) -> bool {
        !self.released && self.shared.is_active(self.id.key())
    }

    /// Reports the memory the holder actually uses now (from its cgroup or
    /// RSS). Memory it has already materialised is no longer subtracted
    /// twice from `MemAvailable` (docs/DESIGN.md §4 step 8).
    ///
    /// # Errors
    /// [`ReleaseError::NotActive`] when the reservation was released.
    pub fn report_usage(&self, bytes: u64) -> Result<(), ReleaseError> {
        if self.shared.report_usage(self.id.key(), bytes) {
            Ok(())
        } else {
            Err(ReleaseError::NotActive(self.id))
        }
    }

    /// Releases now.
    ///
    /// # Errors
    /// [`ReleaseError::NotActive`] when it was already released by id.
    pub fn release(mut self) -> Result<(), ReleaseError> {
        self.released = true;
        if self.shared.release(self.id.key()) { Ok(()) } else { Err(ReleaseError::NotActive(self.id)) }
    }

    pub(crate) fn belongs_to(&self, shared: &Arc<Shared>) -> bool {
        Arc::ptr_eq(&self.shared, shared)
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if !self.released {
            self.released = true;
            self.shared.release(self.id.key());
        }
    }
}

impl fmt::Debug for Reservation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reservation")
            .field("id", &self.id)
            .field("kind", &self.kind)
            .field("contract", &self.contract)
            .finish_non_exhaustive()
    }
}
