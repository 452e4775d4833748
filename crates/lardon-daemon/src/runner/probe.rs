//! The first run of an unproven class goes alone.
//!
//! Under hard enforcement, a class whose tasks all under-declare their
//! memory (liars) would otherwise be admitted many at once at the declared
//! size and every one of them killed at its limit. Instead, while a class
//! has learned nothing from a completed run, one of its runs (the probe)
//! runs and the others wait for it; once it completed (or ended), they ask
//! for a fresh admission, which is sized from what the probe taught. A
//! class that has a completed sample never waits here.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::Duration;

use crate::spec::TaskId;

/// Classes with a probe in flight, and who probes.
#[derive(Debug, Default)]
pub(crate) struct ClassProbes {
    probing: Mutex<HashMap<String, TaskId>>,
    ended: Condvar,
}

/// What [`ClassProbes::enter`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Turn {
    /// Run now (as the probe, or the class is proven).
    Go,
    /// Another task probed meanwhile: ask for a fresh admission first.
    Readmit,
}

/// How often a waiting task rechecks whether it was cancelled.
const RECHECK: Duration = Duration::from_millis(200);

impl ClassProbes {
    /// Lets task `id` run a run of `class`: at once when `proven()` holds or
    /// no other task probes the class (then `id` becomes its probe);
    /// otherwise waits until the probe ends, `proven()` holds, or
    /// `give_up()` (a cancel, a stop) does — then `None`.
    pub(crate) fn enter(
        &self,
        class: &str,
        id: TaskId,
        proven: impl Fn() -> bool,
        give_up: impl Fn() -> bool,
    ) -> Option<Turn> {
        let mut waited = false;
        let mut probing = self.probing.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if give_up() {
                return None;
            }
            if proven() {
                return Some(if waited { Turn::Readmit } else { Turn::Go });
            }
            match probing.get(class) {
                Some(&p) if p != id => {
                    waited = true;
                    probing = self
                        .ended
                        .wait_timeout(probing, RECHECK)
                        .map(|(g, _)| g)
                        .unwrap_or_else(|e| e.into_inner().0);
                }
                _ => {
                    probing.insert(class.to_owned(), id);
                    return Some(if waited { Turn::Readmit } else { Turn::Go });
                }
            }
        }
    }

    /// Task `id` is done probing `class` (its run completed or it ended):
    /// the waiting tasks go.
    pub(crate) fn leave(&self, class: &str, id: TaskId) {
        let mut probing = self.probing.lock().unwrap_or_else(PoisonError::into_inner);
        if probing.get(class) == Some(&id) {
            probing.remove(class);
            self.ended.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_probe_per_unproven_class_and_none_once_proven() {
        let p = ClassProbes::default();
        let never = || false;
        assert_eq!(p.enter("liar", TaskId(1), never, never), Some(Turn::Go), "the first probes");
        assert_eq!(
            p.enter("liar", TaskId(1), never, never),
            Some(Turn::Go),
            "the probe runs again (a retry)"
        );
        assert_eq!(p.enter("other", TaskId(2), never, never), Some(Turn::Go), "classes are independent");
        // A second task of the class waits; giving up ends the wait.
        assert_eq!(p.enter("liar", TaskId(3), never, || true), None);
        // Proven: nobody waits, probe or not.
        assert_eq!(p.enter("liar", TaskId(3), || true, never), Some(Turn::Go));
        p.leave("liar", TaskId(3));
        assert_eq!(
            p.enter("liar", TaskId(4), never, || true),
            None,
            "only the probe's leave frees the class"
        );
        p.leave("liar", TaskId(1));
        assert_eq!(p.enter("liar", TaskId(4), never, never), Some(Turn::Go), "the next probe");
    }

    #[test]
    fn a_waiting_task_goes_when_the_probe_leaves_and_readmits() {
        let p = std::sync::Arc::new(ClassProbes::default());
        assert_eq!(p.enter("liar", TaskId(1), || false, || false), Some(Turn::Go));
        let waiter = {
            let p = std::sync::Arc::clone(&p);
            std::thread::spawn(move || p.enter("liar", TaskId(2), || false, || false))
        };
        p.leave("liar", TaskId(1));
        // Either it had not waited yet (Go) or it waited and must readmit.
        let turn = waiter.join().unwrap_or(None);
        assert!(matches!(turn, Some(Turn::Go | Turn::Readmit)), "{turn:?}");
        assert_eq!(p.enter("liar", TaskId(3), || false, || true), None, "task 2 is the probe now");
    }
}
