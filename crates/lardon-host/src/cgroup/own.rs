//! Figures of our own cgroup for [`lardon::Snapshot::cgroup`].

use std::path::{Path, PathBuf};

use lardon::CgroupSample;

use super::files::{parse_cfs_quota, parse_counter, parse_cpu_max, parse_v1_limit, parse_v2_limit};
use super::layout::CgroupLayout;
use crate::cpulist::parse_cpu_list;

#[derive(Debug, Clone)]
enum Source {
    V2Limit(PathBuf),
    V1Limit(PathBuf),
    Counter(PathBuf),
    CpuMax(PathBuf),
    CfsQuota(PathBuf, PathBuf),
    CpuList(PathBuf),
}

fn first_existing(candidates: Vec<Option<Source>>) -> Option<Source> {
    let exists = |p: &Path| p.is_file();
    candidates.into_iter().flatten().find(|s| match s {
        Source::V2Limit(p)
        | Source::V1Limit(p)
        | Source::Counter(p)
        | Source::CpuMax(p)
        | Source::CpuList(p) => exists(p),
        Source::CfsQuota(q, p) => exists(q) && exists(p),
    })
}

/// Our memory cgroup and every ancestor (nearest first) that carries a
/// limit file: `(limit, usage)` per level. A level without the file (the
/// v2 root, a level where the controller is not enabled) is skipped, not
/// the end of the walk: inside a Slurm job the limit sits on the job's
/// cgroup several levels up. The walk ends where the cgroup filesystem
/// does (a directory with neither the limit file nor `cgroup.procs`).
fn memory_levels(
    own: Option<&PathBuf>,
    limit_file: &str,
    usage_file: &str,
    v2: bool,
) -> Vec<(Source, Source)> {
    let mut levels = Vec::new();
    let mut dir = own.map(PathBuf::as_path);
    while let Some(d) = dir {
        let limit = d.join(limit_file);
        if limit.is_file() {
            let limit = if v2 { Source::V2Limit(limit) } else { Source::V1Limit(limit) };
            levels.push((limit, Source::Counter(d.join(usage_file))));
        } else if !d.join("cgroup.procs").is_file() {
            break;
        }
        dir = d.parent();
    }
    levels
}

/// The files holding our cgroup's figures, resolved once (v2 preferred,
/// v1 where the v2 file is absent, as on hybrid hosts). Memory limits of
/// every ancestor apply too: the sample reports the level with the least
/// room (limit − usage), so the budget is the minimum over all of them.
#[derive(Debug, Clone, Default)]
pub struct OwnCgroup {
    levels: Vec<(Source, Source)>,
    usage: Option<Source>,
    cpu: Option<Source>,
    cpuset: Option<Source>,
}

impl OwnCgroup {
    /// Resolves the files for `layout`.
    pub fn new(layout: &CgroupLayout) -> Self {
        let v2 = |f: &str| layout.v2.as_ref().map(|d| d.join(f));
        let v1m = |f: &str| layout.v1_memory.as_ref().map(|d| d.join(f));
        OwnCgroup {
            levels: match memory_levels(layout.v2.as_ref(), "memory.max", "memory.current", true) {
                l if !l.is_empty() => l,
                _ => memory_levels(
                    layout.v1_memory.as_ref(),
                    "memory.limit_in_bytes",
                    "memory.usage_in_bytes",
                    false,
                ),
            },
            usage: first_existing(vec![
                v2("memory.current").map(Source::Counter),
                v1m("memory.usage_in_bytes").map(Source::Counter),
            ]),
            cpu: first_existing(vec![
                v2("cpu.max").map(Source::CpuMax),
                layout
                    .v1_cpu
                    .as_ref()
                    .map(|d| Source::CfsQuota(d.join("cpu.cfs_quota_us"), d.join("cpu.cfs_period_us"))),
            ]),
            cpuset: first_existing(vec![
                v2("cpuset.cpus.effective").map(Source::CpuList),
                layout.v1_cpuset.as_ref().map(|d| Source::CpuList(d.join("cpuset.effective_cpus"))),
            ]),
        }
    }

    /// The smallest memory limit over our cgroup and its ancestors, bytes;
    /// `None` when no level has one. A daemon confined to a 2 GiB cgroup on
    /// a 64 GiB host governs 2 GiB: this is the memory its policy's
    /// defaults scale with.
    pub fn memory_limit(&self) -> Option<u64> {
        self.levels
            .iter()
            .filter_map(|(l, _)| {
                let text = match l {
                    Source::V2Limit(p) | Source::V1Limit(p) => crate::read_pseudo(p).ok()?,
                    _ => return None,
                };
                match l {
                    Source::V2Limit(_) => parse_v2_limit(&text).ok()?,
                    _ => parse_v1_limit(&text).ok()?,
                }
            })
            .min()
    }

    /// Reads the figures; each unreadable or malformed one is `None`.
    /// Returns `None` when no figure is known at all.
    pub fn sample(&self) -> Option<CgroupSample> {
        let read = |p: &Path| crate::read_pseudo(p).ok();
        let limit = |s: &Source| -> Option<Option<u64>> {
            match s {
                Source::V2Limit(p) => parse_v2_limit(&read(p)?).ok(),
                Source::V1Limit(p) => parse_v1_limit(&read(p)?).ok(),
                _ => None,
            }
        };
        let counter = |s: &Source| match s {
            Source::Counter(p) => parse_counter("memory usage", &read(p)?).ok(),
            _ => None,
        };
        let cpu = |s: &Source| -> Option<Option<u32>> {
            match s {
                Source::CpuMax(p) => parse_cpu_max(&read(p)?).ok(),
                Source::CfsQuota(q, p) => parse_cfs_quota(&read(q)?, &read(p)?).ok(),
                _ => None,
            }
        };
        let cpuset = |s: &Source| -> Option<u32> {
            match s {
                Source::CpuList(p) => {
                    let set = parse_cpu_list(&read(p)?).ok()?;
                    u32::try_from(set.len()).ok().filter(|n| *n > 0)
                }
                _ => None,
            }
        };
        // The level with the least room (limit − usage) constrains us.
        let levels: Vec<(Option<Option<u64>>, Option<u64>)> =
            self.levels.iter().map(|(l, u)| (limit(l), counter(u))).collect();
        let tightest =
            levels.iter().filter_map(|&(l, u)| Some((l??, u?))).min_by_key(|&(l, u)| l.saturating_sub(u));
        let own_limit = levels.first().and_then(|&(l, _)| l);
        let limit = tightest.map(|(l, _)| Some(l)).or(own_limit);
        let usage = tightest.map(|(_, u)| u).or_else(|| self.usage.as_ref().and_then(counter));
        let cpu = self.cpu.as_ref().and_then(cpu);
        let sample = CgroupSample {
            memory_limit: limit.flatten(),
            memory_usage: usage,
            cpu_quota_millis: cpu.flatten(),
            cpuset_cpus: self.cpuset.as_ref().and_then(cpuset),
        };
        let known =
            limit.is_some() || cpu.is_some() || sample.memory_usage.is_some() || sample.cpuset_cpus.is_some();
        known.then_some(sample)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, rel: &str, text: &str) -> PathBuf {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn hybrid_v1_figures() {
        let d = tempfile::tempdir().unwrap();
        let mem = d.path().join("memory/app");
        write(&mem, "memory.limit_in_bytes", "2147483648\n");
        write(&mem, "memory.usage_in_bytes", "536870912\n");
        let cpu = d.path().join("cpu");
        write(&cpu, "cpu.cfs_quota_us", "150000\n");
        write(&cpu, "cpu.cfs_period_us", "100000\n");
        let cs = d.path().join("cpuset");
        write(&cs, "cpuset.effective_cpus", "0-3\n");
        let layout = CgroupLayout {
            v2: Some(d.path().join("unified")),
            v1_memory: Some(mem),
            v1_cpu: Some(cpu),
            v1_cpuset: Some(cs),
            ..CgroupLayout::default()
        };
        let s = OwnCgroup::new(&layout).sample().unwrap();
        assert_eq!(s.memory_limit, Some(2 << 30));
        assert_eq!(s.memory_usage, Some(512 << 20));
        assert_eq!(s.cpu_quota_millis, Some(1500));
        assert_eq!(s.cpuset_cpus, Some(4));
    }

    #[test]
    fn v2_preferred_and_malformed_is_unknown() {
        let d = tempfile::tempdir().unwrap();
        let v2 = d.path().join("unified/app");
        write(&v2, "memory.max", "max\n");
        write(&v2, "memory.current", "-12\n");
        write(&v2, "cpu.max", "50000 100000\n");
        write(&v2, "cpuset.cpus.effective", "0-1,4\n");
        let mem = d.path().join("memory");
        write(&mem, "memory.limit_in_bytes", "1024\n");
        let layout = CgroupLayout { v2: Some(v2), v1_memory: Some(mem), ..CgroupLayout::default() };
        let s = OwnCgroup::new(&layout).sample().unwrap();
        assert_eq!(s.memory_limit, None, "v2 max wins over the v1 file");
        assert_eq!(s.memory_usage, None, "malformed usage is unknown");
        assert_eq!(s.cpu_quota_millis, Some(500));
        assert_eq!(s.cpuset_cpus, Some(3));
    }

    #[test]
    fn an_ancestor_limit_with_less_room_wins() {
        let d = tempfile::tempdir().unwrap();
        let parent = d.path().join("memory/slice");
        let own = parent.join("app");
        write(&d.path().join("memory"), "memory.limit_in_bytes", "9223372036854771712\n");
        write(&d.path().join("memory"), "memory.usage_in_bytes", "9000000000\n");
        write(&parent, "memory.limit_in_bytes", "4294967296\n");
        write(&parent, "memory.usage_in_bytes", "3221225472\n");
        write(&own, "memory.limit_in_bytes", "3221225472\n");
        write(&own, "memory.usage_in_bytes", "1073741824\n");
        let layout = CgroupLayout { v1_memory: Some(own.clone()), ..CgroupLayout::default() };
        let s = OwnCgroup::new(&layout).sample().unwrap();
        // Own room 2 GiB, parent room 1 GiB: the parent constrains.
        assert_eq!((s.memory_limit, s.memory_usage), (Some(4 << 30), Some(3 << 30)));
        // No limit anywhere: no limit, own usage.
        write(&parent, "memory.limit_in_bytes", "9223372036854771712\n");
        write(&own, "memory.limit_in_bytes", "9223372036854771712\n");
        let s = OwnCgroup::new(&layout).sample().unwrap();
        assert_eq!((s.memory_limit, s.memory_usage), (None, Some(1 << 30)));
    }

    #[test]
    fn nothing_known_is_none() {
        assert_eq!(OwnCgroup::new(&CgroupLayout::default()).sample(), None);
    }
}
