//! The router's parts: an agent as the router sees it, one capability's
//! queues with their round-robin turn, and the deterministic source of
//! its random choices.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::ids::{SubmitterId, TaskId};
use crate::messages::{Availability, Need};

/// A connected agent: what it declared, its mirror and bound, what it
/// holds, when its allocation ends and whether it drains.
#[derive(Debug, Clone)]
pub(super) struct Agent {
    pub(super) capabilities: BTreeSet<String>,
    pub(super) mirror: Availability,
    pub(super) tokens: u32,
    pub(super) holding: BTreeSet<TaskId>,
    pub(super) ends_at_ms: Option<u64>,
    pub(super) draining: bool,
}

impl Agent {
    pub(super) fn free_tokens(&self) -> u32 {
        self.tokens.saturating_sub(u32::try_from(self.holding.len()).unwrap_or(u32::MAX))
    }

    /// Serves `key` for new work (declared it and is not draining).
    pub(super) fn serves(&self, key: &str) -> bool {
        !self.draining && self.capabilities.contains(key)
    }

    /// Has time left for a task of `duration_ms` at `now_ms`: an unknown
    /// end or an unknown duration does not hold a task back.
    pub(super) fn has_time(&self, duration_ms: Option<u64>, now_ms: u64) -> bool {
        match (self.ends_at_ms, duration_ms) {
            (Some(end), Some(d)) => now_ms.saturating_add(d) <= end,
            _ => true,
        }
    }

    pub(super) fn can_take(&self, key: &str, need: Need, duration_ms: Option<u64>, now_ms: u64) -> bool {
        self.serves(key)
            && self.free_tokens() > 0
            && self.mirror.admits(need)
            && self.has_time(duration_ms, now_ms)
    }
}

/// One capability's waiting tasks, per submitter, and the round-robin turn.
#[derive(Debug, Default, Clone)]
pub(super) struct Route {
    pub(super) queues: BTreeMap<SubmitterId, VecDeque<TaskId>>,
    pub(super) turn: VecDeque<SubmitterId>,
}

impl Route {
    pub(super) fn push(&mut self, submitter: &SubmitterId, task: TaskId, front: bool) {
        let q = self.queues.entry(submitter.clone()).or_default();
        if q.is_empty() && !self.turn.contains(submitter) {
            self.turn.push_back(submitter.clone());
        }
        if front { q.push_front(task) } else { q.push_back(task) }
    }

    pub(super) fn remove(&mut self, submitter: &SubmitterId, task: &TaskId) {
        if let Some(q) = self.queues.get_mut(submitter) {
            q.retain(|t| t != task);
            if q.is_empty() {
                self.queues.remove(submitter);
                self.turn.retain(|s| s != submitter);
            }
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }
}

/// A small deterministic generator (SplitMix64) for the two random
/// choices: the same seed gives the same placements, so tests replay.
#[derive(Debug, Clone)]
pub(super) struct SplitMix(pub(super) u64);

impl SplitMix {
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub(super) fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % u64::try_from(n.max(1)).unwrap_or(u64::MAX)).unwrap_or(0)
    }
}
