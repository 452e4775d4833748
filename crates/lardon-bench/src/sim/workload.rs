//! Simulated tasks and the seeded workload generators.
//!
//! A task processes `items` items in one or more sequences. A sequence of
//! `b` items really takes `time_fixed + time_per_item × b` milliseconds and
//! really peaks at `real_fixed + real_per_item × b` bytes, held for the
//! whole sequence (a rectangle: the simulator does not model ramps). Its
//! estimate declares `est_fixed + est_per_item × b`; an honest task's
//! estimate equals its real use, a liar's is lower.

use super::rng::SplitMix64;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// One simulated task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimTask {
    /// Name (and learning class unless `class` says otherwise).
    pub name: String,
    /// Learning class shared with other tasks of the same kind; `None`: a
    /// class of its own, named after the task.
    pub class: Option<String>,
    /// Higher runs first (Lardon and FIFO; fixed-N ignores it).
    pub priority: i32,
    /// Items to process (1 for an unbatched task).
    pub items: u64,
    /// Smallest batch the task accepts.
    pub batch_min: u64,
    /// Largest batch (the user's cap; fixed-N always runs this many).
    pub batch_max: u64,
    /// Declared fixed memory per sequence, bytes.
    pub est_fixed: u64,
    /// Declared memory per item, bytes.
    pub est_per_item: u64,
    /// Real fixed memory per sequence, bytes.
    pub real_fixed: u64,
    /// Real memory per item, bytes.
    pub real_per_item: u64,
    /// Fixed time per sequence, ms.
    pub time_fixed: u64,
    /// Time per item, ms.
    pub time_per_item: u64,
}

impl SimTask {
    /// An unbatched, honest task: `memory` bytes for `millis` ms.
    pub fn simple(name: impl Into<String>, memory: u64, millis: u64) -> Self {
        SimTask {
            name: name.into(),
            class: None,
            priority: 0,
            items: 1,
            batch_min: 1,
            batch_max: 1,
            est_fixed: memory,
            est_per_item: 0,
            real_fixed: memory,
            real_per_item: 0,
            time_fixed: millis,
            time_per_item: 0,
        }
    }

    /// Real peak of a sequence of `b` items, bytes.
    pub fn real_memory(&self, b: u64) -> u64 {
        self.real_fixed.saturating_add(self.real_per_item.saturating_mul(b))
    }

    /// Declared memory of a sequence of `b` items, bytes.
    pub fn est_memory(&self, b: u64) -> u64 {
        self.est_fixed.saturating_add(self.est_per_item.saturating_mul(b))
    }

    /// Duration of a sequence of `b` items, ms.
    pub fn duration(&self, b: u64) -> u64 {
        self.time_fixed.saturating_add(self.time_per_item.saturating_mul(b))
    }

    /// The learning class: `class`, or the task's name.
    pub fn class_name(&self) -> &str {
        self.class.as_deref().unwrap_or(&self.name)
    }

    /// True when the real use exceeds the estimate.
    pub fn is_liar(&self) -> bool {
        self.real_fixed > self.est_fixed || self.real_per_item > self.est_per_item
    }
}

/// A named list of tasks, in submission order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workload {
    /// Short name for tables.
    pub name: String,
    /// Tasks in submission order.
    pub tasks: Vec<SimTask>,
}

/// 200 unbatched honest tasks, memory uniform in 1–8 GiB, duration
/// uniform in 10–120 s.
pub fn uniform(seed: u64) -> Workload {
    let mut r = SplitMix64::new(seed);
    let tasks = (0..200)
        .map(|i| SimTask::simple(format!("u{i}"), r.range(GIB, 8 * GIB), r.range(10_000, 120_000)))
        .collect();
    Workload { name: "uniform".into(), tasks }
}

/// 200 unbatched honest tasks with Pareto(α = 1.5) memory (from 512 MiB,
/// capped at 40 GiB) and duration (from 5 s, capped at 30 min).
pub fn heavy_tailed(seed: u64) -> Workload {
    let mut r = SplitMix64::new(seed);
    let tasks = (0..200)
        .map(|i| {
            let mem = r.pareto(512.0, 1.5, 40.0 * 1024.0) as u64 * MIB;
            let ms = r.pareto(5_000.0, 1.5, 1_800_000.0) as u64;
            SimTask::simple(format!("h{i}"), mem, ms)
        })
        .collect();
    Workload { name: "heavy-tailed".into(), tasks }
}

fn batched_task(r: &mut SplitMix64, name: String) -> SimTask {
    let fixed = r.range(GIB / 2, 2 * GIB);
    let per_item = r.range(20, 200) * MIB;
    SimTask {
        name,
        class: None,
        priority: 0,
        items: r.range(50, 400),
        batch_min: 1,
        batch_max: 64,
        est_fixed: fixed,
        est_per_item: per_item,
        real_fixed: fixed,
        real_per_item: per_item,
        time_fixed: r.range(2_000, 10_000),
        time_per_item: r.range(100, 1_000),
    }
}

/// 40 honest batched tasks: 50–400 items, batch 1..64, 0.5–2 GiB fixed
/// and 20–200 MiB per item, 2–10 s fixed and 0.1–1 s per item.
pub fn batched(seed: u64) -> Workload {
    let mut r = SplitMix64::new(seed);
    let tasks = (0..40).map(|i| batched_task(&mut r, format!("b{i}"))).collect();
    Workload { name: "batched".into(), tasks }
}

/// The batched mix where every fifth task is a liar whose real per-item
/// memory is 2–3× its estimate (learning from measured peaks must
/// shrink its batches).
pub fn liars(seed: u64) -> Workload {
    let mut r = SplitMix64::new(seed);
    let tasks = (0..40)
        .map(|i| {
            let mut t = batched_task(&mut r, format!("l{i}"));
            if i % 5 == 0 {
                let factor_pct = r.range(200, 300);
                t.real_per_item = t.est_per_item * factor_pct / 100;
            }
            t
        })
        .collect();
    Workload { name: "liars".into(), tasks }
}

/// 200 unbatched tasks of 20 classes (10 tasks each, interleaved in
/// submission order). A class declares one size, uniform in 1–4 GiB; every
/// fifth class is a liar whose tasks really use 2–3× it. Durations are
/// uniform in 10–120 s per task. What a class learns from its first runs
/// (a measured peak, or the lower bound of a kill) sizes the rest.
pub fn unbatched_liars(seed: u64) -> Workload {
    let mut r = SplitMix64::new(seed);
    let sizes: Vec<(u64, u64)> = (0..20)
        .map(|c| {
            let declared = r.range(GIB, 4 * GIB);
            let real = if c % 5 == 0 { declared * r.range(200, 300) / 100 } else { declared };
            (declared, real)
        })
        .collect();
    let tasks = (0..200)
        .map(|i| {
            let (declared, real) = sizes[i % 20];
            SimTask {
                class: Some(format!("k{}", i % 20)),
                real_fixed: real,
                ..SimTask::simple(format!("v{i}"), declared, r.range(10_000, 120_000))
            }
        })
        .collect();
    Workload { name: "unbatched liars".into(), tasks }
}

/// The three job shapes of [`mixed`]: (shape, declared = real bytes,
/// duration range ms, share in percent). Sizes are the issue-31 report's
/// (2.5 GiB, 1 GiB and 150 MiB jobs on a 4 GiB budget) scaled to the
/// simulated host's 60 GiB budget.
const MIXED_SHAPES: [(&str, u64, (u64, u64), u64); 3] = [
    ("large", 36 * GIB, (60_000, 180_000), 8),
    ("medium", 15 * GIB, (30_000, 120_000), 22),
    ("small", 2250 * MIB, (5_000, 60_000), 70),
];

/// 150 unbatched honest tasks of three shapes — a few large jobs (36 GiB,
/// 60–180 s), some medium ones (15 GiB, 30–120 s) and many small ones
/// (2.25 GiB, 5–60 s; 8 / 22 / 70 % in a seeded shuffle) — submitted
/// without a class: each learns under its command shape, as the daemon
/// keys it (`default.<program>.<hash>`, docs/DESIGN.md §6), so a small job
/// never inherits a large one's peak.
pub fn mixed(seed: u64) -> Workload {
    mixed_keyed(seed, "mixed", |shape| format!("default.{shape}"))
}

/// [`mixed`] under the rule before issue 31: every task of the default
/// class learned under one key, `default` (an ablation: what pooling
/// strangers costs).
pub fn mixed_pooled(seed: u64) -> Workload {
    mixed_keyed(seed, "mixed, one default class (before)", |_| "default".to_owned())
}

fn mixed_keyed(seed: u64, name: &str, key: impl Fn(&str) -> String) -> Workload {
    let mut r = SplitMix64::new(seed);
    let tasks = (0..150)
        .map(|i| {
            let pick = r.range(0, 100);
            let mut acc = 0;
            let &(shape, bytes, (lo, hi), _) = MIXED_SHAPES
                .iter()
                .find(|(_, _, _, share)| {
                    acc += share;
                    pick < acc
                })
                .unwrap_or(&MIXED_SHAPES[2]);
            SimTask {
                class: Some(key(shape)),
                ..SimTask::simple(format!("m{i}-{shape}"), bytes, r.range(lo, hi))
            }
        })
        .collect();
    Workload { name: name.into(), tasks }
}

/// Every standard workload for `seed`.
pub fn standard(seed: u64) -> Vec<Workload> {
    vec![
        uniform(seed),
        heavy_tailed(seed),
        batched(seed),
        liars(seed),
        unbatched_liars(seed),
        mixed(seed),
        mixed_pooled(seed),
    ]
}

/// A tiny mixed workload for smoke runs and CI: a few simple tasks, one
/// big one, two batched ones, one of them a liar.
pub fn tiny(seed: u64) -> Workload {
    let mut r = SplitMix64::new(seed);
    let mut tasks: Vec<SimTask> = (0..6)
        .map(|i| SimTask::simple(format!("s{i}"), r.range(2 * GIB, 12 * GIB), r.range(5_000, 30_000)))
        .collect();
    tasks.insert(2, SimTask::simple("big", 40 * GIB, 20_000));
    let mut b = batched_task(&mut r, "batch".into());
    b.items = 60;
    tasks.push(b);
    let mut l = batched_task(&mut r, "liar".into());
    l.items = 60;
    l.real_per_item = l.est_per_item * 2;
    tasks.push(l);
    Workload { name: "tiny".into(), tasks }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generators_are_reproducible_and_shaped() {
        assert_eq!(standard(42), standard(42));
        assert_ne!(uniform(42), uniform(43));
        let l = liars(1);
        assert_eq!(l.tasks.iter().filter(|t| t.is_liar()).count(), 8);
        assert!(batched(1).tasks.iter().all(|t| !t.is_liar() && t.items >= 50));
        assert!(heavy_tailed(1).tasks.iter().all(|t| t.real_fixed <= 40 * GIB && t.real_fixed >= 512 * MIB));
        assert!(tiny(3).tasks.iter().any(SimTask::is_liar));
        let u = unbatched_liars(1);
        assert_eq!(u.tasks.iter().filter(|t| t.is_liar()).count(), 40);
        assert!(u.tasks.iter().all(|t| t.items == 1 && t.batch_max == 1 && t.class_name().starts_with('k')));
        let m = mixed(1);
        assert_eq!(mixed(1), m);
        assert!(m.tasks.iter().all(|t| !t.is_liar() && t.class_name().starts_with("default.")));
        for shape in ["large", "medium", "small"] {
            assert!(m.tasks.iter().any(|t| t.class_name() == format!("default.{shape}")), "{shape}");
        }
        assert!(mixed_pooled(1).tasks.iter().all(|t| t.class_name() == "default"));
    }

    #[test]
    fn sequence_costs() {
        let t =
            SimTask { real_per_item: 3, est_per_item: 2, time_per_item: 5, ..SimTask::simple("x", 10, 7) };
        assert_eq!(t.real_memory(4), 22);
        assert_eq!(t.est_memory(4), 18);
        assert_eq!(t.duration(4), 27);
        assert!(t.is_liar());
    }
}
