//! What a running callback gets: [`TaskContext`].

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::task::Waker;
use std::time::Duration;

use crate::contract::Contract;
use crate::decision::DecisionKind;
use crate::governor::Governor;
use crate::parallel::{ParMapError, par_map, try_par_map};
use crate::progress::{Phase, Progress, ProgressError};
use crate::reservation::Reservation;

use super::Inner;
use super::dispatch::Start;
use super::events::QueueEvent;
use super::task::{Callback, TaskError, TaskId, TaskResult, TaskState};

/// The running task's handle on the queue: its contract, progress,
/// checkpoints, sequences and parallel helpers.
///
/// It owns the task's reservation; whatever the callback does — return,
/// fail, panic — the reservation is released exactly once.
pub struct TaskContext {
    inner: Arc<Inner>,
    id: TaskId,
    held: Held,
}

/// What a running task holds: its reservation (whose contract is the
/// sequence's: no copy is made per task), or, between two sequences, a
/// copy of the ended sequence's contract.
enum Held {
    Reserved(Box<Reservation>),
    Between(Contract),
}

impl std::fmt::Debug for TaskContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskContext").field("id", &self.id).field("contract", self.contract()).finish()
    }
}

impl TaskContext {
    pub(crate) fn new(inner: Arc<Inner>, id: TaskId, reservation: Box<Reservation>) -> Self {
        TaskContext { inner, id, held: Held::Reserved(reservation) }
    }

    /// This task's id.
    pub fn id(&self) -> TaskId {
        self.id
    }

    /// A copy of the current sequence's contract.
    pub fn contract(&self) -> &Contract {
        match &self.held {
            Held::Reserved(r) => r.contract(),
            Held::Between(c) => c,
        }
    }

    /// Whether the task holds an active reservation now (false only
    /// between sequences, inside `sequence_break`).
    pub fn holds_reservation(&self) -> bool {
        matches!(&self.held, Held::Reserved(r) if r.is_valid())
    }

    /// Takes the reservation out (the task keeps a copy of its contract),
    /// for its release.
    fn take_reservation(&mut self) -> Option<Box<Reservation>> {
        if !matches!(self.held, Held::Reserved(_)) {
            return None;
        }
        let kept = Held::Between(self.contract().clone());
        match std::mem::replace(&mut self.held, kept) {
            Held::Reserved(r) => Some(r),
            Held::Between(_) => None,
        }
    }

    /// The Governor (read-only uses: availability, history).
    pub fn governor(&self) -> &Governor {
        &self.inner.governor
    }

    /// Reports progress in items.
    ///
    /// # Errors
    /// [`ProgressError`] for `total == 0` or `done > total`; nothing changes.
    pub fn set_progress(&self, done: u64, total: u64) -> Result<(), ProgressError> {
        self.report(Progress::items(done, total)?)
    }

    /// Reports progress as a percentage in hundredths (`5000` = 50 %).
    ///
    /// # Errors
    /// [`ProgressError::PercentOutOfRange`] above 100 %.
    pub fn set_percent(&self, hundredths: u16) -> Result<(), ProgressError> {
        self.report(Progress::percent(hundredths)?)
    }

    fn report(&self, progress: Progress) -> Result<(), ProgressError> {
        let now = self.inner.governor.now();
        let mut st = self.inner.lock();
        if let Some(e) = st.entries.get_mut(&self.id) {
            e.progress.report(progress, now)?;
            st.emit(|| QueueEvent::Progress { id: self.id, progress });
        }
        Ok(())
    }

    /// Blocks while the task is paused (keeping its reservation).
    ///
    /// # Errors
    /// [`TaskError::Cancelled`] once the task was cancelled: return it.
    pub fn checkpoint(&self) -> TaskResult {
        loop {
            let epoch = self.inner.tasks.epoch();
            let now = self.inner.governor.now();
            {
                let mut st = self.inner.lock();
                let Some(e) = st.entries.get_mut(&self.id) else { return Err(TaskError::Cancelled) };
                if e.cancel_requested {
                    return Err(TaskError::Cancelled);
                }
                let next = if e.pause_requested { TaskState::Paused } else { TaskState::Running };
                if e.state != next {
                    e.state = next;
                    let phase = if next == TaskState::Paused { Phase::Paused } else { Phase::Running };
                    let _ = e.progress.set_phase(phase, now);
                    st.emit(|| QueueEvent::StateChanged { id: self.id, state: next });
                }
                if next == TaskState::Running {
                    return Ok(());
                }
            }
            self.inner.tasks.wait(epoch, None);
        }
    }

    /// Ends the current sequence: releases the reservation, waits (on the
    /// Governor's generation, never a poll) for a new admission, installs
    /// the new contract and returns it. Progress is kept. A task submitted
    /// with its items left ([`crate::EstimateBuilder::items_left`]) is
    /// re-admitted with those its last [`TaskContext::set_progress`] says
    /// are left (docs/DESIGN.md §4 step 9).
    ///
    /// # Errors
    /// [`TaskError::Cancelled`] when cancelled (while paused or waiting),
    /// [`TaskError::Failed`] when the Governor rejects the task.
    pub fn sequence_break(&mut self) -> Result<Contract, TaskError> {
        drop(self.take_reservation());
        let signal = Arc::clone(&self.inner.tasks);
        let waker = Waker::from(Arc::clone(&signal));
        let envelope = {
            let st = self.inner.lock();
            st.entries.get(&self.id).map(|e| next_envelope(e)).ok_or(TaskError::Cancelled)?
        };
        loop {
            self.checkpoint()?;
            let epoch = signal.epoch();
            let generation = self.inner.governor.generation();
            let snapshot = match self.inner.governor.sample() {
                Ok(s) => s,
                Err(_) => {
                    signal.wait(epoch, Some(self.inner.config.sample_interval));
                    continue;
                }
            };
            let running = self.inner.lock().running.saturating_sub(1);
            let now = self.inner.governor.now();
            match self.inner.governor.reserve_queued(&envelope, &snapshot, running, None) {
                Ok(reservation) => {
                    let contract = reservation.contract().clone();
                    let mut st = self.inner.lock();
                    st.record_decision(
                        self.id,
                        reservation.kind(),
                        reservation.reason(),
                        "new sequence",
                        now,
                    );
                    if let Some(e) = st.entries.get_mut(&self.id) {
                        e.contract = Some(contract.clone());
                        e.sequences += 1;
                    }
                    st.emit(|| QueueEvent::Sequence { id: self.id, contract: contract.clone() });
                    drop(st);
                    self.held = Held::Reserved(Box::new(reservation));
                    return Ok(contract);
                }
                Err(d) if d.kind() == DecisionKind::Reject => {
                    self.inner.lock().record_decision(self.id, d.kind(), d.reason(), d.message(), now);
                    return Err(TaskError::Failed(d.message().to_owned()));
                }
                Err(d) => {
                    self.inner.lock().record_decision(self.id, d.kind(), d.reason(), d.message(), now);
                    if !self.inner.governor.register_waker(generation, &waker) {
                        continue;
                    }
                    let timeout =
                        d.reason().scope().waits_on_host().then_some(self.inner.config.sample_interval);
                    signal.wait(epoch, timeout);
                }
            }
        }
    }

    /// Records a completed batch of this task's class with its measured
    /// peak ([`crate::Governor::record_batch`]); returns whether it changed
    /// what the class has learned.
    pub fn record_batch(&self, items: u64, duration: Duration, peak_memory: Option<u64>) -> bool {
        self.inner.governor.record_batch(&self.contract().class, items, duration, peak_memory)
    }

    /// Records one run of this task's class, unbatched or a batch,
    /// completed or killed at its memory limit
    /// ([`crate::Governor::record_run`]); returns whether it changed what
    /// the class has learned.
    pub fn record_run(&self, record: crate::RunRecord) -> bool {
        self.inner.governor.record_run(&self.contract().class, record)
    }

    /// Feeds this sequence's throughput to its capability ramp.
    pub fn record_sequence(&self, items: u64, wall: Duration) -> bool {
        self.inner.governor.record_sequence(self.contract(), items, wall)
    }

    /// Reports the memory the task uses now (see [`Reservation::report_usage`]).
    pub fn report_usage(&self, bytes: u64) {
        if let Held::Reserved(r) = &self.held {
            let _ = r.report_usage(bytes);
        }
    }

    /// Marks the task failed with `reason` (it ends FAILED even if the
    /// callback then returns `Ok`).
    pub fn fail(&self, reason: impl Into<String>) {
        let mut st = self.inner.lock();
        if let Some(e) = st.entries.get_mut(&self.id) {
            e.failed_message = Some(reason.into());
        }
    }

    /// Maps `items` on at most the granted CPUs (this thread counts as
    /// one), results in input order whatever the thread count.
    pub fn par_map<T: Sync, R: Send>(&self, items: &[T], f: impl Fn(usize, &T) -> R + Sync) -> Vec<R> {
        par_map(items, self.contract().whole_cpus() as usize, f)
    }

    /// Fallible [`TaskContext::par_map`]: the lowest failing index wins.
    ///
    /// # Errors
    /// [`ParMapError`] with the results before the failure.
    pub fn try_par_map<T: Sync, R: Send, E: Send>(
        &self,
        items: &[T],
        f: impl Fn(usize, &T) -> Result<R, E> + Sync,
    ) -> Result<Vec<R>, ParMapError<R, E>> {
        try_par_map(items, self.contract().whole_cpus() as usize, f)
    }
}

/// Runs `callback` to its end on the current (worker) thread, then ends
/// the task and releases its reservation exactly once, whatever happened.
/// Returns the next task this thread is handed (see
/// [`super::dispatch::end_and_hand_off`]; `starts` is the worker's buffer
/// for that hand-off's admitted tasks).
pub(crate) fn run_callback(
    mut ctx: TaskContext,
    callback: Callback,
    starts: &mut Vec<Start>,
) -> Option<Start> {
    let result = catch_unwind(AssertUnwindSafe(|| callback(&mut ctx)));
    let (state, message) = match result {
        // `TaskContext::fail` may still turn this into a failure.
        Ok(Ok(())) => (TaskState::Completed, None),
        Ok(Err(TaskError::Cancelled)) => (TaskState::Cancelled, None),
        Ok(Err(TaskError::Failed(m))) => (TaskState::Failed, Some(m)),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_owned());
            (TaskState::Failed, Some(format!("panicked: {what}")))
        }
    };
    let TaskContext { inner, id, held } = ctx;
    let reservation = match held {
        Held::Reserved(r) => Some(r),
        Held::Between(_) => None,
    };
    let next = super::dispatch::end_and_hand_off(&inner, id, state, message, reservation, starts);
    #[cfg(test)]
    inner.in_flight.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    next
}

/// The envelope a task's next sequence is admitted with: its own, with the
/// items left updated from its progress in items when it declared them.
fn next_envelope(e: &super::state::Entry) -> crate::Envelope {
    match (e.envelope.items_left(), e.progress.progress()) {
        (Some(_), Some(p @ crate::progress::Progress::Items { .. })) => {
            e.envelope.with_items_left(p.remaining())
        }
        _ => e.envelope.clone(),
    }
}
