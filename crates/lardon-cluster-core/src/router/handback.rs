//! Handing tasks back: what the broker asks the router before and after
//! it routes a provisionable task that no allocation shape can hold
//! (whether a connected agent could still run it, handing a queued one
//! back), and the sweep of routes no agent serves and of tasks no agent
//! has the time for.

use super::{Place, Router};
use crate::ids::{SubmitterId, TaskId};
use crate::messages::{Delivery, Event};

impl Router {
    /// Whether tasks of capability `key` wait for an allocation when no
    /// agent serves them ([`Router::set_provisionable`]).
    #[must_use]
    pub fn is_provisionable(&self, key: &str) -> bool {
        self.provisionable.contains(key)
    }

    /// Whether a connected agent that serves capability `key` (and is not
    /// draining) could ever take a task of `duration_ms` (time left only
    /// shrinks; an unknown duration or end holds nothing back). Its
    /// Governor still admits or refuses the task's memory.
    #[must_use]
    pub fn could_run(&self, key: &str, duration_ms: Option<u64>) -> bool {
        self.could_ever(key, duration_ms)
    }

    /// Answers a *queued* task `delivery` and takes it off its route; a
    /// task in flight, finished or unknown is left alone (no events).
    pub fn hand_back_queued(&mut self, task: &TaskId, delivery: Delivery) -> Vec<Event> {
        if !self.tasks.get(task).is_some_and(|e| matches!(e.place, Place::Queued)) {
            return Vec::new();
        }
        self.stop(task, delivery)
    }

    /// Routes no agent serves any more (gone or draining): their tasks are
    /// handed back. On routes still served, tasks no agent has the time
    /// for are answered [`Delivery::NoExecutor`].
    pub(super) fn sweep_orphans(&mut self) -> Vec<Event> {
        let mut events = Vec::new();
        let orphaned: Vec<String> = self
            .routes
            .keys()
            .filter(|k| !self.provisionable.contains(*k) && !self.agents.values().any(|a| a.serves(k)))
            .cloned()
            .collect();
        for key in orphaned {
            if let Some(route) = self.routes.remove(&key) {
                for id in route.queues.into_values().flatten() {
                    let reason = format!("no agent for {key} any more");
                    events.extend(self.finish(&id, Delivery::RunLocally(reason)));
                }
            }
        }
        // A provisionable route waits: a new allocation may have the time.
        let keys: Vec<String> =
            self.routes.keys().filter(|k| !self.provisionable.contains(*k)).cloned().collect();
        for key in keys {
            let timeless: Vec<(SubmitterId, TaskId)> = self
                .routes
                .get(&key)
                .into_iter()
                .flat_map(|r| r.queues.iter())
                .flat_map(|(s, q)| q.iter().map(move |t| (s.clone(), t.clone())))
                .filter(|(_, t)| {
                    let duration = self.tasks.get(t).and_then(|e| e.request.duration_ms);
                    !self.could_ever(&key, duration)
                })
                .collect();
            for (submitter, id) in timeless {
                events.extend(self.hand_back_timeless(&key, &submitter, &id));
            }
        }
        events
    }

    /// Takes a queued task no agent has the time for off its route and
    /// answers it [`Delivery::NoExecutor`].
    pub(super) fn hand_back_timeless(
        &mut self,
        key: &str,
        submitter: &SubmitterId,
        task: &TaskId,
    ) -> Option<Event> {
        if let Some(route) = self.routes.get_mut(key) {
            route.remove(submitter, task);
            if route.is_empty() {
                self.routes.remove(key);
            }
        }
        self.finish(task, Delivery::NoExecutor)
    }
}
