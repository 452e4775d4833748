//! # Implementation details
//!
//! The queue's state, touched only under the queue lock: live tasks,
//! the pending order, dependencies, the terminal history and event
//! subscribers.
//!
//! # Invariants
//! - `pending` holds exactly the live PENDING/PAUSED tasks that have not
//!   started, keyed by [`order_key`] (priority, then most items left,
//!   then submission sequence);
//! - a RUNNING task's entry has no callback left (it was taken once);
//! - `history.len() ≤ HISTORY`.

use std::collections::{HashMap, VecDeque};
use std::sync::mpsc::Sender;

use crate::clock::MonoTime;
use crate::contract::Contract;
use crate::decision::{DecisionKind, Reason, ReasonCode};
use crate::envelope::Envelope;
use crate::idhash::Ids;
use crate::progress::{Outcome, ProgressTracker};

use super::events::{DecisionRecord, QueueEvent, TaskView};
use super::pending::PendingOrder;
use super::slab::IdSlab;
use super::task::{Callback, TaskId, TaskState};

/// Terminal tasks kept for `snapshot`.
pub const HISTORY: usize = 64;

pub(crate) struct Entry {
    pub(crate) id: TaskId,
    pub(crate) name: std::borrow::Cow<'static, str>,
    pub(crate) envelope: Envelope,
    pub(crate) priority: i32,
    pub(crate) seq: u64,
    pub(crate) state: TaskState,
    pub(crate) started: bool,
    pub(crate) waiting_on: Vec<TaskId>,
    pub(crate) waiting_any: Vec<TaskId>,
    pub(crate) callback: Option<Callback>,
    pub(crate) pause_requested: bool,
    pub(crate) cancel_requested: bool,
    pub(crate) failed_message: Option<String>,
    pub(crate) contract: Option<Contract>,
    pub(crate) last_decision: Option<Recorded>,
    pub(crate) progress: ProgressTracker,
    pub(crate) submitted_at: MonoTime,
    pub(crate) started_at: Option<MonoTime>,
    pub(crate) finished_at: Option<MonoTime>,
    pub(crate) message: Option<String>,
    pub(crate) sequences: u32,
    /// Since when this task, at the head of the line, has been bypassed.
    pub(crate) bypassed_since: Option<MonoTime>,
}

/// The human text of a recorded decision, kept as what produced it and
/// written only when an observer reads it (a view or an event): a scan
/// records a decision for every task it evaluates, and formatting each
/// one under the locks cost about a tenth of a no-op task (BENCHMARKS.md
/// "Fast path II").
#[derive(Clone)]
pub(crate) enum Note {
    /// Written already.
    Text(String),
    /// A WAIT or REJECT reason (its message may itself be written lazily).
    Reason(Reason),
    /// A grant: "batch B, X memory, Y CPUs".
    Granted { batch: u64, memory: u64, cpu_millis: u32 },
}

impl Note {
    /// The text observers see.
    pub(crate) fn render(&self) -> String {
        match self {
            Note::Text(text) => text.clone(),
            Note::Reason(reason) => reason.message().to_owned(),
            Note::Granted { batch, memory, cpu_millis } => {
                super::grant_text::granted_message(*batch, *memory, *cpu_millis)
            }
        }
    }

    /// Whether both say the same, without writing either when both keep
    /// figures.
    fn same_as(&self, other: &Note) -> bool {
        match (self, other) {
            (Note::Reason(a), Note::Reason(b)) => a.same_as(b),
            (
                Note::Granted { batch: a, memory: b, cpu_millis: c },
                Note::Granted { batch: x, memory: y, cpu_millis: z },
            ) => (a, b, c) == (x, y, z),
            (Note::Text(a), Note::Text(b)) => a == b,
            _ => self.render() == other.render(),
        }
    }
}

impl From<&str> for Note {
    fn from(text: &str) -> Self {
        Note::Text(text.to_owned())
    }
}

impl From<String> for Note {
    fn from(text: String) -> Self {
        Note::Text(text)
    }
}

impl From<&String> for Note {
    fn from(text: &String) -> Self {
        Note::Text(text.clone())
    }
}

impl From<Reason> for Note {
    fn from(reason: Reason) -> Self {
        Note::Reason(reason)
    }
}

/// A decision as the queue records it; [`Recorded::record`] writes it out
/// as the public [`DecisionRecord`].
#[derive(Clone)]
pub(crate) struct Recorded {
    pub(crate) kind: DecisionKind,
    pub(crate) reason: ReasonCode,
    pub(crate) note: Note,
    pub(crate) at: MonoTime,
}

impl Recorded {
    /// The public record, its message written now.
    pub(crate) fn record(&self) -> DecisionRecord {
        DecisionRecord { kind: self.kind, reason: self.reason, message: self.note.render(), at: self.at }
    }
}

/// Items left above this count order like this count.
const ITEMS_ORDERED: u64 = (1 << 31) - 1;

/// The pending order's key (docs/DESIGN.md §7): higher `priority` first;
/// within a priority, more `items_left` first (the longest work starts
/// first; a task that did not say counts as 0); then submission order.
/// Priority and items share the first number (`-priority × 2³¹` plus the
/// items' complement, items capped at 2³¹ − 1), which fits an `i64` for
/// every `i32` priority.
pub(crate) fn order_key(priority: i32, items_left: u64, seq: u64) -> (i64, u64) {
    let fewer = ITEMS_ORDERED - items_left.min(ITEMS_ORDERED);
    (-i64::from(priority) * (1 << 31) + i64::try_from(fewer).unwrap_or(i64::MAX), seq)
}

impl Entry {
    /// Where this task stands in the pending order ([`order_key`]); the
    /// items left are the most any alternative of its envelope declares.
    pub(crate) fn order_key(&self) -> (i64, u64) {
        order_key(self.priority, self.envelope.items_left().unwrap_or(0), self.seq)
    }

    /// The task as observers see it. A pending task the last scan skipped
    /// because a queue- or host-wide reason (`queue_wait`) made every later
    /// task wait shows that reason, not the older one it was last evaluated
    /// with (re-recording it on every skipped task would cost a pass over
    /// the backlog per scan).
    pub(crate) fn view(
        &self,
        now: MonoTime,
        pressure_green: bool,
        queue_wait: Option<&Recorded>,
    ) -> TaskView {
        let last_decision = match (&self.last_decision, queue_wait) {
            (Some(d), Some(q))
                if self.state == TaskState::Pending
                    && !self.started
                    && d.kind == DecisionKind::Wait
                    && d.at < q.at =>
            {
                Some(q.record())
            }
            _ => self.last_decision.as_ref().map(Recorded::record),
        };
        TaskView {
            id: self.id,
            name: self.name.clone().into_owned(),
            state: self.state,
            priority: self.priority,
            contract: self.contract.clone(),
            progress: self.progress.view(now, pressure_green),
            last_decision,
            submitted_at: self.submitted_at,
            started_at: self.started_at,
            finished_at: self.finished_at,
            message: self.message.clone(),
            sequences: self.sequences,
            waiting_for: self.waiting_on.iter().chain(&self.waiting_any).copied().collect(),
        }
    }
}

/// An ended task kept for observers: its entry as it ended, and when. Its
/// view is built when read (building it at every task end, under the
/// locks, cost strings and a message per task that nobody may ever read).
pub(crate) struct Retired {
    entry: Box<Entry>,
    at: MonoTime,
}

impl Retired {
    /// The ended task's id.
    pub(crate) fn id(&self) -> TaskId {
        self.entry.id
    }

    /// The task as it ended (progress as of its end).
    pub(crate) fn view(&self) -> TaskView {
        self.entry.view(self.at, true, None)
    }
}

#[derive(Default)]
pub(crate) struct QueueState {
    pub(crate) entries: IdSlab<Box<Entry>>,
    pub(crate) pending: PendingOrder,
    /// The queue- or host-wide wait that stopped the last scan early, if
    /// one did (see [`Entry::view`]).
    pub(crate) queue_wait: Option<Recorded>,
    pub(crate) history: VecDeque<Retired>,
    pub(crate) next_id: u64,
    pub(crate) next_seq: u64,
    pub(crate) running: usize,
    pub(crate) closing: bool,
    pub(crate) dispatcher_wake: bool,
    /// A task ended since the dispatcher's last scan: its memory shows in
    /// the host's figures only in a snapshot taken after it, so the next
    /// scan takes one at most [`END_SAMPLE_AGE`](super::dispatch::END_SAMPLE_AGE) old.
    pub(crate) task_ended: bool,
    /// The Governor's generation at the end of the latest scan, by the
    /// dispatcher or by a worker handing off: every change up to it has
    /// been seen by a scan, so it is not a reason to scan again.
    pub(crate) scanned_generation: u64,
    /// The dispatcher sleeps with the sample interval (it re-samples the
    /// host on its own), as of its last scan.
    pub(crate) dispatcher_timed: bool,
    /// A hand-off left a task waiting on host state since the dispatcher's
    /// last scan (it then sleeps timed).
    pub(crate) hand_off_host_wait: bool,
    /// Callers blocked in `submit` on a full queue. They count themselves
    /// in and out under this lock, so whoever makes room knows whether to
    /// notify `not_full` (a futex system call even with no sleeper, which
    /// every scan that starts a task would otherwise pay). Tests also read
    /// it to see a submitter asleep before they make room.
    pub(crate) blocked_submits: usize,
    /// Tasks submitted since the last scan (evaluated even when a
    /// queue-wide reason stops the scan early). Every scan empties it, so
    /// while it is not empty the dispatcher has a wake pending for it.
    pub(crate) fresh: Vec<TaskId>,
    /// The scan's buffer for the pending order it reads in batches (kept
    /// between scans: its capacity is reused).
    pub(crate) walk: Vec<TaskId>,
    pub(crate) subscribers: Vec<Sender<QueueEvent>>,
    /// Events emitted so far (see [`super::TaskQueue::events_emitted`]).
    pub(crate) emitted: u64,
    /// Terminal outcome of every task that ended, so a dependency on a task
    /// that ended long ago (out of `history`) still resolves. One small
    /// entry per task ever run.
    pub(crate) outcomes: IdSlab<TaskState>,
    /// Live tasks waiting on each live task (`after` or `after_any`): the
    /// reverse of every entry's `waiting_on` and `waiting_any`. A list may
    /// name a task that has since ended; it is skipped.
    pub(crate) dependents: HashMap<TaskId, Vec<TaskId>, Ids>,
}

impl QueueState {
    /// Sends the event `make` builds to every subscriber (counted either
    /// way: the daemon waits on the count). With none, the event is never
    /// built (its strings and contract are not copied).
    pub(crate) fn emit(&mut self, make: impl FnOnce() -> QueueEvent) {
        self.emitted += 1;
        if self.subscribers.is_empty() {
            return;
        }
        let event = make();
        self.subscribers.retain(|s| s.send(event.clone()).is_ok());
    }

    /// Records `decision` for `id` and emits an event when its kind or
    /// reason changed (a waiting task re-evaluated each scan stays quiet).
    /// The note is written out only for the event, when someone subscribes.
    pub(crate) fn record_decision(
        &mut self,
        id: TaskId,
        kind: DecisionKind,
        reason: ReasonCode,
        note: impl Into<Note>,
        now: MonoTime,
    ) {
        let Some(e) = self.entries.get_mut(&id) else { return };
        let note = note.into();
        let changed = e.last_decision.as_ref().is_none_or(|d| d.kind != kind || d.reason != reason);
        let event_message = (changed && !self.subscribers.is_empty()).then(|| note.render());
        match e.last_decision.as_mut() {
            // Same decision again (a waiting task re-evaluated): kept.
            Some(d) if !changed && d.note.same_as(&note) => d.at = now,
            _ => e.last_decision = Some(Recorded { kind, reason, note, at: now }),
        }
        if changed {
            self.emit(|| QueueEvent::Decision {
                id,
                kind,
                reason,
                message: event_message.unwrap_or_default(),
            });
        }
    }

    /// Makes room in a full history for one more retired task: the oldest
    /// retired task, for the caller to drop once it holds no lock (`None`
    /// while the history has room). [`QueueState::finish`] evicts by
    /// itself otherwise.
    pub(crate) fn evict_one(&mut self) -> Option<Retired> {
        (self.history.len() >= HISTORY).then(|| self.history.pop_front()).flatten()
    }

    /// Ends `id` in `state` (terminal), dropping its callback if it never
    /// ran, retiring it to history and resolving its dependents. Returns
    /// the callback so the caller drops it outside the lock.
    pub(crate) fn finish(
        &mut self,
        id: TaskId,
        state: TaskState,
        message: Option<String>,
        now: MonoTime,
    ) -> Vec<Callback> {
        debug_assert!(state.is_terminal());
        let mut dropped = Vec::new();
        // Dependents failed by this end queue up here; the common end has
        // none, and `Vec::new` allocates nothing until one does.
        let mut ended = Vec::new();
        let mut next = Some((id, state, message));
        while let Some((id, state, message)) = next.take().or_else(|| ended.pop()) {
            let Some(mut e) = self.entries.remove(&id) else { continue };
            debug_assert!(!e.state.is_terminal(), "a terminal state is final");
            // A started task left the pending order when it started.
            if e.started {
                self.running -= 1;
            } else {
                self.pending.remove(&e.order_key());
            }
            debug_assert!(!self.pending.contains_key(&e.order_key()));
            e.state = state;
            e.finished_at = Some(now);
            e.message = message.clone();
            e.contract = None;
            let outcome = match state {
                TaskState::Completed => Outcome::Completed,
                TaskState::Failed => Outcome::Failed,
                _ => Outcome::Cancelled,
            };
            let _ = e.progress.finish(outcome, now);
            if let Some(cb) = e.callback.take() {
                dropped.push(cb);
            }
            self.emit(|| QueueEvent::Finished { id, state, message: message.clone() });
            self.outcomes.insert(id, state);
            if self.history.len() == HISTORY {
                self.history.pop_front();
            }
            self.history.push_back(Retired { entry: e, at: now });
            // Dependents, from the reverse index (a pass over every live
            // entry per task end made a backlog of N cost O(N²)).
            for dep_id in self.dependents.remove(&id).unwrap_or_default() {
                let Some(d) = self.entries.get_mut(&dep_id) else { continue };
                d.waiting_any.retain(|&x| x != id);
                if d.waiting_on.contains(&id) {
                    d.waiting_on.retain(|&x| x != id);
                    if state != TaskState::Completed {
                        ended.push((
                            dep_id,
                            TaskState::Failed,
                            Some(format!("dependency {id} ended {state}")),
                        ));
                    }
                }
            }
            self.task_ended = true;
        }
        debug_assert!(self.history.len() <= HISTORY);
        dropped
    }
}
