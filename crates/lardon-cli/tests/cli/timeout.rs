//! `submit --timeout`: a local run past its time limit has its whole
//! process tree killed (child and grandchild), and the task ends FAILED
//! with reason `timeout` in `status`, `explain` and `wait`'s exit; with
//! `--retry-on-timeout N` it runs N more times first; a batched task's
//! limit is per batch run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use crate::support::{Daemon, lardon, stderr, stdout, submit, task_json, wait_until};

const LONG: Duration = Duration::from_secs(30);

/// Whether `pid` is gone (or a zombie nobody reaped yet: it runs nothing).
fn dead(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

fn read_pid(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_owned()).filter(|s| !s.is_empty())
}

/// Break it to see it fail: drop `timeout_at` from the run's deadline in
/// `local/command.rs` (the task runs its 100 s and the wait's deadline
/// fails the test).
#[test]
fn a_timeout_kills_the_whole_tree_and_fails_with_reason_timeout() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let _d = Daemon::start(dir, "8GiB,2");
    let (fg, bg) = (dir.join("fg.pid"), dir.join("bg.pid"));
    let script = format!("sleep 100 & echo $! > {}; echo $$ > {}; sleep 100", bg.display(), fg.display());
    let id = submit(dir, &["--timeout", "1s", "--name", "hung", "--", "sh", "-c", &script]);
    wait_until("both pids written", LONG, || read_pid(&fg).is_some() && read_pid(&bg).is_some());
    let (fg, bg) = (read_pid(&fg).unwrap(), read_pid(&bg).unwrap());
    // Waits on the end itself (the stream), bounded by the run's 100 s.
    let o = lardon(dir, &["wait", &id]);
    assert_ne!(o.status.code(), Some(0), "wait exits non-zero: {}{}", stdout(&o), stderr(&o));
    let t = task_json(dir, &id);
    assert_eq!(t["state"], "failed", "{t}");
    let reason = t["failure_reason"].as_str().unwrap_or_default().to_owned();
    assert!(reason.starts_with("timeout"), "{t}");
    let o = lardon(dir, &["status", &id]);
    assert!(stdout(&o).contains("timeout"), "{}", stdout(&o));
    let o = lardon(dir, &["explain", &id, "--history"]);
    assert!(stdout(&o).contains("timed_out") && stdout(&o).contains("[timeout]"), "{}", stdout(&o));
    wait_until("child and grandchild gone", LONG, || dead(&fg) && dead(&bg));
}

/// `--retry-on-timeout 1`: two runs, then the failure. Break it to see it
/// fail: drop the `continue` of a retried timeout (one run only).
#[test]
fn a_run_killed_at_its_timeout_runs_again_before_the_task_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let _d = Daemon::start(dir, "8GiB,2");
    let runs = dir.join("runs");
    let script = format!("echo run >> {}; sleep 100", runs.display());
    let id = submit(dir, &["--timeout", "300ms", "--retry-on-timeout", "1", "--", "sh", "-c", &script]);
    let o = lardon(dir, &["wait", &id]);
    assert_ne!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert_eq!(std::fs::read_to_string(&runs).unwrap().lines().count(), 2);
    let t = task_json(dir, &id);
    assert!(t["failure_reason"].as_str().unwrap_or_default().starts_with("timeout"), "{t}");
}

/// A batched task's timeout is per batch run: three batches of 0.6 s each
/// under a 1.5 s timeout complete, though together they take longer.
#[test]
fn a_batched_tasks_timeout_is_per_batch_run() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let _d = Daemon::start(dir, "8GiB,2");
    let id =
        submit(dir, &["--timeout", "1500ms", "--items", "3", "--batch", "1", "--", "sh", "-c", "sleep 0.6"]);
    let o = lardon(dir, &["wait", &id]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
}

/// The policy's `timeout` holds a task that sets none; `none` lifts it.
/// Break it to see it fail: drop `.or(shared.settings().timeout_ms)` in
/// `local/command.rs` (the task completes).
#[test]
fn the_policys_timeout_applies_to_a_task_that_sets_none() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let _d = Daemon::start(dir, "8GiB,2");
    let o = lardon(dir, &["policy", "--set", "timeout=300ms"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let id = submit(dir, &["--", "sleep", "100"]);
    let o = lardon(dir, &["wait", &id]);
    assert_ne!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(task_json(dir, &id)["failure_reason"].as_str().unwrap_or_default().starts_with("timeout"));
    assert!(lardon(dir, &["policy", "--set", "timeout=none"]).status.success());
    let id = submit(dir, &["--", "sleep", "0.5"]);
    assert_eq!(lardon(dir, &["wait", &id]).status.code(), Some(0));
    let o = lardon(dir, &["policy", "--set", "timeout=soon"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("timeout"), "{}", stderr(&o));
}
