//! One daemon per state dir: an exclusive `flock` on `<state dir>/lardon.lock`
//! holding the owner's pid (so the refusal can name it).

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

use crate::DaemonError;

/// File name of the lock inside the state dir.
pub const LOCK_FILE: &str = "lardon.lock";

/// The held lock; released when dropped (or when the process dies, so a
/// kill -9 never leaves a stale lock behind).
#[derive(Debug)]
pub(crate) struct StateLock {
    _lock: Flock<File>,
}

impl StateLock {
    /// Takes the lock or explains who holds it.
    pub(crate) fn acquire(state_dir: &Path) -> Result<StateLock, DaemonError> {
        let path = state_dir.join(LOCK_FILE);
        let io = |source| DaemonError::Io { what: "open the lock file", path: path.clone(), source };
        let file =
            OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path).map_err(io)?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(mut lock) => {
                // Record our pid for the next contender's error message.
                let _ = lock.set_len(0);
                let _ = lock.seek(SeekFrom::Start(0));
                let _ = writeln!(lock, "{}", std::process::id());
                let _ = lock.sync_data();
                Ok(StateLock { _lock: lock })
            }
            Err((mut file, _)) => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                Err(DaemonError::AlreadyRunning {
                    state_dir: state_dir.to_path_buf(),
                    pid: text.trim().parse().ok(),
                })
            }
        }
    }
}

/// The lock file of `state_dir`.
pub fn lock_path(state_dir: &Path) -> PathBuf {
    state_dir.join(LOCK_FILE)
}
