//! Starting and reaping task processes: into a task cgroup and the compute
//! pool from their first instruction, and `wait4` for `ru_maxrss`.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus};

use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::unistd::Pid;

use crate::cgroup::TaskCgroup;
use crate::error::HostError;
use crate::topology::CpuMask;

/// How a reaped child ended, with its peak RSS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChildExit {
    /// The wait status.
    pub status: ExitStatus,
    /// `ru_maxrss` of the child (the largest RSS of the process itself, not
    /// of its own children), in bytes.
    pub max_rss: u64,
}

/// Spawns `cmd` so that it starts inside every cgroup of `task` and pinned
/// to `pool`: nothing it allocates escapes the task's limit, and every
/// thread it starts inherits the pool.
///
/// Where the backend can move a single thread (cgroup v1's `tasks` files,
/// [`TaskCgroup::thread_moves`]), the calling thread steps into the task's
/// cgroups and onto the pool, spawns, and steps back: the child inherits
/// both from the thread that created it, and `cmd` needs no pre-`exec`
/// hook, so the standard library starts it with `posix_spawn` (a
/// `CLONE_VM | CLONE_VFORK` child) instead of `fork`. A `fork` of the
/// daemon copies its page tables and turns every page its other threads
/// then write into a copy-on-write fault with a TLB shoot-down: measured
/// on the launch benchmark, about a third of the daemon's CPU per task.
/// Elsewhere (cgroup v2, whose domain cgroups take whole processes only)
/// the child writes itself into the cgroups and pins itself between
/// `fork` and `exec`.
///
/// # Errors
/// [`HostError`] when a procs or tasks file cannot be opened or written,
/// the CPU set is invalid, or the spawn fails (including the child's own
/// setup).
pub fn spawn_in(
    cmd: &mut Command,
    task: Option<&dyn TaskCgroup>,
    pool: Option<&CpuMask>,
) -> Result<Child, HostError> {
    let cpus: Option<CpuSet> = pool.map(CpuMask::to_cpuset).transpose()?;
    if let Some(moves) = task.and_then(TaskCgroup::thread_moves) {
        return spawn_from_inside(cmd, &moves, cpus.as_ref());
    }
    let files: Vec<File> = task
        .map(|t| t.procs_files())
        .unwrap_or_default()
        .into_iter()
        .map(|p| OpenOptions::new().write(true).open(&p).map_err(|e| HostError::io("open", p, e)))
        .collect::<Result<_, _>>()?;
    install_pre_exec(cmd, files, cpus);
    cmd.spawn().map_err(|e| HostError::io("spawn", cmd.get_program(), e))
}

/// [`spawn_in`] for a backend that moves threads: `moves` holds, per
/// hierarchy, the task cgroup's `tasks` file and the one this thread
/// returns to.
fn spawn_from_inside(
    cmd: &mut Command,
    moves: &[(PathBuf, PathBuf)],
    cpus: Option<&CpuSet>,
) -> Result<Child, HostError> {
    let open = |p: &PathBuf| OpenOptions::new().write(true).open(p).map_err(|e| HostError::io("open", p, e));
    // Everything that can fail before the first move is done first.
    let files: Vec<(File, File, &PathBuf)> =
        moves.iter().map(|(into, home)| Ok((open(into)?, open(home)?, home))).collect::<Result<_, _>>()?;
    let tid = nix::unistd::gettid().as_raw().to_string();
    let _pinned = match cpus {
        Some(set) => Some(Pinned::new(set)?),
        None => None,
    };
    let mut inside = Inside { tid: &tid, joined: Vec::with_capacity(files.len()) };
    for (into, home, home_path) in files {
        (&into).write_all(tid.as_bytes()).map_err(|e| HostError::io("join", &moves[0].0, e))?;
        inside.joined.push((home, home_path));
    }
    let child = cmd.spawn().map_err(|e| HostError::io("spawn", cmd.get_program(), e));
    inside.leave()?;
    child
}

/// The calling thread inside a task's cgroups: [`Inside::leave`] (or the
/// drop, on an error path) moves it back home.
struct Inside<'a> {
    tid: &'a str,
    /// The home `tasks` files of the hierarchies joined so far.
    joined: Vec<(File, &'a PathBuf)>,
}

impl Inside<'_> {
    /// Moves the thread back into every home cgroup; the first failure is
    /// reported (the rest are still tried).
    fn leave(&mut self) -> Result<(), HostError> {
        let mut result = Ok(());
        for (home, path) in self.joined.drain(..) {
            if let Err(e) = (&home).write_all(self.tid.as_bytes())
                && result.is_ok()
            {
                result = Err(HostError::io("return to", path, e));
            }
        }
        result
    }
}

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        let _ = self.leave();
    }
}

/// The calling thread pinned to a CPU set; its former affinity is put
/// back on drop.
struct Pinned(CpuSet);

impl Pinned {
    fn new(set: &CpuSet) -> Result<Pinned, HostError> {
        let me = Pid::from_raw(0);
        let before = sched_getaffinity(me).map_err(|e| HostError::sys("sched_getaffinity", e))?;
        sched_setaffinity(me, set).map_err(|e| HostError::sys("sched_setaffinity", e))?;
        Ok(Pinned(before))
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        let _ = sched_setaffinity(Pid::from_raw(0), &self.0);
    }
}

#[allow(unsafe_code)]
fn install_pre_exec(cmd: &mut Command, files: Vec<File>, cpus: Option<CpuSet>) {
    let hook = move || -> std::io::Result<()> {
        for mut f in &files {
            // "0" is "the writing process"; no allocation after fork.
            f.write_all(b"0")?;
        }
        if let Some(set) = &cpus {
            sched_setaffinity(Pid::from_raw(0), set).map_err(std::io::Error::from)?;
        }
        Ok(())
    };
    // SAFETY: the hook runs between fork and exec. It only calls write(2)
    // on already-open descriptors and sched_setaffinity(2), both
    // async-signal-safe; it allocates nothing and takes no lock (the
    // captured Vec and CpuSet were built before fork and are only read).
    unsafe {
        cmd.pre_exec(hook);
    }
}

/// A child's exit as a descriptor (a pidfd) that one thread can wait on
/// with a timeout: the runner waits for its command and wakes on its usage
/// sampling period on the same thread, with no helper thread per run.
#[derive(Debug)]
pub struct ExitWatch(std::os::fd::OwnedFd);

impl ExitWatch {
    /// Watches process `pid` (our child, not yet reaped).
    ///
    /// # Errors
    /// [`HostError::Sys`] when the kernel offers no pidfd (before Linux
    /// 5.3) or the pid is out of range.
    pub fn new(pid: u32) -> Result<ExitWatch, HostError> {
        let raw = i32::try_from(pid)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
            .ok_or_else(|| HostError::Unsupported(format!("pid {pid} out of range")))?;
        rustix::process::pidfd_open(raw, rustix::process::PidfdFlags::empty())
            .map(ExitWatch)
            .map_err(|e| HostError::sys("pidfd_open", nix::Error::from_raw(e.raw_os_error())))
    }

    /// The pidfd itself, for a caller that waits on it in its own event
    /// loop (an async runtime): it turns readable when the process exits.
    #[must_use]
    pub fn into_fd(self) -> std::os::fd::OwnedFd {
        self.0
    }

    /// Blocks until the process has exited (`true`: reaping it no longer
    /// blocks) or `timeout` has passed (`false`). A failing `poll(2)` says
    /// `true`, so the caller goes on to a blocking reap rather than spin.
    pub fn exited_within(&self, timeout: std::time::Duration) -> bool {
        use rustix::event::{PollFd, PollFlags, Timespec, poll};
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let wait = Timespec {
                tv_sec: i64::try_from(left.as_secs()).unwrap_or(i64::MAX),
                tv_nsec: i64::from(left.subsec_nanos()),
            };
            let mut fds = [PollFd::new(&self.0, PollFlags::IN)];
            match poll(&mut fds, Some(&wait)) {
                Ok(0) => return false,
                Err(rustix::io::Errno::INTR) => {}
                Ok(_) | Err(_) => return true,
            }
        }
    }
}

/// Reaps `child` with `wait4(2)` and returns its status and `ru_maxrss`.
/// Blocks until it exits. Take any piped `stdin`/`stdout`/`stderr` out of
/// `child` first: they are closed when `child` is consumed.
///
/// # Errors
/// [`HostError::Sys`] when `wait4` fails.
#[allow(unsafe_code)]
pub fn wait_child(child: Child) -> Result<ChildExit, HostError> {
    let pid = libc::pid_t::try_from(child.id())
        .map_err(|_| HostError::Unsupported(format!("pid {} out of range", child.id())))?;
    let mut status: libc::c_int = 0;
    loop {
        // SAFETY: an all-zero rusage is a valid value of this plain C struct.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `status` and `usage` are valid, exclusive pointers for the
        // duration of the call; `pid` is our own unreaped child (we own
        // `child`, and std never reaps implicitly).
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if r == pid {
            let kib = u64::try_from(usage.ru_maxrss).unwrap_or(0);
            return Ok(ChildExit { status: ExitStatus::from_raw(status), max_rss: kib.saturating_mul(1024) });
        }
        let err = nix::Error::last();
        if err != nix::Error::EINTR {
            return Err(HostError::sys("wait4", err));
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    use std::time::Duration;

    use super::{ExitWatch, wait_child};

    /// A live child times out; the same child, once its stdin closes and it
    /// exits, is reported at once and reaps without blocking.
    #[test]
    fn exit_watch_times_out_while_alive_and_fires_at_exit() {
        let mut child = Command::new("cat")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("cat must be installed");
        let watch = ExitWatch::new(child.id()).expect("a pidfd (Linux >= 5.3)");
        assert!(!watch.exited_within(Duration::from_millis(20)), "cat waits for its stdin");
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"x").unwrap();
        drop(stdin);
        assert!(watch.exited_within(Duration::from_secs(30)), "cat ends at the end of its input");
        assert!(wait_child(child).unwrap().status.success());
    }
}
