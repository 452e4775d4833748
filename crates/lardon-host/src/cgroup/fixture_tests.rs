//! Detection and set-up on fixture cgroup trees: pure v2 (with its leaf
//! move, controller enabling, sibling task cgroups and the refusals),
//! hybrid, v1 only, none, and a Slurm job layout.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::fixture::{FakeCgroupFs, cgroup};
use super::*;

const PID: u32 = 4242;
const MIB: u64 = 1 << 20;

const V2_MOUNT: &str = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
const V1_MEMORY_MOUNT: &str = "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n";
const HYBRID_V2_MOUNT: &str = "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

/// A fixture host: `proc/self/{mountinfo,cgroup}` and a `sys/` tree.
struct Host {
    dir: tempfile::TempDir,
}

impl Host {
    fn new(mountinfo: &str, proc_cgroup: &str) -> Host {
        let dir = tempfile::tempdir().unwrap();
        let proc_self = dir.path().join("proc/self");
        std::fs::create_dir_all(&proc_self).unwrap();
        std::fs::write(proc_self.join("mountinfo"), mountinfo).unwrap();
        std::fs::write(proc_self.join("cgroup"), proc_cgroup).unwrap();
        Host { dir }
    }

    fn root(&self) -> HostRoot {
        HostRoot::under(self.dir.path())
    }

    fn sys(&self, rel: &str) -> PathBuf {
        self.dir.path().join("sys").join(rel)
    }
}

/// Pure v2: the root offers memory/cpu/pids/io, `user.slice` enables
/// them, and our service `user.slice/app.service` (delegated to us)
/// offers them and holds `procs`.
fn pure_v2(procs: &[u32]) -> (Host, Arc<FakeCgroupFs>, PathBuf) {
    let host = Host::new(V2_MOUNT, "0::/user.slice/app.service\n");
    let mount = host.sys("fs/cgroup");
    let all = "cpuset cpu io memory hugetlb pids";
    cgroup(&mount, true, all, "cpu io memory pids", &[]);
    cgroup(&mount.join("user.slice"), false, "cpu io memory pids", "cpu io memory pids", &[]);
    let own = mount.join("user.slice/app.service");
    cgroup(&own, false, "cpu io memory pids", "", procs);
    let fs = Arc::new(FakeCgroupFs::new(mount));
    (host, fs, own)
}

fn detect(host: &Host, fs: &Arc<FakeCgroupFs>) -> Detection {
    detect_enforcer_with(&host.root(), Arc::clone(fs) as Arc<dyn CgroupFs>, PID)
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap().lines().map(str::to_owned).collect()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap().trim().to_owned()
}

#[test]
fn pure_v2_moves_the_daemon_into_a_leaf_and_enables_controllers() {
    let (host, fs, own) = pure_v2(&[PID]);
    let d = detect(&host, &fs);
    assert_eq!(d.kind(), BackendKind::V2, "{}", d.reason);
    assert!(d.limits_apply());
    let leaf = own.join(DAEMON_LEAF);
    assert_eq!(lines(&leaf.join("cgroup.procs")), vec![PID.to_string()], "the daemon moved into its leaf");
    assert!(lines(&own.join("cgroup.procs")).is_empty(), "no process left in the delegated cgroup");
    assert_eq!(read(&own.join("cgroup.subtree_control")), "memory cpu pids");
    assert!(d.reason.contains(&leaf.display().to_string()), "{}", d.reason);
    assert_eq!(d.enforcer.task_parents(), vec![own.clone()]);
}

#[test]
fn pure_v2_task_cgroups_are_siblings_of_the_leaf_with_memory_max_written() {
    let (host, fs, own) = pure_v2(&[PID]);
    let d = detect(&host, &fs);
    let limits = TaskLimits { memory_max: Some(128 * MIB), memory_high: None, cpu_millis: Some(1500) };
    let task = d.enforcer.create("t1", &limits).unwrap();
    let dir = own.join("lardon-t1");
    assert_eq!(task.procs_files(), vec![dir.join("cgroup.procs")]);
    assert_eq!(dir.parent(), own.join(DAEMON_LEAF).parent(), "a sibling of the daemon's leaf");
    assert_eq!(read(&dir.join("memory.max")), (128 * MIB).to_string());
    assert_eq!(read(&dir.join("memory.high")), "max");
    assert_eq!(read(&dir.join("cpu.max")), "150000 100000");
    assert_eq!(task.memory_peak().unwrap(), Some(0));
    assert!(!task.oom_killed().unwrap());
    std::fs::write(dir.join("memory.events"), "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\noom_group_kill 0\n")
        .unwrap();
    assert!(task.oom_killed().unwrap(), "an OOM kill is read from memory.events");
    task.remove().unwrap();
    assert!(!dir.exists(), "an empty task cgroup is removed without waiting");
}

#[test]
fn v2_peak_without_memory_peak_is_the_largest_current_sampled() {
    let (host, fs, own) = pure_v2(&[PID]);
    let d = detect(&host, &fs);
    let task = d.enforcer.create("old-kernel", &TaskLimits::default()).unwrap();
    let dir = own.join("lardon-old-kernel");
    std::fs::remove_file(dir.join("memory.peak")).unwrap();
    std::fs::write(dir.join("memory.current"), "700\n").unwrap();
    assert_eq!(task.memory_current().unwrap(), Some(700));
    std::fs::write(dir.join("memory.current"), "300\n").unwrap();
    assert_eq!(task.memory_peak().unwrap(), Some(700));
}

#[test]
fn a_second_start_in_the_leaf_is_idempotent() {
    let (host, fs, own) = pure_v2(&[PID]);
    detect(&host, &fs);
    // The process now lives in the leaf: /proc/self/cgroup says so.
    std::fs::write(host.dir.path().join("proc/self/cgroup"), "0::/user.slice/app.service/lardon-daemon\n")
        .unwrap();
    let d = detect(&host, &fs);
    assert_eq!(d.kind(), BackendKind::V2, "{}", d.reason);
    assert_eq!(d.enforcer.task_parents(), vec![own.clone()]);
    assert!(!own.join(DAEMON_LEAF).join(DAEMON_LEAF).exists(), "no leaf inside the leaf");
}

#[test]
fn ebusy_on_subtree_control_is_none_with_the_reason() {
    // Another process shares our cgroup (e.g. the shell of a scope): the
    // daemon moves itself out, but the cgroup still holds a process.
    let (host, fs, own) = pure_v2(&[PID, 777]);
    let d = detect(&host, &fs);
    assert_eq!(d.kind(), BackendKind::None);
    assert!(!d.limits_apply());
    for part in ["cannot enable the memory controller", "busy", "777", "no kernel limit applies"] {
        assert!(d.reason.to_lowercase().contains(&part.to_lowercase()), "{part:?} in {}", d.reason);
    }
    assert_eq!(read(&own.join("cgroup.subtree_control")), "", "nothing enabled");
}

#[test]
fn a_refused_write_is_reported_as_is() {
    let (host, fs, own) = pure_v2(&[PID]);
    fs.refuse(own.join("cgroup.subtree_control"), libc::EBUSY);
    let d = detect(&host, &fs);
    assert_eq!(d.kind(), BackendKind::None);
    assert!(d.reason.contains("cgroup.subtree_control"), "{}", d.reason);
    assert!(d.reason.contains("processes live in that cgroup itself"), "{}", d.reason);
}

#[test]
fn a_cgroup_not_delegated_is_none_and_nothing_moves() {
    let (host, mut fs, own) = pure_v2(&[PID]);
    Arc::get_mut(&mut fs).unwrap().readonly.push(own.clone());
    let d = detect(&host, &fs);
    assert_eq!(d.kind(), BackendKind::None);
    assert!(d.reason.contains("not writable") && d.reason.contains("Delegate=yes"), "{}", d.reason);
    assert!(!own.join(DAEMON_LEAF).exists());
    assert_eq!(lines(&own.join("cgroup.procs")), vec![PID.to_string()]);
}

#[test]
fn no_memory_controller_offered_is_none() {
    let (host, fs, own) = pure_v2(&[PID]);
    std::fs::write(own.join("cgroup.controllers"), "cpu pids\n").unwrap();
    let d = detect(&host, &fs);
    assert_eq!(d.kind(), BackendKind::None);
    assert!(d.reason.contains("offers no memory controller"), "{}", d.reason);
    assert!(!own.join(DAEMON_LEAF).exists(), "no move when there is nothing to enable");
}

#[test]
fn cpu_or_pids_missing_still_enforces_memory() {
    let (host, fs, own) = pure_v2(&[PID]);
    std::fs::write(own.join("cgroup.controllers"), "memory\n").unwrap();
    let d = detect(&host, &fs);
    assert_eq!(d.kind(), BackendKind::V2, "{}", d.reason);
    assert!(d.reason.contains("cpu not offered") && d.reason.contains("pids not offered"), "{}", d.reason);
    assert_eq!(read(&own.join("cgroup.subtree_control")), "memory");
}

#[test]
fn in_the_root_cgroup_the_daemon_stays_put() {
    let host = Host::new(V2_MOUNT, "0::/\n");
    let mount = host.sys("fs/cgroup");
    cgroup(&mount, true, "cpu memory pids", "", &[PID, 1]);
    let fs = Arc::new(FakeCgroupFs::new(mount.clone()));
    let d = detect(&host, &fs);
    assert_eq!(d.kind(), BackendKind::V2, "{}", d.reason);
    assert!(!mount.join(DAEMON_LEAF).exists());
    assert_eq!(d.enforcer.task_parents(), vec![mount]);
}

/// On a pure v2 fixture, a backend that claims limits (anything but none,
/// i.e. what `lardon resources` shows as hard) is one whose task cgroups
/// get `memory.max` written — in every variant of the tree.
#[test]
fn pure_v2_never_claims_limits_unless_memory_max_is_written() {
    type Variant = fn(&FakeCgroupFs, &Path);
    let variants: [(&str, Variant); 6] = [
        ("delegated", |_, _| {}),
        ("shared cgroup", |_, own| {
            std::fs::write(own.join("cgroup.procs"), format!("{PID}\n999\n")).unwrap();
        }),
        ("no memory offered", |_, own| {
            std::fs::write(own.join("cgroup.controllers"), "cpu pids\n").unwrap();
        }),
        ("subtree_control refuses", |fs, own| {
            fs.refuse(own.join("cgroup.subtree_control"), libc::EINVAL);
        }),
        ("leaf move refused", |fs, own| {
            fs.refuse(own.join(DAEMON_LEAF).join("cgroup.procs"), libc::EACCES);
        }),
        ("memory already enabled by someone", |_, own| {
            std::fs::write(own.join("cgroup.procs"), "").unwrap();
            std::fs::write(own.join("cgroup.subtree_control"), "memory\n").unwrap();
        }),
    ];
    for (name, prepare) in variants {
        let (host, fs, own) = pure_v2(&[PID]);
        prepare(&fs, &own);
        let d = detect(&host, &fs);
        let limits = TaskLimits { memory_max: Some(64 * MIB), ..TaskLimits::default() };
        let written = match d.enforcer.create(&format!("probe-{}", name.len()), &limits) {
            Ok(task) => {
                let file = own.join(format!("lardon-probe-{}", name.len())).join("memory.max");
                let ok = file.is_file() && read(&file) == (64 * MIB).to_string();
                drop(task);
                ok
            }
            Err(_) => false,
        };
        let claims = d.limits_apply();
        assert_eq!(
            claims, written,
            "{name}: claims a limit {claims}, memory.max written {written}: {}",
            d.reason
        );
        if !claims {
            // Under the none backend the direct v2 path would have had no
            // memory.max to write: the claim would have been false.
            let direct = V2Enforcer::with_fs(own.clone(), Arc::clone(&fs) as Arc<dyn CgroupFs>);
            assert!(direct.create("direct", &limits).is_err(), "{name}");
        }
    }
}

#[test]
fn hybrid_uses_v1_and_touches_nothing_in_v2() {
    let host = Host::new(&format!("{V1_MEMORY_MOUNT}{HYBRID_V2_MOUNT}"), "4:memory:/process_api/abc\n0::/\n");
    let unified = host.sys("fs/cgroup/unified");
    cgroup(&unified, true, "hugetlb", "", &[PID]);
    let mem = host.sys("fs/cgroup/memory/process_api/abc");
    std::fs::create_dir_all(&mem).unwrap();
    let fs = Arc::new(FakeCgroupFs::new(unified.clone()));
    let d = detect(&host, &fs);
    assert_eq!(d.kind(), BackendKind::V1, "{}", d.reason);
    assert!(d.reason.contains("offers no memory controller (cgroup.controllers: [hugetlb])"), "{}", d.reason);
    assert_eq!(d.enforcer.task_parents(), vec![mem]);
    assert!(!unified.join(DAEMON_LEAF).exists());
}

#[test]
fn v1_only_uses_v1() {
    let host = Host::new(V1_MEMORY_MOUNT, "4:memory:/jobs/x\n");
    let mem = host.sys("fs/cgroup/memory/jobs/x");
    std::fs::create_dir_all(&mem).unwrap();
    let fs = Arc::new(FakeCgroupFs::new(host.sys("fs/cgroup")));
    let d = detect(&host, &fs);
    assert_eq!(d.kind(), BackendKind::V1, "{}", d.reason);
    assert!(d.reason.contains("no cgroup v2 mount"), "{}", d.reason);
}

#[test]
fn v1_not_writable_is_none() {
    let host = Host::new(V1_MEMORY_MOUNT, "4:memory:/jobs/x\n");
    let mem = host.sys("fs/cgroup/memory/jobs/x");
    std::fs::create_dir_all(&mem).unwrap();
    let mut fs = FakeCgroupFs::new(host.sys("fs/cgroup"));
    fs.readonly.push(mem);
    let d = detect(&host, &Arc::new(fs));
    assert_eq!(d.kind(), BackendKind::None);
    assert!(d.reason.contains("is not writable"), "{}", d.reason);
}

#[test]
fn no_cgroups_at_all_is_none() {
    let host = Host::new("22 1 0:21 / /proc rw - proc proc rw\n", "");
    let fs = Arc::new(FakeCgroupFs::new(host.sys("fs/cgroup")));
    let d = detect(&host, &fs);
    assert_eq!(d.kind(), BackendKind::None);
    assert!(d.reason.contains("no cgroup v2 mount; no cgroup v1 memory hierarchy"), "{}", d.reason);
    assert!(d.enforcer.task_parents().is_empty());
}

/// Slurm: `/system.slice/slurmstepd.scope/job_42/step_0/user/task_0`, the
/// job's limit on `job_42`; `task_0` has no `memory.max` of its own (the
/// controller is not enabled for it) and the levels between say `max`.
#[test]
fn slurm_job_budget_is_the_minimum_over_all_ancestors() {
    let host = Host::new(V2_MOUNT, "0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_0\n");
    let mount = host.sys("fs/cgroup");
    let chain = ["system.slice", "slurmstepd.scope", "job_42", "step_0", "user", "task_0"];
    cgroup(&mount, true, "cpu memory pids", "cpu memory pids", &[]);
    let mut dir = mount.clone();
    for level in chain {
        dir = dir.join(level);
        cgroup(&dir, false, "cpu memory pids", "", &[]);
    }
    let at = |rel: &str| mount.join("system.slice/slurmstepd.scope").join(rel);
    std::fs::write(mount.join("system.slice/memory.max"), format!("{}\n", 64u64 << 30)).unwrap();
    std::fs::write(mount.join("system.slice/memory.current"), format!("{}\n", 10u64 << 30)).unwrap();
    std::fs::write(at("job_42/memory.max"), format!("{}\n", 4u64 << 30)).unwrap();
    std::fs::write(at("job_42/memory.current"), format!("{}\n", 3u64 << 30)).unwrap();
    std::fs::write(at("job_42/step_0/user/task_0/memory.current"), format!("{}\n", 1u64 << 30)).unwrap();
    for f in ["memory.max", "memory.high", "memory.peak", "memory.events"] {
        std::fs::remove_file(at("job_42/step_0/user/task_0").join(f)).unwrap();
    }
    let layout = CgroupLayout::detect(&host.root()).unwrap();
    assert_eq!(layout.v2.as_deref(), Some(at("job_42/step_0/user/task_0").as_path()));
    let s = OwnCgroup::new(&layout).sample().unwrap();
    assert_eq!(s.memory_limit, Some(4 << 30), "the job's limit, four levels up");
    assert_eq!(s.memory_usage, Some(3 << 30), "the job's usage");
    // A tighter limit lower down wins.
    std::fs::write(at("job_42/step_0/memory.max"), format!("{}\n", 2u64 << 30)).unwrap();
    std::fs::write(at("job_42/step_0/memory.current"), format!("{}\n", 1u64 << 30)).unwrap();
    let s = OwnCgroup::new(&layout).sample().unwrap();
    assert_eq!((s.memory_limit, s.memory_usage), (Some(2 << 30), Some(1 << 30)));
}
