//! [`ProcessTree`]: one task's processes, followed through `/proc` — the
//! leader and every descendant, adopted through
//! `/proc/<pid>/task/*/children` and kept once seen, so a process
//! re-parented away (a double fork, `setsid`) is still counted — and their
//! resident memory summed. The cgroup-less backend's watchdog
//! ([`NoneEnforcer`](crate::NoneEnforcer)) and a cluster agent's soft
//! memory watchdog both sample with it.

use std::path::PathBuf;

use crate::error::HostError;
use crate::parse::parse_u64;
use crate::root::HostRoot;

/// A watched process: pid and start time (to survive pid reuse).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Proc {
    pid: i32,
    start: u64,
}

/// One sample of a [`ProcessTree`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TreeRss {
    /// The sum of the processes' `VmRSS`, bytes (shared pages count once
    /// per process, so a sum over many processes can exceed their real
    /// footprint).
    pub rss: u64,
    /// The largest single process's `VmHWM` (its own peak), bytes.
    pub largest_hwm: u64,
}

/// One task's process tree under a [`HostRoot`]'s `/proc` (see the module
/// docs).
#[derive(Debug, Clone)]
pub struct ProcessTree {
    proc: PathBuf,
    list: Vec<Proc>,
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

impl ProcessTree {
    /// An empty tree reading `root`'s `/proc`.
    #[must_use]
    pub fn new(root: &HostRoot) -> Self {
        ProcessTree { proc: root.proc.clone(), list: Vec::new() }
    }

    /// Starts following `pid` (and, from the next sample, its descendants).
    ///
    /// # Errors
    /// [`HostError`] when `pid` is out of range or its `stat` cannot be
    /// read (it is gone).
    pub fn watch(&mut self, pid: u32) -> Result<(), HostError> {
        let raw =
            i32::try_from(pid).map_err(|_| HostError::Unsupported(format!("pid {pid} out of range")))?;
        let start = self.start_of(raw).ok_or_else(|| {
            HostError::io("read", self.proc.join(format!("{pid}/stat")), std::io::ErrorKind::NotFound.into())
        })?;
        if self.list.iter().all(|p| p.pid != raw) {
            self.list.push(Proc { pid: raw, start });
        }
        Ok(())
    }

    /// Drops the processes that are gone and adopts the children of those
    /// left (transitively).
    pub fn refresh(&mut self) {
        let proc = self.proc.clone();
        self.list.retain(|p| Self::start_in(&proc, p.pid) == Some(p.start));
        let mut i = 0;
        while i < self.list.len() {
            let task_dir = self.proc.join(format!("{}/task", self.list[i].pid));
            for t in std::fs::read_dir(task_dir).into_iter().flatten().flatten() {
                let children = crate::read_pseudo(&t.path().join("children")).unwrap_or_default();
                for pid in children.split_ascii_whitespace().filter_map(|c| c.parse::<i32>().ok()) {
                    if self.list.iter().all(|p| p.pid != pid)
                        && let Some(start) = self.start_of(pid)
                    {
                        self.list.push(Proc { pid, start });
                    }
                }
            }
            i += 1;
        }
    }

    /// Refreshes, then sums the processes' resident memory.
    pub fn sample(&mut self) -> TreeRss {
        self.refresh();
        let mut sample = TreeRss::default();
        for p in &self.list {
            let status = crate::read_pseudo(&self.proc.join(format!("{}/status", p.pid)));
            let (rss, hwm) = rss_hwm(&status.unwrap_or_default());
            sample.rss = sample.rss.saturating_add(rss);
            sample.largest_hwm = sample.largest_hwm.max(hwm);
        }
        sample
    }

    /// The pids followed as of the last refresh (zombies included).
    #[must_use]
    pub fn pids(&self) -> Vec<i32> {
        self.list.iter().map(|p| p.pid).collect()
    }

    /// Refreshes, then the pids that still run (neither zombie nor dead).
    pub fn running(&mut self) -> Vec<i32> {
        self.refresh();
        self.list
            .iter()
            .filter(|p| {
                let stat = crate::read_pseudo(&self.proc.join(format!("{}/stat", p.pid)));
                let state =
                    stat.ok().and_then(|s| s.rfind(')').and_then(|i| s.get(i + 2..i + 3).map(str::to_owned)));
                !matches!(state.as_deref(), None | Some("Z" | "X"))
            })
            .map(|p| p.pid)
            .collect()
    }

    /// SIGKILLs every followed process that still runs (those that left
    /// the task's process group included); returns how many were signalled.
    pub fn kill_running(&mut self) -> usize {
        let running = self.running();
        for pid in &running {
            let _ =
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid), nix::sys::signal::Signal::SIGKILL);
        }
        running.len()
    }

    fn start_of(&self, pid: i32) -> Option<u64> {
        Self::start_in(&self.proc, pid)
    }

    fn start_in(proc: &std::path::Path, pid: i32) -> Option<u64> {
        start_time(&crate::read_pseudo(&proc.join(format!("{pid}/stat"))).ok()?)
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

    #[test]
    fn follows_a_real_tree_and_sums_it() {
        // A shell with a child: both are counted, the child adopted.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & wait"])
            .spawn()
            .unwrap_or_else(|e| panic!("{e}"));
        let mut tree = ProcessTree::new(&HostRoot::default());
        tree.watch(child.id()).unwrap_or_else(|e| panic!("{e}"));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while tree.running().len() < 2 {
            assert!(std::time::Instant::now() < deadline, "the child was never adopted: {:?}", tree.pids());
            std::thread::yield_now();
        }
        assert!(tree.sample().rss > 0);
        assert_eq!(tree.kill_running(), 2);
        let _ = child.wait();
        assert!(tree.watch(u32::MAX).is_err(), "out of range");
    }
}
