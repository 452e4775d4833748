//! A run whose log stayed empty gives its file back once its cgroup is
//! gone, and the next run reuses that file (no new inode per run, the
//! launch benchmark's largest cost on a journal-less ext4), while every
//! task still shows exactly its own output in `lardon log`.
//!
//! Needs a cgroup backend (v1 or v2) the daemon can create task cgroups
//! in: without one no run can prove its processes are gone, nothing is
//! given back, and the test fails saying so.
//!
//! Break it to see it fail: drop the `give_back` call from the local
//! executor's cleanup (no spare appears), or open logs without the pool
//! (the second run gets a new inode).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

use crate::support::{Daemon, lardon, stderr, stdout, submit};

/// Inode numbers of the files in `dir` whose names end with `suffix`.
fn inodes(dir: &Path, suffix: &str) -> BTreeSet<u64> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(suffix))
        .map(|e| e.metadata().unwrap().ino())
        .collect()
}

fn run(dir: &Path, args: &[&str]) -> String {
    let id = submit(dir, args);
    let o = lardon(dir, &["wait", &id]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    id
}

#[test]
fn empty_logs_are_reused_and_each_task_shows_only_its_own_output() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let _d = Daemon::start(dir, "8GiB,2");
    let logs = dir.join("logs");
    let quiet: Vec<String> = (0..3).map(|_| run(dir, &["--mem", "16MiB", "--", "true"])).collect();
    let spares = inodes(&logs.join(".spare"), "");
    assert!(
        !spares.is_empty(),
        "no spare log file after three runs without output: the daemon needs a cgroup backend \
         (v1 or v2) it can create task cgroups in for a run to give its empty log back"
    );
    assert!(inodes(&logs, ".log").is_empty(), "the empty logs were given back");
    for id in &quiet {
        let o = lardon(dir, &["log", id]);
        assert!(o.status.success(), "log {id}: {}", stderr(&o));
        assert_eq!(stdout(&o), "", "a task without output shows an empty log");
    }

    let loud = run(dir, &["--mem", "16MiB", "--", "sh", "-c", "echo mine"]);
    let written = inodes(&logs, ".log");
    assert_eq!(written.len(), 1, "only the task with output keeps a log file");
    assert!(written.is_subset(&spares), "its log is a reused spare, not a new file");
    let o = lardon(dir, &["log", &loud]);
    assert_eq!(stdout(&o), "mine\n", "{}", stderr(&o));
}
