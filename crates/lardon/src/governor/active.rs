//! # Implementation details
//!
//! The ledger's active reservations, in a slab indexed by a slot number
//! that the reservation's handle carries: hold, release and lookup are an
//! index and a compare, with no hashing and no probing (a `HashMap` keyed
//! by sequence number cost about 180 instructions per reserve + release,
//! see BENCHMARKS.md "Fast path II").
//!
//! # Invariants
//! - a slot holds at most one reservation; its sequence number is stored
//!   with it, so a stale key (a released reservation whose slot was reused)
//!   finds nothing: sequence numbers are never reused;
//! - `len` is the number of occupied slots, and every free slot index is
//!   in `free` exactly once (checked by `debug_assert!`s in debug builds).

use super::ledger::Held;

/// Where an active reservation lives: its never-reused sequence number and
/// its slot in the slab (reused after release).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Key {
    pub(crate) seq: u64,
    pub(crate) slot: usize,
}

/// One slab entry: `held` is `Some` while reservation `seq` is active.
#[derive(Debug)]
struct Slot {
    seq: u64,
    held: Option<Held>,
}

/// The active reservations: a slab with a free list (most recently freed
/// slot reused first, so the hot path keeps touching the same memory).
#[derive(Debug, Default)]
pub(crate) struct Active {
    slots: Vec<Slot>,
    free: Vec<usize>,
    len: usize,
}

impl Active {
    /// Stores `held` for the new sequence number `seq`; returns its key.
    #[inline]
    pub(crate) fn insert(&mut self, seq: u64, held: Held) -> Key {
        self.len += 1;
        if let Some(slot) = self.free.pop() {
            let entry = &mut self.slots[slot];
            debug_assert!(entry.held.is_none(), "a free slot was occupied");
            debug_assert!(entry.seq < seq, "sequence numbers only grow");
            entry.seq = seq;
            entry.held = Some(held);
            return Key { seq, slot };
        }
        let slot = self.slots.len();
        self.slots.push(Slot { seq, held: Some(held) });
        Key { seq, slot }
    }

    /// Removes and returns what `key` holds; `None` (nothing changes) when
    /// it is not active: released already, or never issued here.
    #[inline]
    pub(crate) fn remove(&mut self, key: Key) -> Option<Held> {
        let entry = self.slots.get_mut(key.slot).filter(|e| e.seq == key.seq)?;
        let held = entry.held.take()?;
        self.len -= 1;
        self.free.push(key.slot);
        debug_assert_eq!(self.slots.len(), self.len + self.free.len(), "slab lost a slot");
        Some(held)
    }

    /// What `key` holds, if it is active.
    pub(crate) fn get_mut(&mut self, key: Key) -> Option<&mut Held> {
        self.slots.get_mut(key.slot).filter(|e| e.seq == key.seq)?.held.as_mut()
    }

    /// Whether `key` is active.
    pub(crate) fn contains(&self, key: Key) -> bool {
        self.slots.get(key.slot).is_some_and(|e| e.seq == key.seq && e.held.is_some())
    }

    /// Active reservations now.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Every active reservation's holding (the ledger's debug check, tests:
    /// compiled only where those are).
    #[cfg(any(debug_assertions, test))]
    pub(crate) fn values(&self) -> impl Iterator<Item = &Held> {
        self.slots.iter().filter_map(|e| e.held.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::{Active, Held, Key};

    fn held(memory: u64) -> Held {
        Held {
            charged_memory: memory,
            gpu_memory: 0,
            gpu_devices: Vec::new(),
            cpu_millis: 0,
            io_slots: 0,
            usage: None,
            leased: false,
            group: None,
        }
    }

    #[test]
    fn a_reused_slot_does_not_answer_to_the_old_key() {
        let mut active = Active::default();
        let first = active.insert(1, held(10));
        assert_eq!(active.remove(first).map(|h| h.charged_memory), Some(10));
        let second = active.insert(2, held(20));
        assert_eq!(second.slot, first.slot, "the freed slot is reused");
        assert!(!active.contains(first), "a released key must stay released");
        assert!(active.remove(first).is_none(), "a second release finds nothing");
        assert!(active.get_mut(first).is_none());
        assert_eq!(active.len(), 1);
        assert_eq!(active.remove(second).map(|h| h.charged_memory), Some(20));
        assert_eq!(active.len(), 0);
    }

    #[test]
    fn keys_never_issued_find_nothing() {
        let mut active = Active::default();
        let k = active.insert(1, held(1));
        assert!(!active.contains(Key { seq: 1, slot: 7 }));
        assert!(!active.contains(Key { seq: 2, slot: k.slot }));
        assert!(active.remove(Key { seq: 9, slot: 0 }).is_none());
        assert_eq!(active.values().count(), 1);
    }
}
