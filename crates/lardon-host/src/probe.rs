//! [`HostProbe`]: the real [`Probe`] for Linux.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use lardon::{Clock, HostPolicy, HostProfile, Pressure, Probe, ProbeError, Snapshot, SystemClock};

use crate::cgroup::{CgroupLayout, OwnCgroup};
use crate::error::HostError;
use crate::gpu::Gpus;
use crate::loadavg::parse_loadavg;
use crate::meminfo::parse_meminfo;
use crate::parse::ParseError;
use crate::psi::parse_psi_some_avg10;
use crate::root::HostRoot;
use crate::topology::{CpuLayout, CpuPlan, default_policy, plan_cpu_pool};
use crate::vmstat::parse_vmstat_swap;

/// Reads `/proc`, PSI, our cgroup and the GPUs. Paths are resolved once at
/// construction; each snapshot only reads files.
pub struct HostProbe {
    clock: Arc<dyn Clock>,
    profile: HostProfile,
    cpus: CpuLayout,
    meminfo: PathBuf,
    loadavg: PathBuf,
    psi: [PathBuf; 3],
    vmstat: PathBuf,
    cgroup: OwnCgroup,
    layout: CgroupLayout,
    gpus: Gpus,
}

impl fmt::Debug for HostProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostProbe")
            .field("profile", &self.profile)
            .field("meminfo", &self.meminfo)
            .field("cgroup", &self.layout)
            .field("gpus", &self.gpus)
            .finish_non_exhaustive()
    }
}

fn read_mandatory(path: &Path) -> Result<String, ProbeError> {
    crate::read_pseudo(path).map_err(|e| ProbeError::Unreadable {
        source_name: path.display().to_string(),
        message: e.to_string(),
    })
}

fn malformed(path: &Path) -> impl FnOnce(ParseError) -> ProbeError + '_ {
    move |e| ProbeError::Malformed { source_name: path.display().to_string(), message: e.to_string() }
}

impl HostProbe {
    /// The real host, stamped with [`SystemClock`].
    ///
    /// # Errors
    /// See [`HostProbe::with_root`].
    pub fn new() -> Result<Self, HostError> {
        Self::with_root(HostRoot::default(), Arc::new(SystemClock))
    }

    /// A probe of the host under `root`, stamping snapshots with `clock`
    /// (give it the Governor's clock).
    ///
    /// # Errors
    /// [`HostError`] when `/proc/meminfo` or the CPU list is unreadable or
    /// malformed, or the affinity cannot be read. An unreadable cgroup
    /// layout only means no cgroup figures.
    pub fn with_root(root: HostRoot, clock: Arc<dyn Clock>) -> Result<Self, HostError> {
        let cpus = CpuLayout::detect(&root)?;
        Self::with_cpus(root, clock, cpus)
    }

    /// Like [`HostProbe::with_root`] with the CPU layout given (fixtures).
    ///
    /// # Errors
    /// [`HostError`] when `/proc/meminfo` is unreadable or malformed.
    pub fn with_cpus(root: HostRoot, clock: Arc<dyn Clock>, cpus: CpuLayout) -> Result<Self, HostError> {
        let meminfo = root.proc_path("meminfo");
        let mem = parse_meminfo(&crate::root::read(&meminfo)?)
            .map_err(|source| HostError::Parse { path: meminfo.clone(), source })?;
        let layout = CgroupLayout::detect(&root).unwrap_or_default();
        let gpus = Gpus::detect(&root, mem.total);
        let count = |s: &std::collections::BTreeSet<u32>| u32::try_from(s.len()).unwrap_or(u32::MAX);
        let cgroup = OwnCgroup::new(&layout);
        // Confined to a cgroup smaller than the machine, we govern the
        // cgroup: its limit is our total, and the default reserves scale
        // with it (else a 2 GiB job on a 24 GiB host would keep a 3 GiB
        // reserve out of a 2 GiB budget and run nothing).
        let total_memory = cgroup.memory_limit().map_or(mem.total, |limit| limit.min(mem.total));
        let profile = HostProfile {
            total_memory,
            logical_cpus: count(&cpus.online),
            allowed_cpus: count(&cpus.allowed),
            gpus: gpus.devices(),
        };
        Ok(HostProbe {
            clock,
            profile,
            cpus,
            loadavg: root.proc_path("loadavg"),
            psi: ["cpu", "memory", "io"].map(|k| root.proc_path(&format!("pressure/{k}"))),
            vmstat: root.proc_path("vmstat"),
            cgroup,
            layout,
            meminfo,
            gpus,
        })
    }

    /// The CPU layout read at construction.
    pub fn cpu_layout(&self) -> &CpuLayout {
        &self.cpus
    }

    /// The whole-core CPU reserve and compute pool for the default policy's
    /// CPU reserve (pin task processes and worker threads to `compute`).
    pub fn cpu_plan(&self) -> CpuPlan {
        plan_cpu_pool(&self.cpus, HostPolicy::default_for(&self.profile).cpu_reserve)
    }

    /// The default policy of docs/DESIGN.md §3 for this host, with the
    /// whole-core CPU reserve ([`crate::default_policy`]).
    pub fn default_policy(&self) -> HostPolicy {
        default_policy(&self.profile, &self.cpus)
    }

    /// Our cgroup directories.
    pub fn cgroup_layout(&self) -> &CgroupLayout {
        &self.layout
    }

    /// The GPUs (and why NVML is unused, if it is).
    pub fn gpus(&self) -> &Gpus {
        &self.gpus
    }
}

impl Probe for HostProbe {
    fn profile(&self) -> HostProfile {
        self.profile.clone()
    }

    fn snapshot(&self) -> Result<Snapshot, ProbeError> {
        let mem = parse_meminfo(&read_mandatory(&self.meminfo)?).map_err(malformed(&self.meminfo))?;
        let load = parse_loadavg(&read_mandatory(&self.loadavg)?).map_err(malformed(&self.loadavg))?;
        let psi = |p: &Path| crate::read_pseudo(p).ok().and_then(|t| parse_psi_some_avg10(&t).ok());
        let [cpu, memory, io] = &self.psi;
        let snapshot = Snapshot {
            captured_at: self.clock.now(),
            memory_available: mem.available,
            memory_free: mem.free,
            swap_free: mem.swap_free,
            load,
            pressure: Pressure { cpu: psi(cpu), memory: psi(memory), io: psi(io) },
            swap: crate::read_pseudo(&self.vmstat).ok().and_then(|t| parse_vmstat_swap(&t).ok()),
            gpus: self.gpus.sample(),
            cgroup: self.cgroup.sample(),
            own_cpu: own_cpu(),
        };
        Ok(snapshot)
    }
}

/// CPU time (user + system) of this process and of the children it reaped:
/// Lardon's own share of the host's load (`Snapshot::own_cpu`). The daemon
/// reaps every task (and, as a child subreaper, their orphans), so a
/// finished task's CPU time is in it from its reaping on.
fn own_cpu() -> Option<std::time::Duration> {
    use nix::sys::resource::{UsageWho, getrusage};
    let total = |who| {
        let u = getrusage(who).ok()?;
        let t = |tv: nix::sys::time::TimeVal| {
            let (s, us) = (u64::try_from(tv.tv_sec()).ok()?, u64::try_from(tv.tv_usec()).ok()?);
            Some(std::time::Duration::from_secs(s) + std::time::Duration::from_micros(us))
        };
        Some(t(u.user_time())? + t(u.system_time())?)
    };
    Some(total(UsageWho::RUSAGE_SELF)? + total(UsageWho::RUSAGE_CHILDREN)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    use lardon::{FakeClock, MonoTime};

    fn fixture_root() -> (tempfile::TempDir, HostRoot) {
        let d = tempfile::tempdir().unwrap();
        let fx = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/proc");
        let proc = d.path().join("proc");
        std::fs::create_dir_all(proc.join("pressure")).unwrap();
        for f in ["meminfo", "loadavg", "vmstat", "pressure/cpu", "pressure/memory", "pressure/io"] {
            std::fs::copy(fx.join(f), proc.join(f)).unwrap();
        }
        std::fs::create_dir_all(d.path().join("sys")).unwrap();
        let root = HostRoot::under(d.path());
        (d, root)
    }

    fn probe(root: &HostRoot) -> HostProbe {
        let cpus = CpuLayout { online: BTreeSet::from([0, 1]), allowed: BTreeSet::from([0, 1]), cores: None };
        HostProbe::with_cpus(root.clone(), Arc::new(FakeClock::new(MonoTime(42))), cpus).unwrap()
    }

    /// Real host: a reaped child's CPU time joins the process's own figure
    /// (the load gate counts it as Lardon's, not foreign).
    #[test]
    fn own_cpu_counts_a_reaped_childs_cpu_time() {
        let before = own_cpu().expect("getrusage works on Linux");
        let status = std::process::Command::new("sh")
            .args(["-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done"])
            .status()
            .unwrap();
        assert!(status.success());
        let after = own_cpu().unwrap();
        // The loop takes far more than 50 ms of CPU on any machine.
        assert!(after >= before + std::time::Duration::from_millis(50), "{before:?} → {after:?}");
        let (_d, root) = fixture_root();
        let s = probe(&root).snapshot().unwrap();
        assert!(s.own_cpu.is_some_and(|c| c >= after), "{:?}", s.own_cpu);
    }

    #[test]
    fn snapshot_from_fixtures() {
        let (_d, root) = fixture_root();
        let p = probe(&root);
        assert_eq!(p.profile().total_memory, 24_684_092 * 1024);
        assert_eq!(p.profile().logical_cpus, 2);
        let s = p.snapshot().unwrap();
        assert_eq!(s.captured_at, MonoTime(42));
        assert_eq!(s.memory_available, 24_359_776 * 1024);
        assert_eq!(s.load.one, 0.46);
        assert_eq!(s.pressure, Pressure { cpu: Some(1.87), memory: Some(0.04), io: Some(0.0) });
        assert_eq!(s.swap.map(|s| s.pages_out), Some(345));
        assert_eq!(s.cgroup, None, "no cgroup files in the fixture");
    }

    #[test]
    fn hybrid_cgroup_figures_are_found_through_mountinfo_and_folded() {
        let (d, root) = fixture_root();
        let fx = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/proc/self");
        std::fs::create_dir_all(root.proc_path("self")).unwrap();
        for f in ["mountinfo", "cgroup"] {
            std::fs::copy(fx.join(f), root.proc_path(&format!("self/{f}"))).unwrap();
        }
        let cg = d.path().join("sys/fs/cgroup");
        let mem = cg.join("memory/process_api/a90de98ae5bbdd41ed56a11cc58f966e");
        std::fs::create_dir_all(&mem).unwrap();
        std::fs::write(mem.join("memory.limit_in_bytes"), "4294967296\n").unwrap();
        std::fs::write(mem.join("memory.usage_in_bytes"), "1073741824\n").unwrap();
        std::fs::create_dir_all(cg.join("cpu")).unwrap();
        std::fs::write(cg.join("cpu/cpu.cfs_quota_us"), "-1\n").unwrap();
        std::fs::write(cg.join("cpu/cpu.cfs_period_us"), "100000\n").unwrap();
        std::fs::create_dir_all(cg.join("cpuset")).unwrap();
        std::fs::write(cg.join("cpuset/cpuset.effective_cpus"), "0-1\n").unwrap();
        // The v2 root of a hybrid host has no memory.max: v1 is used.
        std::fs::create_dir_all(cg.join("unified")).unwrap();
        let p = probe(&root);
        // Confined to 4 GiB of a 23.5 GiB host: we govern 4 GiB, and the
        // default reserves are derived from that.
        assert_eq!(p.profile().total_memory, 4 << 30);
        assert_eq!(p.default_policy(), HostPolicy::default_for(&HostProfile::new(4 << 30, 2)));
        let s = p.snapshot().unwrap();
        let sample = s.cgroup.unwrap();
        assert_eq!(sample.memory_limit, Some(4 << 30));
        assert_eq!(sample.memory_usage, Some(1 << 30));
        assert_eq!((sample.cpu_quota_millis, sample.cpuset_cpus), (None, Some(2)));
        assert_eq!(s.effective_memory_available(), 3 << 30);
        // The v1 "unlimited" value is no limit: MemAvailable stands.
        std::fs::write(mem.join("memory.limit_in_bytes"), "9223372036854771712\n").unwrap();
        let s = p.snapshot().unwrap();
        assert_eq!(s.cgroup.unwrap().memory_limit, None);
        assert_eq!(s.effective_memory_available(), s.memory_available);
    }

    #[test]
    fn optional_sources_missing_or_malformed_are_unknown() {
        let (_d, root) = fixture_root();
        let p = probe(&root);
        std::fs::remove_file(root.proc_path("pressure/io")).unwrap();
        std::fs::write(root.proc_path("pressure/cpu"), "some avg10=-1.00 avg60=0 avg300=0 total=0\n")
            .unwrap();
        std::fs::write(root.proc_path("vmstat"), "pswpin 1\n").unwrap();
        let s = p.snapshot().unwrap();
        assert_eq!(s.pressure, Pressure { cpu: None, memory: Some(0.04), io: None });
        assert_eq!(s.swap, None);
    }

    #[test]
    fn mandatory_sources_name_the_file() {
        let (_d, root) = fixture_root();
        let p = probe(&root);
        std::fs::write(root.proc_path("loadavg"), "0.1 0.2 0.3 1/2 3 junk\n").unwrap();
        match p.snapshot() {
            Err(ProbeError::Malformed { source_name, .. }) => assert!(source_name.ends_with("loadavg")),
            other => panic!("{other:?}"),
        }
        std::fs::remove_file(root.proc_path("loadavg")).unwrap();
        assert!(matches!(p.snapshot(), Err(ProbeError::Unreadable { .. })));
        std::fs::write(root.proc_path("meminfo"), "MemTotal: 1 kB\n").unwrap();
        match p.snapshot() {
            Err(ProbeError::Malformed { source_name, message }) => {
                assert!(source_name.ends_with("meminfo"));
                assert!(message.contains("MemFree"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn real_host_snapshot_is_plausible() {
        let p = HostProbe::new().unwrap();
        let profile = p.profile();
        assert!(profile.total_memory > 0);
        assert!(profile.logical_cpus >= 1 && profile.allowed_cpus <= profile.logical_cpus);
        let before = SystemClock.now();
        let s = p.snapshot().unwrap();
        assert!(s.captured_at >= before && s.captured_at <= SystemClock.now());
        assert!(s.memory_available <= profile.total_memory);
        assert!(s.memory_free <= profile.total_memory);
        assert!(s.load.one >= 0.0 && s.load.five >= 0.0 && s.load.fifteen >= 0.0);
        for v in [s.pressure.cpu, s.pressure.memory, s.pressure.io].into_iter().flatten() {
            assert!((0.0..=100.0).contains(&v));
        }
        if let Some(cg) = s.cgroup {
            assert!(s.effective_memory_available() <= s.memory_available);
            if let Some(n) = cg.cpuset_cpus {
                assert!(n <= profile.logical_cpus);
            }
        }
        assert_eq!(s.gpus.len(), profile.gpus.len());
        let policy = p.default_policy();
        assert_eq!(policy.validate(&profile), Ok(()));
        assert_eq!(p.cpu_plan().reserve_count(), policy.cpu_reserve);
        assert!(p.cpu_plan().compute.count() >= 1);
        eprintln!("real host: {profile:?}\n{s:?}\ncgroup layout: {:?}", p.cgroup_layout());
    }
}
