//! A pending task the queue holds back before admission says why, in
//! `status`, `status --json` and `explain`: an `--after` dependency not
//! ended yet, or its class's first run (the probe whose measured peak
//! sizes it). Without it such a task showed no reason at all.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Duration;

use crate::support::wait::wait_until;
use crate::support::{Daemon, lardon, state, stdout, submit, task_json};

#[test]
fn a_task_held_back_by_a_dependency_or_its_class_probe_names_what_it_waits_for() {
    let dir = tempfile::tempdir().unwrap();
    let _d = Daemon::start(dir.path(), "8GiB,4");
    let gate = dir.path().join("gate");
    let hold = format!("until test -e {}; do sleep 0.02; done", gate.display());
    let first = submit(dir.path(), &["--mem", "100MiB", "--class", "render", "--", "sh", "-c", &hold]);
    wait_until("the probe to run", Duration::from_secs(30), || state(dir.path(), &first) == "running");
    let sibling = submit(dir.path(), &["--mem", "100MiB", "--class", "render", "--", "true"]);
    let after = submit(dir.path(), &["--after", &first, "--", "true"]);

    let t = task_json(dir.path(), &sibling);
    assert_eq!(t["state"], "pending");
    let why = t["waiting_for"].as_str().unwrap_or_default().to_owned();
    assert_eq!(
        why,
        format!("waiting for task {first} (the first run of class render: its measured peak sizes this one)")
    );
    let t = task_json(dir.path(), &after);
    assert_eq!(t["waiting_for"], format!("waiting for task {first} (--after)"));
    let table = stdout(&lardon(dir.path(), &["status"]));
    assert!(table.contains(&format!("waiting for task {first} (--after)")), "{table}");
    let explain = stdout(&lardon(dir.path(), &["explain", &sibling]));
    assert!(explain.contains(&format!("held back: waiting for task {first} (the first run")), "{explain}");

    std::fs::write(&gate, "").unwrap();
    for id in [&sibling, &after] {
        wait_until("it to complete", Duration::from_secs(30), || state(dir.path(), id) == "completed");
        assert!(task_json(dir.path(), id)["waiting_for"].is_null(), "no longer held back");
    }
    assert!(task_json(dir.path(), &first)["waiting_for"].is_null());
}
