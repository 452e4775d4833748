//! What the broker learned of each task class from what ran
//! (docs/DESIGN.md §14): the measured peak memory and wall time of each
//! successful run, per class, so that dispatch (walltime) and the
//! Provisioner size work from evidence rather than from what submitters
//! declared.
//!
//! The rule is the engine's (docs/DESIGN.md §6), bounded the same way: the
//! last [`Learned::SAMPLES`] successful runs per class are kept, and the
//! estimate is the **worst** of them — the largest peak and the longest
//! wall time. The worst, not an average, because both uses are one-sided:
//! an allocation that ends before the task does wastes the whole run, and a
//! memory size below the need is killed. Old samples age out, so a class
//! that got lighter is believed within eight runs. Failed runs teach
//! nothing (a cut-short run says nothing about the need); a run with no
//! measurement (0) is not a sample.
//!
//! At most [`Learned::MAX_CLASSES`] classes are kept; the least recently
//! recorded goes first. The broker's store persists every sample so a
//! restart keeps what was learned (`lardon_cluster::store::Store::learn`).

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use lardon_proto::cluster as pb;

use crate::capability::Capability;

/// What a class is expected to cost, from its recent successful runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Estimate {
    /// The largest measured peak memory, bytes (0: never measured).
    pub peak: u64,
    /// The longest measured wall time.
    pub duration: Duration,
}

/// One successful run's measurements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sample {
    peak: u64,
    wall_ms: u64,
}

#[derive(Debug, Clone, Default)]
struct Class {
    samples: VecDeque<Sample>,
    /// When it last learned (a counter), for evicting the stalest class.
    touched: u64,
}

/// Learned estimates per task class (see the module docs). Fields are
/// private: samples enter only through [`Learned::record`], bounded.
#[derive(Debug, Clone, Default)]
pub struct Learned {
    classes: BTreeMap<String, Class>,
    clock: u64,
}

/// The class of a task: what its submitter named, else its capability key
/// and the base name of its program (`gcc@12:*/cc1plus`), so tasks that run
/// the same tool on the same toolchain learn together and a path prefix
/// never splits a class.
pub fn class_of(capability: &Capability, spec: &pb::TaskSpec) -> String {
    if !spec.class.is_empty() {
        return spec.class.clone();
    }
    let program = spec.argv.first().map_or("", String::as_str);
    let base = program.rsplit('/').next().unwrap_or(program);
    format!("{}/{base}", capability.key())
}

impl Learned {
    /// Successful runs kept per class (the engine's ring, docs/DESIGN.md §6).
    pub const SAMPLES: usize = 8;
    /// Classes kept; the least recently recorded is forgotten first.
    pub const MAX_CLASSES: usize = 10_000;

    /// Nothing learned yet.
    #[must_use]
    pub fn new() -> Self {
        Learned::default()
    }

    /// Records one successful run of `class` that peaked at `peak` bytes
    /// and took `wall_ms`. A run with neither figure measured (both 0)
    /// records nothing; returns whether it was recorded.
    pub fn record(&mut self, class: &str, peak: u64, wall_ms: u64) -> bool {
        if peak == 0 && wall_ms == 0 {
            return false;
        }
        self.clock += 1;
        let touched = self.clock;
        let entry = self.classes.entry(class.to_owned()).or_default();
        entry.touched = touched;
        entry.samples.push_back(Sample { peak, wall_ms });
        while entry.samples.len() > Self::SAMPLES {
            entry.samples.pop_front();
        }
        while self.classes.len() > Self::MAX_CLASSES {
            let stalest = self.classes.iter().min_by_key(|(_, c)| c.touched).map(|(k, _)| k.clone());
            match stalest {
                Some(k) => drop(self.classes.remove(&k)),
                None => break,
            }
        }
        true
    }

    /// What `class` is expected to cost: the worst of its kept samples;
    /// `None` before its first measured success.
    #[must_use]
    pub fn estimate(&self, class: &str) -> Option<Estimate> {
        let c = self.classes.get(class)?;
        let peak = c.samples.iter().map(|s| s.peak).max()?;
        let wall = c.samples.iter().map(|s| s.wall_ms).max()?;
        Some(Estimate { peak, duration: Duration::from_millis(wall) })
    }

    /// Classes known.
    #[must_use]
    pub fn len(&self) -> usize {
        self.classes.len()
    }

    /// Whether nothing was learned.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.classes.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn the_estimate_is_the_worst_of_the_last_eight_successes() {
        let mut l = Learned::new();
        assert_eq!(l.estimate("c"), None, "nothing before the first run");
        l.record("c", 100 * MIB, 2_000);
        l.record("c", 300 * MIB, 1_000);
        l.record("c", 200 * MIB, 5_000);
        assert_eq!(l.estimate("c"), Some(Estimate { peak: 300 * MIB, duration: Duration::from_secs(5) }));
        // Eight lighter runs push the heavy ones out: the class got lighter.
        for _ in 0..Learned::SAMPLES {
            l.record("c", 50 * MIB, 500);
        }
        assert_eq!(l.estimate("c"), Some(Estimate { peak: 50 * MIB, duration: Duration::from_millis(500) }));
        assert_eq!(l.estimate("other"), None, "classes do not mix");
    }

    #[test]
    fn an_unmeasured_run_is_not_a_sample() {
        let mut l = Learned::new();
        assert!(!l.record("c", 0, 0));
        assert_eq!(l.estimate("c"), None);
        assert!(l.record("c", 0, 700), "a wall time alone is a measurement");
        assert_eq!(l.estimate("c"), Some(Estimate { peak: 0, duration: Duration::from_millis(700) }));
    }

    #[test]
    fn classes_are_bounded_and_the_stalest_goes_first() {
        let mut l = Learned::new();
        for i in 0..Learned::MAX_CLASSES {
            l.record(&format!("c{i}"), MIB, 1);
        }
        // c0 learns again: c1 is now the stalest.
        l.record("c0", MIB, 1);
        l.record("new", MIB, 1);
        assert_eq!(l.len(), Learned::MAX_CLASSES);
        assert!(l.estimate("c0").is_some() && l.estimate("new").is_some());
        assert_eq!(l.estimate("c1"), None);
    }

    #[test]
    fn the_class_is_the_submitters_else_the_capability_and_program_name() {
        let cap = Capability::parse("gcc@12").unwrap_or_else(|e| panic!("{e}"));
        let spec = |argv: &str, class: &str| pb::TaskSpec {
            argv: vec![argv.into(), "-O2".into()],
            class: class.into(),
            ..Default::default()
        };
        assert_eq!(class_of(&cap, &spec("/usr/lib/gcc/cc1plus", "")), "gcc@12:*/cc1plus");
        assert_eq!(class_of(&cap, &spec("cc1plus", "")), class_of(&cap, &spec("/opt/x/cc1plus", "")));
        assert_eq!(class_of(&cap, &spec("cc1plus", "render-4k")), "render-4k");
    }
}
