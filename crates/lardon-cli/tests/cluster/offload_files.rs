//! Offload from a daemon, continued (docs/DESIGN.md §14), with real
//! processes on loopback (`support/offload_cluster.rs`): a shippable task
//! that waits in the local queue ships after `offload_wait_ms` and runs
//! once; a shipped task's input file travels to the agent and its output
//! file comes back into its working directory, also across a daemon
//! restart; a missing input is refused at submit naming the flag.
//!
//! Waits poll with a deadline that only fails.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;

use crate::support::offload_cluster::{Cluster, REMOTE, lines, sh};
use crate::support::procs::logs;
use crate::support::{lardon, stderr, task_json};

/// A shell loop that ends once `go` exists (or after two minutes).
fn until_file(go: &Path) -> String {
    format!("i=0; while [ ! -e '{}' ] && [ $i -lt 2400 ]; do sleep 0.05; i=$((i+1)); done", go.display())
}

#[test]
fn a_task_waiting_in_the_local_queue_ships_after_wait_ms_and_runs_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let c = Cluster::start(d, "max_running = 1\noffload = { prefer = \"local\", wait_ms = 500 }\n", "1");
    let go = d.join("go");
    let busy = c.submit(&["--", "sh", "-c", &until_file(&go)]);
    c.until("the local task running", || task_json(&c.state, &busy)["state"] == "running");

    let runs = d.join("runs");
    let id = c.submit(&sh(&format!("echo at-$ONLY_ON_AGENT. >> '{}'", runs.display())));
    let t = c.ended(&id);
    assert_eq!(t["state"].as_str(), Some("completed"), "{t}\n{}", logs(&c.procs()));
    assert_eq!(task_json(&c.state, &busy)["state"], "running", "it did not wait for the slot");
    assert_eq!(lines(&runs, "at-agent-side."), 1, "it ran at the agent");

    // It joined the local queue, waited there (the busy task holds the
    // simulated host's one free CPU and its one running slot), then
    // shipped saying why.
    let course = c.course(&id);
    let waited = course.iter().position(|(k, _, _)| k == "waited");
    let shipped = course.iter().position(|(k, code, m)| {
        k == "offloaded" && code == "shipped" && m.contains("waited") && m.contains("offload wait_ms = 500")
    });
    assert!(waited.is_some() && shipped.is_some() && waited < shipped, "{course:?}");

    // The slot frees: a later local task runs, and the shipped one never
    // runs here (it left the local queue, which is FIFO under max_running).
    std::fs::write(&go, "").unwrap();
    assert_eq!(c.ended(&busy)["state"].as_str(), Some("completed"));
    let after = c.submit(&["--", "true"]);
    assert_eq!(c.ended(&after)["state"].as_str(), Some("completed"));
    assert_eq!((lines(&runs, "at-agent-side."), lines(&runs, "at-.")), (1, 0), "it ran once, remotely");
}

#[test]
fn a_shipped_tasks_input_travels_and_its_output_comes_back_into_its_directory() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let c = Cluster::start(d, REMOTE, "1");
    let work = d.join("work");
    std::fs::create_dir_all(work.join("src")).unwrap();
    std::fs::write(work.join("src/in.txt"), "hello from here\n").unwrap();
    std::fs::create_dir(work.join("out")).unwrap();
    std::fs::write(work.join("out/up.txt"), "stale\n").unwrap();

    let script = "mkdir -p out && tr a-z A-Z < src/in.txt > out/up.txt && echo where=$ONLY_ON_AGENT";
    let mut args = vec!["--cwd", work.to_str().unwrap(), "--input", "src/in.txt", "--output", "out/up.txt"];
    args.extend(sh(script));
    let id = c.submit(&args);
    let t = c.ended(&id);
    assert_eq!(t["state"].as_str(), Some("completed"), "{t}\n{}", logs(&c.procs()));
    assert!(c.log(&id).contains("where=agent-side"), "{}", c.log(&id));
    assert_eq!(std::fs::read_to_string(work.join("out/up.txt")).unwrap(), "HELLO FROM HERE\n");
    let names: Vec<String> = std::fs::read_dir(work.join("out"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, ["up.txt"], "no temporary file left");
    assert_eq!(std::fs::read_to_string(work.join("src/in.txt")).unwrap(), "hello from here\n");
}

#[test]
fn a_daemon_restarted_while_the_task_is_out_still_writes_its_output() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut c = Cluster::start(d, REMOTE, "1");
    let work = d.join("work");
    std::fs::create_dir(&work).unwrap();
    std::fs::write(work.join("in.txt"), "abc\n").unwrap();
    let runs = d.join("runs");
    let script = format!(
        "echo start >> '{r}'; {wait}; rev in.txt > out.txt; echo end >> '{r}'",
        r = runs.display(),
        wait = until_file(&d.join("go"))
    );
    let mut args = vec!["--cwd", work.to_str().unwrap(), "--input", "in.txt", "--output", "out.txt"];
    args.extend(sh(&script));
    let id = c.submit(&args);
    c.until("the run started at the agent", || lines(&runs, "start") == 1);

    c.daemon.kill9();
    std::fs::write(d.join("go"), "").unwrap();
    c.until("the run ended at the agent", || lines(&runs, "end") == 1);
    assert!(!work.join("out.txt").exists(), "nothing wrote it yet");
    c.daemon = Cluster::daemon(d, &c.state, &c.addr);
    c.until("the daemon to answer again", || lardon(&c.state, &["status"]).status.success());

    let t = c.ended(&id);
    assert_eq!(t["state"].as_str(), Some("completed"), "{t}\n{}", logs(&c.procs()));
    assert_eq!(std::fs::read_to_string(work.join("out.txt")).unwrap(), "cba\n");
    assert_eq!((lines(&runs, "start"), lines(&runs, "end")), (1, 1), "it ran once");
}

#[test]
fn bad_file_flags_are_refused_at_submit_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("sub")).unwrap();
    let cwd = d.to_str().unwrap();
    let outside = std::env::temp_dir().join("lardon-not-under-cwd.txt");
    for (files, want) in [
        (vec!["--input", "missing.txt"], "--input: `"),
        (vec!["--input", "sub"], "is not a regular file"),
        (vec!["--input", "../x"], "--input: `../x` has an empty, `.` or `..` component"),
        (vec!["--input", outside.to_str().unwrap()], "is outside the working directory"),
        (vec!["--output", "/tmp/out.o"], "--output: `/tmp/out.o` is absolute"),
        (vec!["--output", "a/../../b"], "--output: `a/../../b` has"),
    ] {
        let mut args = vec!["submit", "--cwd", cwd];
        args.extend(&files);
        args.extend(sh("true"));
        // No daemon runs: the flags are checked before any connection.
        let o = lardon(&d.join("state"), &args);
        assert_eq!(o.status.code(), Some(2), "{files:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{files:?}: {}", stderr(&o));
        if files[1] == "missing.txt" {
            assert!(stderr(&o).contains("missing.txt"), "{}", stderr(&o));
        }
    }
    // Without --shippable the flags are refused by the parser.
    let o = lardon(&d.join("state"), &["submit", "--input", "x", "--", "true"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--shippable"), "{}", stderr(&o));
}

#[test]
fn balance_ships_a_task_this_host_would_admit_when_it_is_busier_than_the_agents() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A pool of one CPU (4 simulated CPUs, 3 reserved), half of it taken;
    // the agent is idle.
    let c = Cluster::start(d, "cpu_reserve = 3\noffload = { prefer = \"balance\" }\n", "1");
    let go = d.join("go");
    let busy = c.submit(&["--cpus", "0.5", "--", "sh", "-c", &until_file(&go)]);
    c.until("the local task running", || task_json(&c.state, &busy)["state"] == "running");

    let mut args = vec!["--cpus", "0.25"];
    args.extend(sh("echo where=$ONLY_ON_AGENT."));
    let id = c.submit(&args);
    let t = c.ended(&id);
    assert_eq!(t["state"].as_str(), Some("completed"), "{t}\n{}", logs(&c.procs()));
    assert!(c.log(&id).contains("where=agent-side."), "{}", c.log(&id));
    let course = c.course(&id);
    assert!(
        course.iter().any(|(k, _, m)| k == "offloaded"
            && m.contains("balance: this host is 50% busy, the agents for sh@1:* 0% (0 of 1 tokens held)")),
        "{course:?}"
    );
    assert!(course.iter().all(|(k, _, _)| k != "waited"), "it was admissible here: {course:?}");

    // Idle here as there: the same task stays here.
    std::fs::write(&go, "").unwrap();
    assert_eq!(c.ended(&busy)["state"].as_str(), Some("completed"));
    let here = c.submit(&args);
    assert_eq!(c.ended(&here)["state"].as_str(), Some("completed"));
    assert!(c.log(&here).contains("where=."), "{}", c.log(&here));
}
