//! Each group's book (docs/DESIGN.md §4 step 7b): its limits and what its
//! active reservations hold, kept by the ledger's hold and release. A child
//! module of the ledger, so it reads and writes the private `groups` field,
//! which nothing outside the ledger touches.

use crate::estimate::Estimate;
use crate::group::{GroupLimits, GroupName, GroupUsage};

use super::{Change, Held, Ledger};

/// One group's limits and what its active reservations hold: the
/// group's sub-budget, accounted with every hold and release of a
/// reservation of the group (an entry exists while the group has limits
/// or holds something).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct GroupBook {
    pub(crate) limits: GroupLimits,
    pub(crate) running: u32,
    pub(crate) memory: u64,
    pub(crate) cpu_millis: u64,
}

impl Ledger {
    /// Counts `held` (a reservation of a group) in its group's book.
    pub(super) fn book_hold(&mut self, held: &Held) {
        if let Some(group) = &held.group {
            let book = self.groups.entry(group.clone()).or_default();
            book.running += 1;
            book.memory += held.charged_memory;
            book.cpu_millis += u64::from(held.cpu_millis);
        }
    }

    /// Gives `held`'s share back to its group's book (dropped once it
    /// holds nothing and has no limits).
    pub(super) fn book_release(&mut self, held: &Held) {
        if let Some(group) = &held.group
            && let Some(book) = self.groups.get_mut(group)
        {
            book.running -= 1;
            book.memory -= held.charged_memory;
            book.cpu_millis -= u64::from(held.cpu_millis);
            if book.running == 0 && book.limits.is_unlimited() {
                self.groups.remove(group);
            }
        }
    }

    /// Sets `group`'s limits (all `None`: removes them); what its tasks
    /// already hold stays held. Moves the generation, so waiters look again.
    pub(crate) fn set_group_limits(&mut self, group: &GroupName, limits: GroupLimits) {
        if limits.is_unlimited() {
            if self.groups.get(group).is_some_and(|b| b.running == 0) {
                self.groups.remove(group);
            } else if let Some(book) = self.groups.get_mut(group) {
                book.limits = limits;
            }
        } else {
            self.groups.entry(group.clone()).or_default().limits = limits;
        }
        self.changed(Change::Groups);
        self.check();
    }

    /// The book of `est`'s group when that group has a limit (admission's
    /// group step and the fast path read it); `None` for a task without a
    /// group or of an unlimited one.
    #[inline]
    pub(crate) fn limited_group(&self, est: &Estimate) -> Option<(&GroupName, &GroupBook)> {
        let group = est.group.as_ref()?;
        if self.groups.is_empty() {
            return None;
        }
        self.groups.get_key_value(group).filter(|(_, b)| !b.limits.is_unlimited())
    }

    /// Every group with limits or holdings, by name.
    pub(crate) fn group_usage(&self) -> Vec<GroupUsage> {
        let mut all: Vec<GroupUsage> = self
            .groups
            .iter()
            .map(|(name, b)| GroupUsage {
                name: Some(name.clone()),
                limits: b.limits,
                running: b.running,
                memory: b.memory,
                cpu_millis: b.cpu_millis,
            })
            .collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// Debug builds: every book equals the sum over its group's active
    /// reservations, and no reservation's group lacks a book.
    #[cfg(debug_assertions)]
    pub(super) fn check_groups(&self) {
        let mut books: std::collections::HashMap<&GroupName, (u32, u64, u64)> = Default::default();
        for h in self.active.values() {
            if let Some(g) = &h.group {
                let b = books.entry(g).or_default();
                b.0 += 1;
                b.1 += h.charged_memory;
                b.2 += u64::from(h.cpu_millis);
            }
        }
        for (g, book) in &self.groups {
            let held = books.remove(g).unwrap_or_default();
            debug_assert_eq!(
                held,
                (book.running, book.memory, book.cpu_millis),
                "group {g} drifted from its reservations"
            );
        }
        debug_assert!(books.is_empty(), "a group holds reservations without a book");
    }
}
