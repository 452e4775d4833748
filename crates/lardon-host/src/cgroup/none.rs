//! The none backend: no cgroup. Peaks come from the RSS seen by a watchdog
//! thread (`VmHWM`/`VmRSS` in `/proc/<pid>/status`) and from `ru_maxrss`;
//! the watchdog kills the task's processes when their summed RSS exceeds
//! the limit — a last resort, since a fast allocation can outrun a poll.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::{BackendKind, Enforcer, TaskCgroup, TaskLimits, task_dir_name};
use crate::error::HostError;
use crate::parse::parse_u64;
use crate::root::HostRoot;
use crate::spawn::ChildExit;

/// The cgroup-less backend.
#[derive(Debug, Clone)]
pub struct NoneEnforcer {
    proc: PathBuf,
    poll: Duration,
}

impl NoneEnforcer {
    /// Watches processes under `root.proc` every `poll`.
    pub fn new(root: HostRoot, poll: Duration) -> Self {
        NoneEnforcer { proc: root.proc, poll: poll.max(Duration::from_millis(1)) }
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
            proc: self.proc.clone(),
            limit: AtomicU64::new(limits.memory_max.unwrap_or(u64::MAX)),
            peak: AtomicU64::new(0),
            current: AtomicU64::new(0),
            oom: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            pids: Mutex::new(Vec::new()),
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

/// A watched process: pid and start time (to survive pid reuse).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Proc {
    pid: i32,
    start: u64,
}

#[derive(Debug)]
struct Shared {
    proc: PathBuf,
    limit: AtomicU64,
    peak: AtomicU64,
    current: AtomicU64,
    oom: AtomicBool,
    stop: AtomicBool,
    pids: Mutex<Vec<Proc>>,
}

/// Field 22 (`starttime`) of `/proc/<pid>/stat`, after the `(comm)` field.
fn start_time(stat: &str) -> Option<u64> {
    let after = &stat[stat.rfind(')')? + 1..];
    parse_u64("starttime", after.split_ascii_whitespace().nth(19)?).ok()
}

/// `VmRSS` and `VmHWM` of a status file, in bytes (0 for a zombie).
fn rss_hwm(status: &str) -> (u64, u64) {
    let field = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().strip_suffix(" kB"))
            .and_then(|v| parse_u64(key, v.trim()).ok())
            .map_or(0, |k| k.saturating_mul(1024))
    };
    (field("VmRSS:"), field("VmHWM:"))
}

impl Shared {
    fn pids(&self) -> MutexGuard<'_, Vec<Proc>> {
        self.pids.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn alive(&self, p: Proc) -> bool {
        let stat = std::fs::read_to_string(self.proc.join(format!("{}/stat", p.pid)));
        stat.ok().and_then(|s| start_time(&s)) == Some(p.start)
    }

    /// Adds the children of every watched process (`/proc/<pid>/task/*/children`).
    fn adopt_children(&self, list: &mut Vec<Proc>) {
        let mut i = 0;
        while i < list.len() {
            let task_dir = self.proc.join(format!("{}/task", list[i].pid));
            for t in std::fs::read_dir(task_dir).into_iter().flatten().flatten() {
                let children = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
                for pid in children.split_ascii_whitespace().filter_map(|c| c.parse::<i32>().ok()) {
                    if list.iter().all(|p| p.pid != pid)
                        && let Some(start) = self.start_of(pid)
                    {
                        list.push(Proc { pid, start });
                    }
                }
            }
            i += 1;
        }
    }

    fn start_of(&self, pid: i32) -> Option<u64> {
        start_time(&std::fs::read_to_string(self.proc.join(format!("{pid}/stat"))).ok()?)
    }

    fn tick(&self) {
        let mut list = self.pids();
        list.retain(|p| self.alive(*p));
        self.adopt_children(&mut list);
        let (mut rss, mut hwm) = (0u64, 0u64);
        for p in list.iter() {
            let status = std::fs::read_to_string(self.proc.join(format!("{}/status", p.pid)));
            let (r, h) = rss_hwm(&status.unwrap_or_default());
            rss = rss.saturating_add(r);
            hwm = hwm.max(h);
        }
        self.current.store(rss, Ordering::Release);
        self.peak.fetch_max(rss.max(hwm), Ordering::AcqRel);
        if rss > self.limit.load(Ordering::Acquire) {
            self.oom.store(true, Ordering::Release);
            for p in list.iter() {
                let _ = kill(Pid::from_raw(p.pid), Signal::SIGKILL);
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
        let raw =
            i32::try_from(pid).map_err(|_| HostError::Unsupported(format!("pid {pid} out of range")))?;
        let start = self.shared.start_of(raw).ok_or_else(|| {
            HostError::io(
                "read",
                self.shared.proc.join(format!("{pid}/stat")),
                std::io::ErrorKind::NotFound.into(),
            )
        })?;
        self.shared.pids().push(Proc { pid: raw, start });
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
            let mut list = self.shared.pids();
            list.retain(|p| self.shared.alive(*p));
            self.shared.adopt_children(&mut list);
            // A killed but unreaped child stays a zombie: that is fine.
            let running: Vec<Proc> = list
                .iter()
                .copied()
                .filter(|p| {
                    let stat = std::fs::read_to_string(self.shared.proc.join(format!("{}/stat", p.pid)));
                    let state = stat
                        .ok()
                        .and_then(|s| s.rfind(')').and_then(|i| s.get(i + 2..i + 3).map(str::to_owned)));
                    !matches!(state.as_deref(), None | Some("Z" | "X"))
                })
                .collect();
            drop(list);
            if running.is_empty() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(HostError::Unsupported(format!("task {} still has processes", self.name)));
            }
            for p in &running {
                let _ = kill(Pid::from_raw(p.pid), Signal::SIGKILL);
            }
            // Each pidfd turns readable at exit: no fixed sleep.
            for p in &running {
                super::fsops::wait_gone(p.pid, deadline);
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

    #[test]
    fn parses_stat_and_status() {
        let stat =
            "4242 (my (odd) prog) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(start_time(stat), Some(987_654));
        assert_eq!(start_time("4242 (x) S 1"), None);
        let status = "Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n";
        assert_eq!(rss_hwm(status), (1 << 20, 2 << 20));
        assert_eq!(rss_hwm("Name:\tzombie\nState:\tZ (zombie)\n"), (0, 0));
    }
}
