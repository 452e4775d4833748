//! A broker, one agent and a daemon offloading to them, as real processes
//! on loopback, for the offload tests (`offload.rs`, `offload_files.rs`):
//! the agent's environment alone has `ONLY_ON_AGENT`, so a task's output
//! says where it ran.

use std::path::Path;
use std::time::Duration;

use super::daemon::{lardon, stderr, stdout, submit, task_json};
use super::procs::{Proc, agent_args, free_port};
pub(crate) use super::wait::WAIT;
use super::wait::until_logged;

/// A broker, one agent `a1` serving `sh@1` with `tokens` tokens, and a
/// daemon on `dir/state` offloading to them under `policy` (TOML).
pub(crate) struct Cluster {
    pub(crate) broker: Proc,
    pub(crate) agent: Proc,
    pub(crate) daemon: Proc,
    pub(crate) addr: String,
    pub(crate) state: std::path::PathBuf,
}

impl Cluster {
    pub(crate) fn start(dir: &Path, policy: &str, tokens: &str) -> Cluster {
        let addr = free_port();
        let broker = Proc::start(dir, "broker", &["broker", "--listen", &addr, "--heartbeat", "1s"]);
        let agent = Proc::start_env(
            dir,
            "a1",
            &agent_args(&addr, "a1", "sh@1", tokens),
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
    pub(crate) fn daemon(dir: &Path, state: &Path, addr: &str) -> Proc {
        Self::daemon_waiting(dir, state, addr, "2s")
    }

    /// [`Cluster::daemon`] whose tasks wait `broker_timeout` for a broker
    /// that does not answer before they run here.
    pub(crate) fn daemon_waiting(dir: &Path, state: &Path, addr: &str, broker_timeout: &str) -> Proc {
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
                broker_timeout,
            ],
        )
    }

    pub(crate) fn procs(&self) -> [&Proc; 3] {
        [&self.broker, &self.agent, &self.daemon]
    }

    /// Polls `ok` until it holds, failing after [`WAIT`] with the three
    /// processes' logs.
    pub(crate) fn until(&self, what: &str, ok: impl FnMut() -> bool) {
        until_logged(what, &self.procs(), ok);
    }

    pub(crate) fn broker_status(&self) -> Option<serde_json::Value> {
        let o = lardon(&self.state, &["cluster", "status", "--broker", &self.addr, "--json"]);
        o.status.success().then(|| serde_json::from_slice(&o.stdout).unwrap())
    }

    pub(crate) fn agents(&self) -> usize {
        self.broker_status().and_then(|s| s["agents"].as_array().map(Vec::len)).unwrap_or(0)
    }

    pub(crate) fn submit(&self, args: &[&str]) -> String {
        submit(&self.state, args)
    }

    /// Waits until task `id` has ended; its `status --json`.
    pub(crate) fn ended(&self, id: &str) -> serde_json::Value {
        self.until(&format!("task {id} to end"), || {
            ["completed", "failed", "cancelled"]
                .contains(&task_json(&self.state, id)["state"].as_str().unwrap_or(""))
        });
        task_json(&self.state, id)
    }

    pub(crate) fn log(&self, id: &str) -> String {
        stdout(&lardon(&self.state, &["log", id]))
    }

    /// The task's course as (kind, reason code, message).
    pub(crate) fn course(&self, id: &str) -> Vec<(String, String, String)> {
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

pub(crate) const REMOTE: &str = "offload = { prefer = \"remote\" }\n";

pub(crate) fn sh(script: &str) -> Vec<&str> {
    vec!["--capability", "sh@1", "--shippable", "--", "sh", "-c", script]
}

pub(crate) fn lines(path: &Path, line: &str) -> usize {
    std::fs::read_to_string(path).unwrap_or_default().lines().filter(|l| *l == line).count()
}
