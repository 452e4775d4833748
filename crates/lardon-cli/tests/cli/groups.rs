//! Groups through the real binary (docs/DESIGN.md §10 "Groups"): a
//! group's limits hold under many `--each` tasks and are explained as
//! `group_limit`; `status|wait|pause|resume|cancel --group`; `restart
//! --failed` reruns exactly what failed; a task's `lardon submit` joins its
//! group and `lardon wait --group` inside it waits for the others; bad
//! names are refused naming the field.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use crate::support::*;

/// `lardon submit --each ARGS` with `input` on stdin.
fn each(dir: &Path, args: &[&str], input: &str) -> Output {
    lardon_stdin(dir, &[&["submit", "--each"], args].concat(), input.as_bytes())
}

fn lines(n: usize) -> String {
    (1..=n).map(|i| format!("{i}\n")).collect()
}

/// The most tasks between their `s` and `e` lines at once, over the
/// order the lines were appended in (each an `O_APPEND` write: one total
/// order of starts and ends). A task writes `s` after it started and `e`
/// before it exits, both inside its reservation, so this is at most what
/// the group held at once.
fn most_at_once(path: &Path) -> (usize, usize) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let (mut now, mut most, mut ends) = (0i64, 0i64, 0);
    for line in text.lines() {
        match line {
            "s" => now += 1,
            "e" => {
                now -= 1;
                ends += 1;
            }
            other => panic!("unexpected line {other:?}"),
        }
        most = most.max(now);
    }
    (usize::try_from(most).unwrap(), ends)
}

fn tasks_of(dir: &Path, group: &str) -> Vec<serde_json::Value> {
    let o = lardon(dir, &["status", "--group", group, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap().as_array().unwrap().clone()
}

fn reason(dir: &Path, id: &str) -> (String, String) {
    let t = task_json(dir, id);
    let d = &t["last_decision"];
    (
        d["reason_code"].as_str().unwrap_or_default().to_owned(),
        d["message"].as_str().unwrap_or_default().to_owned(),
    )
}

#[test]
fn a_max_running_limit_holds_under_200_each_tasks_and_is_explained() {
    let dir = tempfile::tempdir().unwrap();
    // 16 CPUs: the host would run many of these at once, the group 2.
    let _d = Daemon::start(dir.path(), "64GiB,16");
    let o = lardon(dir.path(), &["group", "add", "render", "--max-running", "2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("max_running 2"), "{}", stdout(&o));

    // Two holders first, so the third's wait can be read while they run.
    let gate = dir.path().join("gate");
    let hold = format!("until test -e {}; do sleep 0.02; done", gate.display());
    let a = submit(dir.path(), &["--group", "render", "--", "sh", "-c", &hold]);
    let b = submit(dir.path(), &["--group", "render", "--", "sh", "-c", &hold]);
    let c = submit(dir.path(), &["--group", "render", "--", "true"]);
    let free = submit(dir.path(), &["--", "true"]);
    wait_until("the ungrouped task to complete", Duration::from_secs(30), || {
        state(dir.path(), &free) == "completed"
    });
    wait_until("two holders running", Duration::from_secs(30), || {
        state(dir.path(), &a) == "running" && state(dir.path(), &b) == "running"
    });
    wait_until("the third to wait for its group", Duration::from_secs(30), || {
        reason(dir.path(), &c).0 == "group_limit"
    });
    assert_eq!(reason(dir.path(), &c).1, "group render holds 2 of its 2 running tasks");
    assert_eq!(state(dir.path(), &c), "pending");
    let table = stdout(&lardon(dir.path(), &["status"]));
    assert!(table.contains("group render holds 2 of its 2 running tasks"), "{table}");
    let explain = stdout(&lardon(dir.path(), &["explain", &c]));
    assert!(explain.contains("group_limit"), "{explain}");
    std::fs::write(&gate, "").unwrap();
    let o = lardon(dir.path(), &["wait", &a, &b, &c]);
    assert!(o.status.success(), "{}", stderr(&o));

    // 200 lines, each task recording its start and end.
    let log = dir.path().join("runs");
    let body = format!("echo s >> {0}; sleep 0.05; echo e >> {0}", log.display());
    let o = each(dir.path(), &["--group", "render", "--", "sh", "-c", &body], &lines(200));
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).lines().count(), 200);
    let o = lardon(dir.path(), &["wait", "--group", "render"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (most, ends) = most_at_once(&log);
    assert_eq!(ends, 200);
    assert!(most <= 2, "the group ran {most} tasks at once, its limit is 2");

    let o = lardon(dir.path(), &["group", "list", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let groups: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let render = groups.as_array().unwrap().iter().find(|g| g["name"] == "render").unwrap().clone();
    assert_eq!(render["limits"]["max_running"], 2, "{render}");
    assert_eq!(render["counts"]["completed"], 203, "{render}");
    assert_eq!(render["held"]["running"], 0, "{render}");
}

#[test]
fn a_memory_limit_holds_and_names_its_figures_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), "64GiB,16");
    let o = lardon(dir.path(), &["group", "add", "mem", "--mem", "1GiB"]);
    assert!(o.status.success(), "{}", stderr(&o));
    // The limit is stored: a new daemon enforces it from its first scan.
    d.kill9();
    let _d = Daemon::start(dir.path(), "64GiB,16");

    let gate = dir.path().join("gate");
    let hold = format!("until test -e {}; do sleep 0.02; done", gate.display());
    let a = submit(dir.path(), &["--group", "mem", "--mem", "400MiB", "--", "sh", "-c", &hold]);
    let b = submit(dir.path(), &["--group", "mem", "--mem", "400MiB", "--", "sh", "-c", &hold]);
    let c = submit(dir.path(), &["--group", "mem", "--mem", "400MiB", "--", "true"]);
    wait_until("the third to wait for its group", Duration::from_secs(30), || {
        reason(dir.path(), &c).0 == "group_limit"
    });
    assert_eq!(
        reason(dir.path(), &c).1,
        "group mem holds 800.0 MiB of its 1.0 GiB memory; needs 400.0 MiB for 1 item(s)"
    );
    assert_eq!((state(dir.path(), &a), state(dir.path(), &b)), ("running".into(), "running".into()));
    std::fs::write(&gate, "").unwrap();

    let log = dir.path().join("runs");
    let body = format!("echo s >> {0}; sleep 0.05; echo e >> {0}", log.display());
    let o = each(dir.path(), &["--group", "mem", "--mem", "400MiB", "--", "sh", "-c", &body], &lines(30));
    assert!(o.status.success(), "{}", stderr(&o));
    let o = lardon(dir.path(), &["wait", "--group", "mem"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (most, ends) = most_at_once(&log);
    assert_eq!(ends, 30);
    assert!(most <= 2, "the group held {most} × 400 MiB at once, its limit is 1 GiB");

    // Removing the limits keeps the tasks' group.
    let o = lardon(dir.path(), &["group", "remove", "mem"]);
    assert!(o.status.success() && stdout(&o).contains("limits removed"), "{}", stdout(&o));
    assert_eq!(tasks_of(dir.path(), "mem").len(), 33);
}

#[test]
fn restart_failed_reruns_exactly_the_failed_lines_of_an_each() {
    let dir = tempfile::tempdir().unwrap();
    let _d = Daemon::start(dir.path(), "8GiB,4");
    let o = each(dir.path(), &["--json", "--", "sh", "-c", "exit $(({} % 2))"], &lines(10));
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let ids: Vec<String> =
        v["ids"].as_array().unwrap().iter().map(|i| i.as_str().unwrap().to_owned()).collect();
    let group = v["group"].as_str().unwrap().to_owned();
    assert_eq!(group, format!("each-{}", ids[0]), "an --each call is a group of its own");
    // Without --json the name is on stderr, the ids alone on stdout.
    let o = each(dir.path(), &["--", "true"], "x\n");
    assert!(o.status.success(), "{}", stderr(&o));
    let other = stdout(&o).trim().to_owned();
    assert!(stderr(&o).contains(&format!("group each-{other}")), "{}", stderr(&o));

    let o = lardon(dir.path(), &["wait", "--group", &group]);
    assert_eq!(o.status.code(), Some(1), "odd lines fail: {}", stdout(&o));
    assert!(stdout(&o).contains("5 completed, 5 failed"), "{}", stdout(&o));

    let o = lardon(dir.path(), &["restart", "--failed", "--group", &group, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let mut restarted: Vec<String> =
        rows.as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap().to_owned()).collect();
    restarted.sort_by_key(|i| i.parse::<u64>().unwrap());
    let odd: Vec<String> = ids.iter().step_by(2).cloned().collect();
    assert_eq!(restarted, odd, "exactly the failed (odd) lines");
    let o = lardon(dir.path(), &["wait", "--group", &group]);
    assert_eq!(o.status.code(), Some(1));
    for (i, id) in ids.iter().enumerate() {
        let h = stdout(&lardon(dir.path(), &["explain", id, "--history", "--json"]));
        assert_eq!(h.contains("\"restarted\""), i % 2 == 0, "line {}: {h}", i + 1);
    }
    // The other --each call's task was never touched.
    let h = stdout(&lardon(dir.path(), &["explain", &other, "--history", "--json"]));
    assert!(!h.contains("\"restarted\""), "{h}");
    // --group alone is not a selection for restart.
    let o = lardon(dir.path(), &["restart", "--group", &group]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn status_pause_resume_cancel_and_wait_take_a_group() {
    let dir = tempfile::tempdir().unwrap();
    let _d = Daemon::start(dir.path(), "8GiB,4");
    let gate = dir.path().join("gate");
    let hold = format!("until test -e {}; do sleep 0.02; done", gate.display());
    let running = submit(dir.path(), &["--group", "g", "--", "sh", "-c", &hold]);
    let queued = submit(dir.path(), &["--group", "g", "--paused", "--", "true"]);
    let outside = submit(dir.path(), &["--paused", "--", "true"]);
    wait_until("the group's task to run", Duration::from_secs(30), || {
        state(dir.path(), &running) == "running"
    });
    let listed: Vec<String> =
        tasks_of(dir.path(), "g").iter().map(|t| t["id"].as_str().unwrap().to_owned()).collect();
    assert_eq!(listed, vec![running.clone(), queued.clone()]);
    assert_eq!(task_json(dir.path(), &running)["group"], "g");

    let o = lardon(dir.path(), &["pause", "--group", "g"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(state(dir.path(), &running), "paused");
    let o = lardon(dir.path(), &["resume", "--group", "g"]);
    assert!(o.status.success(), "{}", stderr(&o));
    wait_until("the group to resume", Duration::from_secs(30), || state(dir.path(), &running) == "running");
    assert_eq!(state(dir.path(), &outside), "paused", "another task is not the group's");

    let o = lardon(dir.path(), &["cancel", "--group", "g"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = lardon(dir.path(), &["wait", "--group", "g"]);
    assert_eq!(o.status.code(), Some(1), "cancelled is not success: {}", stdout(&o));
    assert_eq!(state(dir.path(), &running), "cancelled");
    assert_eq!(state(dir.path(), &outside), "paused");

    // `restart --failed` finds no failed task of the group; with
    // `--cancelled` it restarts the group's cancelled ones, and only those.
    let o = lardon(dir.path(), &["restart", "--failed", "--group", "g"]);
    assert!(o.status.success() && stdout(&o).contains("nothing to restart"), "{}", stdout(&o));
    std::fs::write(&gate, "").unwrap();
    let o = lardon(dir.path(), &["restart", "--failed", "--cancelled", "--group", "g", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let ids: Vec<&str> = rows.as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap()).collect();
    // (`queued` ran when the group was resumed: it completed.)
    assert_eq!(state(dir.path(), &queued), "completed");
    assert_eq!(ids, vec![running.as_str()]);
    let o = lardon(dir.path(), &["wait", "--group", "g"]);
    assert!(o.status.success(), "both rerun and complete: {}", stdout(&o));
    assert_eq!(state(dir.path(), &outside), "paused");
}

#[test]
fn a_task_submits_into_its_own_group_and_waits_for_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let _d = Daemon::start(dir.path(), "8GiB,4");
    let lardon_bin = bin().display().to_string();
    let gate = dir.path().join("gate");
    let child_out = dir.path().join("child");
    let parent_out = dir.path().join("parent");
    // The child waits for the test's gate; the parent (no --state-dir: the
    // LARDON_SOCKET its task has) submits it, waits for its group, and
    // records that the child had ended by then.
    let child = format!(
        "until test -e {g}; do sleep 0.02; done; echo \"$LARDON_GROUP\" > {c}",
        g = gate.display(),
        c = child_out.display()
    );
    let script = format!(
        "{l} submit -- sh -c '{child}' > {p}.id && {l} submit --group elsewhere -- true > /dev/null && \
         {l} wait --group \"$LARDON_GROUP\" > /dev/null; echo \"waited $? $(cat {c})\" > {p}",
        l = lardon_bin,
        p = parent_out.display(),
        c = child_out.display()
    );
    let parent = submit(dir.path(), &["--group", "fam", "--", "sh", "-c", &script]);
    let id_file = dir.path().join("parent.id");
    wait_until("the parent to submit its child", Duration::from_secs(30), || {
        std::fs::read_to_string(&id_file).is_ok_and(|s| !s.trim().is_empty())
    });
    let child_id = std::fs::read_to_string(&id_file).unwrap().trim().to_owned();
    // In the same daemon, in the parent's group.
    assert_eq!(task_json(dir.path(), &child_id)["group"], "fam");
    let fam: Vec<String> =
        tasks_of(dir.path(), "fam").iter().map(|t| t["id"].as_str().unwrap().to_owned()).collect();
    assert_eq!(fam, vec![parent.clone(), child_id.clone()], "the --group elsewhere task is not fam's");
    wait_until("the child to run", Duration::from_secs(30), || state(dir.path(), &child_id) == "running");
    assert_eq!(state(dir.path(), &parent), "running", "the parent waits for its child");
    std::fs::write(&gate, "").unwrap();
    // A deadline, not `lardon wait`: a parent that waited for itself would
    // never end.
    wait_until("the parent to end", Duration::from_secs(30), || state(dir.path(), &parent) == "completed");
    // It waited (exit 0) until the child had written its group, and never
    // for itself (it ended).
    assert_eq!(std::fs::read_to_string(&parent_out).unwrap().trim(), "waited 0 fam");
}

#[test]
fn bad_group_names_are_refused_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let _d = Daemon::start(dir.path(), "8GiB,2");
    for args in [
        vec!["submit", "--group", "a b", "--", "true"],
        vec!["submit", "--group", "", "--", "true"],
        vec!["status", "--group", "x/y"],
        vec!["wait", "--group", "é"],
        vec!["cancel", "--group", "no spaces"],
    ] {
        let o = lardon(dir.path(), &args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("--group"), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("group name"), "{args:?}: {}", stderr(&o));
    }
    let long = "x".repeat(65);
    let o = lardon(dir.path(), &["group", "add", &long, "--max-running", "1"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("<NAME>") && stderr(&o).contains("longer than 64"), "{}", stderr(&o));
    let o = lardon(dir.path(), &["group", "add", "ok", "--max-running", "0"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("max_running"), "{}", stderr(&o));
    let o = lardon(dir.path(), &["status", "--json"]);
    assert_eq!(stdout(&o).trim(), "[]", "nothing was queued");
}
