//! Offload from a daemon (docs/DESIGN.md §14) with real processes on
//! loopback: a `lardon broker`, a `lardon agent` whose environment alone
//! has `ONLY_ON_AGENT` (so a task's output says where it ran), and a
//! `lardon daemon --broker`; tasks are submitted, cancelled and read with
//! the ordinary `lardon` commands. Every infrastructure failure must run
//! the task here, once.
//!
//! Waits poll with a deadline that only fails.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::support;
use std::path::Path;

use crate::support::offload_cluster::{Cluster, REMOTE, WAIT, lines, sh};
use crate::support::procs::{Proc, free_port, logs};
use crate::support::{lardon, stderr, stdout, submit, task_json, wait_until};

#[test]
fn prefer_remote_runs_at_the_agent_and_comes_back_as_a_local_run_would() {
    let dir = tempfile::tempdir().unwrap();
    let c = Cluster::start(dir.path(), REMOTE, "2");

    let ok = c.submit(&sh("echo where=$ONLY_ON_AGENT; echo to-stderr >&2"));
    let bad = c.submit(&sh("echo failing; exit 3"));

    let t = c.ended(&ok);
    assert_eq!((t["state"].as_str(), t["exit_code"].as_i64()), (Some("completed"), Some(0)), "{t}");
    let log = c.log(&ok);
    assert!(log.contains("where=agent-side") && log.contains("to-stderr"), "{log}");
    let course = c.course(&ok);
    assert!(
        course
            .iter()
            .any(|(k, code, m)| k == "offloaded" && code == "ran_remotely" && m.contains("ran on agent a1")),
        "{course:?}\n{}",
        logs(&c.procs())
    );

    let t = c.ended(&bad);
    assert_eq!((t["state"].as_str(), t["exit_code"].as_i64()), (Some("failed"), Some(3)), "{t}");
    assert!(c.log(&bad).contains("failing"));
    // `lardon wait` works unchanged: 0 for the success, 1 for the failure.
    assert_eq!(lardon(&c.state, &["wait", &ok]).status.code(), Some(0));
    let w = lardon(&c.state, &["wait", &bad]);
    assert_eq!(w.status.code(), Some(1), "{}", stderr(&w));
}

#[test]
fn a_capability_no_agent_serves_runs_here_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let c = Cluster::start(dir.path(), REMOTE, "1");
    let id =
        c.submit(&["--capability", "gcc@12", "--shippable", "--", "sh", "-c", "echo where=$ONLY_ON_AGENT."]);
    let t = c.ended(&id);
    assert_eq!(t["state"].as_str(), Some("completed"), "{t}");
    assert!(c.log(&id).contains("where=."), "ran here, without the agent's environment");
    let course = c.course(&id);
    assert!(
        course.iter().any(|(k, code, m)| k == "ran_locally"
            && code == "no_executor"
            && m == "no agent for capability gcc@12:*: ran locally"),
        "{course:?}"
    );
}

#[test]
fn a_broker_killed_with_queued_tasks_has_them_run_here_once_each() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut c = Cluster::start(d, REMOTE, "1");
    // Another submitter holds the agent's one token, so the daemon's tasks
    // queue at the broker.
    let blocker = format!(
        "i=0; while [ ! -e '{}' ] && [ $i -lt 2400 ]; do sleep 0.05; i=$((i+1)); done",
        d.join("go").display()
    );
    let _holder = Proc::start(
        d,
        "holder",
        &["cluster", "submit", "--broker", &c.addr, "--capability", "sh@1", "--", "sh", "-c", &blocker],
    );
    c.until("the holder in flight", || c.broker_status().is_some_and(|s| s["in_flight"] == 1));
    let runs = d.join("runs");
    let scripts: Vec<String> =
        ["b", "c"].iter().map(|n| format!("echo run-{n} >> '{}'", runs.display())).collect();
    let ids: Vec<String> = scripts.iter().map(|s| c.submit(&sh(s))).collect();
    c.until("both queued at the broker", || c.broker_status().is_some_and(|s| s["queued"] == 2));

    c.broker.kill9();
    for id in &ids {
        let t = c.ended(id);
        assert_eq!(t["state"].as_str(), Some("completed"), "{t}\n{}", logs(&c.procs()));
        let course = c.course(id);
        assert!(
            course.iter().any(|(k, code, m)| k == "ran_locally"
                && code == "broker_unreachable"
                && m.ends_with("unreachable: ran locally")),
            "{course:?}"
        );
    }
    // The agent is free again, and no broker is left to hand it anything.
    std::fs::write(d.join("go"), "").unwrap();
    assert_eq!((lines(&runs, "run-b"), lines(&runs, "run-c")), (1, 1), "each ran exactly once");
}

#[test]
fn cancel_reaches_the_agent_and_the_deadline_travels_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let c = Cluster::start(d, REMOTE, "2");
    let pid_of = |name: &str| {
        let path = d.join(name);
        c.until(&format!("{name} written"), || {
            std::fs::read_to_string(&path).is_ok_and(|s| s.ends_with('\n'))
        });
        std::fs::read_to_string(&path).unwrap().trim().to_owned()
    };
    let gone = |pid: &str| !Path::new(&format!("/proc/{pid}")).exists();

    let victim = c.submit(&sh(&format!("echo $$ > '{}'; exec sleep 600", d.join("victim.pid").display())));
    let pid = pid_of("victim.pid");
    let o = lardon(&c.state, &["cancel", &victim]);
    assert!(o.status.success(), "{}", stderr(&o));
    let t = c.ended(&victim);
    assert_eq!(t["state"].as_str(), Some("cancelled"), "{t}");
    c.until("the agent to kill the cancelled run", || gone(&pid));

    let mut args = vec!["--deadline", "2s"];
    let script = format!("echo $$ > '{}'; exec sleep 600", d.join("late.pid").display());
    args.extend(sh(&script));
    let late = c.submit(&args);
    let pid = pid_of("late.pid");
    let t = c.ended(&late);
    assert_eq!(t["state"].as_str(), Some("failed"), "{t}");
    let reason = t.to_string();
    assert!(reason.contains("deadline passed") && reason.contains("a1"), "{reason}");
    c.until("the agent to kill the late run", || gone(&pid));
}

#[test]
fn balance_ships_only_what_this_host_would_make_wait() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // wait_ms = 0: a task this host would make wait ships at once (with
    // the default, it would join the local queue first: offload_files.rs).
    let c = Cluster::start(d, "max_running = 1\noffload = { prefer = \"balance\", wait_ms = 0 }\n", "1");
    // A local task takes the simulated host's one free CPU (and the one
    // running slot): the next task would WAIT here.
    let go = d.join("go");
    let busy = c.submit(&[
        "--",
        "sh",
        "-c",
        &format!(
            "i=0; while [ ! -e '{}' ] && [ $i -lt 2400 ]; do sleep 0.05; i=$((i+1)); done",
            go.display()
        ),
    ]);
    c.until("the local task running", || task_json(&c.state, &busy)["state"] == "running");

    let shipped = c.submit(&sh("echo where=$ONLY_ON_AGENT."));
    assert_eq!(c.ended(&shipped)["state"].as_str(), Some("completed"));
    assert!(c.log(&shipped).contains("where=agent-side."), "{}", c.log(&shipped));
    let course = c.course(&shipped);
    assert!(
        course.iter().any(|(k, _, m)| k == "offloaded" && m.contains("this host would make it wait")),
        "{course:?}"
    );

    // With the slot free again, the same task runs here.
    std::fs::write(&go, "").unwrap();
    assert_eq!(c.ended(&busy)["state"].as_str(), Some("completed"));
    let here = c.submit(&sh("echo where=$ONLY_ON_AGENT."));
    assert_eq!(c.ended(&here)["state"].as_str(), Some("completed"));
    assert!(c.log(&here).contains("where=."), "{}", c.log(&here));
    assert!(c.course(&here).iter().all(|(k, _, _)| k != "offloaded"));
}

#[test]
fn a_bad_offload_policy_or_flag_is_refused_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let policy = d.join("p.toml");
    std::fs::write(&policy, "offload = { prefer = \"sideways\" }\n").unwrap();
    let o = lardon(d, &["daemon", "--policy", policy.to_str().unwrap(), "--broker", "127.0.0.1:1"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("offload.prefer: `sideways` is not one of local, remote, balance"),
        "{}",
        stderr(&o)
    );
    let o = lardon(d, &["submit", "--capability", "sh@1", "--", "true"]);
    assert_eq!(o.status.code(), Some(2), "--capability needs --shippable: {}", stderr(&o));
    let o = lardon(d, &["submit", "--capability", "/bin/sh", "--shippable", "--", "true"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--capability"), "{}", stderr(&o));
    let o = lardon(d, &["submit", "--deadline", "1s", "--", "true"]);
    assert_eq!(o.status.code(), Some(2), "--deadline needs --shippable: {}", stderr(&o));

    // What an agent cannot run is refused by the daemon, naming the field.
    let _daemon = support::Daemon::start(d, "8GiB,4");
    for (extra, field) in [
        (&["--items", "3"][..], "shippable: items:"),
        (&["--scratch", "1GiB"][..], "shippable: scratch:"),
        (&["--paused"][..], "capability: paused:"),
    ] {
        let mut args = vec!["submit", "--capability", "sh@1", "--shippable"];
        args.extend(extra);
        args.extend(["--", "true"]);
        let o = lardon(d, &args);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(field), "{extra:?}: {}", stderr(&o));
    }
}

#[test]
fn a_daemon_killed_with_a_task_out_asks_for_it_again_and_it_runs_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut c = Cluster::start(d, REMOTE, "1");
    let runs = d.join("runs");
    let script = format!(
        "echo start >> '{r}'; i=0; while [ ! -e '{go}' ] && [ $i -lt 2400 ]; do sleep 0.05; i=$((i+1)); done; echo end >> '{r}'; echo done-at-$ONLY_ON_AGENT",
        r = runs.display(),
        go = d.join("go").display()
    );
    let id = c.submit(&sh(&script));
    c.until("the run started at the agent", || lines(&runs, "start") == 1);

    c.daemon.kill9();
    // It ends while no daemon listens: the broker keeps the answer.
    std::fs::write(d.join("go"), "").unwrap();
    c.until("the run ended at the agent", || lines(&runs, "end") == 1);
    c.daemon = Cluster::daemon(d, &c.state, &c.addr);
    c.until("the daemon to answer again", || lardon(&c.state, &["status"]).status.success());

    let t = c.ended(&id);
    assert_eq!(t["state"].as_str(), Some("completed"), "{t}\n{}", logs(&c.procs()));
    assert!(c.log(&id).contains("done-at-agent-side"), "{}", c.log(&id));
    assert_eq!((lines(&runs, "start"), lines(&runs, "end")), (1, 1), "it ran once");
    let course = c.course(&id);
    assert!(
        course.iter().any(|(_, _, m)| m.contains("asked for again after a daemon restart")),
        "{course:?}"
    );
}

#[test]
fn a_daemon_offloads_to_a_secured_broker_with_its_certificate_and_token_only() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let p = |name: &str| d.join(name).to_str().unwrap().to_owned();
    for args in [
        vec!["cert", "init", "--dir", &p("ca")],
        vec!["cert", "issue", "broker", "--ca", &p("ca"), "--host", "127.0.0.1", "--out", &p("broker")],
        vec!["cert", "issue", "agent-1", "--ca", &p("ca"), "--out", &p("agent")],
        vec!["cert", "issue", "daemon", "--ca", &p("ca"), "--out", &p("daemon")],
        vec!["cert", "token", "--out", &p("join.token")],
    ] {
        let o = lardon(d, &args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    }
    let addr = free_port();
    let token = p("join.token");
    let broker = Proc::start(
        d,
        "broker",
        &[
            "broker",
            "--listen",
            &addr,
            "--heartbeat",
            "1s",
            "--tls-dir",
            &p("broker"),
            "--join-token-file",
            &token,
        ],
    );
    let agent = Proc::start_env(
        d,
        "a1",
        &[
            "agent",
            "--broker",
            &addr,
            "--id",
            "a1",
            "--capability",
            "sh@1",
            "--heartbeat",
            "1s",
            "--simulate-host",
            "8GiB,8",
            "--tls-dir",
            &p("agent"),
            "--tls-name",
            "agent-1",
            "--join-token-file",
            &token,
        ],
        &[("ONLY_ON_AGENT", "agent-side")],
    );
    std::fs::write(d.join("policy.toml"), REMOTE).unwrap();
    let agents = || {
        let o = lardon(
            d,
            &[
                "cluster",
                "status",
                "--broker",
                &addr,
                "--json",
                "--tls-dir",
                &p("agent"),
                "--tls-name",
                "agent-1",
                "--join-token-file",
                &token,
            ],
        );
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        v["agents"].as_array().map_or(0, Vec::len)
    };
    wait_until("the agent at the broker", WAIT, || agents() == 1);
    let daemon = |state: &str, creds: &[&str]| {
        let mut args = vec![
            "--state-dir",
            state,
            "daemon",
            "--simulate-host",
            "8GiB,4",
            "--policy",
            "",
            "--broker",
            &addr,
            "--broker-heartbeat",
            "1s",
            "--broker-timeout",
            "2s",
        ];
        let policy = p("policy.toml");
        args[6] = &policy;
        args.extend(creds);
        let proc = Proc::start(d, state.rsplit('/').next().unwrap(), &args);
        wait_until("the daemon to answer", WAIT, || lardon(Path::new(state), &["status"]).status.success());
        proc
    };
    let secured = p("secured");
    let plain = p("plain");
    let daemons = [
        daemon(&secured, &["--tls-dir", &p("daemon"), "--tls-name", "daemon", "--join-token-file", &token]),
        daemon(&plain, &[]),
    ];
    let procs = [&broker, &agent, &daemons[0], &daemons[1]];
    let run = |state: &str| {
        let state = Path::new(state);
        let id = submit(state, &sh("echo where=$ONLY_ON_AGENT."));
        wait_until("the task to end", WAIT, || task_json(state, &id)["state"] == "completed");
        let log = stdout(&lardon(state, &["log", &id]));
        let course = stdout(&lardon(state, &["explain", &id, "--history"]));
        (log, course)
    };
    let (log, course) = run(&secured);
    assert!(log.contains("where=agent-side."), "{log}\n{course}\n{}", logs(&procs));
    // Without the certificate and token the broker refuses it: it runs here.
    let (log, course) = run(&plain);
    assert!(log.contains("where=."), "{log}");
    assert!(course.contains("unreachable: ran locally"), "{course}");
}

#[test]
fn a_task_whose_agent_is_lost_ships_again_up_to_max_retries_then_runs_here() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut c = Cluster::start(d, "offload = { prefer = \"remote\", max_retries = 1 }\n", "1");
    let runs = d.join("runs");
    // The first run (at the agent) records its pid and blocks; a later one ends.
    let script = format!(
        "cd '{}'; echo start-$ONLY_ON_AGENT >> runs; if [ -e mark ]; then echo end >> runs; else echo $$ > pid; touch mark; exec sleep 600; fi",
        d.display()
    );
    let id = c.submit(&sh(&script));
    c.until("the run started at the agent", || lines(&runs, "start-agent-side") == 1);
    c.agent.kill9();
    // The orphaned run would go with the agent's allocation; here the test ends it.
    if let Ok(pid) = std::fs::read_to_string(d.join("pid")) {
        let _ = std::process::Command::new("kill").args(["-9", pid.trim()]).status();
    }
    let t = c.ended(&id);
    assert_eq!(t["state"].as_str(), Some("completed"), "{t}\n{}", logs(&c.procs()));
    assert_eq!((lines(&runs, "start-"), lines(&runs, "end")), (1, 1), "then it ran here, once");
    let course = c.course(&id);
    let kinds: Vec<(&str, &str)> = course.iter().map(|(k, code, _)| (k.as_str(), code.as_str())).collect();
    assert_eq!(
        kinds[..3],
        [("offloaded", "shipped"), ("offloaded", "shipped"), ("ran_locally", "no_executor")],
        "{course:?}"
    );
    assert!(course[1].2.contains("shipping again (retry 1 of 1)"), "{course:?}");
}

#[test]
fn a_shippable_task_that_runs_here_is_held_to_its_deadline_too() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let c = Cluster::start(d, REMOTE, "1");
    let pid_file = d.join("here.pid");
    let script = format!("echo $$ > '{}'; exec sleep 600", pid_file.display());
    // No agent serves gcc@12: it runs here, under the same deadline.
    let id =
        c.submit(&["--capability", "gcc@12", "--shippable", "--deadline", "2s", "--", "sh", "-c", &script]);
    c.until("the run started here", || std::fs::read_to_string(&pid_file).is_ok_and(|s| s.ends_with('\n')));
    let pid = std::fs::read_to_string(&pid_file).unwrap().trim().to_owned();
    let t = c.ended(&id);
    assert_eq!(t["state"].as_str(), Some("failed"), "{t}");
    assert!(t.to_string().contains("deadline passed"), "{t}");
    assert!(c.course(&id).iter().any(|(k, code, _)| k == "ran_locally" && code == "no_executor"));
    c.until("the run killed", || !Path::new(&format!("/proc/{pid}")).exists());
}
