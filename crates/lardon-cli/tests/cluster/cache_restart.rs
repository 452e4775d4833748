//! The broker's cache under `--state` survives a restart (docs/DESIGN.md
//! §14), with real processes on loopback: a shipped task queued at the
//! broker with an input file, the broker SIGKILLed and started again on
//! the same state, runs at the agent with its input; when the cache was
//! lost meanwhile, the task is handed back to its daemon and runs there,
//! never failed for a missing blob.
//!
//! Waits poll with a deadline that only fails.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};

use crate::support::offload_cluster::{Cluster, lines, sh};
use crate::support::procs::{Proc, agent_args, free_port};
use crate::support::wait::until_logged;
use crate::support::{lardon, stdout, submit, task_json};

/// A shell loop that ends once `go` exists (or after two minutes).
fn until_file(go: &Path) -> String {
    format!("i=0; while [ ! -e '{}' ] && [ $i -lt 2400 ]; do sleep 0.05; i=$((i+1)); done", go.display())
}

fn broker(dir: &Path, addr: &str) -> Proc {
    let state = dir.join("broker-state");
    Proc::start(
        dir,
        "broker",
        &[
            "broker",
            "--listen",
            addr,
            "--heartbeat",
            "1s",
            "--recovery",
            "2s",
            "--state",
            state.to_str().unwrap(),
        ],
    )
}

/// A daemon offloading everything to `addr`, which keeps waiting for a
/// broker that is away for a while (a restart) instead of running here.
fn daemon(dir: &Path, state: &Path, addr: &str) -> Proc {
    std::fs::write(dir.join("policy.toml"), "offload = { prefer = \"remote\" }\n").unwrap();
    Cluster::daemon_waiting(dir, state, addr, "60s")
}

struct Trial {
    broker: Proc,
    agent: Proc,
    daemon: Proc,
    addr: String,
    state: PathBuf,
    work: PathBuf,
    go: PathBuf,
    /// The task holding the agent's one token.
    busy: String,
    /// The task queued behind it at the broker, with an input file.
    queued: String,
}

impl Trial {
    fn until(&self, what: &str, ok: impl FnMut() -> bool) {
        until_logged(what, &[&self.broker, &self.agent, &self.daemon], ok);
    }

    fn broker_status(&self) -> serde_json::Value {
        let o = lardon(&self.state, &["cluster", "status", "--broker", &self.addr, "--json"]);
        if !o.status.success() {
            return serde_json::Value::Null;
        }
        serde_json::from_slice(&o.stdout).unwrap()
    }

    fn broker_queued(&self) -> u64 {
        self.broker_status()["queued"].as_u64().unwrap_or(0)
    }

    /// A broker, one agent with one token and a daemon; one task holds
    /// the token, one with an input waits behind it at the broker.
    fn start(dir: &Path) -> Trial {
        let addr = free_port();
        let broker = broker(dir, &addr);
        let agent =
            Proc::start_env(dir, "a1", &agent_args(&addr, "a1", "sh@1", "1"), &[("ONLY_ON_AGENT", "agent")]);
        let state = dir.join("state");
        let daemon = daemon(dir, &state, &addr);
        let work = dir.join("work");
        std::fs::create_dir(&work).unwrap();
        std::fs::write(work.join("in.txt"), "abc\n").unwrap();
        let go = dir.join("go");
        let mut t = Trial {
            broker,
            agent,
            daemon,
            addr,
            state,
            work,
            go,
            busy: String::new(),
            queued: String::new(),
        };
        t.until("the daemon to answer", || lardon(&t.state, &["status"]).status.success());
        // Before any submission: a task offered while no agent is there
        // runs at its daemon at once.
        t.until("the agent at the broker", || {
            t.broker_status()["agents"].as_array().is_some_and(|a| a.len() == 1)
        });
        let runs = dir.join("runs");
        let hold = format!("echo busy >> '{}'; {}", runs.display(), until_file(&t.go));
        t.busy = submit(&t.state, &sh(&hold));
        t.until("the busy task at the agent", || lines(&runs, "busy") == 1);
        let mut args = vec!["--cwd", t.work.to_str().unwrap(), "--input", "in.txt", "--output", "out.txt"];
        args.extend(sh("rev in.txt > out.txt; echo where=$ONLY_ON_AGENT."));
        t.queued = submit(&t.state, &args);
        t.until("the task with an input queued at the broker", || t.broker_queued() == 1);
        t
    }

    fn restart_broker(&mut self, dir: &Path, between: impl FnOnce()) {
        self.broker.kill9();
        between();
        self.broker = broker(dir, &self.addr);
        std::fs::write(&self.go, "").unwrap();
    }

    fn ended(&self, id: &str) -> serde_json::Value {
        self.until(&format!("task {id} to end"), || {
            ["completed", "failed", "cancelled"]
                .contains(&task_json(&self.state, id)["state"].as_str().unwrap_or(""))
        });
        task_json(&self.state, id)
    }
}

#[test]
fn a_task_queued_with_an_input_before_a_broker_restart_runs_at_the_agent_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut t = Trial::start(d);
    t.restart_broker(d, || {});
    let ended = t.ended(&t.queued);
    let logs = crate::support::procs::logs(&[&t.broker, &t.agent, &t.daemon]);
    assert_eq!(ended["state"], "completed", "{ended}\n{logs}");
    assert_eq!(stdout(&lardon(&t.state, &["log", &t.queued])), "where=agent.\n", "{logs}");
    assert_eq!(std::fs::read_to_string(t.work.join("out.txt")).unwrap(), "cba\n");
    assert!(logs.contains("kept from before"), "the broker said it kept its cache: {logs}");
    assert_eq!(t.ended(&t.busy)["state"], "completed");
}

#[test]
fn a_task_whose_input_the_restarted_broker_lost_runs_at_its_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut t = Trial::start(d);
    let blobs = d.join("broker-state/cache/blobs");
    t.restart_broker(d, || std::fs::remove_dir_all(&blobs).unwrap());
    let ended = t.ended(&t.queued);
    let logs = crate::support::procs::logs(&[&t.broker, &t.agent, &t.daemon]);
    assert_eq!(ended["state"], "completed", "{ended}\n{logs}");
    assert_eq!(stdout(&lardon(&t.state, &["log", &t.queued])), "where=.\n", "it ran here: {logs}");
    assert_eq!(std::fs::read_to_string(t.work.join("out.txt")).unwrap(), "cba\n");
    let history = stdout(&lardon(&t.state, &["explain", &t.queued, "--history"]));
    assert!(history.contains("is no longer in the broker's cache"), "{history}");
}
