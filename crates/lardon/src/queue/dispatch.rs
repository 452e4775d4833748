//! # Implementation details
//!
//! The dispatcher: one thread that scans pending tasks in order
//! (priority, then FIFO), starts every task the Governor admits, and sleeps
//! until something changes. It holds the queue lock during a scan and
//! calls into the Governor (engine code) but never into the probe: host
//! snapshots are taken before the lock.

use std::sync::Arc;
use std::task::Waker;

use crate::decision::{DecisionKind, ReasonCode};
use crate::governor::Hold;
use crate::progress::Phase;
use crate::reservation::Reservation;
use crate::snapshot::Snapshot;

use super::context::{TaskContext, run_callback};
use super::events::{DecisionRecord, QueueEvent};
use super::state::QueueState;
use super::task::{Callback, TaskId, TaskState};
use super::{Inner, MutexGuard};

/// What earlier waits in this scan prove about later tasks: a task that
/// was already evaluated once and needs at least as much of a resource that
/// made an earlier task wait would wait too, so it is not evaluated again
/// (this keeps a scan over a long backlog cheap). Fresh tasks are always
/// evaluated, so an impossible task is rejected at once.
#[derive(Default)]
struct Blocked {
    /// A host-wide or queue-wide reason: every later evaluated task waits
    /// (and keeps its last decision: re-recording it would cost a pass over
    /// the whole backlog).
    all: bool,
    memory: Option<u64>,
    cpu: Option<u64>,
    io: bool,
    /// Some task waited for a GPU slot: every GPU task would.
    gpu_slot: bool,
    /// The smallest per-device GPU memory that waited.
    gpu_memory: Option<u64>,
    scratch: Option<u64>,
}

/// The minimum a single-alternative task needs to start.
struct Need {
    memory: u64,
    cpu: u64,
    io: bool,
    gpu: bool,
    /// Per-device GPU memory at `batch_min` (0 on unified hosts: folded).
    gpu_memory: u64,
    scratch: u64,
}

impl Need {
    fn of(envelope: &crate::envelope::Envelope, unified: bool) -> Option<Need> {
        let [alt] = envelope.alternatives() else { return None };
        let e = alt.estimate();
        let gpu_bytes = if unified { e.gpu_memory_for(e.batch_min()).unwrap_or(u64::MAX) } else { 0 };
        Some(Need {
            memory: e.memory_for(e.batch_min()).unwrap_or(u64::MAX).saturating_add(gpu_bytes),
            cpu: u64::from(if e.cpus_reducible() { e.cpus().min(1000) } else { e.cpus() }),
            io: e.io_slots() > 0,
            gpu: e.gpu_slots() > 0,
            gpu_memory: if unified { 0 } else { e.gpu_memory_for(e.batch_min()).unwrap_or(u64::MAX) },
            scratch: e.scratch_bytes(),
        })
    }
}

impl Blocked {
    fn covers(&self, need: &Need) -> bool {
        self.all
            || self.memory.is_some_and(|m| need.memory >= m)
            || self.cpu.is_some_and(|c| need.cpu >= c)
            || (self.io && need.io)
            || (self.gpu_slot && need.gpu)
            || self.gpu_memory.is_some_and(|g| need.gpu && need.gpu_memory >= g)
            || self.scratch.is_some_and(|b| need.scratch >= b && need.scratch > 0)
    }

    fn learn(&mut self, reason: ReasonCode, need: Option<&Need>) {
        match (reason, need) {
            (
                ReasonCode::StaleSnapshot
                | ReasonCode::InvalidSnapshot
                | ReasonCode::ProbeFailed
                | ReasonCode::PressureRed
                | ReasonCode::CpuLoad
                | ReasonCode::CpuPressure
                | ReasonCode::MemoryPressure
                | ReasonCode::MaxRunning,
                _,
            ) => self.all = true,
            (ReasonCode::Memory, Some(n)) => {
                self.memory = Some(self.memory.map_or(n.memory, |m| m.min(n.memory)))
            }
            (ReasonCode::Cpu, Some(n)) => self.cpu = Some(self.cpu.map_or(n.cpu, |c| c.min(n.cpu))),
            (ReasonCode::IoSlot | ReasonCode::IoPressure, Some(_)) => self.io = true,
            (ReasonCode::GpuSlot, Some(_)) => self.gpu_slot = true,
            (ReasonCode::GpuMemory, Some(n)) => {
                self.gpu_memory = Some(self.gpu_memory.map_or(n.gpu_memory, |g| g.min(n.gpu_memory)));
            }
            (ReasonCode::Scratch, Some(n)) => {
                self.scratch = Some(self.scratch.map_or(n.scratch, |b| b.min(n.scratch)));
            }
            _ => {}
        }
    }
}

struct Scan {
    /// Some task waits on host state: re-sample after the interval.
    host_wait: bool,
    exit: bool,
}

pub(crate) fn run(inner: &Arc<Inner>) {
    let waker = Waker::from(Arc::clone(&inner.dispatch));
    let mut last: Option<Snapshot> = None;
    loop {
        let epoch = inner.dispatch.epoch();
        let generation = inner.governor.generation();
        let scan = scan(inner, &mut last);
        if scan.exit {
            return;
        }
        if !inner.governor.register_waker(generation, &waker) {
            continue;
        }
        let timeout = scan.host_wait.then_some(inner.config.sample_interval);
        if !inner.dispatch.wait(epoch, timeout) {
            // Timed out while waiting on the host: force a fresh sample.
            last = None;
        }
    }
}

/// A snapshot young enough to reuse, or a fresh one (fed to the Governor).
fn snapshot(inner: &Inner, last: &mut Option<Snapshot>, force: bool) -> Result<Snapshot, String> {
    let now = inner.governor.now();
    if !force
        && let Some(snap) = last.as_ref()
        && now.checked_since(snap.captured_at).is_some_and(|age| age < inner.config.sample_interval)
    {
        return Ok(snap.clone());
    }
    match inner.governor.sample() {
        Ok(snap) => {
            *last = Some(snap.clone());
            Ok(snap)
        }
        Err(e) => {
            *last = None;
            Err(format!("cannot observe the host: {e}"))
        }
    }
}

fn scan(inner: &Arc<Inner>, last: &mut Option<Snapshot>) -> Scan {
    let force = std::mem::take(&mut inner.lock().dispatcher_wake);
    let snap = snapshot(inner, last, force);
    let now = inner.governor.now();
    let mut st = inner.lock();
    if st.closing {
        return Scan { host_wait: false, exit: true };
    }
    let snap = match snap {
        Ok(s) => s,
        Err(message) => {
            let ids: Vec<TaskId> = st.pending.values().copied().collect();
            for id in ids {
                st.record_decision(id, DecisionKind::Wait, ReasonCode::ProbeFailed, &message, now);
            }
            return Scan { host_wait: true, exit: false };
        }
    };
    let fresh = std::mem::take(&mut st.fresh);
    let bound = inner.config.starvation_bound;
    let unified = inner.governor.gpus_unified();
    let mut head: Option<TaskId> = None;
    let mut hold: Option<Hold> = None;
    let mut bypassed_head = false;
    let mut host_wait = false;
    let mut to_start: Vec<(TaskId, Reservation, Callback)> = Vec::new();
    let mut dropped: Vec<Callback> = Vec::new();
    let mut unused: Vec<Reservation> = Vec::new();
    let mut blocked = Blocked::default();
    let mut queue_wait: Option<DecisionRecord> = None;
    let mut gov_scan = inner.governor.scan();
    // Walk the pending order with a cursor (tasks leave it as they start);
    // once a queue- or host-wide reason blocks everything, only tasks never
    // evaluated are still looked at (so an impossible one is rejected now).
    let mut cursor: Option<(i64, u64)> = None;
    let mut fresh = fresh.into_iter();
    loop {
        let id = if blocked.all {
            match fresh.next() {
                Some(id) => id,
                None => break,
            }
        } else {
            let next = match cursor {
                None => st.pending.iter().next(),
                Some(c) => {
                    st.pending.range((std::ops::Bound::Excluded(c), std::ops::Bound::Unbounded)).next()
                }
            };
            match next {
                Some((key, id)) => {
                    cursor = Some(*key);
                    *id
                }
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
        let need = Need::of(&e.envelope, unified);
        let evaluated_before = e.last_decision.is_some();
        // A head with a hold pending is always evaluated (it sets the hold).
        if evaluated_before && head.is_some() && need.as_ref().is_some_and(|n| blocked.covers(n)) {
            continue;
        }
        let is_head = head.is_none();
        let result = gov_scan.reserve(&e.envelope, &snap, st.running, hold.as_ref());
        match result {
            Ok(reservation) => {
                if !is_head {
                    bypassed_head = true;
                }
                let (kind, reason) = (reservation.kind(), reservation.reason());
                let message = admitted_message(&reservation);
                st.record_decision(id, kind, reason, &message, now);
                match start(&mut st, id, &reservation, now) {
                    Some(cb) => to_start.push((id, reservation, cb)),
                    None => unused.push(reservation),
                }
            }
            Err(decision) if decision.kind == DecisionKind::Wait => {
                host_wait |= decision.reason.waits_on_host();
                blocked.learn(decision.reason, need.as_ref());
                if blocked.all && queue_wait.is_none() {
                    queue_wait = Some(DecisionRecord {
                        kind: decision.kind,
                        reason: decision.reason,
                        message: decision.message.clone(),
                        at: now,
                    });
                }
                st.record_decision(id, decision.kind, decision.reason, &decision.message, now);
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
            Err(decision) => {
                st.record_decision(id, decision.kind, decision.reason, &decision.message, now);
                dropped.extend(st.finish(id, TaskState::Failed, Some(decision.message), now));
            }
        }
    }
    if let Some(h) = head
        && bypassed_head
        && let Some(e) = st.entries.get_mut(&h)
    {
        e.bypassed_since.get_or_insert(now);
    }
    drop(gov_scan);
    st.queue_wait = queue_wait;
    if !to_start.is_empty() || !dropped.is_empty() {
        inner.not_full.notify_all();
    }
    drop(st);
    drop(unused);
    drop(dropped);
    for (id, reservation, callback) in to_start {
        launch(inner, id, reservation, callback);
    }
    Scan { host_wait, exit: false }
}

fn admitted_message(r: &Reservation) -> String {
    let c = r.contract();
    format!(
        "batch {}, {} memory, {} CPUs",
        c.batch,
        crate::units::format_bytes(c.memory),
        crate::units::format_cpus(c.cpu_millis)
    )
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
    let contract = r.contract().clone();
    st.pending.remove(&key);
    st.running += 1;
    st.emit(QueueEvent::Started { id, contract });
    Some(callback)
}

fn launch(inner: &Arc<Inner>, id: TaskId, reservation: Reservation, callback: Callback) {
    if let Some(grant) = reservation.contract().scratch.clone()
        && let Err(message) = inner.governor.prepare_scratch(&grant)
    {
        drop(reservation);
        let now = inner.governor.now();
        let dropped = inner.lock().finish(id, TaskState::Failed, Some(message), now);
        drop(dropped);
        drop(callback);
        inner.tasks.bump();
        inner.wake_dispatcher();
        return;
    }
    #[cfg(test)]
    inner.in_flight.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let ctx = TaskContext::new(Arc::clone(inner), id, reservation);
    let job: Box<dyn FnOnce() + Send> = Box::new(move || run_callback(ctx, callback));
    if let Err(job) = inner.pool.execute(job) {
        // No thread could be started: run the callback here rather than
        // lose the task (it holds its reservation and will release it).
        job();
    }
}
