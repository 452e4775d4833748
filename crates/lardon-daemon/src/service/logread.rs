//! Reading a task's log for the `Log` stream: what a person should see,
//! which is not always the file's bytes. A log past its cap while its run
//! still writes has a hole over its middle (docs/DESIGN.md §10, log caps):
//! the reader skips it (`SEEK_DATA`/`SEEK_HOLE`) and shows one marker line,
//! `[lardon: N bytes dropped]`, instead of streaming its zeros. It also
//! finds where the last N lines start (`--tail N`) and stops after the
//! first N (`--head N`).
//!
//! Blocking calls: run it on a blocking thread.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt as _;
use std::path::Path;

use nix::errno::Errno;
use nix::unistd::{Whence, lseek};

use crate::runner::logcap::marker;

/// Where a reader starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Start {
    /// The first byte.
    Beginning,
    /// This many bytes before the end (`--tail-bytes`).
    TailBytes(u64),
    /// The last this many lines (`--tail`).
    TailLines(u64),
}

/// A position in one opened log file.
#[derive(Debug)]
pub(crate) struct LogCursor {
    file: File,
    offset: u64,
    /// Whether the last byte handed out ended a line (a marker for a hole
    /// then needs no newline before it).
    line_start: bool,
    /// Lines still to hand out (`--head`); `None`: no limit.
    lines_left: Option<u64>,
}

/// The extents of `file` that hold data, in order (`SEEK_DATA` /
/// `SEEK_HOLE`; a filesystem without them reports one extent, the file).
fn data_extents(file: &File, len: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut at = 0u64;
    while at < len {
        let Ok(from) = i64::try_from(at) else { break };
        let start = match lseek(file, from, Whence::SeekData) {
            Ok(d) => d.unsigned_abs(),
            // No data at or past `at`: a hole to the end.
            Err(Errno::ENXIO) => break,
            Err(_) => {
                out.push((at, len));
                break;
            }
        };
        let Ok(s) = i64::try_from(start) else { break };
        let end = lseek(file, s, Whence::SeekHole).map_or(len, |h| h.unsigned_abs()).min(len);
        if end <= start {
            break;
        }
        out.push((start, end));
        at = end;
    }
    out
}

/// Where the last `lines` lines of `file` start, as `tail -n` counts them
/// (a last line without its newline counts), and as the reader shows a
/// hole: the bytes before it end a line, and its marker is one line.
fn tail_start(file: &File, len: u64, lines: u64) -> io::Result<u64> {
    if lines == 0 {
        return Ok(len);
    }
    let extents = data_extents(file, len);
    let mut seen = 0u64;
    let mut buf = vec![0u8; 64 << 10];
    for (i, &(start, end)) in extents.iter().enumerate().rev() {
        // A newline that ends the extent starts nothing of its own: what
        // follows (the end, or a hole's marker) was counted already.
        let mut pos = end;
        while pos > start {
            let from = pos.saturating_sub(buf.len() as u64).max(start);
            let n = usize::try_from(pos - from).unwrap_or(0);
            file.read_exact_at(&mut buf[..n], from)?;
            for (j, b) in buf[..n].iter().enumerate().rev() {
                let at = from + j as u64;
                if *b == b'\n' && at + 1 < end {
                    seen += 1;
                    if seen == lines {
                        return Ok(at + 1);
                    }
                }
            }
            pos = from;
        }
        if start > 0 {
            // The extent's first line, then the marker of the hole before it.
            seen += 1;
            if seen == lines {
                return Ok(start);
            }
            seen += 1;
            if seen == lines {
                return Ok(if i > 0 { extents[i - 1].1 } else { 0 });
            }
        }
    }
    Ok(0)
}

impl LogCursor {
    /// Opens the log at `path` at `start`, handing out at most `head` lines
    /// (`None`: all). `Ok(None)`: no file yet.
    ///
    /// # Errors
    /// The file exists but cannot be opened or read.
    pub(crate) fn open(path: &Path, start: Start, head: Option<u64>) -> io::Result<Option<LogCursor>> {
        let file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let len = file.metadata()?.len();
        let offset = match start {
            Start::Beginning => 0,
            Start::TailBytes(n) => len.saturating_sub(n),
            Start::TailLines(n) => tail_start(&file, len, n)?,
        };
        // The last lines start a line (or at a hole: its marker does).
        let mut line_start = true;
        if offset > 0 && !matches!(start, Start::TailLines(_)) {
            let mut b = [0u8];
            line_start = file.read_at(&mut b, offset - 1)? == 1 && b[0] == b'\n';
        }
        Ok(Some(LogCursor { file, offset, line_start, lines_left: head }))
    }

    /// Whether `--head`'s lines have all been handed out.
    pub(crate) fn done(&self) -> bool {
        self.lines_left == Some(0)
    }

    /// The next piece of the log at its offset, at most `max` bytes (a
    /// hole's marker in place of the hole); `None`: nothing more now.
    ///
    /// # Errors
    /// Reading failed.
    pub(crate) fn next(&mut self, max: usize) -> io::Result<Option<(u64, Vec<u8>)>> {
        loop {
            if self.done() {
                return Ok(None);
            }
            let Some((at, mut data, hole)) = self.read_once(max)? else { return Ok(None) };
            if !hole && !self.still_data(at, data.len() as u64) {
                // Punched while it was read: read again (a hole now).
                continue;
            }
            self.offset = if hole { self.offset } else { at + data.len() as u64 };
            if let Some(left) = self.lines_left.as_mut() {
                let mut seen = 0u64;
                if let Some(cut) = data.iter().position(|b| {
                    seen += u64::from(*b == b'\n');
                    seen == *left
                }) {
                    data.truncate(cut + 1);
                    *left = 0;
                } else {
                    *left -= seen;
                }
            }
            if let Some(last) = data.last() {
                self.line_start = *last == b'\n';
            }
            return Ok(Some((at, data)));
        }
    }

    /// One read at the offset: `(offset, bytes, whether a hole's marker)`.
    fn read_once(&mut self, max: usize) -> io::Result<Option<(u64, Vec<u8>, bool)>> {
        let at = self.offset;
        let Ok(from) = i64::try_from(at) else { return Ok(None) };
        let data_at = match lseek(&self.file, from, Whence::SeekData) {
            Ok(d) => d.unsigned_abs(),
            // At or past the end, or only a hole left (the writer is past it).
            Err(Errno::ENXIO) => return Ok(None),
            // No SEEK_DATA here: no holes either.
            Err(_) => at,
        };
        if data_at > at {
            // A hole from `at`: its marker, then on from its end.
            let mut text = if self.line_start { Vec::new() } else { b"\n".to_vec() };
            text.extend_from_slice(&marker(data_at - at));
            self.offset = data_at;
            return Ok(Some((at, text, true)));
        }
        let Ok(d) = i64::try_from(data_at) else { return Ok(None) };
        let hole_at = lseek(&self.file, d, Whence::SeekHole).map_or(u64::MAX, |h| h.unsigned_abs());
        let want = usize::try_from(hole_at.saturating_sub(at)).unwrap_or(max).min(max);
        let mut buf = vec![0u8; want];
        let n = self.file.read_at(&mut buf, at)?;
        if n == 0 {
            return Ok(None);
        }
        buf.truncate(n);
        Ok(Some((at, buf, false)))
    }

    /// Whether `[at, at + len)` is still all data: a hole punched there
    /// while it was read may have given zeros (a punched range stays a
    /// hole: the writer only appends).
    fn still_data(&self, at: u64, len: u64) -> bool {
        let Ok(from) = i64::try_from(at) else { return true };
        match lseek(&self.file, from, Whence::SeekData) {
            Ok(d) if d.unsigned_abs() != at => false,
            Ok(_) => lseek(&self.file, from, Whence::SeekHole).is_ok_and(|h| h.unsigned_abs() >= at + len),
            Err(_) => true,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::fs::OpenOptions;

    use nix::fcntl::{FallocateFlags, fallocate};

    use super::*;

    fn all(cursor: &mut LogCursor) -> Vec<u8> {
        let mut out = Vec::new();
        while let Some((_, data)) = cursor.next(1000).unwrap() {
            out.extend_from_slice(&data);
        }
        out
    }

    fn numbered(n: usize) -> String {
        (1..=n).map(|i| format!("line {i}\n")).collect()
    }

    #[test]
    fn head_and_tail_give_exactly_those_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.log");
        std::fs::write(&path, numbered(5000)).unwrap();
        let mut head = LogCursor::open(&path, Start::Beginning, Some(3)).unwrap().unwrap();
        assert_eq!(all(&mut head), b"line 1\nline 2\nline 3\n");
        assert!(head.done());
        let mut tail = LogCursor::open(&path, Start::TailLines(2), None).unwrap().unwrap();
        assert_eq!(all(&mut tail), b"line 4999\nline 5000\n");
        let mut more = LogCursor::open(&path, Start::TailLines(9000), None).unwrap().unwrap();
        assert_eq!(all(&mut more), numbered(5000).as_bytes());
        std::fs::write(&path, "a\nb\nno newline").unwrap();
        let mut last = LogCursor::open(&path, Start::TailLines(2), None).unwrap().unwrap();
        assert_eq!(all(&mut last), b"b\nno newline");
        assert!(LogCursor::open(&dir.path().join("none"), Start::Beginning, None).unwrap().is_none());
    }

    #[test]
    fn a_hole_is_shown_as_one_marker_line_not_zeros() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.log");
        let text: Vec<u8> = b"0123456789abcdef\n".iter().copied().cycle().take(1 << 20).collect();
        std::fs::write(&path, &text).unwrap();
        let file = OpenOptions::new().write(true).open(&path).unwrap();
        let flags = FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE;
        if fallocate(&file, flags, 64 << 10, 512 << 10).is_err() {
            return; // No holes on this filesystem: nothing to skip.
        }
        let mut cursor = LogCursor::open(&path, Start::Beginning, None).unwrap().unwrap();
        let got = all(&mut cursor);
        assert!(!got.contains(&0), "no zeros streamed");
        let mut want = text[..64 << 10].to_vec();
        want.push(b'\n');
        want.extend_from_slice(&marker(512 << 10));
        want.extend_from_slice(&text[(576 << 10)..]);
        assert!(got == want, "got {} bytes, want {}", got.len(), want.len());
        // The marker is one line for --tail.
        let end = (1 << 20) - (576 << 10);
        let tail_lines = text[(576 << 10)..].iter().filter(|b| **b == b'\n').count() as u64;
        let mut tail = LogCursor::open(&path, Start::TailLines(tail_lines + 2), None).unwrap().unwrap();
        let got = all(&mut tail);
        assert!(got.starts_with(b"[lardon: 524288 bytes dropped]\n"), "{:?}", &got[..40]);
        assert_eq!(got.len(), MARKER_LEN + end);
    }

    const MARKER_LEN: usize = "[lardon: 524288 bytes dropped]\n".len();
}
