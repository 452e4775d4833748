//! # Implementation details
//!
//! A map keyed by [`TaskId`] for the queue's per-task tables (the live
//! entries, the ended tasks' outcomes), shaped for the ids the queue
//! hands out: consecutive numbers. Ids near each other sit in one window
//! of slots indexed by `id − base`, so a submit appends, a lookup is a
//! subtraction and a bounds check, and an end clears a slot — no hashing,
//! no probing and no rehash (BENCHMARKS.md "Fast path IV: queue", step
//! 1). An id far from the window (a caller's
//! preassigned one) goes to a side `HashMap`, so no id can make the window
//! huge.
//!
//! # Invariants
//! - an id is in at most one place: the window when `base ≤ id <
//!   base + slots.len()` and its slot is full, else the side map;
//! - `dense` counts the full slots;
//! - the window never starts or ends with an empty slot;
//! - `slots.len() ≤ 2 × dense + SLACK` after every `remove` (the oldest
//!   entries of a window mostly made of holes move to the side map), so
//!   its memory follows the entries kept, not the ids ever seen.

use std::collections::{HashMap, VecDeque};

use crate::idhash::Ids;

use super::task::TaskId;

/// Empty slots a window may hold beyond twice its entries.
const SLACK: usize = 64;

/// A map from [`TaskId`] to `T` (see the module's invariants).
pub(crate) struct IdSlab<T> {
    base: u64,
    slots: VecDeque<Option<T>>,
    dense: usize,
    sparse: HashMap<TaskId, T, Ids>,
}

impl<T> Default for IdSlab<T> {
    fn default() -> Self {
        IdSlab { base: 0, slots: VecDeque::new(), dense: 0, sparse: HashMap::default() }
    }
}

impl<T> IdSlab<T> {
    /// Entries held.
    pub(crate) fn len(&self) -> usize {
        self.dense + self.sparse.len()
    }

    /// Whether no entry is held.
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The window slot of `id`, if the window covers it.
    fn index(&self, id: TaskId) -> Option<usize> {
        let at = usize::try_from(id.0.checked_sub(self.base)?).ok()?;
        (at < self.slots.len()).then_some(at)
    }

    /// The entry of `id`.
    pub(crate) fn get(&self, id: &TaskId) -> Option<&T> {
        match self.index(*id).and_then(|at| self.slots[at].as_ref()) {
            Some(v) => Some(v),
            None if self.sparse.is_empty() => None,
            None => self.sparse.get(id),
        }
    }

    /// The entry of `id`, to change.
    pub(crate) fn get_mut(&mut self, id: &TaskId) -> Option<&mut T> {
        if let Some(at) = self.index(*id)
            && self.slots[at].is_some()
        {
            return self.slots[at].as_mut();
        }
        if self.sparse.is_empty() { None } else { self.sparse.get_mut(id) }
    }

    /// Whether `id` has an entry.
    pub(crate) fn contains_key(&self, id: &TaskId) -> bool {
        self.get(id).is_some()
    }

    /// Sets the entry of `id`; returns the one it replaces.
    pub(crate) fn insert(&mut self, id: TaskId, value: T) -> Option<T> {
        let len = self.slots.len() as u64;
        // New slots (holes and the entry's own) the window may take on and
        // still hold at most `2 × dense + SLACK` slots with this entry.
        let room = (2 * (self.dense as u64 + 1) + SLACK as u64).saturating_sub(len);
        if self.slots.is_empty() {
            self.base = id.0;
            self.slots.push_back(None);
        } else if id.0 < self.base {
            // Before the window: only a little before.
            let before = self.base - id.0;
            if before > room {
                return self.sparse.insert(id, value);
            }
            for _ in 0..before {
                self.slots.push_front(None);
            }
            self.base = id.0;
        } else if id.0 - self.base >= len {
            // After the window (the common case: the next id appends).
            let gap = id.0 - self.base - len;
            if gap + 1 > room {
                return self.sparse.insert(id, value);
            }
            for _ in 0..gap {
                self.slots.push_back(None);
            }
            self.slots.push_back(None);
        }
        // The window covers `id` now (grown above when it did not).
        let Some(slot) = self.index(id).and_then(|at| self.slots.get_mut(at)) else {
            return self.sparse.insert(id, value);
        };
        let before = match slot.replace(value) {
            Some(old) => Some(old),
            None => {
                self.dense += 1;
                None
            }
        };
        // The window now covers `id`: an older entry for it in the side map
        // is the one replaced.
        if before.is_none() && !self.sparse.is_empty() {
            return self.sparse.remove(&id);
        }
        before
    }

    /// Takes the entry of `id` out.
    pub(crate) fn remove(&mut self, id: &TaskId) -> Option<T> {
        let taken = match self.index(*id) {
            Some(at) => self.slots[at].take(),
            None => None,
        };
        let Some(value) = taken else {
            return if self.sparse.is_empty() { None } else { self.sparse.remove(id) };
        };
        self.dense -= 1;
        self.tidy();
        Some(value)
    }

    /// Drops empty slots at both ends, and moves the oldest entries to the
    /// side map while the window is mostly holes.
    fn tidy(&mut self) {
        loop {
            match self.slots.front() {
                Some(None) => {}
                Some(Some(_)) if self.slots.len() > 2 * self.dense + SLACK => {}
                _ => break,
            }
            if let Some(Some(value)) = self.slots.pop_front() {
                self.dense -= 1;
                self.sparse.insert(TaskId(self.base), value);
            }
            // Wraps only past `u64::MAX`, when the window is empty.
            self.base = self.base.wrapping_add(1);
        }
        while let Some(None) = self.slots.back() {
            self.slots.pop_back();
        }
    }

    /// Every entry: the window's in id order, then the side map's.
    pub(crate) fn values(&self) -> impl Iterator<Item = &T> + '_ {
        self.slots.iter().flatten().chain(self.sparse.values())
    }

    /// Every entry, to change.
    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut T> + '_ {
        self.slots.iter_mut().flatten().chain(self.sparse.values_mut())
    }
}

#[cfg(all(test, not(loom)))]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::{IdSlab, SLACK};
    use crate::queue::TaskId;

    #[derive(Debug, Clone)]
    enum Op {
        /// The next consecutive id.
        Next,
        /// Any id near the consecutive ones (a restored task).
        Near(u64),
        /// An id far away (a caller's preassigned id).
        Far(u64),
        /// Remove the n-th entry in id order (modulo the count).
        Remove(usize),
        /// Remove an id that may not be there.
        RemoveId(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => Just(Op::Next),
            1 => (0u64..600).prop_map(Op::Near),
            1 => (1u64 << 40..(1u64 << 40) + 50).prop_map(Op::Far),
            5 => (0usize..1000).prop_map(Op::Remove),
            1 => (0u64..600).prop_map(Op::RemoveId),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// The slab answers exactly as a map would, whatever the ids and
        /// operations, and its window stays within twice its entries.
        ///
        /// To see it fail, drop the side-map lookup from `get`: an entry
        /// placed far away is no longer found.
        #[test]
        fn the_slab_behaves_as_a_map(ops in proptest::collection::vec(op(), 1..400)) {
            let mut model: BTreeMap<TaskId, u64> = BTreeMap::new();
            let mut slab = IdSlab::default();
            let mut next = 300u64;
            let mut value = 0u64;
            for op in ops {
                value += 1;
                match op {
                    Op::Next => {
                        next += 1;
                        prop_assert_eq!(slab.insert(TaskId(next), value), model.insert(TaskId(next), value));
                    }
                    Op::Near(id) | Op::Far(id) => {
                        prop_assert_eq!(slab.insert(TaskId(id), value), model.insert(TaskId(id), value));
                    }
                    Op::Remove(n) => {
                        if let Some(id) = model.keys().nth(n % model.len().max(1)).copied() {
                            prop_assert_eq!(slab.remove(&id), model.remove(&id));
                            prop_assert!(!slab.contains_key(&id));
                        }
                    }
                    Op::RemoveId(id) => {
                        prop_assert_eq!(slab.remove(&TaskId(id)), model.remove(&TaskId(id)));
                    }
                }
                prop_assert_eq!(slab.len(), model.len());
                for (id, v) in &model {
                    prop_assert_eq!(slab.get(id), Some(v));
                }
                let mut all: Vec<u64> = slab.values().copied().collect();
                all.sort_unstable();
                let mut theirs: Vec<u64> = model.values().copied().collect();
                theirs.sort_unstable();
                prop_assert_eq!(all, theirs);
                prop_assert!(slab.slots.len() <= 2 * slab.dense + SLACK, "{} slots for {}", slab.slots.len(), slab.dense);
            }
        }
    }

    /// The largest id goes in and out like any other (the window's start
    /// steps past it without overflowing).
    #[test]
    fn the_largest_id_is_kept_and_removed() {
        let mut slab = IdSlab::default();
        assert_eq!(slab.insert(TaskId(u64::MAX), 1), None);
        assert_eq!(slab.insert(TaskId(u64::MAX - 1), 2), None);
        assert_eq!(slab.remove(&TaskId(u64::MAX - 1)), Some(2));
        assert_eq!(slab.remove(&TaskId(u64::MAX)), Some(1));
        assert!(slab.is_empty());
        assert_eq!(slab.insert(TaskId(7), 3), None);
        assert_eq!(slab.get(&TaskId(7)), Some(&3));
    }

    /// A task that stays while a hundred thousand later ones come and go
    /// (ten at a time) does not keep a slot for each of them.
    ///
    /// To see it fail, stop `tidy` from moving entries to the side map.
    #[test]
    fn a_long_lived_entry_does_not_pin_the_window() {
        let mut slab = IdSlab::default();
        slab.insert(TaskId(1), ());
        for id in 2..100_000u64 {
            slab.insert(TaskId(id), ());
            if id > 11 {
                slab.remove(&TaskId(id - 10));
            }
        }
        assert!(slab.contains_key(&TaskId(1)));
        assert_eq!(slab.len(), 11);
        assert!(slab.slots.len() <= 2 * 11 + SLACK, "{} slots", slab.slots.len());
    }
}
