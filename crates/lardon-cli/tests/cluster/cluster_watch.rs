//! `lardon cluster status --watch --json` against a real broker and agent
//! (docs/DESIGN.md §14): one JSON line per event of the broker's `Watch`
//! stream — the snapshot at once, a line when an agent joins (with a
//! higher sequence), a heartbeat line when nothing changes — and exit
//! code 3 once the broker is gone. A bad --min-interval is a usage error.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::support;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::support::procs::{Proc, free_port, logs};

const WAIT: Duration = Duration::from_secs(30);

#[test]
fn watch_json_prints_a_line_when_an_agent_joins_and_exits_3_when_the_broker_goes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let addr = free_port();
    let mut broker = Proc::start(dir, "broker", &["broker", "--listen", &addr, "--heartbeat", "1s"]);
    // The broker is up once `cluster status` answers.
    let start = Instant::now();
    while !Command::new(support::bin())
        .args(["cluster", "status", "--broker", &addr])
        .output()
        .unwrap()
        .status
        .success()
    {
        assert!(start.elapsed() < WAIT, "the broker never answered\n{}", logs(&[&broker]));
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut watch = Command::new(support::bin())
        .args(["cluster", "status", "--broker", &addr, "--watch", "--json", "--min-interval", "10ms"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, lines) = mpsc::channel();
    let stdout = watch.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let next = |what: &str, procs: &[&Proc]| -> serde_json::Value {
        let line =
            lines.recv_timeout(WAIT).unwrap_or_else(|e| panic!("no line for {what}: {e}\n{}", logs(procs)));
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not one JSON object per line ({e}): {line}"))
    };

    let first = next("the snapshot", &[&broker]);
    assert_eq!(first["agents"].as_array().map(Vec::len), Some(0), "{first}");
    assert_eq!(first["heartbeat"], false, "{first}");
    let first_seq = first["sequence"].as_u64().expect("a sequence");

    let agent = Proc::start(
        dir,
        "agent",
        &["agent", "--broker", &addr, "--id", "w-agent", "--capability", "sh@1", "--simulate-host", "8GiB,8"],
    );
    let procs = [&broker, &agent];
    let joined = loop {
        let event = next("the agent joining", &procs);
        let ids: Vec<&str> =
            event["agents"].as_array().unwrap().iter().filter_map(|a| a["id"].as_str()).collect();
        if ids == ["w-agent"] {
            break event;
        }
    };
    assert_eq!(joined["heartbeat"], false, "{joined}");
    assert_eq!(joined["agents"][0]["capabilities"][0], "sh@1:*", "{joined}");
    assert!(joined["sequence"].as_u64().unwrap() > first_seq, "{joined} after {first}");
    // Quiet now: the broker's heartbeat (1 s) comes as a line of its own.
    let mut last = joined;
    let beat = loop {
        let event = next("a heartbeat", &procs);
        if event["heartbeat"] == true {
            break event;
        }
        last = event;
    };
    assert_eq!(beat["sequence"], last["sequence"], "a heartbeat repeats the sequence: {beat}");
    assert_eq!(beat["agents"], last["agents"], "and the state: {beat}");

    broker.kill9();
    let start = Instant::now();
    let status = loop {
        if let Some(status) = watch.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > WAIT {
            let _ = watch.kill();
            panic!("--watch went on after the broker died");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut watch.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(3), "{stderr}");
    assert!(stderr.contains(&format!("the broker at {addr}")), "{stderr}");
}

#[test]
fn a_bad_min_interval_is_a_usage_error_naming_the_flag() {
    let out = Command::new(support::bin())
        .args(["cluster", "status", "--broker", &free_port(), "--watch", "--min-interval", "5ms"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--min-interval: 5ms is out of range"), "{stderr}");
}
