//! Starting and reaping task processes: into a task cgroup and the compute
//! pool before `exec`, and `wait4` for `ru_maxrss`.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus};

use nix::sched::{CpuSet, sched_setaffinity};
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

/// Spawns `cmd` so that, before `exec`, the child writes itself into every
/// `cgroup.procs` of `task` and pins itself to `pool`. Nothing it allocates
/// escapes the task's limit, and every thread it starts inherits the pool.
///
/// # Errors
/// [`HostError`] when a procs file cannot be opened, the CPU set is
/// invalid, or the spawn fails (including the child's own setup).
pub fn spawn_in(
    cmd: &mut Command,
    task: Option<&dyn TaskCgroup>,
    pool: Option<&CpuMask>,
) -> Result<Child, HostError> {
    let files: Vec<File> = task
        .map(|t| t.procs_files())
        .unwrap_or_default()
        .into_iter()
        .map(|p| OpenOptions::new().write(true).open(&p).map_err(|e| HostError::io("open", p, e)))
        .collect::<Result<_, _>>()?;
    let cpus: Option<CpuSet> = pool.map(CpuMask::to_cpuset).transpose()?;
    install_pre_exec(cmd, files, cpus);
    cmd.spawn().map_err(|e| HostError::io("spawn", cmd.get_program(), e))
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
