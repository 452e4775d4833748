//! Where each live task is: one typed value per task, in one table under
//! one lock, owned by the kernel. The routes move a task between
//! placements (a local run takes its slot, offload claims, sends and takes
//! back, Slurm takes and lets go); the actions (`cancel`, `pause`,
//! `resume`) look the placement up and dispatch to the one route it names
//! ([`Placements::route_of`]), instead of asking each route in turn.
//!
//! A task with no entry is on the local route (waiting in the local queue,
//! or between the queue's hand-off and its callback) or has ended: the
//! local queue, which owns it then, answers for it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::Slot;
use crate::spec::{TaskId, TaskSpec};

/// Where one live task is, off the local queue.
#[derive(Debug)]
pub(crate) enum Placement {
    /// Running here: the control slot of its callback (its live run, and
    /// the pause and cancel intents a later run honours).
    Running(Arc<Slot>),
    /// Claimed by offload and being shipped, not sent: a cancel that takes
    /// it ends it, and it is then never sent ([`Placements::promote`]
    /// fails).
    Shipping {
        /// Re-shipments so far.
        retry: u32,
    },
    /// Shipped to the broker under a remote id.
    Out(Sent),
    /// Native Slurm mode holds it (waiting for room under
    /// `slurm_max_jobs`, or a job out).
    Slurm,
}

/// A task shipped under a remote id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sent {
    /// Its id there.
    pub(crate) remote: String,
    /// Re-shipments so far.
    pub(crate) retry: u32,
    /// Its spec, to run it here on a fallback.
    pub(crate) spec: Arc<TaskSpec>,
}

/// The route a task's placement names, for an action to dispatch to
/// (the hub's `Routes::for_placement`).
#[derive(Debug, Clone)]
pub(crate) enum Placed {
    /// The local queue (its slot, when its callback has one).
    Local(Option<Arc<Slot>>),
    /// Offload (being shipped, or out at the broker).
    Offload,
    /// Native Slurm mode.
    Slurm,
}

impl Placed {
    /// The local run's slot, if this is the local route and it has one.
    pub(crate) fn slot(self) -> Option<Arc<Slot>> {
        match self {
            Placed::Local(slot) => slot,
            Placed::Offload | Placed::Slurm => None,
        }
    }
}

/// What an offload cancel took out of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Shipped {
    /// Claimed, never sent.
    Claimed,
    /// Sent under this remote id.
    Sent(String),
}

/// The table (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Placements {
    table: Mutex<HashMap<TaskId, Placement>>,
}

impl Placements {
    fn lock(&self) -> MutexGuard<'_, HashMap<TaskId, Placement>> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The route task `id` is on now.
    pub(crate) fn route_of(&self, id: TaskId) -> Placed {
        match self.lock().get(&id) {
            None => Placed::Local(None),
            Some(Placement::Running(slot)) => Placed::Local(Some(Arc::clone(slot))),
            Some(Placement::Shipping { .. } | Placement::Out(_)) => Placed::Offload,
            Some(Placement::Slurm) => Placed::Slurm,
        }
    }

    // The local route.

    /// The control slot of task `id` running here, created on first use
    /// (by its callback, or by a pause that came first). A task placed on
    /// another route gets a detached slot: nothing of it is kept.
    pub(crate) fn slot(&self, id: TaskId) -> Arc<Slot> {
        let mut table = self.lock();
        match table.entry(id).or_insert_with(|| Placement::Running(Arc::default())) {
            Placement::Running(slot) => Arc::clone(slot),
            _ => Arc::default(),
        }
    }

    /// Task `id`'s callback ended: its slot goes.
    pub(crate) fn ran_here(&self, id: TaskId) {
        let mut table = self.lock();
        if matches!(table.get(&id), Some(Placement::Running(_))) {
            table.remove(&id);
        }
    }

    /// The slots of every task running here.
    pub(crate) fn slots(&self) -> Vec<Arc<Slot>> {
        self.lock()
            .values()
            .filter_map(|p| match p {
                Placement::Running(slot) => Some(Arc::clone(slot)),
                _ => None,
            })
            .collect()
    }

    // Offload. An answer counts only while its task is out under the same
    // remote id: taking it removes the entry, so a second answer for it (or
    // one arriving after a cancel) finds nothing and is dropped — a result
    // is recorded once.

    /// Claims `id` for shipping before it has a remote id: from here a
    /// cancel finds it ([`Placements::take_shipped`]), and
    /// [`Placements::promote`] then fails, so it is not sent.
    pub(crate) fn claim(&self, id: TaskId, retry: u32) {
        self.lock().insert(id, Placement::Shipping { retry });
    }

    /// Drops the claim on `id` (it will not be sent); false when a cancel
    /// took it first or it was already promoted.
    pub(crate) fn unclaim(&self, id: TaskId) -> bool {
        let mut table = self.lock();
        let claimed = matches!(table.get(&id), Some(Placement::Shipping { .. }));
        if claimed {
            table.remove(&id);
        }
        claimed
    }

    /// Gives the claim on `id` its remote id and spec; false when the claim
    /// is gone (cancelled meanwhile: do not send it).
    pub(crate) fn promote(&self, id: TaskId, remote: &str, spec: &Arc<TaskSpec>) -> bool {
        let mut table = self.lock();
        let Some(entry) = table.get_mut(&id) else { return false };
        let Placement::Shipping { retry } = *entry else { return false };
        *entry = Placement::Out(Sent { remote: remote.to_owned(), retry, spec: Arc::clone(spec) });
        true
    }

    /// Runs `send` while `id` is out as `remote`, under the table's lock:
    /// a cancel takes the task out under the same lock before it sends its
    /// own cancel, so the broker sees the request before the cancel, or
    /// neither. `None` when it is not out as `remote`.
    pub(crate) fn while_out_as<T>(&self, id: TaskId, remote: &str, send: impl FnOnce() -> T) -> Option<T> {
        let table = self.lock();
        matches!(table.get(&id), Some(Placement::Out(s)) if s.remote == remote).then(send)
    }

    /// Takes `id` if it is out as `remote`; `None` for a duplicate or a
    /// stale answer.
    pub(crate) fn take_sent(&self, id: TaskId, remote: &str) -> Option<Sent> {
        let mut table = self.lock();
        if !matches!(table.get(&id), Some(Placement::Out(s)) if s.remote == remote) {
            return None;
        }
        match table.remove(&id) {
            Some(Placement::Out(sent)) => Some(sent),
            _ => None,
        }
    }

    /// Takes `id` if offload holds it, whatever its step (a cancel).
    pub(crate) fn take_shipped(&self, id: TaskId) -> Option<Shipped> {
        let mut table = self.lock();
        let shipped = match table.get(&id)? {
            Placement::Shipping { .. } => Shipped::Claimed,
            Placement::Out(sent) => Shipped::Sent(sent.remote.clone()),
            Placement::Running(_) | Placement::Slurm => return None,
        };
        table.remove(&id);
        Some(shipped)
    }

    // Native Slurm mode.

    /// Native Slurm mode holds `id` from now on.
    pub(crate) fn to_slurm(&self, id: TaskId) {
        self.lock().insert(id, Placement::Slurm);
    }

    /// Native Slurm mode let `id` go (it ended).
    pub(crate) fn off_slurm(&self, id: TaskId) {
        let mut table = self.lock();
        if matches!(table.get(&id), Some(Placement::Slurm)) {
            table.remove(&id);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn spec() -> Arc<TaskSpec> {
        Arc::new(TaskSpec::command(["true"]))
    }

    #[test]
    fn an_answer_counts_once_and_only_for_the_current_remote_id() {
        let p = Placements::default();
        p.claim(TaskId(7), 2);
        assert!(p.promote(TaskId(7), "h:t7:a1:r0", &spec()));
        assert_eq!(p.take_sent(TaskId(7), "h:t7:a1:r9"), None, "a stale id");
        let sent = p.take_sent(TaskId(7), "h:t7:a1:r0").unwrap();
        assert_eq!(sent.retry, 2, "the claim's retry");
        assert_eq!(p.take_sent(TaskId(7), "h:t7:a1:r0"), None, "the same answer twice");
        p.claim(TaskId(8), 0);
        assert!(p.promote(TaskId(8), "x", &spec()));
        assert_eq!(p.take_shipped(TaskId(8)), Some(Shipped::Sent("x".into())));
        assert_eq!(p.take_sent(TaskId(8), "x"), None, "an answer after a cancel");
    }

    #[test]
    fn a_claim_cancelled_before_its_remote_id_is_never_promoted_nor_sent() {
        let p = Placements::default();
        p.claim(TaskId(9), 0);
        assert!(matches!(p.route_of(TaskId(9)), Placed::Offload), "a cancel finds it");
        assert_eq!(p.while_out_as(TaskId(9), "", || ()), None, "a claim is out under no id");
        assert!(p.promote(TaskId(9), "h:t9:a1:r0", &spec()));
        assert_eq!(p.while_out_as(TaskId(9), "h:t9:a1:r0", || 1), Some(1));
        assert!(!p.promote(TaskId(9), "h:t9:a1:r1", &spec()), "promoted once");
        assert!(!p.unclaim(TaskId(9)), "a sent task is no claim");
        p.claim(TaskId(10), 0);
        assert_eq!(p.take_shipped(TaskId(10)), Some(Shipped::Claimed));
        assert!(!p.promote(TaskId(10), "h:t10:a1:r0", &spec()), "cancelled meanwhile: not sent");
        p.claim(TaskId(11), 0);
        assert!(p.unclaim(TaskId(11)));
        assert!(matches!(p.route_of(TaskId(11)), Placed::Local(None)), "back to the local route");
    }

    #[test]
    fn each_task_has_one_placement_and_a_route_keeps_to_its_own() {
        let p = Placements::default();
        let slot = p.slot(TaskId(1));
        assert!(matches!(p.route_of(TaskId(1)), Placed::Local(Some(s)) if Arc::ptr_eq(&s, &slot)));
        assert!(Arc::ptr_eq(&p.slot(TaskId(1)), &slot), "one slot per run");
        assert_eq!(p.take_shipped(TaskId(1)), None, "offload takes only its own");
        p.to_slurm(TaskId(2));
        assert!(matches!(p.route_of(TaskId(2)), Placed::Slurm));
        p.ran_here(TaskId(2));
        assert!(matches!(p.route_of(TaskId(2)), Placed::Slurm), "the local route lets go only of its own");
        p.off_slurm(TaskId(2));
        p.ran_here(TaskId(1));
        assert!(matches!(p.route_of(TaskId(1)), Placed::Local(None)));
        assert!(matches!(p.route_of(TaskId(2)), Placed::Local(None)));
        assert!(p.slots().is_empty());
    }
}
