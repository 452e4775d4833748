//! The optimizer on an agent (docs/DESIGN.md §14): at a bounded period
//! the agent reads its own cgroup's CPU counters, feeds them with the
//! tokens in use to [`Optimizer`], and pushes the bound and the latest
//! verdict to the broker (which routes with the bound and shows the
//! verdict in `lardon cluster status`). The bound stays within 1 ..= the
//! agent's `--tokens`.
//!
//! The counters come from whichever hierarchy has them, found under a
//! [`HostRoot`] so fixture trees stand in for `/proc` and `/sys`:
//! * **v2**: our cgroup's `cpu.stat` (`usage_usec`, `throttled_usec`);
//! * **v1**: `cpuacct.usage` (nanoseconds) of our `cpuacct` cgroup and
//!   `throttled_time` (nanoseconds) of our `cpu` cgroup's `cpu.stat`.
//!
//! v2 is preferred when its `cpu.stat` reports throttling (the cpu
//! controller is enabled there); on a hybrid host whose v2 tree has no
//! controllers the v1 files are used; a v2 `cpu.stat` without throttling
//! is the last resort (usage alone still lets the bound grow).

use std::path::{Path, PathBuf};
use std::time::Duration;

use lardon_host::{CgroupMount, HostRoot, own_dir, parse_mountinfo, parse_proc_cgroup};
use lardon_proto::cluster as pb;

use crate::optimizer::{CpuSample, Optimizer, OptimizerConfig, Verdict};

/// Where an agent's CPU counters are read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CpuSource {
    /// A cgroup v2 `cpu.stat`.
    V2 {
        /// The file.
        stat: PathBuf,
    },
    /// cgroup v1: `cpuacct.usage` and the `cpu` controller's `cpu.stat`.
    V1 {
        /// `cpuacct.usage` (nanoseconds).
        usage: PathBuf,
        /// `cpu.stat` (`throttled_time`, nanoseconds); `None` without the
        /// cpu controller (no throttling to read).
        stat: Option<PathBuf>,
    },
}

/// The agent's cgroup directory for a v1 controller or v2 (`ctrl` empty).
fn own_cgroup(root: &HostRoot, ctrl: &str) -> Result<Option<PathBuf>, String> {
    let read = |p: PathBuf| std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()));
    let mounts = parse_mountinfo(&read(root.proc_path("self/mountinfo"))?).map_err(|e| e.to_string())?;
    let members = parse_proc_cgroup(&read(root.proc_path("self/cgroup"))?).map_err(|e| e.to_string())?;
    let v2 = ctrl.is_empty();
    let member = members.iter().find(|m| {
        if v2 { m.id == 0 && m.controllers.is_empty() } else { m.controllers.iter().any(|c| c == ctrl) }
    });
    let mount: Option<&CgroupMount> =
        mounts.iter().find(|m| if v2 { m.v2 } else { !m.v2 && m.controllers.iter().any(|c| c == ctrl) });
    Ok(match (member, mount) {
        (Some(member), Some(mount)) => own_dir(mount, &member.path).map(|d| rebase(&d, &root.sys)),
        _ => None,
    })
}

/// `/sys/…` as seen under `sys` (a fixture tree, or `/sys` itself).
fn rebase(path: &Path, sys: &Path) -> PathBuf {
    match path.strip_prefix("/sys") {
        Ok(rest) => sys.join(rest),
        Err(_) => path.to_path_buf(),
    }
}

fn field(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .find(|(k, _)| *k == name)
        .and_then(|(_, v)| v.trim().parse().ok())
}

impl CpuSource {
    /// Finds the agent's own counters under `root` (see the module docs);
    /// `None` when no hierarchy has them (then the bound stays fixed).
    ///
    /// # Errors
    /// A message naming the file when `/proc/self/mountinfo` or
    /// `/proc/self/cgroup` is unreadable or malformed.
    pub fn detect(root: &HostRoot) -> Result<Option<Self>, String> {
        let v2 = own_cgroup(root, "")?.map(|d| d.join("cpu.stat")).filter(|p| p.is_file());
        let v2_throttles = v2
            .as_ref()
            .is_some_and(|p| std::fs::read_to_string(p).is_ok_and(|t| field(&t, "throttled_usec").is_some()));
        if let (true, Some(stat)) = (v2_throttles, &v2) {
            return Ok(Some(CpuSource::V2 { stat: stat.clone() }));
        }
        let usage = own_cgroup(root, "cpuacct")?.map(|d| d.join("cpuacct.usage")).filter(|p| p.is_file());
        if let Some(usage) = usage {
            let stat = own_cgroup(root, "cpu")?.map(|d| d.join("cpu.stat")).filter(|p| p.is_file());
            return Ok(Some(CpuSource::V1 { usage, stat }));
        }
        Ok(v2.map(|stat| CpuSource::V2 { stat }))
    }

    /// Reads the counters now, stamped `at`.
    ///
    /// # Errors
    /// A message naming the unreadable or malformed file.
    pub fn read(&self, at: Duration) -> Result<CpuSample, String> {
        let read = |p: &Path| std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()));
        match self {
            CpuSource::V2 { stat } => {
                CpuSample::parse_v2(&read(stat)?, at).map_err(|e| format!("{}: {e}", stat.display()))
            }
            CpuSource::V1 { usage, stat } => {
                let text = read(usage)?;
                let ns: u64 = text
                    .trim()
                    .parse()
                    .map_err(|_| format!("{}: `{}` is not a number", usage.display(), text.trim()))?;
                let throttled_ns = match stat {
                    Some(p) => field(&read(p)?, "throttled_time").unwrap_or(0),
                    None => 0,
                };
                Ok(CpuSample { at, usage_usec: ns / 1000, throttled_usec: throttled_ns / 1000 })
            }
        }
    }
}

/// How an agent runs its optimizer.
#[derive(Debug, Clone)]
pub struct Tuning {
    /// Where it reads its counters.
    pub source: CpuSource,
    /// The allocation's CPUs (its quota or cpuset, not the node's).
    pub cpus: f64,
    /// Between samples.
    pub every: Duration,
}

impl Tuning {
    /// The shortest period: reading a few files more often than this is
    /// noise, not control.
    pub const MIN_EVERY: Duration = Duration::from_millis(100);
}

/// An agent's optimizer, fed from its cgroup (see the module docs).
#[derive(Debug)]
pub struct Tuner {
    source: CpuSource,
    optimizer: Optimizer,
}

fn verdict_word(v: Verdict) -> &'static str {
    match v {
        Verdict::Grow => "grow",
        Verdict::Shrink => "shrink",
        Verdict::Hold => "hold",
    }
}

impl Tuner {
    /// A controller for an allocation of `cpus` CPUs whose bound moves
    /// within 1 ..= `tokens` and starts at `tokens`.
    #[must_use]
    pub fn new(source: CpuSource, cpus: f64, tokens: u32) -> Self {
        let tokens = tokens.max(1);
        let config =
            OptimizerConfig { min_tokens: 1, max_tokens: tokens, ..OptimizerConfig::for_cpus(tokens) };
        Tuner { source, optimizer: Optimizer::new(config, cpus, tokens) }
    }

    /// The current bound.
    #[must_use]
    pub fn tokens(&self) -> u32 {
        self.optimizer.tokens()
    }

    /// Takes a sample at `at` (the agent's monotonic clock) with `busy`
    /// tokens in use; returns what to push to the broker (the bound and the
    /// latest verdict), or `None` before the first verdict.
    ///
    /// # Errors
    /// A message naming the file when the counters cannot be read (the
    /// bound is left as it was).
    pub fn tick(&mut self, at: Duration, busy: u32) -> Result<Option<pb::TokenBound>, String> {
        let sample = self.source.read(at)?;
        self.optimizer.observe(sample, busy);
        Ok(self.optimizer.latest().map(|(verdict, reason)| pb::TokenBound {
            tokens: self.optimizer.tokens(),
            verdict: verdict_word(verdict).to_owned(),
            reason: reason.to_owned(),
        }))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A fixture root whose `/proc/self` places us in `cg` of a pure v2
    /// tree (`v2 = true`) or of separate v1 `cpu` and `cpuacct` mounts.
    fn fixture(v2: bool) -> (tempfile::TempDir, HostRoot, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("proc/self")).unwrap();
        let (mountinfo, cgroup) = if v2 {
            ("30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n".to_owned(), "0::/job/agent\n".to_owned())
        } else {
            (
                "31 23 0:27 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n\
                 32 23 0:28 / /sys/fs/cgroup/cpuacct rw - cgroup cgroup rw,cpuacct\n\
                 33 23 0:29 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
                    .to_owned(),
                "3:cpu:/job/agent\n2:cpuacct:/job/agent\n0::/\n".to_owned(),
            )
        };
        std::fs::write(dir.path().join("proc/self/mountinfo"), mountinfo).unwrap();
        std::fs::write(dir.path().join("proc/self/cgroup"), cgroup).unwrap();
        let (a, b) = if v2 {
            let d = dir.path().join("sys/fs/cgroup/job/agent");
            (d.clone(), d)
        } else {
            let unified = dir.path().join("sys/fs/cgroup/unified");
            std::fs::create_dir_all(&unified).unwrap();
            // The hybrid v2 root: usage, no throttling (no controllers).
            std::fs::write(unified.join("cpu.stat"), "usage_usec 99\n").unwrap();
            (
                dir.path().join("sys/fs/cgroup/cpu/job/agent"),
                dir.path().join("sys/fs/cgroup/cpuacct/job/agent"),
            )
        };
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        let root = HostRoot::under(dir.path());
        (dir, root, a, b)
    }

    #[test]
    fn finds_v2_counters_and_reads_them() {
        let (_d, root, cg, _) = fixture(true);
        std::fs::write(cg.join("cpu.stat"), "usage_usec 2000\nthrottled_usec 30\n").unwrap();
        let source = CpuSource::detect(&root).unwrap().unwrap();
        assert_eq!(source, CpuSource::V2 { stat: cg.join("cpu.stat") });
        let s = source.read(Duration::from_secs(3)).unwrap();
        assert_eq!((s.usage_usec, s.throttled_usec, s.at), (2000, 30, Duration::from_secs(3)));
    }

    #[test]
    fn on_a_hybrid_host_the_v1_counters_win_over_a_v2_tree_without_throttling() {
        let (_d, root, cpu, cpuacct) = fixture(false);
        std::fs::write(cpuacct.join("cpuacct.usage"), "5000000\n").unwrap();
        std::fs::write(cpu.join("cpu.stat"), "nr_periods 4\nnr_throttled 1\nthrottled_time 7000\n").unwrap();
        let source = CpuSource::detect(&root).unwrap().unwrap();
        assert_eq!(
            source,
            CpuSource::V1 { usage: cpuacct.join("cpuacct.usage"), stat: Some(cpu.join("cpu.stat")) }
        );
        let s = source.read(Duration::ZERO).unwrap();
        assert_eq!((s.usage_usec, s.throttled_usec), (5000, 7), "nanoseconds become microseconds");
        std::fs::write(cpuacct.join("cpuacct.usage"), "lots\n").unwrap();
        assert!(source.read(Duration::ZERO).unwrap_err().contains("cpuacct.usage: `lots` is not a number"));
    }

    #[test]
    fn throttling_on_a_fixture_tree_shrinks_the_bound_and_it_never_leaves_1_to_tokens() {
        let (_d, root, cg, _) = fixture(true);
        let stat = cg.join("cpu.stat");
        let write = |usage: u64, throttled: u64| {
            std::fs::write(&stat, format!("usage_usec {usage}\nthrottled_usec {throttled}\n")).unwrap();
        };
        // The injected clock: one second per tick.
        let (mut at, mut usage, mut throttled) = (Duration::ZERO, 0, 0);
        write(usage, throttled);
        let mut tuner = Tuner::new(CpuSource::detect(&root).unwrap().unwrap(), 2.0, 4);
        assert_eq!(tuner.tick(at, 4).unwrap(), None, "one sample is no verdict");
        let mut bounds = Vec::new();
        for _ in 0..12 {
            at += Duration::from_secs(1);
            usage += 2_000_000;
            throttled += 500_000; // half of every second throttled
            write(usage, throttled);
            let pushed = tuner.tick(at, tuner.tokens()).unwrap().unwrap();
            assert_eq!(pushed.tokens, tuner.tokens());
            bounds.push((pushed.tokens, pushed.verdict));
        }
        assert_eq!(bounds[2], (2, "shrink".to_owned()), "halved after three throttled intervals: {bounds:?}");
        assert_eq!(tuner.tokens(), 1, "never below 1: {bounds:?}");
        // Idle CPUs with every token busy: it grows back, never past --tokens.
        for _ in 0..30 {
            at += Duration::from_secs(1);
            usage += 100_000;
            write(usage, throttled);
            tuner.tick(at, tuner.tokens()).unwrap();
        }
        assert_eq!(tuner.tokens(), 4, "back up to --tokens and no further");
        let last = tuner.tick(at + Duration::from_secs(1), 4).unwrap().unwrap();
        assert!(last.reason.contains("tokens busy"), "{}", last.reason);
    }
}
