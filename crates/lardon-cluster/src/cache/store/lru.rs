//! Least-recently-used order over keys.

use std::collections::{BTreeMap, HashMap};

/// Keys in the order of their last use: a use moves a key to the back.
#[derive(Debug, Default)]
pub(super) struct Lru {
    next: u64,
    by_use: BTreeMap<u64, String>,
    use_of: HashMap<String, u64>,
}

impl Lru {
    /// Marks `key` as used now (adding it if new).
    pub(super) fn touch(&mut self, key: &str) {
        if let Some(old) = self.use_of.remove(key) {
            self.by_use.remove(&old);
        }
        self.next += 1;
        self.by_use.insert(self.next, key.to_owned());
        self.use_of.insert(key.to_owned(), self.next);
    }

    /// Forgets `key`.
    pub(super) fn remove(&mut self, key: &str) {
        if let Some(old) = self.use_of.remove(key) {
            self.by_use.remove(&old);
        }
    }

    /// The least recently used key.
    pub(super) fn oldest(&self) -> Option<String> {
        self.by_use.values().next().cloned()
    }
}
