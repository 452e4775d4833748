//! CPU topology, the whole-core reserve, the compute pool, and pinning.

use std::collections::{BTreeMap, BTreeSet};

use lardon::{HostPolicy, HostProfile};
use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::unistd::Pid;

use crate::cpulist::parse_cpu_list;
use crate::error::HostError;
use crate::parse::parse_u64;
use crate::root::{HostRoot, read};

/// A set of logical CPU numbers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CpuMask(pub BTreeSet<u32>);

impl CpuMask {
    /// Number of CPUs.
    pub fn count(&self) -> u32 {
        u32::try_from(self.0.len()).unwrap_or(u32::MAX)
    }

    /// As a kernel CPU set.
    ///
    /// # Errors
    /// [`HostError::Sys`] when a CPU number exceeds `CpuSet`'s capacity.
    pub fn to_cpuset(&self) -> Result<CpuSet, HostError> {
        let mut set = CpuSet::new();
        for &cpu in &self.0 {
            set.set(cpu as usize).map_err(|e| HostError::sys("CpuSet::set", e))?;
        }
        Ok(set)
    }

    /// The CPUs of a kernel CPU set.
    pub fn from_cpuset(set: &CpuSet) -> Self {
        let n = u32::try_from(CpuSet::count()).unwrap_or(u32::MAX);
        CpuMask((0..n).filter(|&c| set.is_set(c as usize).unwrap_or(false)).collect())
    }
}

/// The CPUs of the host: online CPUs, our affinity mask, and, when sysfs
/// has it, the physical core of each CPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuLayout {
    /// Online logical CPUs.
    pub online: BTreeSet<u32>,
    /// CPUs in our affinity mask (a subset of `online`).
    pub allowed: BTreeSet<u32>,
    /// `(physical_package_id, core_id)` per online CPU; `None` when any is
    /// unreadable (count-only fallback).
    pub cores: Option<BTreeMap<u32, (u64, u64)>>,
}

impl CpuLayout {
    /// Reads `<sys>/devices/system/cpu/{online,cpuN/topology/*}` and the
    /// calling thread's affinity.
    ///
    /// # Errors
    /// [`HostError`] when the online list is unreadable or malformed, or the
    /// affinity cannot be read.
    pub fn detect(root: &HostRoot) -> Result<Self, HostError> {
        let set = sched_getaffinity(Pid::from_raw(0)).map_err(|e| HostError::sys("sched_getaffinity", e))?;
        Self::detect_with_affinity(root, &CpuMask::from_cpuset(&set).0)
    }

    /// Like [`CpuLayout::detect`], with the affinity mask given (for fixtures).
    ///
    /// # Errors
    /// [`HostError`] when the online list is unreadable or malformed.
    pub fn detect_with_affinity(root: &HostRoot, affinity: &BTreeSet<u32>) -> Result<Self, HostError> {
        let online_path = root.sys_path("devices/system/cpu/online");
        let online = parse_cpu_list(&read(&online_path)?)
            .map_err(|source| HostError::Parse { path: online_path, source })?;
        let cores = online
            .iter()
            .map(|&cpu| {
                let topo = |f: &str| {
                    let p = root.sys_path(&format!("devices/system/cpu/cpu{cpu}/topology/{f}"));
                    let text = std::fs::read_to_string(p).ok()?;
                    parse_u64(f, text.strip_suffix('\n').unwrap_or(&text)).ok()
                };
                Some((cpu, (topo("physical_package_id")?, topo("core_id")?)))
            })
            .collect::<Option<BTreeMap<_, _>>>();
        let allowed = online.intersection(affinity).copied().collect();
        Ok(CpuLayout { online, allowed, cores })
    }
}

/// The CPU reserve and the compute pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuPlan {
    /// Allowed CPUs held back for the rest of the host (whole cores when
    /// the topology is known).
    pub reserved: CpuMask,
    /// Online CPUs outside our affinity mask (they count towards the reserve).
    pub excluded: CpuMask,
    /// Where task processes and worker threads run.
    pub compute: CpuMask,
    /// Whether whole cores were used (false: count-only fallback).
    pub whole_cores: bool,
}

impl CpuPlan {
    /// The effective reserve in logical CPUs: excluded plus reserved.
    pub fn reserve_count(&self) -> u32 {
        self.excluded.count().saturating_add(self.reserved.count())
    }
}

/// Carves a reserve of at least `target` logical CPUs out of `layout`.
///
/// CPUs outside the affinity mask count first. The rest is taken as the
/// smallest set of whole cores (SMT siblings together) covering it while
/// leaving at least one compute CPU — a subset sum, so cores of 3, 3, 2
/// with a target of 4 reserve 5, not 6 — preferring the highest-numbered
/// cores. When no whole-core set fits (or the topology is unknown), single
/// CPUs are counted from the top.
pub fn plan_cpu_pool(layout: &CpuLayout, target: u32) -> CpuPlan {
    let excluded: BTreeSet<u32> = layout.online.difference(&layout.allowed).copied().collect();
    let allowed: Vec<u32> = layout.allowed.iter().copied().collect();
    let need = (target as usize).saturating_sub(excluded.len());
    let max_reserve = allowed.len().saturating_sub(1);
    let by_cores = layout.cores.as_ref().and_then(|cores| {
        let mut groups: BTreeMap<(u64, u64), Vec<u32>> = BTreeMap::new();
        for &cpu in &allowed {
            groups.entry(*cores.get(&cpu)?).or_default().push(cpu);
        }
        let mut sizes: BTreeMap<(u64, u64), usize> = BTreeMap::new();
        for key in cores.values() {
            *sizes.entry(*key).or_default() += 1;
        }
        let mut groups: Vec<(bool, Vec<u32>)> =
            groups.into_iter().map(|(key, g)| (g.len() < sizes.get(&key).copied().unwrap_or(0), g)).collect();
        // On ties prefer cores partly outside our mask (reserving the rest
        // completes them), then the highest-numbered cores.
        groups.sort_by_key(|(partial, g)| std::cmp::Reverse((*partial, g.iter().max().copied())));
        let groups: Vec<Vec<u32>> = groups.into_iter().map(|(_, g)| g).collect();
        smallest_cover(&groups, need, max_reserve).map(|chosen| chosen.into_iter().flatten().collect())
    });
    let whole_cores = by_cores.is_some();
    let reserved: BTreeSet<u32> =
        by_cores.unwrap_or_else(|| allowed.iter().rev().take(need.min(max_reserve)).copied().collect());
    let compute = layout.allowed.difference(&reserved).copied().collect();
    CpuPlan {
        reserved: CpuMask(reserved),
        excluded: CpuMask(excluded),
        compute: CpuMask(compute),
        whole_cores,
    }
}

/// The groups whose sizes sum to the smallest total in `need..=max`, or
/// `None` when no subset reaches `need` within `max`. Earlier groups win ties.
fn smallest_cover(groups: &[Vec<u32>], need: usize, max: usize) -> Option<Vec<Vec<u32>>> {
    if need == 0 {
        return Some(Vec::new());
    }
    if need > max {
        return None;
    }
    // reach[s] = indices of a subset summing to s (first found).
    let mut reach: Vec<Option<Vec<usize>>> = vec![None; max + 1];
    reach[0] = Some(Vec::new());
    for (i, g) in groups.iter().enumerate() {
        for s in (g.len()..=max).rev() {
            if reach[s].is_none()
                && let Some(prev) = &reach[s - g.len()]
            {
                let mut with = prev.clone();
                with.push(i);
                reach[s] = Some(with);
            }
        }
    }
    let chosen = reach[need..=max].iter().flatten().next()?;
    Some(chosen.iter().map(|&i| groups[i].clone()).collect())
}

/// The default policy (docs/DESIGN.md §3) for `profile`, with `cpu_reserve`
/// set to the effective whole-core reserve from `layout`.
pub fn default_policy(profile: &HostProfile, layout: &CpuLayout) -> HostPolicy {
    let mut policy = HostPolicy::default_for(profile);
    let plan = plan_cpu_pool(layout, policy.cpu_reserve);
    policy.cpu_reserve = plan.reserve_count().min(profile.logical_cpus.saturating_sub(1));
    policy
}

/// Pins the calling thread to `mask` (`sched_setaffinity(0)`).
///
/// # Errors
/// [`HostError::Sys`] when the kernel refuses.
pub fn pin_current_thread(mask: &CpuMask) -> Result<(), HostError> {
    pin_pid(0, mask)
}

/// Pins process (or thread) `pid` to `mask`; `0` is the calling thread.
/// Threads the process already has keep their affinity: prefer
/// [`crate::spawn_in`], which pins a child before `exec`.
///
/// # Errors
/// [`HostError::Sys`] when the kernel refuses.
pub fn pin_pid(pid: u32, mask: &CpuMask) -> Result<(), HostError> {
    let pid = i32::try_from(pid).map_err(|_| HostError::sys("sched_setaffinity", nix::Error::ESRCH))?;
    sched_setaffinity(Pid::from_raw(pid), &mask.to_cpuset()?)
        .map_err(|e| HostError::sys("sched_setaffinity", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(cores: &[(u32, u64)], allowed: &[u32]) -> CpuLayout {
        CpuLayout {
            online: cores.iter().map(|c| c.0).collect(),
            allowed: allowed.iter().copied().collect(),
            cores: Some(cores.iter().map(|&(cpu, core)| (cpu, (0, core))).collect()),
        }
    }

    fn set(v: &[u32]) -> BTreeSet<u32> {
        v.iter().copied().collect()
    }

    #[test]
    fn sixteen_cpus_smt_siblings_reserve_two_whole_cores() {
        let cores: Vec<(u32, u64)> = (0..16).map(|c| (c, u64::from(c % 8))).collect();
        let all: Vec<u32> = (0..16).collect();
        let plan = plan_cpu_pool(&layout(&cores, &all), 4);
        assert_eq!(plan.reserved.0, set(&[6, 7, 14, 15]));
        assert_eq!(plan.compute.count(), 12);
        assert_eq!(plan.reserve_count(), 4);
        assert!(plan.whole_cores);
    }

    #[test]
    fn asymmetric_cores_take_the_smallest_cover() {
        // Cores of 3, 3 and 2 CPUs: 4 is covered by 3 + 2 = 5, not 3 + 3 = 6.
        let cores = [(0, 0), (1, 0), (2, 0), (3, 1), (4, 1), (5, 1), (6, 2), (7, 2)];
        let all: Vec<u32> = (0..8).collect();
        let plan = plan_cpu_pool(&layout(&cores, &all), 4);
        assert_eq!(plan.reserve_count(), 5);
        assert_eq!(plan.reserved.0, set(&[3, 4, 5, 6, 7]));
        assert_eq!(plan.compute.0, set(&[0, 1, 2]));
    }

    #[test]
    fn excluded_cpus_count_towards_the_reserve() {
        let cores: Vec<(u32, u64)> = (0..16).map(|c| (c, u64::from(c % 8))).collect();
        // CPUs 14 and 15 are outside our mask: two more suffice, and their
        // siblings 6 and 7 complete cores 6 and 7.
        let allowed: Vec<u32> = (0..14).collect();
        let plan = plan_cpu_pool(&layout(&cores, &allowed), 4);
        assert_eq!(plan.excluded.0, set(&[14, 15]));
        assert_eq!(plan.reserved.0, set(&[6, 7]));
        assert_eq!(plan.reserve_count(), 4);
        assert_eq!(plan.compute.count(), 12);
        // Half the host excluded already covers the target.
        let plan = plan_cpu_pool(&layout(&cores, &(0..8).collect::<Vec<_>>()), 4);
        assert!(plan.reserved.0.is_empty());
        assert_eq!((plan.reserve_count(), plan.compute.count()), (8, 8));
    }

    #[test]
    fn at_least_one_compute_cpu_and_count_only_fallbacks() {
        // One SMT core of 2 CPUs, target 1: a whole core would leave nothing.
        let plan = plan_cpu_pool(&layout(&[(0, 0), (1, 0)], &[0, 1]), 1);
        assert_eq!((plan.reserved.0, plan.compute.0, plan.whole_cores), (set(&[1]), set(&[0]), false));
        let no_topo =
            CpuLayout { online: set(&[0, 1, 2, 3, 4, 5]), allowed: set(&[0, 1, 2, 3, 4, 5]), cores: None };
        let plan = plan_cpu_pool(&no_topo, 4);
        assert_eq!((plan.reserved.0, plan.compute.0), (set(&[2, 3, 4, 5]), set(&[0, 1])));
        let single = CpuLayout { online: set(&[0]), allowed: set(&[0]), cores: None };
        assert_eq!(plan_cpu_pool(&single, 4).compute.0, set(&[0]));
    }

    #[test]
    fn detects_a_sysfs_fixture_and_builds_the_default_policy() {
        let d = tempfile::tempdir().unwrap();
        let cpu = d.path().join("sys/devices/system/cpu");
        std::fs::create_dir_all(&cpu).unwrap();
        std::fs::write(cpu.join("online"), "0-15\n").unwrap();
        for c in 0..16 {
            let t = cpu.join(format!("cpu{c}/topology"));
            std::fs::create_dir_all(&t).unwrap();
            std::fs::write(t.join("physical_package_id"), "0\n").unwrap();
            std::fs::write(t.join("core_id"), format!("{}\n", c % 8)).unwrap();
        }
        let root = HostRoot::under(d.path());
        let l = CpuLayout::detect_with_affinity(&root, &(0..16).collect()).unwrap();
        assert_eq!(l.cores.as_ref().map(BTreeMap::len), Some(16));
        assert_eq!(plan_cpu_pool(&l, 4).reserved.0, set(&[6, 7, 14, 15]));
        let profile = HostProfile::new(32 << 30, 16);
        assert_eq!(
            default_policy(&profile, &l).cpu_reserve,
            2,
            "16 CPUs / 8: one whole core of two siblings"
        );
        // Unreadable topology of one CPU: count-only.
        std::fs::write(cpu.join("cpu3/topology/core_id"), "-3\n").unwrap();
        let l = CpuLayout::detect_with_affinity(&root, &(0..16).collect()).unwrap();
        assert_eq!(l.cores, None);
        assert!(!plan_cpu_pool(&l, 4).whole_cores);
    }

    #[test]
    fn real_host_layout_and_pinning() {
        let root = HostRoot::default();
        let l = CpuLayout::detect(&root).unwrap();
        assert!(!l.allowed.is_empty() && l.allowed.is_subset(&l.online));
        let plan = plan_cpu_pool(&l, 4);
        assert!(plan.compute.count() >= 1);
        // Pin a scratch thread (never the test harness's) to the pool.
        let compute = plan.compute.clone();
        let got = std::thread::spawn(move || {
            pin_current_thread(&compute).unwrap();
            CpuMask::from_cpuset(&sched_getaffinity(Pid::from_raw(0)).unwrap())
        })
        .join()
        .unwrap();
        assert_eq!(got, plan.compute);
    }
}
