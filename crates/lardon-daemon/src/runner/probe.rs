//! The first task of an unproven class goes first.
//!
//! A class whose tasks all under-declare their memory (liars) would
//! otherwise be admitted many at once at the declared size, and every one
//! of them killed at its limit (hard enforcement) or all of them together
//! overrunning the budget (soft, off). So while a named class (not the
//! default one, which gathers unrelated commands) has learned nothing
//! from a completed run, a task of it that declares memory is queued
//! *after* the class's live probe (the first such task, which learns —
//! through its memory retries if need be); when the probe ends, the others
//! are admitted at the size it taught. Waiting is a queue dependency, so a
//! waiting task holds no resources (a probe's re-admission is never
//! blocked by its waiting siblings). A class with a completed sample never
//! waits here.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use crate::spec::TaskId;

/// The live probe of each unproven class.
#[derive(Debug, Default)]
pub(crate) struct ClassProbes {
    probing: Mutex<HashMap<String, TaskId>>,
}

impl ClassProbes {
    /// Where task `id` of an unproven `class` stands: `Some(probe)` when
    /// another task is the class's live probe (`id` is queued after it),
    /// else `None` and `id` becomes the probe. `live` tells whether a task
    /// has yet to end.
    pub(crate) fn probe_for(&self, class: &str, id: TaskId, live: impl Fn(TaskId) -> bool) -> Option<TaskId> {
        let mut probing = self.probing.lock().unwrap_or_else(PoisonError::into_inner);
        match probing.get(class) {
            Some(&p) if p != id && live(p) => Some(p),
            _ => {
                probing.insert(class.to_owned(), id);
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_live_task_of_a_class_probes_for_the_rest() {
        let p = ClassProbes::default();
        let all_live = |_| true;
        assert_eq!(p.probe_for("liar", TaskId(1), all_live), None, "the first probes");
        assert_eq!(p.probe_for("liar", TaskId(2), all_live), Some(TaskId(1)));
        assert_eq!(p.probe_for("liar", TaskId(3), all_live), Some(TaskId(1)));
        assert_eq!(p.probe_for("other", TaskId(4), all_live), None, "classes are independent");
        assert_eq!(p.probe_for("liar", TaskId(1), all_live), None, "the probe itself never waits");
        // The probe ended: the next task of the still unproven class probes.
        assert_eq!(p.probe_for("liar", TaskId(5), |t| t != TaskId(1)), None);
        assert_eq!(p.probe_for("liar", TaskId(6), all_live), Some(TaskId(5)));
    }
}
