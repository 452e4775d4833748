//! Task log caps (policy `log_max`, docs/DESIGN.md §10 "Log caps"): a
//! task's log past its cap keeps its head and its tail, and the middle is
//! dropped with one marker line, `[lardon: N bytes dropped]`.
//!
//! A run's stdout and stderr are the log file itself (no pipe through the
//! daemon), so the daemon bounds it from the side:
//! * while a run lives, [`LiveCap::tend`] (called from the run's own wait,
//!   which wakes periodically anyway) punches a hole over the middle
//!   (`FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE`, block-aligned): the
//!   child keeps appending at the logical end, the disk used stays about
//!   the cap plus what the child writes between two checks. Where punching
//!   is unsupported, the file is compacted in place instead
//!   ([`compact_in_place`]), which can lose (uncounted) what the child
//!   writes during the compaction itself;
//! * once the task's runs have ended (no writer left), [`compact`] writes
//!   head + marker + tail to a new file renamed over the log: a reader
//!   streaming the log holds its own descriptor of the old file and
//!   finishes it consistently, and later readers see the compacted one.
//!
//! The kept head is the first `cap / 2` bytes cut back to a line end, the
//! kept tail the last `cap - cap / 2` bytes cut forward to a line start, so
//! the result is at most the cap plus the marker (and a newline before it
//! when the head is one line longer than half the cap). A log compacted
//! again (a restart, more batch runs) keeps the marker already in its head
//! and adds to its count: the count is always of the task's own bytes.

use std::fs::{File, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{FallocateFlags, fallocate};

/// The smallest `log_max`: the head and the tail each span whole blocks
/// with room for the marker, so the middle can be punched.
pub const MIN_LOG_MAX: u64 = 64 << 10;

/// The default `log_max`: 256 MiB.
pub const DEFAULT_LOG_MAX: u64 = 256 << 20;

/// The marker line's fixed parts: `[lardon: N bytes dropped]\n`.
const MARKER_PREFIX: &[u8] = b"[lardon: ";
const MARKER_SUFFIX: &[u8] = b" bytes dropped]\n";
/// The longest marker line (a u64 count).
const MARKER_MAX: usize = MARKER_PREFIX.len() + 20 + MARKER_SUFFIX.len();

/// How far forward from the tail's first byte a line start is looked for.
const LINE_WINDOW: u64 = 64 << 10;

/// Chunk of a copy.
const COPY_CHUNK: usize = 256 << 10;

/// A per-task log limit in bytes, at least [`MIN_LOG_MAX`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogCap(u64);

/// Why a `log_max` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("must be at least 64KiB (`none` = no cap), not {0} bytes")]
pub struct LogCapTooSmall(pub u64);

impl LogCap {
    /// A cap of `bytes`.
    ///
    /// # Errors
    /// Below [`MIN_LOG_MAX`].
    pub fn new(bytes: u64) -> Result<LogCap, LogCapTooSmall> {
        if bytes < MIN_LOG_MAX { Err(LogCapTooSmall(bytes)) } else { Ok(LogCap(bytes)) }
    }

    /// The cap, bytes.
    pub fn bytes(self) -> u64 {
        self.0
    }

    fn head(self) -> u64 {
        self.0 / 2
    }

    fn tail(self) -> u64 {
        self.0 - self.0 / 2
    }
}

impl Default for LogCap {
    fn default() -> Self {
        LogCap(DEFAULT_LOG_MAX)
    }
}

/// The marker line for `dropped` bytes.
pub fn marker(dropped: u64) -> Vec<u8> {
    let mut line = Vec::with_capacity(MARKER_MAX);
    line.extend_from_slice(MARKER_PREFIX);
    line.extend_from_slice(dropped.to_string().as_bytes());
    line.extend_from_slice(MARKER_SUFFIX);
    line
}

/// A marker line at the start of `bytes`: its count and its length.
fn parse_marker(bytes: &[u8]) -> Option<(u64, usize)> {
    let rest = bytes.strip_prefix(MARKER_PREFIX)?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 20 || !rest[digits..].starts_with(MARKER_SUFFIX) {
        return None;
    }
    let n = std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()?;
    Some((n, MARKER_PREFIX.len() + digits + MARKER_SUFFIX.len()))
}

/// What a compaction keeps: `[0, head)`, a newline when the head does not
/// end one, the marker for `dropped`, then `[tail, len)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Plan {
    head: u64,
    newline: bool,
    dropped: u64,
    tail: u64,
    len: u64,
}

impl Plan {
    fn marker(&self) -> Vec<u8> {
        let mut m = if self.newline { b"\n".to_vec() } else { Vec::new() };
        m.extend_from_slice(&marker(self.dropped));
        m
    }
}

fn read_at(file: &File, offset: u64, len: u64) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; usize::try_from(len).unwrap_or(usize::MAX)];
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(got);
    Ok(buf)
}

/// What compacting `file` (of `len` bytes) under `cap` keeps; `None` when
/// it is within the cap.
fn plan(file: &File, len: u64, cap: LogCap) -> io::Result<Option<Plan>> {
    if len <= cap.bytes() {
        return Ok(None);
    }
    let (half, keep_tail) = (cap.head(), cap.tail());
    let head = read_at(file, 0, (half + MARKER_MAX as u64 + 1).min(len))?;
    // A marker already kept in the head (an earlier compaction): the head
    // ends before it and its count carries over.
    let line_starts = std::iter::once(0)
        .chain(head.iter().enumerate().filter(|(_, b)| **b == b'\n').map(|(i, _)| i + 1))
        .take_while(|p| *p as u64 <= half + 1);
    let earlier = line_starts.into_iter().find_map(|p| parse_marker(&head[p..]).map(|(n, l)| (p, n, l)));
    let (h, carried, skip) = match earlier {
        Some((p, n, l)) => (p as u64, n, l as u64),
        None => {
            let within = &head[..usize::try_from(half).unwrap_or(usize::MAX).min(head.len())];
            let h = within.iter().rposition(|b| *b == b'\n').map_or(half.min(len), |i| i as u64 + 1);
            (h, 0, 0)
        }
    };
    let newline = h > 0 && head.get(usize::try_from(h - 1).unwrap_or(usize::MAX)) != Some(&b'\n');
    // The tail starts at a line start: after the first newline at or past
    // `len - keep_tail` (unless the byte before it ends a line already).
    let mut tail = (len - keep_tail).max(h + skip);
    if tail > 0 && tail < len {
        let window = read_at(file, tail - 1, LINE_WINDOW.min(len - tail + 1))?;
        if window.first() != Some(&b'\n')
            && let Some(i) = window.iter().skip(1).position(|b| *b == b'\n')
            && tail + (i as u64) + 1 < len
        {
            tail += i as u64 + 1;
        }
    }
    let dropped = carried + (tail - h - skip);
    Ok(Some(Plan { head: h, newline, dropped, tail, len }))
}

/// Copies `len` bytes of `src` at `from` to `dst` at `to` (forward, so in
/// place with `to <= from`).
fn copy(src: &File, from: u64, dst: &File, to: u64, len: u64) -> io::Result<()> {
    let mut buf = vec![0u8; COPY_CHUNK];
    let mut done = 0u64;
    while done < len {
        let want = usize::try_from((len - done).min(COPY_CHUNK as u64)).unwrap_or(COPY_CHUNK);
        let n = src.read_at(&mut buf[..want], from + done)?;
        if n == 0 {
            break;
        }
        dst.write_all_at(&buf[..n], to + done)?;
        done += n as u64;
    }
    Ok(())
}

/// The temporary name a compaction writes before its rename.
fn temp_name(path: &Path) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!(".{name}.capping"))
}

/// Whether `name` is a compaction's temporary file (left by a crash: the
/// log it was made from is intact, so it can be removed).
pub fn is_temp(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(".capping")
}

/// Compacts the log at `path` to head + marker + tail when it is past
/// `cap`, by a new file renamed over it. Call only once no process can
/// write to it (a process that still did would write to the replaced
/// file). Returns whether it was compacted; a missing log is not.
///
/// # Errors
/// The log cannot be read or the new file written or renamed (the log is
/// then left as it was).
pub fn compact(path: &Path, cap: LogCap) -> io::Result<bool> {
    let src = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    let len = src.metadata()?.len();
    let Some(plan) = plan(&src, len, cap)? else { return Ok(false) };
    let temp = temp_name(path);
    let result = (|| {
        let mut dst = OpenOptions::new().write(true).create(true).truncate(true).open(&temp)?;
        copy(&src, 0, &dst, 0, plan.head)?;
        let m = plan.marker();
        dst.write_all_at(&m, plan.head)?;
        copy(&src, plan.tail, &dst, plan.head + m.len() as u64, plan.len - plan.tail)?;
        dst.flush()?;
        std::fs::rename(&temp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result.map(|()| true)
}

/// Compacts `file` in place (the fallback where holes cannot be punched):
/// the marker and the tail are moved down behind the head and the file
/// cut there. With a writer still appending, what it writes during the
/// copy is lost (the file is cut behind it). Returns whether it was
/// compacted.
///
/// # Errors
/// Reading, writing or truncating failed.
pub fn compact_in_place(file: &File, cap: LogCap) -> io::Result<bool> {
    let len = file.metadata()?.len();
    let Some(plan) = plan(file, len, cap)? else { return Ok(false) };
    let m = plan.marker();
    let to = plan.head + m.len() as u64;
    // Past the cap by less than a marker: already within cap + marker, and
    // a forward copy onto its own source would overwrite what it reads.
    if to > plan.tail {
        return Ok(false);
    }
    let keep = plan.len - plan.tail;
    file.write_all_at(&m, plan.head)?;
    copy(file, plan.tail, file, to, keep)?;
    file.set_len(to + keep)?;
    Ok(true)
}

/// The cap of one task's log while its runs write it, across its runs
/// (a batched task's runs share one file): see the module docs. Costs
/// nothing until [`LiveCap::tend`] is first called (a run that lives past
/// the first check) or a run's end reports a log past the cap.
#[derive(Debug)]
pub struct LiveCap {
    cap: LogCap,
    /// Opened at the first check (a short run never opens it).
    file: Option<File>,
    /// Punched up to here already.
    punched: u64,
    /// Cleared at the first `EOPNOTSUPP`: compact in place from then on.
    can_punch: bool,
    /// The log was seen past the cap: compact it at the end.
    over: bool,
}

impl LiveCap {
    /// The cap of one task's log.
    pub fn new(cap: LogCap) -> LiveCap {
        LiveCap { cap, file: None, punched: 0, can_punch: true, over: false }
    }

    /// Notes a run's log length seen at its end ([`crate::runner::Run::log_len`]).
    pub fn note_len(&mut self, len: Option<u64>) {
        self.over |= len.is_some_and(|l| l > self.cap.bytes());
    }

    /// Checks the size of the log at `path` and, past the cap, drops its
    /// middle from the disk. Returns whether it dropped something (the
    /// caller checks again sooner then: the writer is fast). Best effort: a
    /// failure is warned about and the log left to grow.
    pub fn tend(&mut self, path: &Path) -> bool {
        match self.try_tend(path) {
            Ok(dropped) => dropped,
            Err(e) => {
                tracing::warn!("log {}: not capped ({e})", path.display());
                false
            }
        }
    }

    /// Compacts the log at `path` when a check or a run's end saw it past
    /// the cap. Call once no run of the task is left to write it.
    pub fn finish(self, path: &Path) {
        if !self.over {
            return;
        }
        drop(self.file);
        if let Err(e) = compact(path, self.cap) {
            tracing::warn!("log {}: not compacted to its cap ({e})", path.display());
        }
    }

    fn try_tend(&mut self, path: &Path) -> io::Result<bool> {
        if self.file.is_none() {
            match OpenOptions::new().read(true).write(true).open(path) {
                Ok(f) => self.file = Some(f),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        let Some(file) = self.file.as_ref() else { return Ok(false) };
        let meta = file.metadata()?;
        let len = meta.len();
        if len <= self.cap.bytes() {
            return Ok(false);
        }
        self.over = true;
        if !self.can_punch {
            return compact_in_place(file, self.cap);
        }
        let block = std::os::unix::fs::MetadataExt::blksize(&meta).max(512);
        // Never into what a compaction reads: the head (and a marker in
        // it), the last `tail` bytes and the byte before them (whether the
        // tail starts a line).
        let start = (self.cap.head() + MARKER_MAX as u64 + 1).next_multiple_of(block).max(self.punched);
        let end = (len - self.cap.tail()).saturating_sub(1) / block * block;
        if end <= start {
            return Ok(false);
        }
        let (Ok(offset), Ok(size)) = (i64::try_from(start), i64::try_from(end - start)) else {
            return Ok(false);
        };
        let flags = FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE;
        match fallocate(file, flags, offset, size) {
            Ok(()) => {
                self.punched = end;
                Ok(true)
            }
            Err(Errno::EOPNOTSUPP | Errno::ENOSYS) => {
                tracing::info!(
                    "log {}: the filesystem cannot punch holes; compacting it in place instead",
                    path.display()
                );
                self.can_punch = false;
                compact_in_place(file, self.cap)
            }
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::os::unix::fs::MetadataExt as _;

    use super::*;

    const CAP: u64 = MIN_LOG_MAX;

    /// `n` bytes of 17-byte lines, `0123456789abcdef\n`, like `yes`.
    fn lines(n: u64) -> Vec<u8> {
        b"0123456789abcdef\n".iter().copied().cycle().take(n as usize).collect()
    }

    /// Compares without printing megabytes: the lengths and the first
    /// difference.
    #[track_caller]
    fn same(got: &[u8], want: &[u8]) {
        let at = got.iter().zip(want).position(|(a, b)| a != b);
        assert!(
            at.is_none() && got.len() == want.len(),
            "got {} bytes, want {}; first difference at {at:?}: got {:?}",
            got.len(),
            want.len(),
            at.map(
                |i| String::from_utf8_lossy(&got[i.saturating_sub(20)..(i + 40).min(got.len())]).into_owned()
            )
        );
    }

    /// What a compaction of `content` under `CAP` must give, worked out
    /// here from the rule (head cut back to a line end, tail cut forward
    /// to a line start, whole lines of 17 bytes).
    fn expected(content: &[u8]) -> Vec<u8> {
        let half = (CAP / 2) as usize;
        let h = half / 17 * 17;
        let t0 = content.len() - (CAP - CAP / 2) as usize;
        let t = t0.next_multiple_of(17);
        let mut out = content[..h].to_vec();
        out.extend_from_slice(&marker((t - h) as u64));
        out.extend_from_slice(&content[t..]);
        out
    }

    #[test]
    fn a_log_past_its_cap_keeps_head_marker_and_tail_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.log");
        let content = lines(1 << 20);
        std::fs::write(&path, &content).unwrap();
        assert!(compact(&path, LogCap::new(CAP).unwrap()).unwrap());
        let got = std::fs::read(&path).unwrap();
        same(&got, &expected(&content));
        assert!(got.len() as u64 <= CAP + MARKER_MAX as u64);
        assert!(got.starts_with(b"0123456789abcdef\n"));
        assert!(got.ends_with(&content[content.len() - 17..]));
        assert!(!temp_name(&path).exists());
    }

    #[test]
    fn a_log_within_its_cap_is_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.log");
        std::fs::write(&path, lines(CAP)).unwrap();
        let ino = std::fs::metadata(&path).unwrap().ino();
        assert!(!compact(&path, LogCap::new(CAP).unwrap()).unwrap());
        assert_eq!(std::fs::read(&path).unwrap(), lines(CAP));
        assert_eq!(std::fs::metadata(&path).unwrap().ino(), ino);
        assert!(!compact(&dir.path().join("none.log"), LogCap::new(CAP).unwrap()).unwrap());
    }

    #[test]
    fn a_second_compaction_keeps_one_marker_and_adds_to_its_count() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.log");
        let cap = LogCap::new(CAP).unwrap();
        let first = lines(1 << 20);
        std::fs::write(&path, &first).unwrap();
        compact(&path, cap).unwrap();
        let once = std::fs::read(&path).unwrap();
        let more = lines(1 << 20);
        let mut all = once.clone();
        all.extend_from_slice(&more);
        std::fs::write(&path, &all).unwrap();
        compact(&path, cap).unwrap();
        let twice = std::fs::read(&path).unwrap();
        let markers = twice.windows(MARKER_PREFIX.len()).filter(|w| *w == MARKER_PREFIX).count();
        assert_eq!(markers, 1, "one marker");
        // Every byte the task wrote is either kept or counted.
        let at = twice.windows(MARKER_PREFIX.len()).position(|w| w == MARKER_PREFIX).unwrap();
        let (n, len) = parse_marker(&twice[at..]).unwrap();
        assert_eq!(twice.len() as u64 - len as u64 + n, 2 << 20);
        assert_eq!(&twice[..at], &first[..at]);
        assert!(twice.ends_with(&more[more.len() - 1000..]));
    }

    #[test]
    fn a_head_without_a_line_end_gets_a_newline_before_the_marker() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.log");
        let content = vec![b'x'; 1 << 20];
        std::fs::write(&path, &content).unwrap();
        compact(&path, LogCap::new(CAP).unwrap()).unwrap();
        let got = std::fs::read(&path).unwrap();
        let half = (CAP / 2) as usize;
        let mut want = content[..half].to_vec();
        want.push(b'\n');
        want.extend_from_slice(&marker((1 << 20) - CAP));
        want.extend_from_slice(&content[..(CAP - CAP / 2) as usize]);
        same(&got, &want);
    }

    #[test]
    fn a_punched_log_compacts_to_the_same_bytes_and_uses_little_disk() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.log");
        let content = lines(8 << 20);
        std::fs::write(&path, &content).unwrap();
        let mut live = LiveCap::new(LogCap::new(CAP).unwrap());
        assert!(live.tend(&path), "a log past its cap has its middle dropped");
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.len(), 8 << 20, "the logical size is kept: the writer appends at its end");
        if live.can_punch {
            assert!(meta.blocks() * 512 < 2 * CAP + (1 << 20), "{} bytes on disk", meta.blocks() * 512);
            // Zeros in the middle now, but the kept parts are intact.
            assert!(compact(&path, LogCap::new(CAP).unwrap()).unwrap());
            same(&std::fs::read(&path).unwrap(), &expected(&content));
        }
    }

    #[test]
    fn in_place_compaction_gives_the_same_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.log");
        let content = lines(1 << 20);
        std::fs::write(&path, &content).unwrap();
        let file = OpenOptions::new().read(true).write(true).open(&path).unwrap();
        assert!(compact_in_place(&file, LogCap::new(CAP).unwrap()).unwrap());
        same(&std::fs::read(&path).unwrap(), &expected(&content));
    }

    #[test]
    fn a_cap_below_the_minimum_is_refused() {
        assert!(LogCap::new(0).is_err());
        assert!(LogCap::new(MIN_LOG_MAX - 1).is_err());
        assert_eq!(LogCap::new(MIN_LOG_MAX).unwrap().bytes(), MIN_LOG_MAX);
    }
}
