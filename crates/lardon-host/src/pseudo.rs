//! Reading the kernel's small text files (`/proc`, cgroupfs) in as few
//! system calls as they allow.
//!
//! `std::fs::read_to_string` sizes its buffer from `statx` (which reports
//! 0 or 4096 for these files) and then probes with reads of 32, 64, 128…
//! bytes: a 300-byte `/proc/<pid>/stat` took a `statx` and six reads. The
//! run path reads three such files per run and the host probe seven per
//! sample.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

/// How much is read at once: more than any per-process or per-cgroup file
/// the daemon reads, so they take one read and one read that finds the end.
const CHUNK: usize = 4096;

/// The whole of `path` as text: one `open`, reads of 4 KiB until
/// end of file, one `close`.
///
/// # Errors
/// The open or a read failing, or text that is not UTF-8
/// (`InvalidData`, as `read_to_string` says).
pub fn read_pseudo(path: &Path) -> io::Result<String> {
    let mut file = File::open(path)?;
    let mut buf = vec![0u8; CHUNK];
    let mut len = 0;
    loop {
        if len == buf.len() {
            buf.resize(len + CHUNK, 0);
        }
        match file.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(len);
    String::from_utf8(buf).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn reads_what_read_to_string_reads_small_large_and_proc() {
        let dir = tempfile::tempdir().unwrap();
        for size in [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 17] {
            let path = dir.path().join(format!("f{size}"));
            let text: String = (0..size).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
            std::fs::write(&path, &text).unwrap();
            assert_eq!(read_pseudo(&path).unwrap(), text, "{size} bytes");
        }
        for proc in ["/proc/self/stat", "/proc/meminfo", "/proc/self/mountinfo"] {
            let ours = read_pseudo(Path::new(proc)).unwrap();
            // Both reads see the same kind of content (the figures move).
            let std = std::fs::read_to_string(proc).unwrap();
            assert_eq!(ours.lines().count(), std.lines().count(), "{proc}");
            assert!(!ours.is_empty(), "{proc}");
        }
    }

    #[test]
    fn errors_say_what_read_to_string_says() {
        let dir = tempfile::tempdir().unwrap();
        let missing = read_pseudo(&dir.path().join("missing")).unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
        let bad = dir.path().join("bad");
        std::fs::write(&bad, [0xff, 0xfe]).unwrap();
        assert_eq!(read_pseudo(&bad).unwrap_err().kind(), io::ErrorKind::InvalidData);
    }
}
