//! Re-routing a shippable task that waits in the local queue
//! (docs/DESIGN.md §14): routing at queue time is not the last word. A
//! task queued here is looked at again `offload_wait_ms` after it was
//! queued; if it has not started and the local Governor's latest word on it
//! is WAIT, and the broker is connected, it is taken out of the local
//! queue with `TaskQueue::withdraw` — under the queue's own lock, so
//! exactly one of "it started here" and "it left the queue" happens — and
//! shipped, its course saying why. Otherwise it is looked at again later,
//! until it starts or ends. A task shipped this way that falls back runs
//! here again and is not watched again (it already tried the cluster).
//!
//! Each look is one timer on the daemon's runtime: nothing wakes for a
//! task that is not waiting here, and an idle daemon has no timer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lardon::{DecisionKind, QueueError};

use super::route;
use super::{Inner, OffloadEngine, Ship};
use crate::kernel::qid;
use crate::spec::{TaskId, TaskSpec};

/// A task not ready to ship is looked at again after `offload_wait_ms`,
/// but never sooner than this.
const LOOK_AGAIN_AT_LEAST: Duration = Duration::from_millis(250);

impl OffloadEngine {
    /// Watches a shippable task just queued here (see the module docs).
    pub(crate) fn watch(&self, id: TaskId, spec: &TaskSpec) {
        if spec.offload.is_none() {
            return;
        }
        let wait = Duration::from_millis(self.inner.shared.settings().offload.wait_ms);
        let queued_at = Instant::now();
        Inner::look_at(&self.inner, id, Arc::new(spec.clone()), queued_at, queued_at + wait);
    }
}

impl Inner {
    /// Looks at task `id` (queued here at `queued_at`) at `at`.
    fn look_at(self: &Arc<Self>, id: TaskId, spec: Arc<TaskSpec>, queued_at: Instant, at: Instant) {
        let me = Arc::clone(self);
        self.rt.spawn(async move {
            tokio::time::sleep_until(at.into()).await;
            let _ = tokio::task::spawn_blocking(move || me.look(id, spec, queued_at)).await;
        });
    }

    fn look(self: &Arc<Self>, id: TaskId, spec: Arc<TaskSpec>, queued_at: Instant) {
        if self.shared.stopping() {
            return;
        }
        // Gone (ended, or withdrawn by another look) or started: done.
        let Some(view) = self.queue.get(qid(id)) else { return };
        match view.state {
            lardon::TaskState::Pending => {}
            lardon::TaskState::Paused if view.started_at.is_none() => return self.later(id, spec, queued_at),
            _ => return,
        }
        let waiting = view
            .last_decision
            .filter(|d| d.kind == DecisionKind::Wait)
            .map(|d| format!("{}: {}", d.reason.as_str(), d.message));
        let settings = self.shared.settings().offload;
        let queued_for = u64::try_from(queued_at.elapsed().as_millis()).unwrap_or(u64::MAX);
        let connected = self.submitter.connected();
        let Some(why) = route::overdue(queued_for, settings.wait_ms, waiting.as_deref(), connected) else {
            return self.later(id, spec, queued_at);
        };
        let Some(offload) = spec.offload.clone() else { return };
        match self.queue.withdraw(qid(id)) {
            Ok(_) => {
                // Claimed at once: a cancel from here on finds it out, and
                // one that came between the withdrawal and the claim ended
                // it in the store, so it does not start as an attempt.
                self.shared.placements.claim(id, 0);
                // The pump's writes for this task's queue events go first:
                // none lands on it after it shipped.
                self.shared.pumped.wait_for(self.queue.events_emitted());
                tracing::info!("task {id}: taken out of the local queue to ship: {why}");
                self.ship(id, spec, &offload, &why, Ship::Fresh, true);
            }
            // Another task waits on it: it stays here.
            Err(QueueError::HasDependents(_)) => {}
            // It started (or ended) first: it runs here.
            Err(_) => {}
        }
    }

    fn later(self: &Arc<Self>, id: TaskId, spec: Arc<TaskSpec>, queued_at: Instant) {
        let wait = Duration::from_millis(self.shared.settings().offload.wait_ms).max(LOOK_AGAIN_AT_LEAST);
        Inner::look_at(self, id, spec, queued_at, Instant::now() + wait);
    }
}
