//! # Implementation details
//!
//! The pending order: tasks that have not started, highest priority first,
//! then by submission sequence. One FIFO lane per priority in use, so the
//! common operations — a submit appending at the tail of its lane, a start
//! or an end taking the head — cost a lane lookup and no tree rebalancing
//! (a `BTreeMap` keyed per task cost about 600 instructions per task for
//! its insert and remove, BENCHMARKS.md "Fast path III").
//!
//! # Invariants
//! - within a lane, slots are sorted by sequence number (a submit's
//!   sequence is the largest yet; an older one is inserted in place);
//! - a removed task leaves a hole (`None`) where it was; holes at a lane's
//!   head are dropped at once, holes elsewhere when they outnumber the
//!   live slots (so a lane holds at most about twice its live tasks);
//! - `len` counts the live slots of every lane; an empty lane is removed
//!   once more than `KEPT_LANES` lanes exist.

use std::collections::{BTreeMap, VecDeque};

use super::task::TaskId;

/// A task's place in the pending order: (−priority, submission sequence).
pub(crate) type OrderKey = (i64, u64);

/// Empty lanes kept (with their buffers) while there are at most this many.
const KEPT_LANES: usize = 4;

/// The tasks of one priority, in submission order.
#[derive(Default)]
struct Lane {
    slots: VecDeque<(u64, Option<TaskId>)>,
    live: usize,
}

impl Lane {
    /// Where `seq` is (or would go). The head, the usual answer for a
    /// start or an end, is checked before the binary search.
    fn position(&self, seq: u64) -> Result<usize, usize> {
        match self.slots.front() {
            Some(&(first, _)) if first == seq => Ok(0),
            Some(&(first, _)) if first > seq => Err(0),
            _ => self.slots.binary_search_by_key(&seq, |&(s, _)| s),
        }
    }

    /// Drops holes at the head, and every hole once they outnumber the
    /// live slots.
    fn tidy(&mut self) {
        while self.slots.front().is_some_and(|(_, id)| id.is_none()) {
            self.slots.pop_front();
        }
        if self.slots.len() > 2 * self.live + 16 {
            self.slots.retain(|(_, id)| id.is_some());
        }
    }
}

/// The pending order (see the module's invariants).
#[derive(Default)]
pub(crate) struct PendingOrder {
    lanes: BTreeMap<i64, Lane>,
    len: usize,
}

impl PendingOrder {
    /// Tasks in the order.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Adds `id` at `key`; returns the task that held `key` before, if any
    /// (it is replaced, as a map would).
    pub(crate) fn insert(&mut self, key: OrderKey, id: TaskId) -> Option<TaskId> {
        let (lane_key, seq) = key;
        let lane = self.lanes.entry(lane_key).or_default();
        let appends = lane.slots.back().is_none_or(|&(last, _)| last < seq);
        if appends {
            lane.slots.push_back((seq, Some(id)));
        } else {
            match lane.position(seq) {
                Ok(at) => {
                    let before = lane.slots[at].1.replace(id);
                    if before.is_none() {
                        lane.live += 1;
                        self.len += 1;
                    }
                    return before;
                }
                Err(at) => lane.slots.insert(at, (seq, Some(id))),
            }
        }
        lane.live += 1;
        self.len += 1;
        None
    }

    /// Removes the task at `key`; returns it if there was one.
    pub(crate) fn remove(&mut self, key: &OrderKey) -> Option<TaskId> {
        let (lane_key, seq) = *key;
        let lane = self.lanes.get_mut(&lane_key)?;
        let at = lane.position(seq).ok()?;
        let id = lane.slots[at].1.take()?;
        lane.live -= 1;
        self.len -= 1;
        lane.tidy();
        // An emptied lane keeps its buffer while few lanes exist (a queue
        // drained and refilled at one priority does not regrow it), and is
        // dropped beyond that (the walk passes every lane).
        if lane.live == 0 && self.lanes.len() > KEPT_LANES {
            self.lanes.remove(&lane_key);
        }
        Some(id)
    }

    /// Whether a task is at `key`.
    pub(crate) fn contains_key(&self, key: &OrderKey) -> bool {
        self.lanes
            .get(&key.0)
            .and_then(|lane| lane.position(key.1).ok().map(|at| lane.slots[at].1.is_some()))
            .unwrap_or(false)
    }

    /// Every task strictly after `after` in the order (from the first
    /// with `None`), with its key.
    pub(crate) fn after(&self, after: Option<OrderKey>) -> impl Iterator<Item = (OrderKey, TaskId)> + '_ {
        let from = after.map_or(i64::MIN, |(lane, _)| lane);
        self.lanes.range(from..).flat_map(move |(&lane_key, lane)| {
            let start = match after {
                Some((l, seq)) if l == lane_key => lane.position(seq).map_or_else(|at| at, |at| at + 1),
                _ => 0,
            };
            lane.slots.range(start..).filter_map(move |&(seq, id)| id.map(|id| ((lane_key, seq), id)))
        })
    }

    /// Every task in the order.
    pub(crate) fn values(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.after(None).map(|(_, id)| id)
    }
}

#[cfg(all(test, not(loom)))]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::{OrderKey, PendingOrder};
    use crate::queue::TaskId;

    #[derive(Debug, Clone)]
    enum Op {
        /// A submit: the next sequence at this priority.
        Submit(i64),
        /// An insert at an older sequence (a restored order).
        Insert(i64, u64),
        /// Remove the n-th task in order (modulo the count).
        Remove(usize),
        /// Remove a key that may not be there.
        RemoveKey(i64, u64),
        /// Read everything after the n-th key in order.
        After(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (-2i64..3).prop_map(Op::Submit),
            1 => (-2i64..3, 0u64..400).prop_map(|(p, s)| Op::Insert(p, s)),
            4 => (0usize..1000).prop_map(Op::Remove),
            1 => (-2i64..3, 0u64..400).prop_map(|(p, s)| Op::RemoveKey(p, s)),
            2 => (0usize..1000).prop_map(Op::After),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// The lanes behave exactly as the map they replace: same
        /// contents, same order, same answers, whatever the operations.
        ///
        /// To see it fail, make `after` start a lane at the cursor's own
        /// slot (`at` instead of `at + 1`): a task is read twice.
        #[test]
        fn the_lanes_behave_as_an_ordered_map(ops in proptest::collection::vec(op(), 1..400)) {
            let mut model: BTreeMap<OrderKey, TaskId> = BTreeMap::new();
            let mut order = PendingOrder::default();
            let mut seq = 400u64;
            let mut id = 0u64;
            for op in ops {
                match op {
                    Op::Submit(p) => {
                        seq += 1;
                        id += 1;
                        prop_assert_eq!(order.insert((p, seq), TaskId(id)), model.insert((p, seq), TaskId(id)));
                    }
                    Op::Insert(p, s) => {
                        id += 1;
                        prop_assert_eq!(order.insert((p, s), TaskId(id)), model.insert((p, s), TaskId(id)));
                    }
                    Op::Remove(n) => {
                        if let Some(key) = model.keys().nth(n % model.len().max(1)).copied() {
                            prop_assert!(order.contains_key(&key));
                            prop_assert_eq!(order.remove(&key), model.remove(&key));
                            prop_assert!(!order.contains_key(&key));
                        }
                    }
                    Op::RemoveKey(p, s) => {
                        prop_assert_eq!(order.remove(&(p, s)), model.remove(&(p, s)));
                    }
                    Op::After(n) => {
                        let cursor = model.keys().nth(n % (model.len() + 1)).copied();
                        let mine: Vec<_> = order.after(cursor).collect();
                        let theirs: Vec<_> = match cursor {
                            Some(c) => model.range((std::ops::Bound::Excluded(c), std::ops::Bound::Unbounded)).map(|(k, v)| (*k, *v)).collect(),
                            None => model.iter().map(|(k, v)| (*k, *v)).collect(),
                        };
                        prop_assert_eq!(mine, theirs);
                    }
                }
                prop_assert_eq!(order.len(), model.len());
                let all: Vec<TaskId> = order.values().collect();
                prop_assert_eq!(all, model.values().copied().collect::<Vec<_>>());
            }
        }
    }

    /// A lane whose head waits while every task behind it starts keeps
    /// about twice its live tasks, not one slot per task ever submitted.
    #[test]
    fn holes_behind_a_waiting_head_are_reclaimed() {
        let mut order = PendingOrder::default();
        order.insert((0, 0), TaskId(0));
        for seq in 1..10_000u64 {
            order.insert((0, seq), TaskId(seq));
            assert_eq!(order.remove(&(0, seq)), Some(TaskId(seq)));
        }
        assert_eq!(order.len(), 1);
        assert!(order.lanes[&0].slots.len() <= 2 + 16, "{} slots", order.lanes[&0].slots.len());
    }
}
