//! Small filesystem helpers for task cgroups.

use std::path::Path;
use std::thread::sleep;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::{AccessFlags, Pid, access};

use super::files::parse_counter;
use crate::error::HostError;
use crate::parse::ParseError;

/// Whether we may create sub-cgroups in `dir`.
pub(crate) fn writable(dir: &Path) -> bool {
    access(dir, AccessFlags::W_OK).is_ok()
}

pub(crate) fn write(path: &Path, value: &str) -> Result<(), HostError> {
    std::fs::write(path, value).map_err(|e| HostError::io("write", path, e))
}

pub(crate) fn read(path: &Path) -> Result<String, HostError> {
    std::fs::read_to_string(path).map_err(|e| HostError::io("read", path, e))
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

/// SIGKILLs every process listed in `dir/cgroup.procs` until it is empty
/// (processes may fork while we kill), for at most two seconds.
pub(crate) fn kill_procs(dir: &Path) -> Result<(), HostError> {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let pids = procs(dir)?;
        if pids.is_empty() {
            return Ok(());
        }
        for pid in pids {
            // ESRCH: it died meanwhile, which is what we want.
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        if Instant::now() > deadline {
            return Err(HostError::Unsupported(format!("processes remain in {}", dir.display())));
        }
        sleep(Duration::from_millis(5));
    }
}

/// Removes a cgroup directory, retrying while the kernel still reports it
/// busy (exiting processes), for at most two seconds. A missing directory
/// is fine.
pub(crate) fn rmdir(dir: &Path) -> Result<(), HostError> {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) if Instant::now() > deadline => return Err(HostError::io("rmdir", dir, e)),
            Err(_) => sleep(Duration::from_millis(10)),
        }
    }
}

/// Creates a cgroup directory; a leftover of the same name (from a crash)
/// is emptied and recreated so its counters start from zero.
pub(crate) fn mkdir(dir: &Path) -> Result<(), HostError> {
    match std::fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            kill_procs(dir)?;
            rmdir(dir)?;
            std::fs::create_dir(dir).map_err(|e| HostError::io("mkdir", dir, e))
        }
        Err(e) => Err(HostError::io("mkdir", dir, e)),
    }
}
