//! The daemon's log destinations through the real binary: standard error
//! and `<state dir>/daemon.log` by default, `--log-file PATH` instead,
//! `--log-file -` for standard error only; a bad `--log-level` is a usage
//! error naming the flag.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::*;

/// Starts `lardon daemon` with `extra` flags (stderr to `daemon.err`),
/// waits until it answers, stops it with SIGTERM.
fn run_daemon(dir: &Path, extra: &[&str]) {
    let err = std::fs::File::create(dir.join("daemon.err")).unwrap();
    let mut child = Command::new(bin())
        .env_remove("LARDON_SOCKET")
        .env_remove("LARDON_STATE_DIR")
        .env_remove("RUST_LOG")
        .env_remove("JOURNAL_STREAM")
        .args(["daemon", "--simulate-host", "4GiB,2", "--state-dir"])
        .arg(dir.join("state"))
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
        .unwrap();
    wait_until("the daemon to answer", Duration::from_secs(30), || {
        assert!(child.try_wait().unwrap().is_none(), "daemon exited early");
        lardon(&dir.join("state"), &["status"]).status.success()
    });
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    assert!(child.wait().unwrap().success());
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

#[test]
fn by_default_the_log_goes_to_stderr_and_the_state_dirs_daemon_log() {
    let dir = tempfile::tempdir().unwrap();
    run_daemon(dir.path(), &[]);
    let file = read(&dir.path().join("state/daemon.log"));
    let err = read(&dir.path().join("daemon.err"));
    for text in [&file, &err] {
        assert!(text.contains("listening on"), "{text}");
        assert!(text.contains("budgets: memory"), "{text}");
        assert!(text.contains("enforcement:"), "{text}");
        assert!(text.contains("the daemon stopped"), "{text}");
    }
    // Not a terminal: no colour codes anywhere.
    assert!(!err.contains('\u{1b}') && !file.contains('\u{1b}'), "{err}");
}

#[test]
fn log_file_replaces_the_default_and_dash_means_stderr_only() {
    let dir = tempfile::tempdir().unwrap();
    let custom = dir.path().join("logs/custom.log");
    run_daemon(dir.path(), &["--log-file", custom.to_str().unwrap()]);
    assert!(read(&custom).contains("listening on"));
    assert!(!dir.path().join("state/daemon.log").exists());
    assert!(!read(&dir.path().join("daemon.err")).contains("listening on"));

    let dir = tempfile::tempdir().unwrap();
    run_daemon(dir.path(), &["--log-file", "-", "--log-level", "debug"]);
    assert!(!dir.path().join("state/daemon.log").exists());
    let err = read(&dir.path().join("daemon.err"));
    assert!(err.contains("listening on"), "{err}");
    // A bare level is about Lardon: no HTTP/2 frame dumps.
    assert!(!err.contains("h2::"), "{err}");
}

#[test]
fn a_bad_log_level_is_a_usage_error_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let o = lardon(dir.path(), &["daemon", "--log-level", "loud==", "--simulate-host", "4GiB,2"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--log-level"), "{}", stderr(&o));
}

#[test]
fn the_log_file_rotates_past_its_size_and_keeps_that_many_files() {
    let dir = tempfile::tempdir().unwrap();
    run_daemon(dir.path(), &["--log-level", "debug", "--log-max-size", "1KiB", "--log-keep", "2"]);
    let state = dir.path().join("state");
    let names: Vec<String> = std::fs::read_dir(&state)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("daemon.log"))
        .collect();
    assert!(names.contains(&"daemon.log.1".to_owned()), "rotated at least once: {names:?}");
    assert!(!names.iter().any(|n| n == "daemon.log.3"), "only two rotated files kept: {names:?}");
    for name in &names {
        let text = read(&state.join(name));
        // A line is never split; a file is over the size only by holding one line.
        assert!(text.len() <= 1024 || text.lines().count() == 1, "{name}: {} bytes", text.len());
    }
    assert!(read(&state.join("daemon.log")).contains("the daemon stopped"), "the newest lines last");
}
