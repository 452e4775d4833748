//! What the broker asks the router before and after it routes a
//! provisionable task that no allocation shape can hold: whether a
//! connected agent could still run it, and handing a queued one back.

use super::{Place, Router};
use crate::ids::TaskId;
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
}
