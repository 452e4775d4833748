//! The daemon's log file, size-bounded: past `max_bytes` it is renamed to
//! `daemon.log.1` (the older ones moving to `.2` … `.KEEP`, the oldest
//! removed) and a new one started, so the daemon's log never takes more
//! than about `(KEEP + 1) × max_bytes`. A line is never split across two
//! files: a file is rotated before the line that would take it past the
//! size (a single line larger than the size gets a file of its own).
//!
//! Our own small writer: `tracing-appender` rotates by time only, and a
//! size rotation is a rename chain and a counter.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use tracing_subscriber::fmt::MakeWriter;

/// What rotation keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rotation {
    /// The size past which the file is rotated; 0: never rotated.
    pub(crate) max_bytes: u64,
    /// Rotated files kept (`.1` … `.keep`); 0: the file is emptied instead.
    pub(crate) keep: u32,
}

/// The default size: 16 MiB.
pub(crate) const DEFAULT_MAX_BYTES: u64 = 16 << 20;
/// The default count of rotated files.
pub(crate) const DEFAULT_KEEP: u32 = 4;

impl Default for Rotation {
    fn default() -> Self {
        Rotation { max_bytes: DEFAULT_MAX_BYTES, keep: DEFAULT_KEEP }
    }
}

#[derive(Debug)]
struct Current {
    file: File,
    len: u64,
}

/// A log file appended to and rotated by size (see the module docs).
#[derive(Debug)]
pub(crate) struct RotatingFile {
    path: PathBuf,
    rotation: Rotation,
    current: Mutex<Current>,
}

fn open(path: &Path) -> io::Result<Current> {
    let file = OpenOptions::new().create(true).append(true).open(path)?;
    let len = file.metadata()?.len();
    Ok(Current { file, len })
}

/// `path` with `.n` appended.
fn numbered(path: &Path, n: u32) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{n}"));
    PathBuf::from(name)
}

impl RotatingFile {
    /// Opens (appends to) the log at `path`.
    ///
    /// # Errors
    /// The file cannot be opened.
    pub(crate) fn open(path: &Path, rotation: Rotation) -> io::Result<RotatingFile> {
        Ok(RotatingFile { path: path.to_owned(), rotation, current: Mutex::new(open(path)?) })
    }

    /// Moves `.1` … to `.2` …, the file to `.1`, and opens a new one.
    fn rotate(&self, current: &mut Current) -> io::Result<()> {
        if self.rotation.keep == 0 {
            current.file.set_len(0)?;
            current.len = 0;
            return Ok(());
        }
        let _ = std::fs::remove_file(numbered(&self.path, self.rotation.keep));
        for n in (1..self.rotation.keep).rev() {
            let from = numbered(&self.path, n);
            if from.exists() {
                std::fs::rename(&from, numbered(&self.path, n + 1))?;
            }
        }
        std::fs::rename(&self.path, numbered(&self.path, 1))?;
        *current = open(&self.path)?;
        Ok(())
    }

    fn write_line(&self, buf: &[u8]) -> io::Result<usize> {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        let max = self.rotation.max_bytes;
        if max > 0 && current.len > 0 && current.len + buf.len() as u64 > max {
            // A failed rotation must not lose the line: it goes to the
            // file as it is.
            if let Err(e) = self.rotate(&mut current) {
                let _ = writeln!(io::stderr(), "lardon: {}: not rotated: {e}", self.path.display());
            }
        }
        current.file.write_all(buf)?;
        current.len += buf.len() as u64;
        Ok(buf.len())
    }
}

/// One event's writer: `tracing`'s fmt layer writes each formatted event
/// with one `write_all`, so each write is a whole line.
#[derive(Debug)]
pub(crate) struct LineWriter<'a>(&'a RotatingFile);

impl Write for LineWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write_line(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for RotatingFile {
    type Writer = LineWriter<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        LineWriter(self)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn files_stay_under_the_size_and_only_keep_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("daemon.log");
        let log = RotatingFile::open(&path, Rotation { max_bytes: 100, keep: 2 }).unwrap();
        for i in 0..50 {
            log.make_writer().write_all(format!("line {i:02} of the log\n").as_bytes()).unwrap();
        }
        // 20 bytes a line: 5 lines a file.
        for p in [&path, &numbered(&path, 1), &numbered(&path, 2)] {
            let text = std::fs::read_to_string(p).unwrap();
            assert!(text.len() <= 100, "{}: {} bytes", p.display(), text.len());
            assert!(text.ends_with('\n'));
        }
        assert!(!numbered(&path, 3).exists(), "only two rotated files are kept");
        assert!(std::fs::read_to_string(&path).unwrap().ends_with("line 49 of the log\n"));
        assert!(std::fs::read_to_string(numbered(&path, 1)).unwrap().starts_with("line 40"));
        assert!(std::fs::read_to_string(numbered(&path, 2)).unwrap().starts_with("line 35"));
    }

    #[test]
    fn an_existing_file_counts_and_keep_zero_empties_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("daemon.log");
        std::fs::write(&path, "x".repeat(90)).unwrap();
        let log = RotatingFile::open(&path, Rotation { max_bytes: 100, keep: 0 }).unwrap();
        log.make_writer().write_all(b"a line of twenty b\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "a line of twenty b\n");
        assert!(!numbered(&path, 1).exists());
    }
}
