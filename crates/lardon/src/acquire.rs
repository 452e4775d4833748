//! The async face of the Governor (cargo feature `async`):
//! [`Governor::acquire`] returns an [`Acquire`] future, so async code can
//! wait for admission without blocking a thread.
//!
//! The future is executor-agnostic (no runtime dependency): it is woken by
//! the Governor's generation counter, exactly like
//! [`Governor::wait_for_change`] wakes blocked threads.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::decision::{Decision, DecisionKind};
use crate::envelope::Envelope;
use crate::estimate::Estimate;
use crate::governor::Governor;
use crate::reservation::Reservation;

/// What an [`Acquire`] asks for.
#[derive(Debug)]
enum Request {
    Estimate(Estimate),
    Envelope(Envelope),
}

/// A future resolving to a [`Reservation`] once the Governor admits the
/// request (ADMIT or REDUCE_BATCH), or to the REJECT [`Decision`].
///
/// Created by [`Governor::acquire`] or [`Governor::acquire_envelope`].
///
/// Each poll tries [`Governor::reserve_available`] (a fresh snapshot from
/// the probe); on WAIT it registers the task's waker and resolves on a later
/// poll, after the generation moves (a release, a recorded batch, a policy
/// change, or a host sample that changes a budget).
///
/// # Host-state waits
/// A WAIT caused by the host itself (memory, pressure, load, a stale
/// snapshot: see [`crate::ReasonScope::waits_on_host`]) only clears when
/// something re-samples the host with [`Governor::sample`] and the budgets
/// change: the future never polls the probe on a timer. Keep a sampler
/// running while such futures are pending (the Task Queue's sampler does
/// this), or call [`Governor::sample`] from a periodic task of your runtime.
///
/// # Cancel safety
/// Dropping the future at any point reserves nothing: a reservation exists
/// only once the future has returned it. A waker registered by a dropped
/// future stays with the Governor until the next generation change, which
/// wakes it (a spurious wake-up) and drops it.
///
/// Polling again after completion panics, like most futures.
#[must_use = "futures do nothing unless polled"]
pub struct Acquire {
    governor: Governor,
    request: Option<Request>,
}

impl fmt::Debug for Acquire {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Acquire").field("request", &self.request).finish_non_exhaustive()
    }
}

impl Governor {
    /// Waits (asynchronously) until `estimate` is admitted; resolves to the
    /// reservation, or to the REJECT decision (an invalid estimate, or one
    /// impossible on this host). See [`Acquire`].
    ///
    /// # Examples
    /// ```
    /// use lardon::{Estimate, FakeProbe, Governor, HostPolicy, HostProfile};
    /// # use std::future::Future;
    /// # use std::sync::Arc;
    /// # use std::task::{Context, Poll, Wake, Waker};
    /// # struct Noop;
    /// # impl Wake for Noop { fn wake(self: Arc<Self>) {} }
    ///
    /// let profile = HostProfile::new(16 << 30, 8);
    /// let governor = Governor::new(HostPolicy::default_for(&profile), FakeProbe::new(profile)).unwrap();
    /// let mut acquire = governor.acquire(Estimate::builder().memory(1 << 30).build());
    /// // In any async runtime: `let reservation = acquire.await?;`. By hand:
    /// # let waker = Waker::from(Arc::new(Noop));
    /// let poll = std::pin::Pin::new(&mut acquire).poll(&mut Context::from_waker(&waker));
    /// let Poll::Ready(Ok(reservation)) = poll else { panic!("admitted at once") };
    /// assert_eq!(reservation.contract().memory, 1 << 30);
    /// ```
    pub fn acquire(&self, estimate: Estimate) -> Acquire {
        Acquire { governor: self.clone(), request: Some(Request::Estimate(estimate)) }
    }

    /// Like [`Governor::acquire`] for a capability envelope
    /// ([`Governor::reserve_envelope_available`] on each attempt).
    pub fn acquire_envelope(&self, envelope: Envelope) -> Acquire {
        Acquire { governor: self.clone(), request: Some(Request::Envelope(envelope)) }
    }
}

impl Future for Acquire {
    type Output = Result<Reservation, Decision>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // Every field is Unpin, so is Acquire.
        let this = self.get_mut();
        let Some(request) = &this.request else {
            panic!("`Acquire` polled after completion");
        };
        loop {
            // Read before the attempt: a change after it is never missed.
            let seen = this.governor.generation();
            let outcome = match request {
                Request::Estimate(e) => this.governor.reserve_available(e),
                Request::Envelope(e) => this.governor.reserve_envelope_available(e),
            };
            match outcome {
                Err(decision) if decision.kind() == DecisionKind::Wait => {
                    if this.governor.register_waker(seen, cx.waker()) {
                        return Poll::Pending;
                    }
                    // The generation moved during the attempt: try again now.
                }
                done => {
                    this.request = None;
                    return Poll::Ready(done);
                }
            }
        }
    }
}
