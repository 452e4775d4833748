//! The [`Governor`]: sole owner of the host's budgets.

// A WAIT is the common answer during a queue scan: returning the Decision
// by value costs a copy, boxing it would cost an allocation every time.
#![allow(clippy::result_large_err)]

mod active;
mod admission;
mod availability;
mod envelopes;
mod fast;
#[cfg(all(test, not(loom)))]
mod fast_tests;
#[cfg(all(test, not(loom)))]
mod gate_tests;
mod group_limits;
#[cfg(all(test, not(loom)))]
mod group_tests;
#[cfg(all(test, not(loom)))]
mod learning_tests;
mod ledger;
mod load;
mod packing;
#[cfg(all(test, not(loom)))]
mod packing_tests;
mod scan;
#[cfg(all(test, not(loom)))]
mod scratch_tests;
mod shared;
mod targets;
#[cfg(all(test, not(loom)))]
mod tests;
mod volumes;

use std::time::Duration;

pub(crate) use admission::Hold;
pub use admission::MAX_SNAPSHOT_AGE;
pub use availability::{Availability, GpuAvailability};
pub(crate) use scan::Scan;
use shared::NEXT_GOVERNOR;
pub(crate) use shared::{Shared, hold_granted};

use crate::clock::{Clock, SystemClock};
use crate::contract::Contract;
use crate::decision::{Decision, ReasonCode};
use crate::envelope::{Envelope, RampLimits};
use crate::estimate::{Class, Estimate};
use crate::history::{BatchSample, RunOutcome, RunRecord};
use crate::learned::Learned;
use crate::policy::{HostPolicy, HostProfile, PolicyError};
use crate::pressure::PressureLevel;
use crate::reservation::{ReleaseError, Reservation, ReservationId};
use crate::snapshot::{Probe, ProbeError, Snapshot};
use crate::sync::{Arc, AtomicU64, Condvar, Mutex, MutexGuard, Ordering};

pub(crate) use active::Key;
use ledger::{Change, Ledger};

/// The admission engine: owns the host's budgets, admits, shrinks, delays
/// or rejects work, and learns from what ran.
///
/// Cheap to clone (a shared handle). Every method is thread-safe; the
/// Governor's lock is never held while calling the probe, the clock or
/// any code outside the engine.
///
/// # Examples
/// ```
/// use lardon::{Estimate, FakeProbe, Governor, HostPolicy, HostProfile};
///
/// let profile = HostProfile::new(16 << 30, 8);
/// let governor = Governor::new(HostPolicy::default_for(&profile), FakeProbe::new(profile)).unwrap();
/// let estimate = Estimate::builder().memory(1 << 30).memory_per_item(256 << 20).batch(1, 64).build();
/// let reservation = governor.reserve_available(&estimate).expect("admitted");
/// // 16 GiB − 1 GiB default reserve − 1 GiB fixed leaves room for 56 items of 256 MiB.
/// assert_eq!(reservation.contract().batch, 56);
/// drop(reservation); // released
/// assert_eq!(governor.availability().reservations, 0);
/// ```
#[derive(Clone)]
pub struct Governor {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Governor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Governor")
            .field("id", &self.shared.id)
            .field("generation", &self.generation())
            .finish()
    }
}

impl Governor {
    /// A Governor for the probe's host under `policy`, on the system clock.
    ///
    /// # Errors
    /// [`PolicyError`] when the policy is invalid for the probe's host.
    pub fn new(policy: HostPolicy, probe: impl Probe + 'static) -> Result<Self, PolicyError> {
        Self::with_clock(policy, probe, std::sync::Arc::new(SystemClock))
    }

    /// Like [`Governor::new`] with an injected clock (tests, simulations).
    ///
    /// # Errors
    /// [`PolicyError`] when the policy is invalid for the probe's host.
    pub fn with_clock(
        policy: HostPolicy,
        probe: impl Probe + 'static,
        clock: std::sync::Arc<dyn Clock>,
    ) -> Result<Self, PolicyError> {
        let profile = probe.profile();
        policy.validate(&profile)?;
        Ok(Governor {
            shared: Arc::new(Shared {
                id: NEXT_GOVERNOR.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                ledger: Mutex::new(Ledger::new(policy, profile)),
                changed: Condvar::new(),
                generation: AtomicU64::new(0),
                probe: Box::new(probe),
                clock,
            }),
        })
    }

    /// The host's static description.
    pub fn profile(&self) -> HostProfile {
        self.shared.lock().profile.clone()
    }

    /// The policy in force.
    pub fn policy(&self) -> HostPolicy {
        self.shared.lock().policy.clone()
    }

    /// The Governor's clock reading.
    pub fn now(&self) -> crate::MonoTime {
        self.shared.clock.now()
    }

    /// Replaces the policy. Refused when it is invalid or no longer covers
    /// the reservations already granted; on success the generation moves
    /// and waiters wake.
    ///
    /// # Errors
    /// [`PolicyError`], with nothing changed.
    pub fn set_policy(&self, policy: HostPolicy) -> Result<(), PolicyError> {
        let mut guard = self.shared.lock();
        let set = guard.set_policy(policy);
        self.shared.publish(guard);
        set
    }

    /// Sets the limits of `group` (docs/DESIGN.md §4, "Group limits"):
    /// from now on no grant to an estimate of the group takes what the
    /// group's reservations hold past a limit; a task that would waits with
    /// reason `group_limit`. Limits all `None` remove them. What the group
    /// already holds stays held (lowering a limit below it only stops new
    /// grants). The generation moves and waiters wake.
    pub fn set_group_limits(&self, group: &crate::GroupName, limits: crate::GroupLimits) {
        let mut guard = self.shared.lock();
        guard.set_group_limits(group, limits);
        self.shared.publish(guard);
    }

    /// Every group with limits or active reservations: its limits and what
    /// it holds now, by name.
    pub fn group_usage(&self) -> Vec<crate::GroupUsage> {
        self.shared.lock().group_usage()
    }

    /// Evaluates `estimate` against `snapshot` without reserving. A new
    /// host sample still feeds the pressure state (once per sample).
    pub fn decide(&self, estimate: &Estimate, snapshot: &Snapshot) -> Decision {
        let (guard, decision) = self.evaluate_locked(|l, now, running| {
            admission::evaluate(l, estimate, snapshot, now, running, None)
        });
        self.shared.publish(guard);
        decision
    }

    /// Evaluates and, on ADMIT or REDUCE_BATCH, reserves.
    ///
    /// # Errors
    /// The WAIT or REJECT [`Decision`] when nothing was reserved.
    pub fn reserve(&self, estimate: &Estimate, snapshot: &Snapshot) -> Result<Reservation, Decision> {
        // Written out rather than through `evaluate_locked`: returning the
        // guard and the decision as a pair costs a copy of the decision.
        let now = self.shared.clock.now();
        let mut guard = self.shared.lock();
        let running = guard.reservations();
        // The common request (`fast.rs`): held straight from the grant's
        // figures, its contract built once, in the handle (no `Decision`
        // to wrap and unwrap, no scratch to prepare).
        if let Some(grant) = fast::grant(&mut guard, estimate, snapshot, now, running, None) {
            let key = guard.hold_plain(
                grant.batch,
                grant.charged_memory,
                grant.cpu_millis,
                grant.io_slots,
                estimate.group.clone(),
            );
            self.shared.publish(guard);
            return Ok(Reservation::held(
                &self.shared,
                key,
                grant.contract(estimate),
                crate::DecisionKind::Admit,
                ReasonCode::Admitted,
            ));
        }
        let decision = admission::evaluate_in_order(&mut guard, estimate, snapshot, now, running, None);
        self.grant(guard, decision)
    }

    /// [`Governor::reserve`] against a fresh snapshot from the probe. A
    /// probe failure is a WAIT with reason `probe_failed`.
    ///
    /// # Errors
    /// The WAIT or REJECT [`Decision`] when nothing was reserved.
    pub fn reserve_available(&self, estimate: &Estimate) -> Result<Reservation, Decision> {
        let snapshot = self.take_snapshot()?;
        self.reserve(estimate, &snapshot)
    }

    /// Takes a snapshot from the probe (outside the lock) and feeds it to
    /// the pressure state; the generation moves when budgets changed.
    ///
    /// # Errors
    /// The probe's error.
    pub fn sample(&self) -> Result<Snapshot, ProbeError> {
        let snapshot = self.shared.probe.snapshot()?;
        self.observe(&snapshot);
        self.refresh_volumes();
        Ok(snapshot)
    }

    /// Feeds `snapshot` to the pressure state if it is fresh and new.
    pub fn observe(&self, snapshot: &Snapshot) {
        let now = self.shared.clock.now();
        let mut guard = self.shared.lock();
        // A WAIT here (stale, RED) concerns no estimate: only the sample's
        // effect on the ledger matters.
        let _ = admission::observe(&mut guard, snapshot, now);
        self.shared.publish(guard);
    }

    fn take_snapshot(&self) -> Result<Snapshot, Decision> {
        self.shared
            .probe
            .snapshot()
            .map_err(|e| Decision::wait(ReasonCode::ProbeFailed, format!("cannot observe the host: {e}")))
    }

    /// Reads the clock (outside code, so before the lock), locks and runs
    /// one evaluation with the number of active reservations as the
    /// running count.
    #[inline]
    fn evaluate_locked(
        &self,
        evaluate: impl FnOnce(&mut Ledger, crate::MonoTime, usize) -> Decision,
    ) -> (MutexGuard<'_, Ledger>, Decision) {
        let now = self.shared.clock.now();
        let mut guard = self.shared.lock();
        let running = guard.reservations();
        let decision = evaluate(&mut guard, now, running);
        (guard, decision)
    }

    /// Turns a granted decision into a reservation under `guard`.
    fn grant(&self, mut guard: MutexGuard<'_, Ledger>, decision: Decision) -> Result<Reservation, Decision> {
        let granted = hold_granted(&self.shared, &mut guard, decision);
        self.shared.publish(guard);
        // Inspected in place: unwrapping and rewrapping the result would
        // copy the reservation twice.
        if let Ok(reservation) = &granted
            && let Some(scratch) = &reservation.contract.scratch
            && let Err(message) = self.prepare_scratch(scratch)
        {
            // Dropping the handle releases it (no lock is held here).
            drop(granted);
            return Err(Decision::wait(ReasonCode::Scratch, message));
        }
        granted
    }

    /// Evaluates a capability envelope: alternatives in order, the first
    /// granted wins; WAIT if any alternative waits, else the last REJECT.
    pub fn decide_envelope(&self, envelope: &Envelope, snapshot: &Snapshot) -> Decision {
        let (guard, decision) = self.evaluate_locked(|l, now, running| {
            envelopes::evaluate(l, envelope, snapshot, now, running, None)
        });
        self.shared.publish(guard);
        decision
    }

    /// Evaluates a capability envelope and reserves the chosen alternative
    /// at its current ramp rungs (the choice is frozen for the sequence).
    ///
    /// # Errors
    /// The WAIT or REJECT [`Decision`] when nothing was reserved.
    pub fn reserve_envelope(
        &self,
        envelope: &Envelope,
        snapshot: &Snapshot,
    ) -> Result<Reservation, Decision> {
        let (guard, decision) = self.evaluate_locked(|l, now, running| {
            envelopes::evaluate(l, envelope, snapshot, now, running, None)
        });
        self.grant(guard, decision)
    }

    /// [`Governor::reserve_envelope`] against a fresh snapshot.
    ///
    /// # Errors
    /// The WAIT or REJECT [`Decision`] when nothing was reserved.
    pub fn reserve_envelope_available(&self, envelope: &Envelope) -> Result<Reservation, Decision> {
        let snapshot = self.take_snapshot()?;
        self.reserve_envelope(envelope, &snapshot)
    }

    /// Records one run of `class` (docs/DESIGN.md §6): its shape (unbatched,
    /// or a batch of N items) and how it ended (completed with a measured
    /// peak, or killed at its memory limit). Returns whether it changed
    /// what the class has learned; only then does the generation move.
    ///
    /// What each record does:
    /// - unbatched, completed with peak `p`: a sample of the class's fixed
    ///   size (the worst of the last 8 is the learned fixed size, used as
    ///   `max(declared, learned)`); clears an unbatched kill's lower bound.
    /// - batch of `n > 0` items, completed with peak `p`: a sample of the
    ///   per-item cost `ceil((p − declared fixed) / n)` (the worst of the
    ///   last 8 is the learned per-item cost); clears a batch kill's bound.
    /// - killed at limit `L`: the need is above `L`; the next estimate of
    ///   that shape is at least `2 × L` (unbatched) or `2 × ceil((L −
    ///   fixed) / n)` per item (batch), capped at what the host could ever
    ///   grant. The limit is never stored as a peak.
    /// - a batch of 0 items, an unknown peak, or a kill at limit 0: ignored
    ///   (no sample evicted, generation unchanged); returns false.
    ///
    /// The next admission of the class sizes its grant from these
    /// ([`Governor::learned`] shows how): after a kill, the daemon's retry
    /// is simply the next admission, which grants more (unbatched) or a
    /// smaller batch at a larger per-item size (batched), or REJECTs as
    /// impossible when even `batch_min` at the learned size can never fit.
    pub fn record_run(&self, class: &Class, record: RunRecord) -> bool {
        let mut guard = self.shared.lock();
        let changed = guard.history.record(class, &record);
        if changed {
            guard.changed(Change::History);
        }
        self.shared.publish(guard);
        changed
    }

    /// Records a completed batch of `items` items of `class` with its
    /// measured peak: shorthand for [`Governor::record_run`] with
    /// [`RunRecord::batch`] and [`RunOutcome::Completed`]. A batch of 0
    /// items or an unknown peak changes nothing (returns false).
    pub fn record_batch(
        &self,
        class: &Class,
        items: u64,
        duration: Duration,
        peak_memory: Option<u64>,
    ) -> bool {
        self.record_run(class, RunRecord::batch(items, duration, RunOutcome::Completed { peak: peak_memory }))
    }

    /// What `estimate`'s class has learned, sized for that estimate: the
    /// learned fixed and per-item figures and where they come from (a
    /// measured peak of run N, or a lower bound after a kill at X), the
    /// fixed and per-item sizes admission uses, and the history batch
    /// target. `None` when the class has no informative record (admission
    /// then uses the declared figures and `batch_max`).
    ///
    /// This is the engine's own computation (the one admission calls), so
    /// a status or explain view built on it cannot drift from what is
    /// granted. An estimate whose memory overflows on a unified-memory host
    /// also gives `None` (admission REJECTs it).
    pub fn learned(&self, estimate: &Estimate) -> Option<Learned> {
        let guard = self.shared.lock();
        guard.history.class(&estimate.class)?;
        admission::sizing(&guard, estimate)
    }

    /// The batch target admission would apply to `estimate` now (step 9 of
    /// docs/DESIGN.md §4): the history target ([`Learned::batch_target`]),
    /// capped at `ceil(fixed ÷ per_item)` while memory is contended (an
    /// estimate got a WAIT for memory within the last second and has not
    /// been granted since), lowered by slow start and halved under YELLOW,
    /// raised to the critical floor of a proven class's task with items left
    /// (`ceil(items_left ÷ 10)`), never below `batch_min`. The batch actually granted may be smaller still when
    /// memory or GPU memory is short.
    pub fn batch_target(&self, estimate: &Estimate) -> u64 {
        let guard = self.shared.lock();
        let now = self.shared.clock.now();
        match admission::sizing(&guard, estimate) {
            Some(s) => admission::step9_target(&guard, estimate, &s, now),
            None => admission::pressure_target(&guard, estimate, 0, estimate.batch_max),
        }
    }

    /// Feeds the throughput of one sequence run under `contract` to its
    /// alternative's ramp. Returns whether the evidence was used (it is
    /// ignored for plain estimates, stale epochs, pressure or a contract
    /// that did not reach its rungs).
    pub fn record_sequence(&self, contract: &Contract, items: u64, wall: Duration) -> bool {
        let Some(ticket) = &contract.ramp_ticket else { return false };
        let mut guard = self.shared.lock();
        let rate = crate::envelope::rate(items, wall);
        let used = match guard.ramps.get_mut(&ticket.key) {
            Some(ramp) => ramp.observe(ticket.epoch, ticket.exercised, rate),
            None => false,
        };
        if used {
            guard.changed(Change::Ramp);
        }
        self.shared.publish(guard);
        used
    }

    /// The current rungs of (class, alternative index), if it has a ramp.
    pub fn ramp_limits(&self, class: &Class, alternative: usize) -> Option<RampLimits> {
        self.shared.lock().ramps.get(&(class.clone(), alternative)).map(|r| r.limits())
    }

    /// The measured batches kept for `class`, oldest first (unbatched runs
    /// and kills are not listed here; see [`Governor::learned`]).
    pub fn history(&self, class: &Class) -> Vec<BatchSample> {
        self.shared.lock().history.samples(class)
    }

    /// Releases `reservation`.
    ///
    /// # Errors
    /// [`ReleaseError::Foreign`] (handing it back untouched) when it belongs
    /// to another Governor; [`ReleaseError::NotActive`] when already released.
    pub fn release(&self, reservation: Reservation) -> Result<(), ReleaseError> {
        if !reservation.belongs_to(&self.shared) {
            return Err(ReleaseError::Foreign(Box::new(reservation)));
        }
        reservation.release()
    }

    /// Releases the reservation `id` (for holders that track ids, such as
    /// a daemon cancelling a task). A handle still holding it becomes
    /// invalid and its drop does nothing.
    ///
    /// # Errors
    /// [`ReleaseError::NotActive`] when `id` is not active here (double
    /// release, or another Governor's id); nothing changes.
    pub fn release_id(&self, id: ReservationId) -> Result<(), ReleaseError> {
        if id.governor != self.shared.id || !self.shared.release(id.key()) {
            return Err(ReleaseError::NotActive(id));
        }
        Ok(())
    }

    /// The generation: moves on every reservation made or released, batch
    /// or sequence recorded, usage report that changes availability,
    /// policy change, and host sample that changes any budget. WAIT and
    /// REJECT never move it.
    pub fn generation(&self) -> u64 {
        self.shared.generation.load(Ordering::Acquire)
    }

    /// Blocks until the generation differs from `seen` or `timeout`
    /// passes (`None`: no timeout); returns the generation then.
    ///
    /// # Blocking
    /// Blocks the calling thread on a condition variable; never polls.
    pub fn wait_for_change(&self, seen: u64, timeout: Option<Duration>) -> u64 {
        let mut guard = self.shared.lock();
        guard.count_waiter(true);
        match timeout {
            None => {
                while guard.generation() == seen {
                    guard =
                        self.shared.changed.wait(guard).unwrap_or_else(std::sync::PoisonError::into_inner);
                }
            }
            #[cfg(not(loom))]
            Some(timeout) => {
                let deadline = std::time::Instant::now() + timeout;
                while guard.generation() == seen {
                    let left = deadline.saturating_duration_since(std::time::Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    guard = self
                        .shared
                        .changed
                        .wait_timeout(guard, left)
                        .map(|(g, _)| g)
                        .unwrap_or_else(|e| e.into_inner().0);
                }
            }
            #[cfg(loom)]
            Some(_) => {}
        }
        guard.count_waiter(false);
        guard.generation()
    }

    /// Threads blocked in [`Governor::wait_for_change`] now. A test hook:
    /// the count is taken under the lock waiters register under, so a test
    /// can see a waiter asleep before it makes the change that wakes it.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn blocked_waiters(&self) -> usize {
        self.shared.lock().waiters()
    }

    /// Pressure level and why.
    pub fn pressure(&self) -> (PressureLevel, String) {
        let guard = self.shared.lock();
        (guard.pressure.level(), guard.pressure.reason().to_owned())
    }

    /// Budgets, what is reserved and what is available now, as of the last
    /// host sample.
    pub fn availability(&self) -> Availability {
        Availability::of(&self.shared.lock())
    }

    /// Registers `waker` to be woken at the next generation change, unless
    /// the generation already differs from `seen` (then returns false).
    pub(crate) fn register_waker(&self, seen: u64, waker: &std::task::Waker) -> bool {
        let mut guard = self.shared.lock();
        // Checked under the ledger lock every change is published under: a
        // change after this takes our waker.
        if guard.generation() != seen {
            return false;
        }
        guard.register_waker(waker);
        true
    }
}
