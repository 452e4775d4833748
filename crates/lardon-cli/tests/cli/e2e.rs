//! End to end through the real binary against a real daemon process
//! (simulated host, so admission does not depend on this machine's load).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;
use std::time::Duration;

use crate::support::{Daemon, lardon, state, stderr, stdout, submit, task_json, wait_until};

const LONG: Duration = Duration::from_secs(30);

#[test]
fn submit_status_explain_log_pause_resume_cancel_wait_remove_clean() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let _d = Daemon::start(dir, "8GiB,2");
    let o = lardon(dir, &["policy", "--set", "cpu_reserve=0", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let policy: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        policy["entries"].as_array().unwrap().iter().any(|e| e["key"] == "cpu_reserve" && e["value"] == "0")
    );

    // A command that succeeds, with its output in the log.
    let ok =
        submit(dir, &["--mem", "64MiB", "--name", "greet", "--", "sh", "-c", "echo hello; echo oops >&2"]);
    let o = lardon(dir, &["wait", &ok]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("completed"));
    let o = lardon(dir, &["log", &ok]);
    assert!(stdout(&o).contains("hello") && stdout(&o).contains("oops"), "{}", stdout(&o));
    let t = task_json(dir, &ok);
    assert_eq!(t["state"], "completed");
    assert_eq!(t["name"], "greet");
    assert_eq!(t["estimate"]["memory_fixed"], 64 << 20);
    let o = lardon(dir, &["explain", &ok, "--json"]);
    let e: serde_json::Value = serde_json::from_slice(&o.stdout).expect("explain --json parses");
    assert_eq!(e["last_decision"]["kind"], "admit", "{e}");
    let o = lardon(dir, &["explain", &ok]);
    assert!(stdout(&o).contains("NEEDS") && stdout(&o).contains("AVAILABLE NOW"), "{}", stdout(&o));

    // --json submit prints the task.
    let o = lardon(dir, &["submit", "--json", "--mem", "1MiB", "--", "true"]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("submit --json parses");
    assert!(j["id"].is_string());

    // Pause, resume and cancel a running command.
    let long = submit(dir, &["--name", "sleeper", "--", "sleep", "60"]);
    wait_until("sleeper to run", LONG, || state(dir, &long) == "running");
    let o = lardon(dir, &["pause", &long]);
    assert!(o.status.success(), "{}", stderr(&o));
    wait_until("sleeper paused", LONG, || state(dir, &long) == "paused");
    assert_eq!(task_json(dir, &long)["paused_while_running"], true);
    assert!(lardon(dir, &["resume", &long]).status.success());
    wait_until("sleeper running again", LONG, || state(dir, &long) == "running");
    let o = lardon(dir, &["status"]);
    assert!(stdout(&o).contains("sleeper") && stdout(&o).contains("running"), "{}", stdout(&o));
    let o = lardon(dir, &["cancel", &long, "--grace", "1s"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = lardon(dir, &["wait", &long]);
    assert_eq!(o.status.code(), Some(1), "a cancelled task is not a success: {}", stdout(&o));
    assert_eq!(state(dir, &long), "cancelled");

    // A failing command: wait exits 1, status has the exit code.
    let bad = submit(dir, &["--", "sh", "-c", "exit 3"]);
    let o = lardon(dir, &["wait", &bad, "--json"]);
    assert_eq!(o.status.code(), Some(1));
    for line in stdout(&o).lines() {
        serde_json::from_str::<serde_json::Value>(line).expect("wait --json lines parse");
    }
    let t = task_json(dir, &bad);
    assert_eq!(t["state"], "failed");
    assert_eq!(t["exit_code"], 3);

    // Remove one, clean the rest; an unknown id is an input error.
    assert!(lardon(dir, &["remove", &bad]).status.success());
    assert_eq!(lardon(dir, &["status", &bad]).status.code(), Some(2));
    let o = lardon(dir, &["clean", "--json"]);
    let c: serde_json::Value = serde_json::from_slice(&o.stdout).expect("clean --json parses");
    assert!(c["removed"].as_array().unwrap().len() >= 3, "{c}");
    let o = lardon(dir, &["status", "--json"]);
    let all: serde_json::Value = serde_json::from_slice(&o.stdout).expect("status --json parses");
    assert_eq!(all.as_array().unwrap().len(), 0, "{all}");
    let o = lardon(dir, &["resources", "--json"]);
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).expect("resources --json parses");
    assert_eq!(r["memory"]["total"], 8u64 << 30);
}

#[test]
fn memory_wait_names_memory_and_impossible_is_rejected() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let _d = Daemon::start(dir, "8GiB,2");
    let o = lardon(
        dir,
        &["policy", "--set", "memory_reserve=6GiB", "--set", "memory_caution=none", "--set", "cpu_reserve=0"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let gate = dir.join("gate");
    let hold = format!("while [ ! -e {} ]; do sleep 0.02; done", gate.display());
    let a = submit(dir, &["--mem", "1536MiB", "--name", "holder", "--", "sh", "-c", &hold]);
    wait_until("holder to run", LONG, || state(dir, &a) == "running");
    let b = submit(dir, &["--mem", "1GiB", "--name", "needs-memory", "--", "true"]);
    wait_until("a memory wait", LONG, || {
        let t = task_json(dir, &b);
        t["state"] == "pending" && t["last_decision"]["reason_code"] == "memory"
    });
    let o = lardon(dir, &["status"]);
    let table = stdout(&o);
    let row = table.lines().find(|l| l.contains("needs-memory")).unwrap();
    assert!(row.contains("waiting") && row.to_lowercase().contains("memory"), "{row}");
    let o = lardon(dir, &["explain", &b]);
    assert!(stdout(&o).contains("WAIT") && stdout(&o).contains("memory"), "{}", stdout(&o));
    let opened =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    std::fs::write(&gate, "").unwrap();
    let o = lardon(dir, &["wait", &a, &b]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let started = task_json(dir, &b)["started_unix_ms"].as_i64().unwrap();
    assert!(started >= opened, "the waiting task started only once the holder could end");

    let huge = submit(dir, &["--mem", "100GiB", "--name", "impossible", "--", "true"]);
    let o = lardon(dir, &["wait", &huge]);
    assert_eq!(o.status.code(), Some(1));
    let t = task_json(dir, &huge);
    assert_eq!(t["state"], "failed");
    let reason = format!("{} {}", t["failure_reason"], t["last_decision"]["message"]).to_lowercase();
    assert!(reason.contains("impossible") || reason.contains("never"), "{t}");
}

#[test]
fn progress_from_inside_a_task_and_log_follow() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let d = Daemon::start(dir, "8GiB,2");
    assert!(lardon(dir, &["policy", "--set", "cpu_reserve=0"]).status.success());
    let gate = dir.join("gate");
    let bin = support::bin().display().to_string();
    // `lardon progress` inside a task finds the daemon through the task's environment.
    let script = format!(
        "echo started; {bin} progress 3/10 'three done' || exit 9; while [ ! -e {} ]; do sleep 0.02; done; echo finished",
        gate.display()
    );
    let id = submit(dir, &["--name", "reporter", "--", "sh", "-c", &script]);
    wait_until("progress 3/10", LONG, || {
        let p = &task_json(dir, &id)["progress"];
        p["done"] == 3 && p["total"] == 10
    });
    assert_eq!(task_json(dir, &id)["progress"]["message"], "three done");
    let o = lardon(dir, &["status"]);
    assert!(stdout(&o).contains("30%"), "{}", stdout(&o));
    // Follow the log until the task ends.
    let follower = std::process::Command::new(support::bin())
        .arg("--state-dir")
        .arg(dir)
        .args(["log", &id, "--follow"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::fs::write(&gate, "").unwrap();
    let out = follower.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(text.contains("started") && text.contains("finished"), "{text}");
    assert_eq!(lardon(dir, &["wait", &id]).status.code(), Some(0));

    // `lardon exercise` as a task reports progress through the daemon.
    let ex = submit(dir, &["--mem", "96MiB", "--", &bin, "exercise", "--mem", "64MiB", "--secs", "0.5"]);
    assert_eq!(lardon(dir, &["wait", &ex]).status.code(), Some(0));
    let t = task_json(dir, &ex);
    assert_eq!(t["progress"]["done"], 100, "{t}");
    assert!(stdout(&lardon(dir, &["log", &ex])).contains("held 64.0 MiB"));

    // `lardon status | head -1` and friends: a closed pipe is a quiet success.
    for args in [&["status"][..], &["completions", "bash"], &["log", &ex]] {
        let mut child = std::process::Command::new(support::bin())
            .arg("--state-dir")
            .arg(dir)
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(out.stderr.is_empty(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }

    // SIGTERM stops the daemon cleanly.
    assert!(d.stop().success());
}
