//! `lardon run FILE.toml` through the embedded engine: the demo runs to
//! completion, a failing task makes it exit 1, and re-running a partially
//! completed state dir does not rerun what completed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;
use std::path::Path;
use std::process::{Command, Output};

fn run(file: &Path, state: &Path) -> Output {
    Command::new(support::bin())
        .env_remove("LARDON_SOCKET")
        .env_remove("LARDON_STATE_DIR")
        .arg("run")
        .arg(file)
        .arg("--state-dir")
        .arg(state)
        .output()
        .unwrap()
}

#[test]
fn demo_runs_to_completion() {
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/demo.toml");
    let tmp = tempfile::tempdir().unwrap();
    let o = run(&demo, tmp.path());
    let out = support::stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{}", support::stderr(&o));
    assert!(out.contains("5 of 5 tasks completed"), "{out}");
    // What the demo is there to show.
    assert!(
        out.contains("big-merge: pending — waiting:") && out.contains("available now"),
        "memory wait: {out}"
    );
    let batches: Vec<&str> = out.lines().filter(|l| l.contains("tiles: items")).collect();
    assert!(batches.len() >= 2, "{out}");
    assert!(batches[0].contains("batch of 16"), "{out}");
    assert!(batches[1..].iter().any(|l| !l.contains("batch of 16")), "learning shrinks later batches: {out}");
}

#[test]
fn failing_task_exits_1_and_resume_skips_completed_tasks() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let lines = dir.join("lines");
    let flag = dir.join("flag");
    let file = dir.join("w.toml");
    std::fs::write(
        &file,
        format!(
            r#"
[host]
memory = "4GiB"
cpus = 2

[[task]]
name = "first"
command = ["sh", "-c", "echo first >> {lines}"]
mem = "16MiB"

[[task]]
name = "second"
command = ["sh", "-c", "test -e {flag}"]
mem = "16MiB"
after = ["first"]

[[task]]
name = "progress"
command = ["lardon", "exercise", "--mem", "8MiB", "--secs", "0.3", "--items", "4"]
mem = "64MiB"
items = 4
batch = "2..2"
"#,
            lines = lines.display(),
            flag = flag.display()
        ),
    )
    .unwrap();
    let state = dir.join("state");
    let o = run(&file, &state);
    let out = support::stdout(&o);
    assert_eq!(o.status.code(), Some(1), "second fails the first time: {out}{}", support::stderr(&o));
    assert!(out.contains("second: failed"), "{out}");
    assert!(out.contains("not completed: second"), "{out}");
    std::fs::write(&flag, "").unwrap();
    let o = run(&file, &state);
    let out = support::stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{}", support::stderr(&o));
    assert!(out.contains("first: kept from the earlier run (completed)"), "{out}");
    assert_eq!(std::fs::read_to_string(&lines).unwrap().lines().count(), 1, "first ran once");
    // A third run has nothing left to do and still succeeds, and says why
    // nothing ran, where that state lives and how to start over. Break it
    // to see it fail: drop the "every task completed" line in `drive`.
    let o = run(&file, &state);
    let out = support::stdout(&o);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(std::fs::read_to_string(&lines).unwrap().lines().count(), 1);
    assert!(out.contains(&format!("state: {} (--state-dir)", state.display())), "{out}");
    assert!(out.contains("every task completed in an earlier run"), "{out}");
    assert!(out.contains(&state.display().to_string()) && out.contains("--fresh"), "{out}");
    // --fresh forgets the earlier run: everything runs again.
    let o = Command::new(support::bin())
        .env_remove("LARDON_SOCKET")
        .env_remove("LARDON_STATE_DIR")
        .arg("run")
        .arg(&file)
        .arg("--fresh")
        .arg("--state-dir")
        .arg(&state)
        .output()
        .unwrap();
    let out = support::stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{}", support::stderr(&o));
    assert!(!out.contains("kept from the earlier run"), "{out}");
    assert_eq!(std::fs::read_to_string(&lines).unwrap().lines().count(), 2, "first ran again");
    // A state dir from the environment (meant for the daemon) is named.
    let o = Command::new(support::bin())
        .env_remove("LARDON_SOCKET")
        .env("LARDON_STATE_DIR", &state)
        .arg("run")
        .arg(&file)
        .output()
        .unwrap();
    let out = support::stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{}", support::stderr(&o));
    assert!(out.contains(&format!("state: {} (LARDON_STATE_DIR)", state.display())), "{out}");
}
