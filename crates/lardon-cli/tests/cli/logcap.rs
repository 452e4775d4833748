//! Log caps through the real binary (docs/DESIGN.md §10, log caps): a task
//! writing 1 GiB to stderr under `log_max = 1MiB` uses little disk while it
//! runs (its log's middle is punched out), `lardon log` of it meanwhile
//! shows one marker line and no zeros, and after its end the log is its
//! head, the marker and its tail, exactly; `log --head N` / `--tail N`
//! print exactly those lines; a log under the cap is untouched.
//!
//! Break it to see it fail: drop the `log.finish` call in the command
//! callback (the log stays 1 GiB long), or the punch in `LiveCap::tend`
//! (the disk used while running is the whole GiB).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{Daemon, WAIT, lardon, state, stderr, stdout, submit, wait_until};

const LINE: &[u8] = b"0123456789abcdef\n";
const GIB: u64 = 1 << 30;
const CAP: u64 = 1 << 20;

/// The byte `yes 0123456789abcdef` writes at `offset`.
fn byte_at(offset: u64) -> u8 {
    LINE[(offset % LINE.len() as u64) as usize]
}

fn bytes(from: u64, to: u64) -> Vec<u8> {
    (from..to).map(byte_at).collect()
}

fn log_file(dir: &Path, id: &str) -> PathBuf {
    dir.join("logs").join(format!("{}.log", id.rsplit('-').next().unwrap()))
}

/// What the rule keeps of `len` bytes of `yes` output under `CAP`: the
/// first half cut back to a line end, the marker, the last half cut
/// forward to a line start.
fn expected(len: u64) -> Vec<u8> {
    let l = LINE.len() as u64;
    let head = CAP / 2 / l * l;
    let tail = (len - (CAP - CAP / 2)).next_multiple_of(l);
    let mut out = bytes(0, head);
    out.extend_from_slice(format!("[lardon: {} bytes dropped]\n", tail - head).as_bytes());
    out.extend_from_slice(&bytes(tail, len));
    out
}

#[test]
fn a_task_writing_a_gib_to_stderr_keeps_head_marker_and_tail_within_its_cap() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let _d = Daemon::start(dir, "8GiB,2");
    let o = lardon(dir, &["policy", "--set", "log_max=1MiB"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let fifo = dir.join("go");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let script = format!("yes 0123456789abcdef | head -c {GIB} >&2; cat {} >/dev/null", fifo.display());
    let id = submit(dir, &["--mem", "64MiB", "--", "sh", "-c", &script]);
    let log = log_file(dir, &id);

    // Written and still running: the logical size is the GiB, the disk
    // used about the cap (the middle punched out by the run's wait).
    wait_until("the GiB written and its middle punched out", WAIT, || {
        std::fs::metadata(&log).is_ok_and(|m| m.len() == GIB && m.blocks() * 512 < 4 * CAP)
    });
    let o = lardon(dir, &["log", &id]);
    assert!(o.status.success(), "{}", stderr(&o));
    let shown = o.stdout;
    assert!(!shown.contains(&0), "no zeros of the hole are streamed");
    assert!(shown.len() as u64 <= CAP + (64 << 10), "{} bytes shown while running", shown.len());
    assert!(shown.starts_with(&bytes(0, CAP / 2 / 17 * 17)), "the head");
    assert!(shown.ends_with(&bytes(GIB - CAP / 2, GIB)), "the tail");
    let markers = shown.windows(9).filter(|w| w == b"[lardon: ").count();
    assert_eq!(markers, 1, "one marker line for the dropped middle");
    let o = lardon(dir, &["log", &id, "--tail", "2"]);
    assert_eq!(o.stdout, bytes(GIB - 17 - GIB % 17, GIB), "{}", stderr(&o));

    // Let it end: the log is compacted to the cap.
    std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    wait_until("the task to end", WAIT, || state(dir, &id) == "completed");
    let meta = std::fs::metadata(&log).unwrap();
    assert!(meta.len() <= CAP + 64, "{} bytes after the end", meta.len());
    assert!(meta.blocks() * 512 <= CAP + (64 << 10), "{} bytes on disk", meta.blocks() * 512);
    let kept = std::fs::read(&log).unwrap();
    let want = expected(GIB);
    assert!(kept == want, "got {} bytes, want {}: head + marker + tail exactly", kept.len(), want.len());
    let o = lardon(dir, &["log", &id]);
    assert!(o.stdout == want, "lardon log shows the compacted log");

    let o = lardon(dir, &["log", &id, "--head", "3"]);
    assert_eq!(o.stdout, LINE.repeat(3), "{}", stderr(&o));
    let o = lardon(dir, &["log", &id, "--tail", "3"]);
    assert_eq!(o.stdout, bytes(GIB - 2 * 17 - GIB % 17, GIB), "{}", stderr(&o));
}

#[test]
fn a_log_under_its_cap_is_untouched_and_head_and_tail_print_exact_lines() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let _d = Daemon::start(dir, "8GiB,2");
    let o = lardon(dir, &["policy", "--set", "log_max=1MiB"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let id = submit(dir, &["--mem", "16MiB", "--", "sh", "-c", "seq 1 50000"]);
    let o = lardon(dir, &["wait", &id]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let all: String = (1..=50000).map(|i| format!("{i}\n")).collect();
    assert_eq!(std::fs::read_to_string(log_file(dir, &id)).unwrap(), all, "under the cap: untouched");
    assert_eq!(stdout(&lardon(dir, &["log", &id, "--head", "2"])), "1\n2\n");
    assert_eq!(stdout(&lardon(dir, &["log", &id, "--tail", "3"])), "49998\n49999\n50000\n");
    assert_eq!(stdout(&lardon(dir, &["log", &id, "--tail", "60000"])), all);
    assert_eq!(stdout(&lardon(dir, &["log", &id, "--tail-bytes", "6"])), "50000\n");
}

#[test]
fn log_max_below_the_minimum_is_refused_naming_the_field() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let _d = Daemon::start(dir, "8GiB,2");
    for bad in ["0", "1KiB", "0.5B"] {
        let o = lardon(dir, &["policy", "--set", &format!("log_max={bad}")]);
        assert_eq!(o.status.code(), Some(2), "log_max={bad}: {}", stderr(&o));
        assert!(stderr(&o).contains("log_max"), "{}", stderr(&o));
    }
    let o = lardon(dir, &["policy"]);
    assert!(stdout(&o).contains("256MiB"), "the default stays: {}", stdout(&o));
}

/// `log ID --tail N --follow` prints the last N lines written so far, then
/// what the task writes after, and ends with the task.
#[test]
fn tail_with_follow_starts_at_the_last_lines_and_follows_to_the_end() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let _d = Daemon::start(dir, "8GiB,2");
    let gate = dir.join("gate");
    let script = format!(
        "for i in 1 2 3 4 5; do echo line$i; done; while [ ! -e '{}' ]; do sleep 0.02; done; echo line6; echo line7",
        gate.display()
    );
    let id = submit(dir, &["--", "sh", "-c", &script]);
    wait_until("five lines written", WAIT, || {
        std::fs::read_to_string(log_file(dir, &id)).is_ok_and(|t| t.lines().count() == 5)
    });
    let mut follow = Command::new(crate::support::bin())
        .args(["--state-dir", dir.to_str().unwrap(), "log", &id, "--tail", "2", "--follow"])
        .env_remove("LARDON_SOCKET")
        .env_remove("LARDON_STATE_DIR")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(follow.stdout.take().unwrap());
    let mut first = Vec::new();
    for _ in 0..2 {
        let mut line = String::new();
        std::io::BufRead::read_line(&mut out, &mut line).unwrap();
        first.push(line);
    }
    assert_eq!(first, ["line4\n", "line5\n"], "--tail 2 starts at the last two lines");
    std::fs::write(&gate, b"").unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert_eq!(rest, "line6\nline7\n", "--follow prints what came after, then ends with the task");
    assert!(follow.wait().unwrap().success());
    assert_eq!(state(dir, &id), "completed");
}
