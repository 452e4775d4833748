//! cgroups: our own figures ([`OwnCgroup`]) and per-task enforcement behind
//! one backend trait ([`Enforcer`]) with three implementations — [`V2Enforcer`],
//! [`V1Enforcer`] and [`NoneEnforcer`] — chosen by [`detect_enforcer`].

mod delegate;
mod files;
#[cfg(test)]
mod fixture;
#[cfg(test)]
mod fixture_tests;
mod fsops;
mod layout;
mod none;
mod own;
mod v1;
mod v2;

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use delegate::{CONTROLLERS, DAEMON_LEAF, Delegation, DelegationError, delegate_v2};
pub use files::{
    V1_UNLIMITED, parse_cfs_quota, parse_counter, parse_cpu_max, parse_keyed, parse_v1_limit, parse_v2_limit,
};
pub use fsops::{CgroupFs, RealFs};
pub use layout::CgroupLayout;
pub use none::NoneEnforcer;
pub use own::OwnCgroup;
pub use v1::V1Enforcer;
pub use v2::V2Enforcer;

use crate::error::HostError;
use crate::root::HostRoot;
use crate::spawn::ChildExit;

/// Limits applied to one task's cgroup. `None` leaves a figure unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TaskLimits {
    /// Hard memory limit in bytes (v2 `memory.max`, v1 `memory.limit_in_bytes`,
    /// none: RSS watchdog).
    pub memory_max: Option<u64>,
    /// Soft limit in bytes: reclaim pressure above it (v2 `memory.high`, v1
    /// `memory.soft_limit_in_bytes`; ignored by the none backend).
    pub memory_high: Option<u64>,
    /// CPU quota in thousandths of a CPU (v2 `cpu.max`, v1 `cpu.cfs_quota_us`).
    pub cpu_millis: Option<u32>,
}

/// Which enforcement backend is in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// A delegated cgroup v2 subtree with the memory controller.
    V2,
    /// cgroup v1 memory (and cpu) hierarchies.
    V1,
    /// No writable cgroup with a memory controller: RSS watchdog.
    None,
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendKind::V2 => "cgroup v2",
            BackendKind::V1 => "cgroup v1",
            BackendKind::None => "none",
        })
    }
}

/// Creates per-task cgroups. One implementation per [`BackendKind`].
pub trait Enforcer: Send + Sync + fmt::Debug {
    /// The backend.
    fn kind(&self) -> BackendKind;

    /// The directories task cgroups are created in (empty for the none
    /// backend), so a restarted daemon can sweep a crashed one's leftovers.
    fn task_parents(&self) -> Vec<PathBuf>;

    /// Creates the task cgroup `lardon-<name>` with `limits` applied.
    /// `name` must be 1–64 characters of `[A-Za-z0-9._-]`, not starting
    /// with `.`. Dropping the handle kills what is left in it and removes it.
    ///
    /// # Errors
    /// [`HostError`] when the directory cannot be created or a limit cannot
    /// be set (e.g. [`HostError::MissingController`]).
    fn create(&self, name: &str, limits: &TaskLimits) -> Result<Box<dyn TaskCgroup>, HostError>;
}

/// One task's cgroup (or, for the none backend, its watched processes).
pub trait TaskCgroup: Send + Sync + fmt::Debug {
    /// The task name given to [`Enforcer::create`].
    fn name(&self) -> &str;

    /// Moves process `pid` (and, for a v1/v2 cgroup, its future children)
    /// into the task. Prefer [`crate::spawn_in`], which does it before
    /// `exec` so no allocation escapes the limit.
    ///
    /// # Errors
    /// [`HostError`] when the pid cannot be added.
    fn add_pid(&self, pid: u32) -> Result<(), HostError>;

    /// The `cgroup.procs` files a new process must write itself into
    /// (one per hierarchy); empty for the none backend.
    fn procs_files(&self) -> Vec<PathBuf>;

    /// Where a single thread can step into this cgroup and back out, one
    /// pair per hierarchy: the task's `tasks` file and the one of the
    /// cgroup the daemon's threads live in. A process a thread creates
    /// starts in that thread's cgroups, so [`crate::spawn_in`] moves the
    /// spawning thread in for the spawn instead of having the child write
    /// itself in between `fork` and `exec`. `None` (the default) where
    /// only whole processes can join (cgroup v2 domain cgroups) or there
    /// is no cgroup.
    fn thread_moves(&self) -> Option<Vec<(PathBuf, PathBuf)>> {
        None
    }

    /// Sets the hard and soft memory limits (`None` = unlimited).
    ///
    /// # Errors
    /// [`HostError`] when the kernel refuses.
    fn set_memory_limit(&self, max: Option<u64>, high: Option<u64>) -> Result<(), HostError>;

    /// Sets the CPU quota in millicpus (`None` = unlimited).
    ///
    /// # Errors
    /// [`HostError`] when the kernel refuses or no cpu controller exists;
    /// on cgroup v1, also for a task created without a quota
    /// ([`TaskLimits::cpu_millis`] `None`): its processes were never put
    /// in a cpu cgroup (ask for the quota at creation).
    fn set_cpu_quota(&self, millis: Option<u32>) -> Result<(), HostError>;

    /// Current memory use in bytes, when known.
    ///
    /// # Errors
    /// [`HostError`] when the figure cannot be read.
    fn memory_current(&self) -> Result<Option<u64>, HostError>;

    /// Peak memory use in bytes, when known (v2 `memory.peak`, v1
    /// `memory.max_usage_in_bytes`, none: the largest RSS seen or
    /// `ru_maxrss` passed to [`TaskCgroup::record_exit`]).
    ///
    /// # Errors
    /// [`HostError`] when the figure cannot be read.
    fn memory_peak(&self) -> Result<Option<u64>, HostError>;

    /// Whether any process of the task was killed for exceeding the memory
    /// limit (v2 `memory.events` `oom_kill`, v1 `memory.oom_control`
    /// `oom_kill`, none: the watchdog fired).
    ///
    /// # Errors
    /// [`HostError`] when the figure cannot be read.
    fn oom_killed(&self) -> Result<bool, HostError>;

    /// Feeds the exit of a process reaped with [`crate::wait_child`]
    /// (the none backend takes its `ru_maxrss` as a peak).
    fn record_exit(&self, exit: &ChildExit) {
        let _ = exit;
    }

    /// Sends SIGKILL to every process of the task and waits until none is
    /// left (v2: `cgroup.kill`, then `populated 0` in `cgroup.events`; v1:
    /// the pids of `cgroup.procs`, through pidfds). Returns at once when the
    /// task has no process left, which is the common case at its end.
    ///
    /// # Errors
    /// [`HostError`] when processes remain or the kill fails.
    fn kill_all(&self) -> Result<(), HostError>;

    /// Kills what is left and removes the cgroup. Dropping the handle does
    /// the same, ignoring errors.
    ///
    /// # Errors
    /// [`HostError`] when the cgroup cannot be removed.
    fn remove(self: Box<Self>) -> Result<(), HostError>;
}

/// The chosen backend and why it was chosen.
#[derive(Debug, Clone)]
pub struct Detection {
    /// The backend.
    pub enforcer: Arc<dyn Enforcer>,
    /// Human explanation, for `lardon resources`: which hierarchy and
    /// where, or for the none backend why no cgroup can enforce a limit.
    pub reason: String,
}

impl Detection {
    /// The backend's kind.
    pub fn kind(&self) -> BackendKind {
        self.enforcer.kind()
    }

    /// Whether a task's memory limit is a kernel limit (a cgroup), as
    /// opposed to the none backend's RSS watchdog.
    pub fn limits_apply(&self) -> bool {
        self.kind() != BackendKind::None
    }
}

/// [`detect_enforcer_with`] on the host, for the calling process.
pub fn detect_enforcer(root: &HostRoot) -> Detection {
    detect_enforcer_with(root, Arc::new(RealFs), std::process::id())
}

/// Picks the enforcement backend from `<proc>/self/mountinfo` and
/// `<proc>/self/cgroup`, and sets it up:
///
/// * **v2** when our v2 cgroup offers the memory controller and
///   [`delegate_v2`] succeeds — process `pid` is moved into the leaf
///   `<own>/lardon-daemon` and task cgroups are created beside it;
/// * else **v1** when our v1 memory cgroup is writable (hybrid hosts);
/// * else **none**, the RSS watchdog, with the reason no cgroup applies
///   (`EBUSY` on `subtree_control`, not delegated, no controller …).
///
/// Never claims a cgroup backend whose memory limit cannot be written.
/// Never fails: an unreadable layout means the none backend.
pub fn detect_enforcer_with(root: &HostRoot, fs: Arc<dyn CgroupFs>, pid: u32) -> Detection {
    let none = |why: String| Detection {
        enforcer: Arc::new(NoneEnforcer::new(root.clone(), Duration::from_millis(50))),
        reason: format!("{why}; tasks are watched by RSS (killed on overrun), no kernel limit applies"),
    };
    let layout = match CgroupLayout::detect(root) {
        Ok(l) => l,
        Err(e) => return none(format!("cgroup layout unreadable ({e})")),
    };
    let mut why = Vec::new();
    match &layout.v2 {
        Some(own) => match delegate_v2(own, pid, &*fs) {
            Ok(d) => {
                let reason = d.describe();
                return Detection { enforcer: Arc::new(V2Enforcer::with_fs(d.base, fs)), reason };
            }
            Err(e) => why.push(e.to_string()),
        },
        None => why.push("no cgroup v2 mount".to_owned()),
    }
    match &layout.v1_memory {
        Some(dir) if fs.writable(dir) => {
            let cpu = layout.v1_cpu.as_ref().filter(|d| fs.writable(d)).cloned();
            let reason = format!(
                "cgroup v1 memory at {}{}; {}",
                dir.display(),
                cpu.as_ref()
                    .map_or(", no writable v1 cpu".to_owned(), |c| format!(", v1 cpu at {}", c.display())),
                why.join("; "),
            );
            Detection { enforcer: Arc::new(V1Enforcer::new(dir.clone(), cpu)), reason }
        }
        Some(dir) => {
            why.push(format!("cgroup v1 memory at {} is not writable", dir.display()));
            none(why.join("; "))
        }
        None if layout.v2.is_some() => none(why.join("; ")),
        None => {
            why.push("no cgroup v1 memory hierarchy".to_owned());
            none(why.join("; "))
        }
    }
}

/// Checks a task name and returns its directory name `lardon-<name>`.
pub(crate) fn task_dir_name(name: &str) -> Result<String, HostError> {
    let ok = (1..=64).contains(&name.len())
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok { Ok(format!("lardon-{name}")) } else { Err(HostError::InvalidName(name.to_owned())) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_names() {
        assert_eq!(task_dir_name("job-1.a_b").unwrap(), "lardon-job-1.a_b");
        for bad in ["", ".hidden", "a/b", "..", "a b", &"x".repeat(65)] {
            assert!(task_dir_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn unreadable_layout_means_none() {
        let d = detect_enforcer(&HostRoot::under("/nonexistent-lardon"));
        assert_eq!(d.kind(), BackendKind::None);
        assert!(d.reason.contains("unreadable"), "{}", d.reason);
    }
}
