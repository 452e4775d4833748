//! Every `--json` verb writing into a pipe nobody reads (`lardon status
//! --json | head -c1`) ends quietly: exit 0, nothing on stderr. The pipe's
//! read end is closed before the command starts, so the very first write
//! fails with EPIPE — deterministic, unlike racing a real `head`.
//!
//! Break it to see it fail: make `json::print` write through
//! `serde_json::to_writer_pretty` again and drop the `serde_json::Error`
//! case of `error::is_broken_pipe` (the io error leaves the chain and
//! `main` prints `error: Broken pipe`, exit 1).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::support::{Daemon, bin, lardon, state, stderr, submit, wait_until};

/// `lardon --state-dir DIR ARGS…` with stdout a pipe whose reader is gone.
fn into_closed_pipe(dir: &std::path::Path, args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    Command::new(bin())
        .env_remove("LARDON_SOCKET")
        .env_remove("LARDON_STATE_DIR")
        .env_remove("LARDON_TASK_ID")
        .arg("--state-dir")
        .arg(dir)
        .args(args)
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("run lardon")
}

#[test]
fn every_json_verb_into_a_closed_pipe_exits_0_quietly() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let _d = Daemon::start(dir, "8GiB,2");
    let done = submit(dir, &["--name", "quick", "--", "true"]);
    assert!(lardon(dir, &["wait", &done]).status.success());
    let gone = submit(dir, &["--", "true"]);
    assert!(lardon(dir, &["wait", &gone]).status.success());
    let long = submit(dir, &["--name", "sleeper", "--", "sleep", "60"]);
    wait_until("sleeper to run", Duration::from_secs(30), || state(dir, &long) == "running");
    let scratch = tmp.path().join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    assert!(
        lardon(dir, &["scratch", "add", scratch.to_str().unwrap(), "--capacity", "1MiB"]).status.success()
    );

    let verbs: Vec<Vec<&str>> = vec![
        vec!["status", "--json"],
        vec!["status", &done, "--json"],
        vec!["explain", &done, "--json"],
        vec!["resources", "--json"],
        vec!["policy", "--json"],
        vec!["scratch", "status", "--json"],
        vec!["submit", "--json", "--", "true"],
        vec!["wait", &done, "--json"],
        vec!["pause", &long, "--json"],
        vec!["resume", &long, "--json"],
        vec!["cancel", &long, "--json"],
        vec!["remove", &gone, "--json"],
        vec!["clean", "--json"],
    ];
    for args in &verbs {
        let o = into_closed_pipe(dir, args);
        assert_eq!(o.status.code(), Some(0), "lardon {args:?} into a closed pipe: {}", stderr(&o));
        assert!(o.stderr.is_empty(), "lardon {args:?} into a closed pipe said: {}", stderr(&o));
    }
}
