//! The none backend: no cgroup. A watchdog thread samples the task's whole
//! process tree ([`ProcessTree`]: the leader and every descendant, adopted
//! through `/proc/<pid>/task/*/children` and kept once seen, so a process
//! re-parented away is still counted) and its peak is the largest *sum*
//! of their RSS (`VmRSS`), not the largest single process (at least any
//! one's `VmHWM`, and `ru_maxrss` at the end). The watchdog kills the
//! task's processes by the one rule of [`crate::watchdog`] (the summed RSS
//! past the limit plus its tolerance) — a last resort, since a fast
//! allocation can outrun a poll.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::{BackendKind, Enforcer, TaskCgroup, TaskLimits, task_dir_name};
use crate::error::HostError;
use crate::proctree::ProcessTree;
use crate::root::HostRoot;
use crate::spawn::ChildExit;

/// The cgroup-less backend.
#[derive(Debug, Clone)]
pub struct NoneEnforcer {
    root: HostRoot,
    poll: Duration,
}

impl NoneEnforcer {
    /// Watches processes under `root.proc` every `poll`.
    pub fn new(root: HostRoot, poll: Duration) -> Self {
        NoneEnforcer { root, poll: poll.max(Duration::from_millis(1)) }
    }
}

impl Enforcer for NoneEnforcer {
    fn kind(&self) -> BackendKind {
        BackendKind::None
    }

    fn task_parents(&self) -> Vec<PathBuf> {
        Vec::new()
    }

    fn create(&self, name: &str, limits: &TaskLimits) -> Result<Box<dyn TaskCgroup>, HostError> {
        task_dir_name(name)?;
        if limits.cpu_millis.is_some() {
            return Err(HostError::Unsupported("the none backend cannot enforce a CPU quota".to_owned()));
        }
        let shared = Arc::new(Shared {
            tree: Mutex::new(ProcessTree::new(&self.root)),
            limit: AtomicU64::new(limits.memory_max.unwrap_or(u64::MAX)),
            peak: AtomicU64::new(0),
            current: AtomicU64::new(0),
            oom: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        });
        let watch = Arc::clone(&shared);
        let poll = self.poll;
        let thread = thread::Builder::new()
            .name(format!("lardon-rss-{name}"))
            .spawn(move || {
                while !watch.stop.load(Ordering::Acquire) {
                    watch.tick();
                    thread::park_timeout(poll);
                }
            })
            .map_err(|e| HostError::io("spawn watchdog for", name, e))?;
        Ok(Box::new(NoneTask { name: name.to_owned(), shared, thread: Some(thread) }))
    }
}

#[derive(Debug)]
struct Shared {
    limit: AtomicU64,
    peak: AtomicU64,
    current: AtomicU64,
    oom: AtomicBool,
    stop: AtomicBool,
    tree: Mutex<ProcessTree>,
}

impl Shared {
    fn tree(&self) -> MutexGuard<'_, ProcessTree> {
        self.tree.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn tick(&self) {
        let mut tree = self.tree();
        let sample = tree.sample();
        self.current.store(sample.rss, Ordering::Release);
        self.peak.fetch_max(sample.rss.max(sample.largest_hwm), Ordering::AcqRel);
        if crate::watchdog::over_limit(sample.rss, self.limit.load(Ordering::Acquire)) {
            self.oom.store(true, Ordering::Release);
            for pid in tree.pids() {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
    }
}

#[derive(Debug)]
struct NoneTask {
    name: String,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl NoneTask {
    fn teardown(&mut self) -> Result<(), HostError> {
        let killed = self.kill_all();
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
        killed
    }
}

impl TaskCgroup for NoneTask {
    fn name(&self) -> &str {
        &self.name
    }

    fn add_pid(&self, pid: u32) -> Result<(), HostError> {
        self.shared.tree().watch(pid)?;
        if let Some(t) = &self.thread {
            t.thread().unpark();
        }
        Ok(())
    }

    fn procs_files(&self) -> Vec<PathBuf> {
        Vec::new()
    }

    fn set_memory_limit(&self, max: Option<u64>, _high: Option<u64>) -> Result<(), HostError> {
        self.shared.limit.store(max.unwrap_or(u64::MAX), Ordering::Release);
        Ok(())
    }

    fn set_cpu_quota(&self, millis: Option<u32>) -> Result<(), HostError> {
        match millis {
            None => Ok(()),
            Some(_) => Err(HostError::Unsupported("the none backend cannot enforce a CPU quota".to_owned())),
        }
    }

    fn memory_current(&self) -> Result<Option<u64>, HostError> {
        self.shared.tick();
        Ok(Some(self.shared.current.load(Ordering::Acquire)))
    }

    fn memory_peak(&self) -> Result<Option<u64>, HostError> {
        let peak = self.shared.peak.load(Ordering::Acquire);
        Ok((peak > 0).then_some(peak))
    }

    fn oom_killed(&self) -> Result<bool, HostError> {
        Ok(self.shared.oom.load(Ordering::Acquire))
    }

    fn record_exit(&self, exit: &ChildExit) {
        self.shared.peak.fetch_max(exit.max_rss, Ordering::AcqRel);
    }

    fn kill_all(&self) -> Result<(), HostError> {
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            // A killed but unreaped child stays a zombie: that is fine.
            let running = self.shared.tree().running();
            if running.is_empty() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(HostError::Unsupported(format!("task {} still has processes", self.name)));
            }
            for pid in &running {
                let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
            }
            // Each pidfd turns readable at exit: no fixed sleep.
            for pid in &running {
                super::fsops::wait_gone(*pid, deadline);
            }
        }
    }

    fn remove(mut self: Box<Self>) -> Result<(), HostError> {
        self.teardown()
    }
}

impl Drop for NoneTask {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    /// A pid no kernel hands out (past any `pid_max`): the kill a breach
    /// sends reaches nothing.
    const PID: u32 = 2_000_000_000;

    /// A fixture `/proc` with one process of `rss_mib` MiB resident.
    fn proc_with(dir: &std::path::Path, rss_mib: u64) {
        let p = dir.join(format!("proc/{PID}"));
        std::fs::create_dir_all(&p).unwrap();
        let stat =
            format!("{PID} (hog) S 1 {PID} {PID} 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10");
        std::fs::write(p.join("stat"), stat).unwrap();
        let kib = rss_mib * 1024;
        std::fs::write(p.join("status"), format!("Name:\thog\nVmHWM:\t{kib} kB\nVmRSS:\t{kib} kB\n"))
            .unwrap();
    }

    /// The none backend kills by the one rule of `crate::watchdog`: a
    /// summed RSS within the limit's tolerance (64 MiB + 8 MiB) is let
    /// run, one past it is killed.
    #[test]
    fn the_none_backend_kills_past_the_limit_plus_its_tolerance_only() {
        let dir = tempfile::tempdir().unwrap();
        proc_with(dir.path(), 70);
        // A poll far beyond the test: only the synchronous samples count.
        let none = NoneEnforcer::new(HostRoot::under(dir.path()), Duration::from_secs(600));
        let limits = TaskLimits { memory_max: Some(64 * MIB), ..TaskLimits::default() };
        let task = none.create("rule", &limits).unwrap();
        task.add_pid(PID).unwrap();
        assert_eq!(task.memory_current().unwrap(), Some(70 * MIB));
        assert!(!task.oom_killed().unwrap(), "70 MiB is within 64 MiB's tolerance");
        proc_with(dir.path(), 73);
        assert_eq!(task.memory_current().unwrap(), Some(73 * MIB));
        assert!(task.oom_killed().unwrap(), "73 MiB is past it");
        std::fs::remove_dir_all(dir.path().join("proc")).unwrap();
        task.remove().unwrap();
    }
}
