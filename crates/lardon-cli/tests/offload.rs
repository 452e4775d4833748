//! Offload from a daemon (docs/DESIGN.md §14) with real processes on
//! loopback: a `lardon broker`, a `lardon agent` whose environment alone
//! has `ONLY_ON_AGENT` (so a task's output says where it ran), and a
//! `lardon daemon --broker`; tasks are submitted, cancelled and read with
//! the ordinary `lardon` commands. Every infrastructure failure must run
//! the task here, once.
//!
//! Waits poll with a deadline that only fails.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;
#[path = "support/procs.rs"]
mod procs;

use std::path::Path;
use std::time::Duration;

use common::{lardon, stderr, stdout, submit, task_json};
use procs::{Proc, free_port, logs};

const WAIT: Duration = Duration::from_secs(60);

/// A broker, one agent `a1` serving `sh@1` with `tokens` tokens, and a
/// daemon on `dir/state` offloading to them under `policy` (TOML).
struct Cluster {
    broker: Proc,
    agent: Proc,
    daemon: Proc,
    addr: String,
    state: std::path::PathBuf,
}

impl Cluster {
    fn start(dir: &Path, policy: &str, tokens: &str) -> Cluster {
        let addr = free_port();
        let broker = Proc::start(dir, "broker", &["broker", "--listen", &addr, "--heartbeat", "1s"]);
        let agent = Proc::start_env(
            dir,
            "a1",
            &[
                "agent",
                "--broker",
                &addr,
                "--id",
                "a1",
                "--capability",
                "sh@1",
                "--tokens",
                tokens,
                "--heartbeat",
                "1s",
                "--simulate-host",
                "8GiB,8",
            ],
            &[("ONLY_ON_AGENT", "agent-side")],
        );
        std::fs::write(dir.join("policy.toml"), policy).unwrap();
        let state = dir.join("state");
        let daemon = Self::daemon(dir, &state, &addr);
        let c = Cluster { broker, agent, daemon, addr, state };
        c.until("the daemon to answer", || lardon(&c.state, &["status"]).status.success());
        c.until("the agent at the broker", || c.agents() == 1);
        c
    }

    /// `lardon daemon --broker` on `state` with `dir/policy.toml`.
    fn daemon(dir: &Path, state: &Path, addr: &str) -> Proc {
        let policy = dir.join("policy.toml");
        Proc::start(
            dir,
            "daemon",
            &[
                "--state-dir",
                state.to_str().unwrap(),
                "daemon",
                "--simulate-host",
                "8GiB,4",
                "--policy",
                policy.to_str().unwrap(),
                "--broker",
                addr,
                "--broker-heartbeat",
                "1s",
                "--broker-timeout",
                "2s",
            ],
        )
    }

    fn procs(&self) -> [&Proc; 3] {
        [&self.broker, &self.agent, &self.daemon]
    }

    fn until(&self, what: &str, mut ok: impl FnMut() -> bool) {
        let start = std::time::Instant::now();
        while !ok() {
            assert!(start.elapsed() < WAIT, "timed out waiting for {what}\n{}", logs(&self.procs()));
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    fn broker_status(&self) -> Option<serde_json::Value> {
        let o = lardon(&self.state, &["cluster", "status", "--broker", &self.addr, "--json"]);
        o.status.success().then(|| serde_json::from_slice(&o.stdout).unwrap())
    }

    fn agents(&self) -> usize {
        self.broker_status().and_then(|s| s["agents"].as_array().map(Vec::len)).unwrap_or(0)
    }

    fn submit(&self, args: &[&str]) -> String {
        submit(&self.state, args)
    }

    /// Waits until task `id` has ended; its `status --json`.
    fn ended(&self, id: &str) -> serde_json::Value {
        self.until(&format!("task {id} to end"), || {
            ["completed", "failed", "cancelled"]
                .contains(&task_json(&self.state, id)["state"].as_str().unwrap_or(""))
        });
        task_json(&self.state, id)
    }

    fn log(&self, id: &str) -> String {
        stdout(&lardon(&self.state, &["log", id]))
    }

    /// The task's course as (kind, reason code, message).
    fn course(&self, id: &str) -> Vec<(String, String, String)> {
        let o = lardon(&self.state, &["explain", id, "--history", "--json"]);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["history"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| {
                let s = |k: &str| h[k].as_str().unwrap_or_default().to_owned();
                (s("kind"), s("reason_code"), s("message"))
            })
            .collect()
    }
}

const REMOTE: &str = "offload = { prefer = \"remote\" }\n";

fn sh(script: &str) -> Vec<&str> {
    vec!["--capability", "sh@1", "--shippable", "--", "sh", "-c", script]
}

fn lines(path: &Path, line: &str) -> usize {
    std::fs::read_to_string(path).unwrap_or_default().lines().filter(|l| *l == line).count()
}

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
    let blocker = format!("while [ ! -e '{}' ]; do sleep 0.05; done", d.join("go").display());
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
    let c = Cluster::start(d, "max_running = 1\noffload = { prefer = \"balance\" }\n", "1");
    // A local task takes the simulated host's one free CPU (and the one
    // running slot): the next task would WAIT here.
    let go = d.join("go");
    let busy =
        c.submit(&["--", "sh", "-c", &format!("while [ ! -e '{}' ]; do sleep 0.05; done", go.display())]);
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
}

#[test]
fn a_daemon_killed_with_a_task_out_asks_for_it_again_and_it_runs_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut c = Cluster::start(d, REMOTE, "1");
    let runs = d.join("runs");
    let script = format!(
        "echo start >> '{r}'; while [ ! -e '{go}' ]; do sleep 0.05; done; echo end >> '{r}'; echo done-at-$ONLY_ON_AGENT",
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
