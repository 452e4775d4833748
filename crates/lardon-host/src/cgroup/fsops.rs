//! Filesystem helpers for cgroups: the [`CgroupFs`] seam the v2 set-up
//! writes through (so fixture trees can refuse a write the way cgroupfs
//! does), and the event-driven waits of task teardown — none of them
//! sleeps a fixed time.

use std::fmt;
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::{AccessFlags, Pid, access};

use super::files::{parse_counter, parse_keyed};
use crate::error::HostError;
use crate::parse::ParseError;

/// How long teardown waits for killed processes to go before giving up.
const TEARDOWN_DEADLINE: Duration = Duration::from_secs(2);

/// The filesystem operations of the cgroup v2 set-up (leaf move and
/// controller enabling). [`RealFs`] is the host; tests put a fixture tree
/// behind it that refuses a write (`EBUSY`) where the kernel would.
pub trait CgroupFs: Send + Sync + fmt::Debug {
    /// Reads a whole interface file.
    ///
    /// # Errors
    /// The I/O error, unchanged.
    fn read(&self, path: &Path) -> io::Result<String>;

    /// Writes `value` to an interface file in one `write(2)`.
    ///
    /// # Errors
    /// The I/O error, unchanged (cgroupfs answers `EBUSY`, `EINVAL`,
    /// `ENOENT` … through it).
    fn write(&self, path: &Path, value: &str) -> io::Result<()>;

    /// Creates one cgroup directory.
    ///
    /// # Errors
    /// The I/O error, unchanged (`AlreadyExists` included).
    fn create_dir(&self, path: &Path) -> io::Result<()>;

    /// Removes one (empty) cgroup directory.
    ///
    /// # Errors
    /// The I/O error, unchanged (`EBUSY` while processes remain).
    fn remove_dir(&self, path: &Path) -> io::Result<()>;

    /// Whether a file or directory exists.
    fn exists(&self, path: &Path) -> bool;

    /// Whether we may create sub-cgroups in `dir` and write its files.
    fn writable(&self, dir: &Path) -> bool;
}

/// The host's filesystem.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealFs;

impl CgroupFs for RealFs {
    fn read(&self, path: &Path) -> io::Result<String> {
        crate::read_pseudo(path)
    }

    fn write(&self, path: &Path, value: &str) -> io::Result<()> {
        std::fs::write(path, value)
    }

    fn create_dir(&self, path: &Path) -> io::Result<()> {
        std::fs::create_dir(path)
    }

    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_dir(path)
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn writable(&self, dir: &Path) -> bool {
        writable(dir)
    }
}

/// Whether we may create sub-cgroups in `dir`.
pub(crate) fn writable(dir: &Path) -> bool {
    access(dir, AccessFlags::W_OK).is_ok()
}

pub(crate) fn write(path: &Path, value: &str) -> Result<(), HostError> {
    std::fs::write(path, value).map_err(|e| HostError::io("write", path, e))
}

pub(crate) fn read(path: &Path) -> Result<String, HostError> {
    crate::read_pseudo(path).map_err(|e| HostError::io("read", path, e))
}

pub(crate) fn parsed<T>(path: &Path, f: impl FnOnce(&str) -> Result<T, ParseError>) -> Result<T, HostError> {
    f(&read(path)?).map_err(|source| HostError::Parse { path: path.to_path_buf(), source })
}

pub(crate) fn counter(path: &Path) -> Result<u64, HostError> {
    parsed(path, |t| parse_counter("counter", t))
}

/// The pids listed in a `cgroup.procs` file.
pub(crate) fn procs(dir: &Path) -> Result<Vec<i32>, HostError> {
    let path = dir.join("cgroup.procs");
    parsed(&path, |t| {
        t.lines()
            .map(|l| {
                let n = crate::parse::parse_u64("pid", l)?;
                i32::try_from(n).map_err(|_| ParseError::Overflow("pid".to_owned()))
            })
            .collect()
    })
}

/// Waits until process `pid` has exited (it may stay a zombie), or until
/// `deadline`. A pidfd becomes readable at exit, so this blocks in
/// `poll(2)` instead of sleeping; a pid already gone returns at once.
pub(crate) fn wait_gone(pid: i32, deadline: Instant) {
    let Some(raw) = rustix::process::Pid::from_raw(pid) else { return };
    let fd = match rustix::process::pidfd_open(raw, rustix::process::PidfdFlags::empty()) {
        Ok(fd) => fd,
        // ESRCH: already gone. Anything else (a kernel before 5.3): the
        // caller's re-check of the group bounds the wait instead.
        Err(_) => return,
    };
    poll_readable(&fd, deadline);
}

/// Blocks until `fd` is readable or `deadline` passes (EINTR retried).
fn poll_readable(fd: &OwnedFd, deadline: Instant) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        let timeout = Timespec {
            tv_sec: i64::try_from(left.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(left.subsec_nanos()),
        };
        let mut fds = [PollFd::new(fd, PollFlags::IN)];
        match poll(&mut fds, Some(&timeout)) {
            Ok(n) if n > 0 => return true,
            Ok(_) => return false,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return false,
        }
    }
}

/// SIGKILLs every process listed in `dir/cgroup.procs` until it is empty
/// (processes may fork while we kill), for at most two seconds. The common
/// case — nothing left — reads the file once and returns; otherwise each
/// killed process is waited for through its pidfd, never a fixed sleep.
pub(crate) fn kill_procs(dir: &Path) -> Result<(), HostError> {
    let deadline = Instant::now() + TEARDOWN_DEADLINE;
    // Never ourselves: a daemon thread steps into a v1 task cgroup for the
    // length of a spawn (`spawn_in`), and one stuck there must not get
    // the daemon killed (the cgroup's rmdir fails instead, saying so).
    let me = i32::try_from(std::process::id()).unwrap_or(0);
    loop {
        let pids: Vec<i32> = procs(dir)?.into_iter().filter(|&p| p != me).collect();
        if pids.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(HostError::Unsupported(format!("processes remain in {}", dir.display())));
        }
        for &pid in &pids {
            // ESRCH: it died meanwhile, which is what we want.
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        for &pid in &pids {
            wait_gone(pid, deadline);
        }
    }
}

/// Whether a v2 cgroup holds a live process (`populated` in
/// `cgroup.events`, which counts the subtree).
fn populated(dir: &Path) -> Result<bool, HostError> {
    parsed(&dir.join("cgroup.events"), |t| parse_keyed(t, "populated")).map(|n| n > 0)
}

/// Waits until `cgroup.events` says `populated 0`, for at most `deadline`.
/// The kernel signals a change of that file as an inotify modify event, so
/// the wait blocks on the inotify descriptor; the file is read again after
/// the watch is set, so a change between the two is not missed.
pub(crate) fn wait_unpopulated(dir: &Path, deadline: Instant) -> Result<(), HostError> {
    use rustix::fs::inotify;
    let events = dir.join("cgroup.events");
    let fd = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK)
        .map_err(|e| HostError::io("inotify_init for", &events, e.into()))?;
    inotify::add_watch(&fd, &events, inotify::WatchFlags::MODIFY)
        .map_err(|e| HostError::io("inotify_add_watch", &events, e.into()))?;
    loop {
        if !populated(dir)? {
            return Ok(());
        }
        if !poll_readable(&fd, deadline) {
            return Err(HostError::Unsupported(format!("processes remain in {}", dir.display())));
        }
        // Drain the queued events; the loop re-reads the file itself.
        let mut buf = [0u8; 1024];
        while rustix::io::read(&fd, &mut buf).is_ok_and(|n| n > 0) {}
    }
}

/// Removes a cgroup directory whose processes are gone. A missing
/// directory is fine. `EBUSY` right after the last process left (the
/// kernel still finishing its exit) is retried with a growing back-off
/// from 50 µs, for at most two seconds; the common case removes at once.
pub(crate) fn rmdir(dir: &Path) -> Result<(), HostError> {
    rmdir_with(&RealFs, dir)
}

/// [`rmdir`] through `fs`.
pub(crate) fn rmdir_with(fs: &dyn CgroupFs, dir: &Path) -> Result<(), HostError> {
    let deadline = Instant::now() + TEARDOWN_DEADLINE;
    let mut backoff = Duration::from_micros(50);
    loop {
        match fs.remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline => {
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_millis(20));
            }
            Err(e) => return Err(HostError::io("rmdir", dir, e)),
        }
    }
}

/// Removes a cgroup directory if it holds no process: `Ok(true)` when it
/// is gone (or was missing), `Ok(false)` when the kernel says it is busy
/// (a process, or one still finishing its exit, is in it).
pub(crate) fn rmdir_if_empty(dir: &Path) -> Result<bool, HostError> {
    match std::fs::remove_dir(dir) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Ok(false),
        Err(e) => Err(HostError::io("rmdir", dir, e)),
    }
}

/// Creates a cgroup directory; a leftover of the same name (from a crash)
/// is emptied and recreated so its counters start from zero.
pub(crate) fn mkdir(dir: &Path) -> Result<(), HostError> {
    match std::fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            kill_procs(dir)?;
            rmdir(dir)?;
            std::fs::create_dir(dir).map_err(|e| HostError::io("mkdir", dir, e))
        }
        Err(e) => Err(HostError::io("mkdir", dir, e)),
    }
}
