//! `lardon broker` stops on SIGTERM even while agents hold their streams
//! open (an agent's stream never ends on its own: before, the broker
//! waited for its agents to leave — minutes, an idle exit — and a service
//! manager's stop timed out). The agent lives on, and joins the broker
//! started again on the same state.
//!
//! Waits poll with a deadline that only fails.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::support;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::procs::{Proc, free_port, logs};

const WAIT: Duration = Duration::from_secs(60);

/// Polls `lardon cluster status --json` until `agents` agents are listed.
fn wait_for_agents(addr: &str, agents: usize, procs: &[&Proc]) {
    let start = Instant::now();
    loop {
        let o = Command::new(support::bin())
            .args(["cluster", "status", "--broker", addr, "--json"])
            .output()
            .unwrap();
        if o.status.success() {
            let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            if v["agents"].as_array().is_some_and(|a| a.len() == agents) {
                return;
            }
        }
        assert!(start.elapsed() < WAIT, "{agents} agent(s) never listed\n{}", logs(procs));
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_broker_with_agents_connected_stops_on_sigterm_and_they_rejoin_its_successor() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let addr = free_port();
    let state = d.join("state");
    let broker_args = ["broker", "--listen", &addr, "--heartbeat", "1s", "--state", state.to_str().unwrap()];
    let mut b = Proc::start(d, "broker", &broker_args);
    let mut a = Proc::start(
        d,
        "agent",
        &[
            "agent",
            "--broker",
            &addr,
            "--id",
            "a1",
            "--capability",
            "sh",
            "--heartbeat",
            "1s",
            "--simulate-host",
            "8GiB,8",
        ],
    );
    wait_for_agents(&addr, 1, &[&b, &a]);

    b.signal("TERM");
    // SHUTDOWN_GRACE is 1 s; 20 s is far past it and far below the agent's
    // stay (it has no idle exit: it would hold the stream for ever).
    let exit = b.wait_exit(Duration::from_secs(20));
    assert_eq!(exit, Some(Some(0)), "the broker did not stop with its agent connected\n{}", logs(&[&b, &a]));
    assert_eq!(
        a.wait_exit(Duration::from_millis(200)),
        None,
        "the agent must outlive its broker\n{}",
        logs(&[&a])
    );

    let b2 = Proc::start(d, "broker2", &broker_args);
    wait_for_agents(&addr, 1, &[&b2, &a]);
    a.kill9();
}
