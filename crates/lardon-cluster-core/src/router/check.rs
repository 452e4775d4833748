//! [`Router::check`]: the invariants of the router's module docs, checked
//! in debug builds after every transition and by the property tests.

use super::{Place, Router};

impl Router {
    /// Checks the invariants of the module docs.
    ///
    /// # Errors
    /// The first one broken, described.
    pub fn check(&self) -> Result<(), String> {
        for (id, entry) in &self.tasks {
            let key = entry.request.capability.key();
            let queued = self
                .routes
                .values()
                .flat_map(|r| r.queues.values())
                .map(|q| q.iter().filter(|t| *t == id).count())
                .sum::<usize>();
            let held = self.agents.values().filter(|a| a.holding.contains(id)).count();
            match &entry.place {
                Place::Queued if queued == 1 && held == 0 => {
                    let in_route = self
                        .routes
                        .get(&key)
                        .and_then(|r| r.queues.get(&entry.request.submitter))
                        .is_some_and(|q| q.contains(id));
                    if !in_route {
                        return Err(format!("task {id} is queued on the wrong route"));
                    }
                }
                Place::InFlight(agent) if queued == 0 && held == 1 => {
                    if !self.agents.get(agent).is_some_and(|a| a.holding.contains(id)) {
                        return Err(format!("task {id} is held by another agent than {agent}"));
                    }
                }
                place => return Err(format!("task {id} ({place:?}) is queued {queued}× and held {held}×")),
            }
            if self.finished_set.contains(id) {
                return Err(format!("task {id} is both live and finished"));
            }
        }
        for (agent, task) in self.stale.blocking() {
            if self.agents.get(agent).is_some_and(|a| a.holding.contains(task)) {
                return Err(format!(
                    "agent {agent} holds task {task} while its stale run of it has not ended"
                ));
            }
        }
        for route in self.routes.values() {
            for q in route.queues.values() {
                if let Some(t) = q.iter().find(|t| !self.tasks.contains_key(*t)) {
                    return Err(format!("route holds unknown task {t}"));
                }
            }
        }
        Ok(())
    }

    pub(super) fn debug_check(&self) {
        #[cfg(debug_assertions)]
        if self.tasks.len() <= 256
            && let Err(e) = self.check()
        {
            debug_assert!(false, "router invariant broken: {e}");
        }
    }
}
