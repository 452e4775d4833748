//! A reply is a promise (docs/DESIGN.md §10), through the real binaries: a
//! submit the daemon acknowledged survives a kill -9 sent the moment the
//! client exits, and `lardon status` run right after `lardon pause` (or
//! resume) already shows it. Nothing waits between the reply and the check.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::support::*;

fn submit_each(dir: &std::path::Path, input: &str) -> Vec<String> {
    let o = crate::support::lardon_stdin(
        dir,
        &["submit", "--paused", "--json", "--each", "-", "--", "echo", "{}"],
        input.as_bytes(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["ids"].as_array().unwrap().iter().map(|i| i.as_str().unwrap().to_owned()).collect()
}

/// `lardon VERB ID`, which must succeed.
fn act(dir: &std::path::Path, verb: &str, id: &str) {
    let o = lardon(dir, &[verb, id]);
    assert!(o.status.success(), "{verb} {id}: {}", stderr(&o));
}

#[test]
fn an_acknowledged_submit_survives_kill_9_right_after_the_reply() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut daemon = Daemon::start(dir, "8GiB,2");
    let mut acked = Vec::new();
    for round in 0..6 {
        // Paused, so that the only thing between the reply and the kill is
        // the reply itself.
        acked.push(submit(dir, &["--paused", "--name", &format!("one{round}"), "--", "true"]));
        daemon.kill9();
        daemon = Daemon::start(dir, "8GiB,2");
        let lines: String = (0..200).map(|i| format!("r{round}i{i}\n")).collect();
        acked.extend(submit_each(dir, &lines));
        daemon.kill9();
        daemon = Daemon::start(dir, "8GiB,2");
    }
    let o = lardon(dir, &["status", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let stored: std::collections::BTreeSet<String> =
        v.as_array().unwrap().iter().map(|t| t["id"].as_str().unwrap().to_owned()).collect();
    let lost: Vec<&String> = acked.iter().filter(|id| !stored.contains(*id)).collect();
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged tasks lost, e.g. {:?}",
        lost.len(),
        acked.len(),
        &lost[..lost.len().min(10)]
    );
    daemon.stop();
}

#[test]
fn status_right_after_pause_and_resume_shows_them() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let daemon = Daemon::start(dir, "8GiB,2");
    // `waiting` stays pending behind a task paused from the start.
    let held = submit(dir, &["--paused", "--", "true"]);
    let waiting = submit(dir, &["--after", &held, "--", "true"]);
    for _ in 0..5 {
        act(dir, "pause", &waiting);
        assert_eq!(state(dir, &waiting), "paused", "status right after pause");
        act(dir, "resume", &waiting);
        assert_eq!(state(dir, &waiting), "pending", "status right after resume");
    }
    // A running command.
    let running = submit(dir, &["--", "sleep", "600"]);
    // Setting up only: it must run before it is paused.
    wait_until("the task to run", std::time::Duration::from_secs(30), || state(dir, &running) == "running");
    for _ in 0..3 {
        act(dir, "pause", &running);
        assert_eq!(state(dir, &running), "paused", "status right after pause");
        act(dir, "resume", &running);
        assert_eq!(state(dir, &running), "running", "status right after resume");
    }
    act(dir, "cancel", &running);
    daemon.stop();
}
