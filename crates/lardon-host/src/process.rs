//! One task's processes as a unit, the layer every Lardon component that
//! runs a command goes through (the daemon's runner, a cluster agent,
//! `lardon exec`): an argv started as the leader of its own process group
//! ([`spawn_group`], into a task cgroup and the compute pool through
//! [`spawn_in`]) with its output sent to a log file, captured or dropped
//! ([`Output`]); its end awaited on a pidfd ([`ExitWatch`], with a timeout
//! while sampling) and reaped with its `ru_maxrss` ([`wait_child`]); its
//! peak taken from the cgroup where there is one ([`peak`]); and the whole
//! tree killed ([`ProcessGroup`], [`GroupGuard`]). The RSS watchdog's kill
//! rule is [`crate::watchdog`].
//!
//! Nothing here adds a pre-`exec` hook, so a spawn without a cgroup to
//! join from the child (no cgroup, or v1's thread moves) stays a
//! `posix_spawn`, the daemon's launch path (see [`spawn_in`]).
//!
//! [`ExitWatch`]: crate::ExitWatch
//! [`wait_child`]: crate::wait_child

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::waitpid;
use nix::unistd::Pid;

use crate::cgroup::TaskCgroup;
use crate::error::HostError;
use crate::spawn::{ChildExit, spawn_in};
use crate::topology::CpuMask;

/// Where a task's stdout and stderr go.
#[derive(Debug)]
pub enum Output {
    /// Nowhere (`/dev/null`).
    Null,
    /// Both appended to this file (the streams interleave).
    Log(File),
    /// Two pipes, read by the caller from the [`Child`].
    Capture,
}

impl Output {
    /// Points `cmd`'s stdout and stderr where `self` says.
    ///
    /// # Errors
    /// [`HostError::Io`] when the log's handle cannot be duplicated for
    /// stderr.
    pub fn apply(self, cmd: &mut Command) -> Result<(), HostError> {
        match self {
            Output::Null => cmd.stdout(Stdio::null()).stderr(Stdio::null()),
            Output::Capture => cmd.stdout(Stdio::piped()).stderr(Stdio::piped()),
            Output::Log(file) => {
                let err = file.try_clone().map_err(|e| HostError::io("duplicate", "the log handle", e))?;
                cmd.stdout(file).stderr(err)
            }
        };
        Ok(())
    }
}

/// A process group led by a task's first process: signals sent to it reach
/// every descendant that did not leave the group (a `setsid` or
/// `setpgid` one is reached through the task's cgroup or
/// [`ProcessTree`](crate::ProcessTree) instead).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessGroup(Pid);

impl ProcessGroup {
    /// The group led by process `pid` (started by [`spawn_group`]); `None`
    /// when `pid` is not a valid process id.
    #[must_use]
    pub fn led_by(pid: u32) -> Option<ProcessGroup> {
        i32::try_from(pid).ok().filter(|p| *p > 0).map(|p| ProcessGroup(Pid::from_raw(p)))
    }

    /// The group's id (its leader's pid).
    #[must_use]
    pub fn id(&self) -> u32 {
        u32::try_from(self.0.as_raw()).unwrap_or(0)
    }

    /// Sends `signal` to every process of the group; a group already gone
    /// is not an error (`Ok(false)`), a delivered signal is `Ok(true)`.
    ///
    /// # Errors
    /// [`HostError::Sys`] when the kernel refuses the signal (permission).
    pub fn signal(&self, signal: Signal) -> Result<bool, HostError> {
        match killpg(self.0, signal) {
            Ok(()) => Ok(true),
            Err(Errno::ESRCH) => Ok(false),
            Err(e) => Err(HostError::sys("killpg", e)),
        }
    }

    /// SIGKILLs the whole group (nothing happens when it is gone).
    pub fn kill(&self) {
        let _ = killpg(self.0, Signal::SIGKILL);
    }

    /// SIGKILLs what is left of the group and reaps every member that is
    /// our child (a child subreaper adopts the orphans). An empty group —
    /// the common end of a run — costs one `killpg`. Blocks until no child
    /// of ours is left in the group; no second look is needed: a member
    /// whose parent dies is re-parented to us before that parent can be
    /// reaped (the kernel re-parents in `exit_notify`, before the parent
    /// turns zombie), so when `waitpid` reports no child left, none can
    /// still become ours.
    pub fn kill_and_reap(&self) {
        if let Err(Errno::ESRCH) = killpg(self.0, Signal::SIGKILL) {
            return;
        }
        while let Ok(_) | Err(Errno::EINTR) = waitpid(Pid::from_raw(-self.0.as_raw()), None) {}
    }
}

/// Kills a group when dropped, unless [`GroupGuard::disarm`]ed first (the
/// task was reaped): a caller that gives up on a task midway (a dropped
/// future, an error path) leaves no process behind.
#[derive(Debug)]
pub struct GroupGuard(Option<ProcessGroup>);

impl GroupGuard {
    /// Guards `group` (`None`: nothing to guard).
    #[must_use]
    pub fn new(group: Option<ProcessGroup>) -> Self {
        GroupGuard(group)
    }

    /// Stops guarding: the drop kills nothing.
    pub fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(group) = self.0.take() {
            group.kill();
        }
    }
}

/// `argv` as a command to start: `argv[0]` looked up in `PATH`, run
/// without a shell; `None` for an empty argv.
#[must_use]
pub fn command<S: AsRef<std::ffi::OsStr>>(argv: &[S]) -> Option<Command> {
    let (program, args) = argv.split_first()?;
    let mut cmd = Command::new(program);
    cmd.args(args);
    Some(cmd)
}

/// Starts `cmd` as the leader of a new process group, inside `task`'s
/// cgroups and pinned to `pool` from its first instruction ([`spawn_in`]).
///
/// # Errors
/// [`HostError`] as [`spawn_in`] says.
pub fn spawn_group(
    cmd: &mut Command,
    task: Option<&dyn TaskCgroup>,
    pool: Option<&CpuMask>,
) -> Result<(Child, ProcessGroup), HostError> {
    cmd.process_group(0);
    let child = spawn_in(cmd, task, pool)?;
    let group = ProcessGroup::led_by(child.id())
        .ok_or_else(|| HostError::Unsupported(format!("pid {} out of range", child.id())))?;
    Ok((child, group))
}

/// A task's peak memory: its cgroup's high-water mark where it has one
/// (every process of the task, the none backend's summed RSS included),
/// else the reaped leader's `ru_maxrss`.
#[must_use]
pub fn peak(task: Option<&dyn TaskCgroup>, exit: Option<&ChildExit>) -> Option<u64> {
    task.and_then(|t| t.memory_peak().ok().flatten()).or_else(|| exit.map(|e| e.max_rss))
}

#[cfg(test)]
mod tests {
    use std::io::Read as _;
    use std::time::Duration;

    use super::*;
    use crate::spawn::{ExitWatch, wait_child};

    /// A group's helpers die with it: `sh` starts a `sleep` of its own,
    /// and killing the group ends both (the pipe's writer side closes only
    /// when every holder is gone).
    #[test]
    fn killing_the_group_ends_the_whole_tree() {
        let mut cmd = command(&["sh", "-c", "sleep 600 & echo started; wait"]).unwrap();
        Output::Capture.apply(&mut cmd).unwrap();
        let (mut child, group) = spawn_group(&mut cmd, None, None).unwrap();
        assert_eq!(group.id(), child.id());
        let mut out = child.stdout.take().unwrap();
        let mut first = [0u8; 8];
        out.read_exact(&mut first).unwrap();
        assert_eq!(&first, b"started\n");
        let watch = ExitWatch::new(child.id()).unwrap();
        assert!(!watch.exited_within(Duration::from_millis(10)), "it waits for its sleep");
        assert!(group.signal(Signal::SIGKILL).unwrap());
        let mut rest = Vec::new();
        out.read_to_end(&mut rest).unwrap(); // EOF: the sleep is gone too
        assert!(watch.exited_within(Duration::from_secs(30)));
        let exit = wait_child(child).unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(exit.status.signal(), Some(9));
        assert_eq!(peak(None, Some(&exit)), Some(exit.max_rss));
        // The orphaned sleep is init's to reap here (the test is no
        // subreaper): nothing of ours is left, so this returns at once.
        group.kill_and_reap();
    }

    #[test]
    fn a_guard_kills_unless_disarmed_and_argv_needs_a_program() {
        let mut cmd = command(&["sleep", "600"]).unwrap();
        Output::Null.apply(&mut cmd).unwrap();
        let (child, group) = spawn_group(&mut cmd, None, None).unwrap();
        drop(GroupGuard::new(Some(group)));
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(wait_child(child).unwrap().status.signal(), Some(9));
        let (child, group) = spawn_group(&mut command(&["true"]).unwrap(), None, None).unwrap();
        let mut guard = GroupGuard::new(Some(group));
        guard.disarm();
        assert!(wait_child(child).unwrap().status.success());
        drop(guard);
        assert!(command::<&str>(&[]).is_none());
        assert!(ProcessGroup::led_by(0).is_none() && ProcessGroup::led_by(u32::MAX).is_none());
    }
}
