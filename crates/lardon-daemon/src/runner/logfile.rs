//! Task log files without a new inode per run: a run whose log stayed
//! empty gives its file back to a small pool of spare empty files
//! (`logs/.spare/`), and the next run takes one by renaming it to its own
//! log's name instead of creating a file.
//!
//! Why: creating a file allocates an inode, and on a journal-less ext4
//! (this build machine's `/tmp`) the allocator scans past every recently
//! freed inode of the directory's group (`find_inode_bit` →
//! `recently_deleted`), one buffer-cache lookup each: measured on the
//! launch benchmark, the `open` that created each task's log was about 40 %
//! of the daemon's CPU per `true` (0.28 ms of 0.7 ms), and nothing with the
//! logs on tmpfs. A rename allocates nothing.
//!
//! What it guarantees:
//! * a log with output is never touched: only a file of length 0 is given
//!   back, and only once no process of its run can still hold it (the
//!   caller says so: the run's cgroup was emptied and removed);
//! * a run never gets a file with someone else's bytes: a spare is taken
//!   with `RENAME_NOREPLACE` (an existing log, e.g. a restarted task's, is
//!   appended to as before) and must still be empty once open, else it is
//!   left where it is and a new file is created;
//! * no reader sees another task's output through a recycled file: a log
//!   is given back only while no `Log` stream is open ([`LogFiles::reader`]
//!   holds the gate), so a reader that opens it later finds no file (an
//!   empty log, as before) rather than the next run's output;
//! * at most [`MAX_SPARES`] spares exist; past that an empty log stays
//!   where it is, as before.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use nix::errno::Errno;
use nix::fcntl::{AT_FDCWD, RenameFlags, renameat2};

/// Spare empty files kept at most (a few per worker is plenty: a run takes
/// one and gives one back).
const MAX_SPARES: usize = 64;

/// The directory of spares, inside the logs directory.
pub const SPARE_DIR: &str = ".spare";

/// The log files of one daemon: where runs open their logs and give empty
/// ones back. See the module docs.
#[derive(Debug)]
pub struct LogFiles {
    spare_dir: PathBuf,
    state: Mutex<Spares>,
    next_name: AtomicU64,
}

#[derive(Debug, Default)]
struct Spares {
    /// Names of empty files in the spare directory.
    files: Vec<PathBuf>,
    /// Open `Log` streams: none may be open while a log is given back.
    readers: usize,
}

impl LogFiles {
    /// The pool of `logs_dir`: creates its spare directory and takes the
    /// spares a previous daemon left (each is checked again when taken).
    ///
    /// # Errors
    /// The spare directory cannot be created or read.
    pub fn new(logs_dir: &Path) -> io::Result<LogFiles> {
        let spare_dir = logs_dir.join(SPARE_DIR);
        std::fs::create_dir_all(&spare_dir)?;
        // A log compaction a crash interrupted left its new file; the log
        // it was made from is intact (the rename never happened).
        for entry in std::fs::read_dir(logs_dir)?.flatten() {
            if super::logcap::is_temp(&entry.file_name().to_string_lossy()) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        let files: Vec<PathBuf> = std::fs::read_dir(&spare_dir)?
            .filter_map(Result::ok)
            .filter(|e| e.metadata().is_ok_and(|m| m.is_file() && m.len() == 0))
            .map(|e| e.path())
            .take(MAX_SPARES)
            .collect();
        Ok(LogFiles {
            spare_dir,
            state: Mutex::new(Spares { files, readers: 0 }),
            next_name: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Spares> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Opens `path` for appending, creating it if needed: from a spare when
    /// one is there and `path` does not exist yet.
    ///
    /// # Errors
    /// The file cannot be opened or created.
    pub fn open(&self, path: &Path) -> io::Result<File> {
        let spare = self.lock().files.pop();
        if let Some(spare) = spare {
            match renameat2(AT_FDCWD, &spare, AT_FDCWD, path, RenameFlags::RENAME_NOREPLACE) {
                Ok(()) => {
                    let file = OpenOptions::new().append(true).open(path)?;
                    if file.metadata()?.len() == 0 {
                        return Ok(file);
                    }
                    // Written to since it was given back (a process that
                    // outlived its run after all): none of it may reach
                    // this run's log. It goes back under its spare name,
                    // out of the pool, and a new file is created.
                    drop(file);
                    tracing::warn!("spare log file {} was not empty; not used", spare.display());
                    std::fs::rename(path, &spare)?;
                }
                // The log exists (a restarted task appends): the spare stays.
                Err(Errno::EEXIST) => self.lock().files.push(spare),
                // Gone or unusable: forgotten.
                Err(_) => {}
            }
        }
        OpenOptions::new().create(true).append(true).open(path)
    }

    /// Gives `path` back as a spare when it is empty, no `Log` stream is
    /// open and the pool is not full. Call only once no process of the run
    /// that wrote it can still hold it open. Best effort: a log that is
    /// not given back stays where it is, as before. Returns the log's
    /// length as seen (`None`: no log), so a caller capping it needs no
    /// look of its own.
    pub fn give_back(&self, path: &Path) -> Option<u64> {
        let meta = std::fs::symlink_metadata(path).ok()?;
        if !meta.is_file() || meta.len() > 0 {
            return Some(meta.len());
        }
        let mut state = self.lock();
        if state.readers > 0 || state.files.len() >= MAX_SPARES {
            return Some(0);
        }
        let n = self.next_name.fetch_add(1, Ordering::Relaxed);
        let spare = self.spare_dir.join(format!("{}-{n}", std::process::id()));
        // Under the lock: no reader can open the log between the checks
        // and the rename.
        if renameat2(AT_FDCWD, path, AT_FDCWD, &spare, RenameFlags::RENAME_NOREPLACE).is_ok() {
            state.files.push(spare);
        }
        Some(0)
    }

    /// Registers a reader of logs: while the guard lives, no log is given
    /// back, so a file the reader opens stays that task's.
    pub fn reader(self: &Arc<Self>) -> LogReader {
        self.lock().readers += 1;
        LogReader(Arc::clone(self))
    }
}

/// An open `Log` stream (see [`LogFiles::reader`]); unregisters on drop.
#[derive(Debug)]
pub struct LogReader(Arc<LogFiles>);

impl Drop for LogReader {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.readers = state.readers.saturating_sub(1);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::io::Write as _;
    use std::os::unix::fs::MetadataExt as _;

    use super::*;

    fn pool() -> (tempfile::TempDir, Arc<LogFiles>) {
        let dir = tempfile::tempdir().unwrap();
        let logs = LogFiles::new(dir.path()).unwrap();
        (dir, Arc::new(logs))
    }

    #[test]
    fn an_empty_log_is_reused_and_a_written_one_is_kept() {
        let (dir, logs) = pool();
        let (a, b, c) = (dir.path().join("1.log"), dir.path().join("2.log"), dir.path().join("3.log"));
        let ino = logs.open(&a).unwrap().metadata().unwrap().ino();
        let _ = logs.give_back(&a);
        assert!(!a.exists(), "an empty log is taken away");
        let mut file = logs.open(&b).unwrap();
        assert_eq!(file.metadata().unwrap().ino(), ino, "the next run gets the same inode");
        file.write_all(b"out\n").unwrap();
        let _ = logs.give_back(&b);
        assert_eq!(std::fs::read_to_string(&b).unwrap(), "out\n", "a log with output stays");
        assert_ne!(logs.open(&c).unwrap().metadata().unwrap().ino(), ino);
    }

    #[test]
    fn an_existing_log_is_appended_to_not_replaced() {
        let (dir, logs) = pool();
        let (a, b) = (dir.path().join("1.log"), dir.path().join("2.log"));
        logs.open(&a).unwrap();
        let _ = logs.give_back(&a);
        std::fs::write(&b, "first attempt\n").unwrap();
        logs.open(&b).unwrap().write_all(b"second\n").unwrap();
        assert_eq!(std::fs::read_to_string(&b).unwrap(), "first attempt\nsecond\n");
        assert_eq!(logs.lock().files.len(), 1, "the spare stays in the pool");
    }

    #[test]
    fn a_spare_written_to_after_it_was_given_back_is_not_used() {
        let (dir, logs) = pool();
        let (a, b) = (dir.path().join("1.log"), dir.path().join("2.log"));
        let mut stray = logs.open(&a).unwrap();
        let _ = logs.give_back(&a);
        stray.write_all(b"late output of run 1\n").unwrap();
        let mut file = logs.open(&b).unwrap();
        file.write_all(b"run 2\n").unwrap();
        assert_eq!(std::fs::read_to_string(&b).unwrap(), "run 2\n");
        assert!(logs.lock().files.is_empty(), "the written spare left the pool");
    }

    #[test]
    fn a_compaction_left_by_a_crash_is_removed_at_start() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(".7.log.capping"), "half").unwrap();
        std::fs::write(dir.path().join("7.log"), "whole").unwrap();
        LogFiles::new(dir.path()).unwrap();
        assert!(!dir.path().join(".7.log.capping").exists());
        assert_eq!(std::fs::read_to_string(dir.path().join("7.log")).unwrap(), "whole");
    }

    #[test]
    fn nothing_is_given_back_while_a_reader_is_open() {
        let (dir, logs) = pool();
        let a = dir.path().join("1.log");
        logs.open(&a).unwrap();
        let reader = logs.reader();
        let _ = logs.give_back(&a);
        assert!(a.exists(), "a reader may have it open");
        drop(reader);
        let _ = logs.give_back(&a);
        assert!(!a.exists());
    }

    #[test]
    fn spares_left_by_a_previous_daemon_are_used_and_the_pool_is_bounded() {
        let (dir, logs) = pool();
        for i in 0..(MAX_SPARES + 3) {
            let p = dir.path().join(format!("{i}.log"));
            File::create(&p).unwrap();
            let _ = logs.give_back(&p);
        }
        assert_eq!(logs.lock().files.len(), MAX_SPARES);
        assert!(dir.path().join(format!("{}.log", MAX_SPARES)).exists(), "past the bound it stays");
        let again = LogFiles::new(dir.path()).unwrap();
        assert_eq!(again.lock().files.len(), MAX_SPARES);
        let p = dir.path().join("next.log");
        again.open(&p).unwrap();
        assert_eq!(std::fs::read_dir(dir.path().join(SPARE_DIR)).unwrap().count(), MAX_SPARES - 1);
    }
}
