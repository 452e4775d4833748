//! `lardon restart ID…` through the real binary: a finished task runs
//! again with the same spec and id as a new attempt, its history (course,
//! log) is kept, and a live task is refused naming why.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::support::*;

/// Fails on its first run and succeeds on the next one: the marker file
/// is the only state that survives between attempts.
fn flaky(dir: &std::path::Path) -> String {
    let marker = dir.join("ran-once");
    let script = format!("echo attempt; test -e {0} || {{ touch {0}; exit 3; }}", marker.display());
    submit(dir, &["--name", "flaky", "--", "sh", "-c", &script])
}

#[test]
fn a_failed_task_runs_again_as_a_new_attempt_and_keeps_its_history() {
    let dir = tempfile::tempdir().unwrap();
    let _d = Daemon::start(dir.path(), "8GiB,2");
    let id = flaky(dir.path());
    let o = lardon(dir.path(), &["wait", &id]);
    assert_eq!(o.status.code(), Some(1), "the first run fails: {}", stderr(&o));
    assert_eq!(state(dir.path(), &id), "failed");

    let o = lardon(dir.path(), &["restart", &id, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(rows[0]["id"], id.as_str());
    assert_eq!(rows[0]["ok"], true);

    let o = lardon(dir.path(), &["wait", &id]);
    assert!(o.status.success(), "the second run succeeds: {}", stderr(&o));
    let task = task_json(dir.path(), &id);
    assert_eq!(task["state"], "completed");
    assert_eq!(task["exit_code"], 0, "{task}");
    assert_eq!(task["name"], "flaky", "same spec");

    // The log keeps both attempts, with the separator between them.
    let log = stdout(&lardon(dir.path(), &["log", &id]));
    assert_eq!(log.matches("attempt").count(), 2, "{log}");
    let marker = log.find("restarted").expect("a separator line");
    assert!(log[..marker].contains("attempt") && log[marker..].contains("attempt"), "{log}");

    // The course says it was restarted, between the two admissions.
    let o = lardon(dir.path(), &["explain", &id, "--history", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let kinds: Vec<&str> =
        v["history"].as_array().unwrap().iter().map(|h| h["kind"].as_str().unwrap()).collect();
    let at = kinds.iter().position(|k| *k == "restarted").unwrap_or_else(|| panic!("{kinds:?}"));
    assert!(kinds[..at].contains(&"admitted") && kinds[at..].contains(&"admitted"), "{kinds:?}");
}

#[test]
fn a_live_or_unknown_task_is_refused_naming_why() {
    let dir = tempfile::tempdir().unwrap();
    let _d = Daemon::start(dir.path(), "8GiB,2");
    let id = submit(dir.path(), &["--paused", "--", "true"]);
    let o = lardon(dir.path(), &["restart", &id]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("only completed, failed or cancelled tasks can be restarted"),
        "{}",
        stderr(&o)
    );
    assert_eq!(state(dir.path(), &id), "paused", "a refused restart changes nothing");

    let o = lardon(dir.path(), &["restart", "999999"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("no task"), "{}", stderr(&o));
}

#[test]
fn a_cancelled_task_restarts_and_a_restart_survives_the_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), "8GiB,2");
    let id = submit(dir.path(), &["--paused", "--", "true"]);
    let o = lardon(dir.path(), &["cancel", &id]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(state(dir.path(), &id), "cancelled");
    // The restart is written before the reply: a kill -9 right after it
    // loses nothing.
    let o = lardon(dir.path(), &["restart", &id]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains(&format!("restarted {id}")), "{}", stdout(&o));
    d.kill9();
    let _d = Daemon::start(dir.path(), "8GiB,2");
    let o = lardon(dir.path(), &["wait", &id]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(state(dir.path(), &id), "completed");
}
