//! # Implementation details
//!
//! The scan of pending tasks in order (priority, then FIFO) that starts
//! every task the Governor admits, run by two callers: the dispatcher
//! thread, which sleeps until something changes from outside, and a worker
//! whose task just ended (the hand-off: it runs the first admitted task
//! itself). A scan holds the queue lock and the Governor's for the whole
//! walk and calls into the Governor (engine code) but never into the
//! probe: host snapshots are taken before the locks.
//!
//! # Invariants
//! - a scan sees every Governor change up to `scanned_generation`, which
//!   it records; the dispatcher sleeps only on a generation no scan has
//!   seen past (so a release inside a hand-off does not wake it, and a
//!   release elsewhere always does);
//! - a task moves PENDING → RUNNING only inside a scan, holding the
//!   reservation the scan just granted.

use std::sync::Arc;
use std::time::Duration;

use crate::decision::{Decision, DecisionKind, Reason, ReasonCode};
use crate::governor::Hold;
use crate::progress::Phase;
use crate::reservation::Reservation;
use crate::snapshot::Snapshot;

use super::context::{TaskContext, run_callback};
use super::events::QueueEvent;
use super::skip::{Blocked, Need, Reuse};
use super::state::{Note, QueueState, Recorded};
use super::task::{Callback, TaskId, TaskState};
use super::{Inner, MutexGuard};

/// Most pending tasks read per descent of the pending order during a scan
/// (the first descents read fewer, see `scan_locked`).
const WALK_BATCH: usize = 64;

/// A task a scan moved to RUNNING, to launch once every lock is dropped.
pub(crate) struct Start {
    id: TaskId,
    /// Boxed: a start moves from the scan to the worker and into its
    /// context, and each move of a ~200-byte reservation was a `memcpy`
    /// (about 16 per task, BENCHMARKS.md "Fast path IV: queue").
    reservation: Box<Reservation>,
    callback: Callback,
}

/// What one scan decided, acted on once the queue lock is dropped. The
/// admitted tasks go to the caller's buffer (see [`scan_locked`]).
struct Outcome {
    /// Some task waits on host state: re-sample after the interval.
    host_wait: bool,
    /// Callbacks of tasks the scan failed (dropped outside the lock).
    dropped: Vec<Callback>,
    /// Reservations granted to tasks that could not start after all.
    unused: Vec<Reservation>,
}

impl Outcome {
    fn nothing(host_wait: bool) -> Self {
        Outcome { host_wait, dropped: Vec::new(), unused: Vec::new() }
    }

    /// Drops what the scan dropped (with no lock held: a callback's drop
    /// and a reservation's release are not run under the queue lock) and
    /// returns whether some task waits on host state.
    fn settle(self) -> bool {
        drop(self.unused);
        drop(self.dropped);
        self.host_wait
    }
}

pub(crate) fn run(inner: &Arc<Inner>) {
    let mut force = false;
    // The scans' buffer of admitted tasks (its capacity is kept).
    let mut starts = Vec::new();
    loop {
        let epoch = inner.dispatch.epoch();
        let generation = inner.governor.generation();
        let Some(Scanned { host_wait, resample_in }) = scan(inner, std::mem::take(&mut force), &mut starts)
        else {
            return;
        };
        // Sleep until a change no scan has seen yet (a worker that handed
        // its thread to the next task scanned after its own release, so
        // that release, and everything before it, is not news), on a timer
        // while some task waits on host state: one this scan left, or one
        // a hand-off left since.
        let (seen, timed) = {
            let mut st = inner.lock();
            let timed = host_wait || std::mem::take(&mut st.hand_off_host_wait);
            st.dispatcher_timed = timed;
            (generation.max(st.scanned_generation), timed)
        };
        if !inner.governor.register_waker(seen, &inner.dispatch_waker) {
            continue;
        }
        // A scan after a task end that reused a snapshot from before it
        // looks again once that snapshot is END_SAMPLE_AGE old, not a whole
        // sample interval later: a task waiting for the ended one's memory
        // waits at most that long for it to show.
        let timeout = timed.then(|| resample_in.unwrap_or(inner.config.sample_interval));
        if !inner.dispatch.wait(epoch, timeout) {
            // Timed out while waiting on the host: force a fresh sample.
            force = true;
        }
    }
}

/// How old a snapshot the first scan after a task end may reuse. Taking a
/// fresh one at every end (about 230 µs on a real host) cost about 0.1 ms
/// of dispatcher CPU per task at a thousand short tasks a second
/// (BENCHMARKS.md, "Fast path III: submit and launch"); within this age a
/// burst of ends shares one sample.
pub(crate) const END_SAMPLE_AGE: Duration = Duration::from_millis(10);

/// A snapshot young enough to reuse (the last one any scan took), or a
/// fresh one from the probe (fed to the Governor). Called with no lock
/// held but the cache's (a leaf): the probe is outside code.
pub(crate) fn snapshot(inner: &Inner, force: bool) -> Result<Snapshot, String> {
    let max_age = if force { Duration::ZERO } else { inner.config.sample_interval };
    snapshot_within(inner, max_age).map(|(snap, _)| snap)
}

/// [`snapshot`] reusing only one younger than `max_age`; also says how old
/// a reused one is (`None` when it was taken now).
fn snapshot_within(inner: &Inner, max_age: Duration) -> Result<(Snapshot, Option<Duration>), String> {
    let now = inner.governor.now();
    if !max_age.is_zero() {
        let cache = crate::sync::lock(&inner.last_sample);
        if let Some(snap) = cache.as_ref()
            && let Some(age) = now.checked_since(snap.captured_at).filter(|age| *age < max_age)
        {
            return Ok((snap.clone(), Some(age)));
        }
    }
    match inner.governor.sample() {
        Ok(snap) => {
            *crate::sync::lock(&inner.last_sample) = Some(snap.clone());
            Ok((snap, None))
        }
        Err(e) => {
            *crate::sync::lock(&inner.last_sample) = None;
            Err(format!("cannot observe the host: {e}"))
        }
    }
}

/// What a dispatcher scan leaves its next sleep to know.
pub(super) struct Scanned {
    /// Some task waits on host state.
    pub(super) host_wait: bool,
    /// The scan reused a snapshot taken before a task ended: look again
    /// after this long, when it is [`END_SAMPLE_AGE`] old.
    pub(super) resample_in: Option<Duration>,
}

/// The dispatcher's scan: every pending task in order, every admitted one
/// launched on the pool (through `starts`, an empty buffer the caller
/// keeps). `None` once the queue closes.
pub(super) fn scan(inner: &Arc<Inner>, force: bool, starts: &mut Vec<Start>) -> Option<Scanned> {
    #[cfg(test)]
    inner.dispatcher_scans.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let (changed, ended) = {
        let mut st = inner.lock();
        (std::mem::take(&mut st.dispatcher_wake), std::mem::take(&mut st.task_ended))
    };
    let max_age = if force || changed {
        Duration::ZERO
    } else if ended {
        END_SAMPLE_AGE.min(inner.config.sample_interval)
    } else {
        inner.config.sample_interval
    };
    let snap = snapshot_within(inner, max_age);
    let resample_in = match &snap {
        Ok((_, Some(age))) if ended => Some(max_age.saturating_sub(*age).max(Duration::from_millis(1))),
        _ => None,
    };
    let snap = snap.map(|(snap, _)| snap);
    let now = inner.governor.now();
    let mut st = inner.lock();
    if st.closing {
        return None;
    }
    let snap = match snap {
        Ok(s) => s,
        Err(message) => {
            let ids: Vec<TaskId> = st.pending.values().collect();
            for id in ids {
                st.record_decision(id, DecisionKind::Wait, ReasonCode::ProbeFailed, &message, now);
            }
            // Every fresh task got its answer: a scan always empties the
            // list (a submit wakes the dispatcher only when it was empty).
            st.fresh.clear();
            return Some(Scanned { host_wait: true, resample_in: None });
        }
    };
    let mut gov_scan = inner.governor.scan_for(&inner.dispatch_waker);
    let outcome = scan_locked(inner, &mut st, &mut gov_scan, &snap, now, starts);
    // A task the scan failed (rejected, or a dependency failed) left.
    let left = (!outcome.dropped.is_empty()).then(|| st.entries.is_empty());
    // The queue lock goes first: ending the scan runs registered wakers
    // (async code's), which must never run under the queue lock.
    drop(st);
    drop(gov_scan);
    let host_wait = outcome.settle();
    if let Some(idle) = left {
        inner.tasks_left(idle);
    }
    for start in starts.drain(..) {
        launch(inner, start);
    }
    Some(Scanned { host_wait, resample_in })
}

/// A worker's end of task `id` (its callback has returned): releases
/// `reservation` and ends the task in `state`, then — the hand-off — runs
/// the dispatcher's scan itself, under the same hold of both locks, so the
/// next admissible task starts on this thread with no dispatcher round
/// trip. The scan is the dispatcher's own code, so every order rule
/// (priority, FIFO, bypass, holds, dependencies, pause) holds alike.
/// Returns the first admitted task for this thread to run; any others
/// go to the pool. `starts` is the worker's buffer for the scan's admitted
/// tasks (empty; kept along its chain of tasks so that a hand-off
/// allocates none).
///
/// The dispatcher is woken only for what a worker cannot do: re-sampling
/// the host (some task waits on host state, or the probe failed).
pub(crate) fn end_and_hand_off(
    inner: &Arc<Inner>,
    id: TaskId,
    state: TaskState,
    message: Option<String>,
    reservation: Option<Box<Reservation>>,
    starts: &mut Vec<Start>,
) -> Option<Start> {
    // A reservation holding a scratch lease is released first, outside
    // the scan, as a dropped one is: its lease directory is removed (and a
    // drain it was the last lease of is finished) before the task is seen
    // to end, so whoever sees the end sees the volume settled.
    let reservation = match reservation {
        Some(r) if r.contract().scratch.is_some() => {
            drop(r);
            None
        }
        other => other,
    };
    // The probe and the clock are outside code: read before any lock.
    let snap = snapshot(inner, false);
    let now = inner.governor.now();
    let mut st = inner.lock();
    let mut gov_scan = inner.governor.scan_for(&inner.dispatch_waker);
    // Released before the task ends: a `Finished` event always follows the
    // release (whoever reads availability after it sees nothing held).
    let released = reservation.map(|r| gov_scan.release(r));
    // The entry this end evicts from the history (when it is full) is
    // dropped after the locks: its box was allocated by the submitting
    // thread, and freeing it here is the costliest free of a task.
    let evicted = if st.entries.contains_key(&id) { st.evict_one() } else { None };
    // `TaskContext::fail` turns a callback's `Ok` into a failure.
    let failed = match st.entries.get(&id) {
        Some(e) if state == TaskState::Completed => e.failed_message.clone(),
        _ => None,
    };
    let (state, message) = match failed {
        Some(m) => (TaskState::Failed, Some(m)),
        None => (state, message),
    };
    let dropped = if st.entries.contains_key(&id) { st.finish(id, state, message, now) } else { Vec::new() };
    let outcome = match snap {
        Ok(snap) if !st.closing => scan_locked(inner, &mut st, &mut gov_scan, &snap, now, starts),
        // Closing: nothing starts. Probe failure: the dispatcher records it
        // and re-samples on its timer.
        Ok(_) => Outcome::nothing(false),
        Err(_) => Outcome::nothing(true),
    };
    // The queue lock goes first: ending the scan runs registered wakers
    // (async code's), which must never run under the queue lock.
    // A task left waiting on host state needs the dispatcher's timer: wake
    // it only if it is not already re-sampling (it reads the flag after
    // every scan, so it cannot miss it on its way to sleep).
    let wake_dispatcher = outcome.host_wait && {
        st.hand_off_host_wait = true;
        !st.dispatcher_timed
    };
    let idle = st.entries.is_empty();
    drop(st);
    drop(gov_scan);
    if let Some(released) = released {
        inner.governor.after_release(released);
    }
    drop(dropped);
    drop(evicted);
    outcome.settle();
    inner.tasks_left(idle);
    if wake_dispatcher {
        inner.wake_dispatcher();
    }
    let mut admitted = starts.drain(..);
    let mine = admitted.next();
    for other in admitted {
        launch(inner, other);
    }
    mine
}
/// One scan of the pending order under the queue lock and the Governor's
/// (held for the whole walk, so no release lands between two evaluations
/// and a task behind a waiting one cannot overtake it in FIFO order).
/// Shared by the dispatcher and by a worker handing off its thread.
/// Admitted tasks are appended to `starts`, in the pending order.
fn scan_locked(
    inner: &Inner,
    st: &mut MutexGuard<'_, QueueState>,
    gov_scan: &mut crate::governor::Scan<'_>,
    snap: &Snapshot,
    now: crate::MonoTime,
    starts: &mut Vec<Start>,
) -> Outcome {
    // The fresh list and the walk's batch are buffers kept in the state
    // (handed back below, capacity kept): no allocation per scan or per
    // submit once they have grown.
    let mut fresh = std::mem::take(&mut st.fresh);
    let bound = inner.config.starvation_bound;
    let unified = gov_scan.gpus_unified();
    let cap = gov_scan.max_running();
    let mut head: Option<TaskId> = None;
    let mut hold: Option<Hold> = None;
    let mut bypassed_head = false;
    let mut host_wait = false;
    let mut dropped: Vec<Callback> = Vec::new();
    let mut unused: Vec<Reservation> = Vec::new();
    let mut blocked = Blocked::default();
    let mut queue_wait: Option<Recorded> = None;
    let mut reuse: Option<Reuse> = None;
    // Walk the pending order with a cursor (tasks leave it as they start);
    // once a queue- or host-wide reason blocks everything, only tasks never
    // evaluated are still looked at (so an impossible one is rejected now).
    // The cursor is read in batches (one lane lookup per batch, not per
    // task): a task the walk started or ended meanwhile is still in the
    // batch, and is skipped below as started or gone.
    let mut cursor: Option<(i64, u64)> = None;
    let mut batch = std::mem::take(&mut st.walk);
    batch.clear();
    // Batches grow from 2: a hand-off's scan usually stops after one or
    // two tasks (the first admitted, the next blocked queue-wide), so
    // copying 64 keys out of the pending order would be wasted.
    let mut batch_size = 2;
    let mut next_fresh = 0;
    loop {
        let id = if blocked.all {
            match fresh.get(next_fresh) {
                Some(&id) => {
                    next_fresh += 1;
                    id
                }
                None => break,
            }
        } else {
            if batch.is_empty() {
                for (key, id) in st.pending.after(cursor).take(batch_size) {
                    cursor = Some(key);
                    batch.push(id);
                }
                batch_size = (batch_size * 2).min(WALK_BATCH);
                batch.reverse();
            }
            match batch.pop() {
                Some(id) => id,
                None => break,
            }
        };
        let Some(e) = st.entries.get(&id) else { continue };
        if e.started || (blocked.all && e.last_decision.is_some()) {
            continue;
        }
        if e.state == TaskState::Paused || !e.waiting_on.is_empty() || !e.waiting_any.is_empty() {
            continue;
        }
        let evaluated_before = e.last_decision.is_some();
        // The running cap reached, no evaluation can grant (`max_running`
        // is admission's last step), so a task evaluated before is not
        // evaluated again: the scan goes on as if it had answered that
        // queue-wide WAIT, and only fresh tasks are still evaluated (so an
        // impossible one is still rejected at once). On a busy queue this
        // spares an admission per task: the one after the task a hand-off
        // starts.
        if evaluated_before
            && let Some(cap) = cap
            && st.running >= cap as usize
        {
            blocked.all = true;
            head.get_or_insert(id);
            queue_wait.get_or_insert_with(|| Recorded {
                kind: DecisionKind::Wait,
                reason: ReasonCode::MaxRunning,
                note: Note::Reason(Reason::max_running(st.running, cap)),
                at: now,
            });
            continue;
        }
        // What the task needs is worked out only where it is read: here,
        // and to learn from a resource WAIT below (not for a grant or a
        // queue-wide WAIT, a scan's common answers).
        // A head with a hold pending is always evaluated (it sets the hold).
        if evaluated_before
            && head.is_some()
            && Need::of(&e.envelope, unified).is_some_and(|n| blocked.covers(&n))
        {
            continue;
        }
        let is_head = head.is_none();
        let reused = reuse
            .as_ref()
            .filter(|r| r.running == st.running && r.held == hold.is_some())
            .filter(|r| st.entries.get(&r.id).is_some_and(|t| t.envelope == e.envelope))
            .map(|r| r.why.clone());
        let result = match reused {
            Some(why) => Err(Decision::Wait(why)),
            None => {
                let result = gov_scan.reserve(&e.envelope, snap, st.running, hold.as_ref());
                reuse = match &result {
                    Err(Decision::Wait(why)) if why.code().scope().queue_wide() => {
                        Some(Reuse { id, why: why.clone(), running: st.running, held: hold.is_some() })
                    }
                    _ => None,
                };
                result
            }
        };
        match result {
            Ok(reservation) => {
                if !is_head {
                    bypassed_head = true;
                }
                let (kind, reason) = (reservation.kind(), reservation.reason());
                let c = reservation.contract();
                let note = Note::Granted { batch: c.batch, memory: c.memory, cpu_millis: c.cpu_millis };
                st.record_decision(id, kind, reason, note, now);
                match start(st, id, &reservation, now) {
                    Some(callback) => {
                        #[cfg(test)]
                        inner.in_flight.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        starts.push(Start { id, reservation: Box::new(reservation), callback });
                    }
                    None => unused.push(reservation),
                }
            }
            Err(Decision::Wait(why)) => {
                host_wait |= why.code().scope().waits_on_host();
                let need =
                    if why.code().scope().queue_wide() { None } else { Need::of(&e.envelope, unified) };
                blocked.learn(why.code(), need.as_ref());
                let code = why.code();
                if blocked.all && queue_wait.is_none() {
                    queue_wait = Some(Recorded {
                        kind: DecisionKind::Wait,
                        reason: code,
                        note: Note::Reason(why.clone()),
                        at: now,
                    });
                }
                st.record_decision(id, DecisionKind::Wait, code, why, now);
                if is_head {
                    head = Some(id);
                    let starving = st
                        .entries
                        .get(&id)
                        .and_then(|e| e.bypassed_since)
                        .is_some_and(|since| now.saturating_since(since) >= bound);
                    if starving && let Some(e) = st.entries.get(&id) {
                        let first = &e.envelope.alternatives()[0];
                        hold = Some(Hold::for_estimate(first.estimate(), unified));
                    }
                }
            }
            // A REJECT fails the task without calling it (a grant is never
            // an `Err`).
            Err(refused) => {
                st.record_decision(id, refused.kind(), refused.reason(), refused.message(), now);
                dropped.extend(st.finish(id, TaskState::Failed, Some(refused.message().to_owned()), now));
            }
        }
    }
    if let Some(h) = head
        && bypassed_head
        && let Some(e) = st.entries.get_mut(&h)
    {
        e.bypassed_since.get_or_insert(now);
    }
    st.queue_wait = queue_wait;
    // Nothing was submitted meanwhile (the scan holds the queue lock).
    fresh.clear();
    st.fresh = fresh;
    st.walk = batch;
    if let Some(generation) = gov_scan.generation() {
        st.scanned_generation = st.scanned_generation.max(generation);
    }
    if (!starts.is_empty() || !dropped.is_empty()) && st.blocked_submits > 0 {
        inner.not_full.notify_all();
    }
    Outcome { host_wait, dropped, unused }
}

/// PENDING → RUNNING under the lock; returns the callback to run.
fn start(
    st: &mut MutexGuard<'_, QueueState>,
    id: TaskId,
    r: &Reservation,
    now: crate::MonoTime,
) -> Option<Callback> {
    let e = st.entries.get_mut(&id)?;
    let key = e.order_key();
    let callback = e.callback.take()?;
    // `r` was granted in this scan (the Governor's lock is still held, so
    // it cannot have been released): a task never starts without one.
    e.started = true;
    e.state = TaskState::Running;
    e.started_at.get_or_insert(now);
    e.contract = Some(r.contract().clone());
    e.sequences = 1;
    e.bypassed_since = None;
    let _ = e.progress.set_phase(Phase::Running, now);
    st.pending.remove(&key);
    st.running += 1;
    st.emit(|| QueueEvent::Started { id, contract: r.contract().clone() });
    Some(callback)
}

/// Runs `start` on a pool thread (on this one when no thread can be
/// started: the task holds its reservation and must run to release it).
fn launch(inner: &Arc<Inner>, start: Start) {
    let for_job = Arc::clone(inner);
    let job: Box<dyn FnOnce() + Send> = Box::new(move || run_chain(&for_job, start));
    if let Err(job) = inner.pool.execute(job) {
        job();
    }
}

/// Runs `start`, then each task the worker is handed at the end of the
/// previous one, on the current thread (a loop, not a recursion: a chain
/// of hand-offs can be as long as the queue).
pub(crate) fn run_chain(inner: &Arc<Inner>, start: Start) {
    let mut next = Some(start);
    // The hand-offs' buffer of admitted tasks, kept along the chain.
    let mut starts = Vec::new();
    while let Some(Start { id, reservation, callback }) = next.take() {
        if let Some(grant) = reservation.contract().scratch.clone()
            && let Err(message) = inner.governor.prepare_scratch(&grant)
        {
            drop(reservation);
            let now = inner.governor.now();
            let (dropped, idle) = {
                let mut st = inner.lock();
                let dropped = st.finish(id, TaskState::Failed, Some(message), now);
                (dropped, st.entries.is_empty())
            };
            drop(dropped);
            drop(callback);
            inner.tasks_left(idle);
            inner.wake_dispatcher();
            #[cfg(test)]
            inner.in_flight.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            return;
        }
        let ctx = TaskContext::new(Arc::clone(inner), id, reservation);
        next = run_callback(ctx, callback, &mut starts);
    }
}
