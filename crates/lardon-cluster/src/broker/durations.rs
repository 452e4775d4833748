//! What the broker learns of its tasks' wall times, per capability, for
//! the Provisioner: from each assignment to the agent's report of a
//! success, as the broker's clock sees it (so it includes the trip to the
//! agent and back, which only makes the estimate safer).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use crate::ids::TaskId;

/// Successful runs remembered per capability.
const WINDOW: usize = 20;

/// The learned wall time of a capability is the longest of its last
/// [`WINDOW`] successful runs: the Provisioner sizes walltimes with it, and
/// an allocation that ends before its task does wastes the run.
#[derive(Debug, Default)]
pub(crate) struct Durations {
    started: HashMap<TaskId, (String, Instant)>,
    recent: HashMap<String, VecDeque<Duration>>,
}

impl Durations {
    /// `task` of capability `key` went to an agent at `now` (a later
    /// assignment, after a WAIT or a lost agent, starts it over).
    pub(crate) fn assigned(&mut self, task: &TaskId, key: String, now: Instant) {
        self.started.insert(task.clone(), (key, now));
    }

    /// `task` was answered at `now`; only a success teaches anything (a
    /// failure, a cancel or a hand-back may be cut short).
    pub(crate) fn answered(&mut self, task: &TaskId, success: bool, now: Instant) {
        let Some((key, start)) = self.started.remove(task) else { return };
        if !success {
            return;
        }
        let runs = self.recent.entry(key).or_default();
        runs.push_back(now.saturating_duration_since(start));
        while runs.len() > WINDOW {
            runs.pop_front();
        }
    }

    /// The learned wall time per capability key.
    pub(crate) fn learned(&self) -> BTreeMap<String, Duration> {
        self.recent.iter().filter_map(|(k, runs)| runs.iter().max().map(|d| (k.clone(), *d))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_of_the_last_twenty_successes_is_learned() {
        let mut d = Durations::default();
        let t0 = Instant::now();
        let id = |n: usize| TaskId::new(&format!("t{n}")).unwrap_or_else(|e| panic!("{e}"));
        // A 9-minute success, then 20 of 1..=20 s: the 9 minutes leave the window.
        d.assigned(&id(0), "sh@1:*".into(), t0);
        d.answered(&id(0), true, t0 + Duration::from_secs(540));
        assert_eq!(d.learned().get("sh@1:*"), Some(&Duration::from_secs(540)));
        for n in 1..=WINDOW {
            d.assigned(&id(n), "sh@1:*".into(), t0);
            d.answered(&id(n), true, t0 + Duration::from_secs(n as u64));
        }
        assert_eq!(d.learned().get("sh@1:*"), Some(&Duration::from_secs(20)));
        // A failure after an hour teaches nothing; an unassigned answer neither.
        d.assigned(&id(99), "sh@1:*".into(), t0);
        d.answered(&id(99), false, t0 + Duration::from_secs(3600));
        d.answered(&id(98), true, t0 + Duration::from_secs(7200));
        assert_eq!(d.learned().get("sh@1:*"), Some(&Duration::from_secs(20)));
        assert_eq!(d.learned().len(), 1);
    }
}
