//! One owner per task, through the real binary: a task's lifecycle reaches
//! the store from more than one writer (the pump's start and end, the
//! run's exit code), and no order in which they land may lose a field.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::support::*;

/// How many tasks each round runs (issue 25: 2 000 × `true`).
const TASKS: usize = 2_000;

/// `lardon submit --each - --paused --json -- true`, one task per input line.
fn submit_paused(dir: &std::path::Path, n: usize) -> Vec<String> {
    let mut child = Command::new(bin())
        .env_remove("LARDON_SOCKET")
        .env_remove("LARDON_STATE_DIR")
        .arg("--state-dir")
        .arg(dir)
        .args(["submit", "--each", "-", "--paused", "--json", "--", "true"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let input: String = (0..n).map(|i| format!("{i}\n")).collect();
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "submit --each: {}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["ids"].as_array().unwrap().iter().map(|id| id.as_str().unwrap().to_owned()).collect()
}

/// The tasks of `lardon status --json` whose id is in `ids`, as (id, state, exit code).
fn ends(dir: &std::path::Path, ids: &[String]) -> Vec<(String, String, serde_json::Value)> {
    let o = lardon(dir, &["status", "--json"]);
    assert!(o.status.success(), "status: {}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let tasks = v.as_array().cloned().or_else(|| v["tasks"].as_array().cloned()).unwrap();
    let wanted: std::collections::HashSet<&str> = ids.iter().map(String::as_str).collect();
    tasks
        .iter()
        .filter_map(|t| {
            let id = t["id"].as_str()?;
            wanted.contains(id).then(|| {
                (id.to_owned(), t["state"].as_str().unwrap_or_default().to_owned(), t["exit_code"].clone())
            })
        })
        .collect()
}

/// Issue 25's lost exit code: paused submits resumed together make the
/// pump's `pending → running` and the runner's exit code race to the
/// store's writer. At every `max_running`, every one of 2 000 `true` tasks
/// must end `completed` with exit code 0.
#[test]
fn every_completed_task_keeps_its_exit_code_at_any_parallelism() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let _daemon = Daemon::start(d, "64GiB,16");
    let o = lardon(d, &["policy", "--set", "cpu_reserve=0", "--set", "memory_caution=none"]);
    assert!(o.status.success(), "{}", stderr(&o));
    for max_running in [1, 2, 8] {
        let started = Instant::now();
        let o = lardon(d, &["policy", "--set", &format!("max_running={max_running}")]);
        assert!(o.status.success(), "{}", stderr(&o));
        let ids = submit_paused(d, TASKS);
        assert_eq!(ids.len(), TASKS);
        let args: Vec<&str> = std::iter::once("resume").chain(ids.iter().map(String::as_str)).collect();
        let o = lardon(d, &args);
        assert!(o.status.success(), "resume: {}", stderr(&o));
        let o = lardon(d, &["wait"]);
        assert!(o.status.success(), "wait: {}", stderr(&o));
        let ends = ends(d, &ids);
        assert_eq!(ends.len(), TASKS, "max_running {max_running}: every task listed");
        let wrong: Vec<_> = ends
            .iter()
            .filter(|(_, state, code)| state != "completed" || *code != serde_json::json!(0))
            .take(5)
            .collect();
        assert!(wrong.is_empty(), "max_running {max_running}: {wrong:?}");
        eprintln!("max_running {max_running}: {TASKS} tasks in {:?}", started.elapsed());
    }
}
