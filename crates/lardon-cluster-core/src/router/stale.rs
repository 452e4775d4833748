//! Stale runs: an agent still runs (or still reports) a task that is not
//! its own here — the task was queued again and placed elsewhere while
//! the agent was away — and was told to stop it. Reports carry only the
//! task's id, so the end of that run is indistinguishable from the end of
//! a newer run of the same task at the same agent. Hence:
//!
//! * the task is **not placed on that agent** until the stale run's end
//!   was reported (its report is then ignored, and acknowledged before any
//!   new assignment travels on the same stream);
//! * the agent's hello **never claims** it back while the stale run may
//!   still be reported (the agent lists it: running, or ended with the
//!   report not yet acknowledged), however long ago its end was reported;
//! * the mark goes when the agent says hello without the task (the run's
//!   end was acknowledged, or the agent restarted) or the task finishes.

use std::collections::{BTreeMap, BTreeSet};

use crate::ids::{AgentId, TaskId};

/// Per agent, its stale runs by task, with whether the run's end was
/// reported since it was told to stop.
#[derive(Debug, Clone, Default)]
pub(super) struct StaleRuns {
    runs: BTreeMap<AgentId, BTreeMap<TaskId, bool>>,
}

impl StaleRuns {
    /// `agent` was told to stop its run of `task`: it may report its end
    /// any time from now.
    pub(super) fn told_to_stop(&mut self, agent: &AgentId, task: &TaskId) {
        self.runs.entry(agent.clone()).or_default().insert(task.clone(), false);
    }

    /// `agent` reported on `task`; returns whether that ended a stale run
    /// (the task may go to that agent again).
    pub(super) fn reported(&mut self, agent: &AgentId, task: &TaskId) -> bool {
        match self.runs.get_mut(agent).and_then(|r| r.get_mut(task)) {
            Some(ended) if !*ended => {
                *ended = true;
                true
            }
            _ => false,
        }
    }

    /// Whether `agent` has a stale run of `task` (ended or not).
    pub(super) fn has(&self, agent: &AgentId, task: &TaskId) -> bool {
        self.runs.get(agent).is_some_and(|r| r.contains_key(task))
    }

    /// Whether `task` must not be placed on `agent`: its stale run there
    /// has not reported its end.
    pub(super) fn blocks(&self, agent: &AgentId, task: &TaskId) -> bool {
        self.runs.get(agent).and_then(|r| r.get(task)).is_some_and(|ended| !ended)
    }

    /// `agent` said hello listing `running`: stale runs it no longer lists
    /// are gone (it forgot them).
    pub(super) fn forget_unlisted(&mut self, agent: &AgentId, running: &BTreeSet<&TaskId>) {
        if let Some(r) = self.runs.get_mut(agent) {
            r.retain(|t, _| running.contains(t));
            if r.is_empty() {
                self.runs.remove(agent);
            }
        }
    }

    /// `task` finished: it is never placed again, so no mark matters.
    pub(super) fn forget_task(&mut self, task: &TaskId) {
        self.runs.retain(|_, r| {
            r.remove(task);
            !r.is_empty()
        });
    }

    /// Every (agent, task) whose stale run has not reported its end.
    pub(super) fn blocking(&self) -> impl Iterator<Item = (&AgentId, &TaskId)> {
        self.runs.iter().flat_map(|(a, r)| r.iter().filter(|(_, ended)| !**ended).map(move |(t, _)| (a, t)))
    }
}
