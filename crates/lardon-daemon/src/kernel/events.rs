//! What the daemon tells its watchers, and the counters behind the metrics.

use std::collections::{BTreeMap, VecDeque};

use crate::spec::TaskId;
use crate::store::DecisionRecord;

/// One change, fanned out to `Watch`, `Wait` and `Log --follow` streams.
#[derive(Debug, Clone)]
pub(crate) enum DaemonEvent {
    /// The task's state, contract, decision or progress changed.
    TaskChanged(TaskId),
    /// The task reached a terminal state (also sent as `TaskChanged`).
    TaskFinished(TaskId),
    /// The task was removed.
    TaskRemoved(TaskId),
    /// A new admission decision.
    Decision(TaskId, DecisionRecord),
}

/// Most recent decisions kept for the dashboard's first snapshot.
pub(crate) const RECENT_DECISIONS: usize = 50;

/// Decision counters (by kind and reason) and the recent decisions.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub(crate) decisions: BTreeMap<(String, String), u64>,
    pub(crate) recent: VecDeque<(TaskId, DecisionRecord)>,
}

impl Stats {
    pub(crate) fn record(&mut self, id: TaskId, d: &DecisionRecord) {
        *self.decisions.entry((d.kind.as_str().to_owned(), d.reason_code.clone())).or_default() += 1;
        if self.recent.len() == RECENT_DECISIONS {
            self.recent.pop_front();
        }
        self.recent.push_back((id, d.clone()));
    }
}
