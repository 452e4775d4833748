//! Enforcement on the real host: a child allocating past its memory limit
//! is OOM-killed and reported by whichever cgroup backend the host offers
//! (v2 through the daemon's delegated leaf on a pure v2 host, v1 on a
//! hybrid one); v2 grouping and `cgroup.kill`, and the forced none backend,
//! are exercised too. A machine that cannot host a test fails it with the
//! reason: nothing here passes by skipping.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::os::unix::process::ExitStatusExt;
use std::process::Command;
use std::time::Duration;

use lardon_host::{
    BackendKind, CgroupLayout, Enforcer, HostRoot, NoneEnforcer, TaskCgroup, TaskLimits, V2Enforcer,
    detect_enforcer, spawn_in, wait_child,
};

const MIB: u64 = 1 << 20;

/// Python that touches `mib` MiB (a filled `bytes`, so every page is
/// resident), then lingers so a poller can see it.
fn hog(mib: u64, linger_s: u32) -> Command {
    let mut cmd = Command::new("python3");
    cmd.args(["-c", &format!("import time\nb = b'x' * ({mib} << 20)\ntime.sleep({linger_s})")]);
    cmd
}

fn unique(name: &str) -> String {
    format!("test-{name}-{}", std::process::id())
}

/// Runs `cmd` in `task` (spawned into it before exec where the backend has
/// cgroups; added after spawn otherwise) and reaps it.
fn run_in(task: &dyn TaskCgroup, mut cmd: Command) -> lardon_host::ChildExit {
    let child = spawn_in(&mut cmd, Some(task), None).expect("python3 must be installed");
    if task.procs_files().is_empty() {
        task.add_pid(child.id()).unwrap();
    }
    let exit = wait_child(child).unwrap();
    task.record_exit(&exit);
    exit
}

/// The host's backend, which must be able to enforce a kernel memory
/// limit: a machine that cannot fails here with the reason, it does not
/// pass by skipping.
fn enforcing_backend() -> lardon_host::Detection {
    let detection = detect_enforcer(&HostRoot::default());
    eprintln!("backend: {} — {}", detection.kind(), detection.reason);
    assert!(
        detection.limits_apply(),
        "this machine cannot enforce a memory limit with a cgroup: {}",
        detection.reason
    );
    detection
}

#[test]
fn over_limit_child_is_oom_killed_and_reported_by_the_host_backend() {
    let detection = enforcing_backend();
    // On our hybrid machines (v2 without a memory controller, v1 memory
    // writable) this must be v1; on a pure v2 host with a delegated
    // cgroup, v2.
    let layout = CgroupLayout::detect(&HostRoot::default()).unwrap();
    let v2_has_memory = layout.v2.as_ref().is_some_and(|d| {
        let own = std::fs::read_to_string(d.join("cgroup.controllers")).unwrap_or_default();
        let parent =
            d.parent().map(|p| std::fs::read_to_string(p.join("cgroup.controllers")).unwrap_or_default());
        own.contains("memory") || parent.unwrap_or_default().contains("memory")
    });
    let v1_writable = layout
        .v1_memory
        .as_ref()
        .is_some_and(|d| nix::unistd::access(d, nix::unistd::AccessFlags::W_OK).is_ok());
    if !v2_has_memory && v1_writable {
        assert_eq!(detection.kind(), BackendKind::V1);
    }
    if v2_has_memory {
        assert_eq!(detection.kind(), BackendKind::V2, "{}", detection.reason);
    }
    let limits = TaskLimits { memory_max: Some(64 * MIB), ..TaskLimits::default() };
    let task = detection.enforcer.create(&unique("oom"), &limits).unwrap();
    let exit = run_in(task.as_ref(), hog(200, 10));
    assert_eq!(exit.status.signal(), Some(9), "killed by SIGKILL: {:?}", exit.status);
    assert!(task.oom_killed().unwrap(), "the OOM kill is reported");
    let peak = task.memory_peak().unwrap().expect("a peak is known");
    assert!(peak >= 32 * MIB, "peak {peak}");
    task.remove().unwrap();
}

#[test]
fn within_limit_child_completes_with_a_peak() {
    let detection = enforcing_backend();
    let limits = TaskLimits { memory_max: Some(256 * MIB), ..TaskLimits::default() };
    let task = detection.enforcer.create(&unique("fits"), &limits).unwrap();
    let exit = run_in(task.as_ref(), hog(40, 0));
    assert!(exit.status.success(), "{:?}", exit.status);
    assert!(exit.max_rss >= 40 * MIB, "ru_maxrss {}", exit.max_rss);
    assert!(!task.oom_killed().unwrap());
    let peak = task.memory_peak().unwrap().expect("a peak is known");
    assert!((40 * MIB..256 * MIB).contains(&peak), "peak {peak}");
    // Drop removes the cgroup.
}

#[test]
fn removing_a_task_with_a_live_process_kills_it_and_removes_the_cgroup() {
    let detection = enforcing_backend();
    let task = detection.enforcer.create(&unique("live"), &TaskLimits::default()).unwrap();
    let dirs: Vec<_> = task.procs_files().iter().map(|f| f.parent().unwrap().to_path_buf()).collect();
    let mut cmd = Command::new("sleep");
    cmd.arg("30");
    let child = spawn_in(&mut cmd, Some(task.as_ref()), None).unwrap();
    task.remove().unwrap();
    let exit = wait_child(child).unwrap();
    assert_eq!(exit.status.signal(), Some(9));
    for d in dirs {
        assert!(!d.exists(), "{} removed", d.display());
    }
}

#[test]
fn v2_groups_and_kills_through_cgroup_kill() {
    let layout = CgroupLayout::detect(&HostRoot::default()).unwrap();
    let base = layout.v2.expect("this machine has no cgroup v2 hierarchy to test grouping on");
    let v2 = V2Enforcer::new(base.clone());
    let task = v2
        .create(&unique("v2group"), &TaskLimits::default())
        .unwrap_or_else(|e| panic!("cannot create a v2 cgroup under {}: {e}", base.display()));
    let dir = base.join(format!("lardon-{}", unique("v2group")));
    let mut cmd = Command::new("sleep");
    cmd.arg("30");
    let child = spawn_in(&mut cmd, Some(task.as_ref()), None).unwrap();
    let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap();
    assert!(procs.lines().any(|l| l == child.id().to_string()), "{procs}");
    task.kill_all().unwrap();
    let events = std::fs::read_to_string(dir.join("cgroup.events")).unwrap();
    assert!(events.contains("populated 0"), "kill_all returns once the cgroup is empty: {events}");
    let exit = wait_child(child).unwrap();
    assert_eq!(exit.status.signal(), Some(9));
    task.remove().unwrap();
    assert!(!dir.exists());
}

#[test]
fn forced_none_backend_watchdog_kills_an_overrun() {
    let none = NoneEnforcer::new(HostRoot::default(), Duration::from_millis(10));
    let limits = TaskLimits { memory_max: Some(64 * MIB), ..TaskLimits::default() };
    let task = none.create(&unique("none"), &limits).unwrap();
    let exit = run_in(task.as_ref(), hog(200, 10));
    assert_eq!(exit.status.signal(), Some(9), "{:?}", exit.status);
    assert!(task.oom_killed().unwrap());
    assert!(task.memory_peak().unwrap().unwrap() > 64 * MIB);
    assert!(task.set_cpu_quota(Some(500)).is_err(), "no CPU quota without cgroups");
    task.remove().unwrap();
}

#[test]
fn forced_none_backend_peak_from_ru_maxrss() {
    let none = NoneEnforcer::new(HostRoot::default(), Duration::from_secs(60));
    let task = none.create(&unique("none-peak"), &TaskLimits::default()).unwrap();
    let exit = run_in(task.as_ref(), hog(30, 0));
    assert!(exit.status.success());
    assert!(!task.oom_killed().unwrap());
    assert!(task.memory_peak().unwrap().unwrap() >= 30 * MIB);
}

#[test]
fn cpu_quota_through_the_host_backend() {
    let detection = enforcing_backend();
    let limits = TaskLimits { cpu_millis: Some(500), ..TaskLimits::default() };
    let task = detection
        .enforcer
        .create(&unique("cpu"), &limits)
        .unwrap_or_else(|e| panic!("{}: cannot set a CPU quota on this machine: {e}", detection.kind()));
    let files = task.procs_files();
    let dir = files.last().unwrap().parent().unwrap();
    let quota = std::fs::read_to_string(dir.join("cpu.cfs_quota_us"))
        .or_else(|_| std::fs::read_to_string(dir.join("cpu.max")))
        .unwrap();
    assert!(quota.starts_with("50000"), "{quota}");
    task.set_cpu_quota(None).unwrap();
    task.remove().unwrap();
}

/// Python that forks two children each holding `mib` MiB, prints `ready`
/// once both hold it, and lingers (children too) until stdin closes.
fn two_hogs(mib: u64) -> Command {
    let script = format!(
        "import os, sys\n\
         r, w = os.pipe()\n\
         kids = []\n\
         for _ in range(2):\n    \
             pid = os.fork()\n    \
             if pid == 0:\n        \
                 b = b'x' * ({mib} << 20)\n        \
                 os.write(w, b'r')\n        \
                 sys.stdin.read()\n        \
                 os._exit(0)\n    \
             kids.append(pid)\n\
         got = b''\n\
         while len(got) < 2:\n    \
             got += os.read(r, 2)\n\
         print('ready', flush=True)\n\
         sys.stdin.read()\n\
         for k in kids:\n    \
             os.waitpid(k, 0)\n"
    );
    let mut cmd = Command::new("python3");
    cmd.args(["-c", &script]).stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped());
    cmd
}

#[test]
fn forced_none_backend_peak_is_the_sum_over_the_process_tree() {
    use std::io::BufRead;
    // A poll far beyond the test: only the synchronous sample below counts.
    let none = NoneEnforcer::new(HostRoot::default(), Duration::from_secs(600));
    let task = none.create(&unique("none-tree"), &TaskLimits::default()).unwrap();
    let mut child =
        spawn_in(&mut two_hogs(60), Some(task.as_ref()), None).expect("python3 must be installed");
    task.add_pid(child.id()).unwrap();
    let stdin = child.stdin.take().unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    // Both children hold their 60 MiB now: the sample sums the tree.
    let current = task.memory_current().unwrap().unwrap();
    assert!(current >= 120 * MIB, "current {} MiB", current / MIB);
    drop(stdin);
    let exit = wait_child(child).unwrap();
    assert!(exit.status.success(), "{:?}", exit.status);
    task.record_exit(&exit);
    let peak = task.memory_peak().unwrap().unwrap();
    assert!(peak >= 120 * MIB, "peak {} MiB is the tree's sum", peak / MIB);
    assert!(peak > exit.max_rss, "more than the largest single process ({} MiB)", exit.max_rss / MIB);
}

/// The cgroup lines of `/proc/<who>/cgroup`, sorted.
fn cgroups_of(who: &str) -> Vec<String> {
    let mut lines: Vec<String> =
        std::fs::read_to_string(format!("/proc/{who}/cgroup")).unwrap().lines().map(str::to_owned).collect();
    lines.sort();
    lines
}

/// A child spawned into a task cgroup with a CPU pool starts inside the
/// cgroup and on the pool (whichever way the backend gets it there: the
/// spawning thread stepping in on v1, the child writing itself in on v2),
/// and the spawning thread ends where it was, with its own affinity.
#[test]
fn spawn_in_places_the_child_and_leaves_the_caller_where_it_was() {
    let detection = enforcing_backend();
    let task = detection.enforcer.create(&unique("place"), &TaskLimits::default()).unwrap();
    let me = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).unwrap();
    let first = (0..nix::sched::CpuSet::count()).find(|&c| me.is_set(c).unwrap_or(false)).unwrap();
    let mut one = nix::sched::CpuSet::new();
    one.set(first).unwrap();
    let pool = lardon_host::CpuMask::from_cpuset(&one);
    let before = cgroups_of("thread-self");
    let mut cmd = Command::new("sleep");
    cmd.arg("30");
    let mut child = spawn_in(&mut cmd, Some(task.as_ref()), Some(&pool)).expect("sleep must be installed");
    assert_eq!(cgroups_of("thread-self"), before, "the spawning thread went back home");
    let after = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).unwrap();
    assert_eq!(after, me, "the spawning thread's affinity is its own again");
    let dir = task.procs_files()[0].parent().unwrap().file_name().unwrap().to_string_lossy().into_owned();
    let child_groups = cgroups_of(&child.id().to_string());
    assert!(child_groups.iter().any(|l| l.ends_with(&format!("/{dir}"))), "{child_groups:?} lacks {dir}");
    let child_cpus = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(child.id() as i32)).unwrap();
    assert_eq!(child_cpus, one, "the child is on the pool");
    child.kill().unwrap();
    child.wait().unwrap();
    task.remove().unwrap();
}
