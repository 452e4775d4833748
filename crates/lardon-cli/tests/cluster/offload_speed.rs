//! Offload at cluster speed (docs/DESIGN.md §14, issue 28), with real
//! broker, agent and daemon processes on loopback:
//!
//! * tasks a daemon ships that fit its agents at once run at once, as
//!   fast as as many `lardon cluster submit`s;
//! * a task the agent cannot admit yet waits at the broker (it is never
//!   offered, so never bounced) and starts as soon as a running one frees
//!   its room (the agent's availability push);
//! * a second stream under a submitter id already connected is refused
//!   with a reason, and the first keeps working.
//!
//! Waits poll with a deadline; the timing bounds leave room for a loaded
//! 2-CPU machine while staying far below what the faults they catch cost
//! (a serialized run, a one-second bounce, a hang).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io::{Read as _, Write as _};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::offload_cluster::{Cluster, REMOTE};
use crate::support::procs::{Proc, agent_args, free_port, logs};
use crate::support::{bin, lardon, lardon_stdin, stderr, stdout};

/// A cluster as [`Cluster::start`] makes it, but with the agent's host
/// simulated as `host` (`MEMORY,CPUS`) and the broker's metrics on `metrics`.
fn cluster(dir: &Path, tokens: &str, host: &str, metrics: &str) -> Cluster {
    let addr = free_port();
    let broker = Proc::start(
        dir,
        "broker",
        &["broker", "--listen", &addr, "--heartbeat", "1s", "--metrics-listen", metrics],
    );
    let mut args = agent_args(&addr, "a1", "sh@1", tokens);
    let simulated = args.iter().position(|a| *a == "--simulate-host").unwrap() + 1;
    args[simulated] = host;
    let agent = Proc::start(dir, "a1", &args);
    std::fs::write(dir.join("policy.toml"), REMOTE).unwrap();
    let state = dir.join("state");
    let daemon = Cluster::daemon(dir, &state, &addr);
    let c = Cluster { broker, agent, daemon, addr, state };
    c.until("the daemon to answer", || lardon(&c.state, &["status"]).status.success());
    c.until("the agent at the broker", || c.agents() == 1);
    c
}

/// One sample of the broker's Prometheus metric `name`.
fn metric(addr: &str, name: &str) -> Option<f64> {
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    text.lines().find_map(|l| l.strip_prefix(&format!("{name} "))?.parse().ok())
}

/// Submits `n` shippable `sh -c SCRIPT` tasks in one `submit --each` (the
/// input line is only `$0`) and waits for them all; the time it took.
fn shipped(c: &Cluster, n: usize, cpus: &str, script: &str) -> Duration {
    let input: String = (1..=n).map(|i| format!("{i}\n")).collect();
    let start = Instant::now();
    let args = [
        "submit",
        "--each",
        "-",
        "--capability",
        "sh@1",
        "--shippable",
        "--cpus",
        cpus,
        "--",
        "sh",
        "-c",
        script,
    ];
    let o = lardon_stdin(&c.state, &args, input.as_bytes());
    assert!(o.status.success(), "{}", stderr(&o));
    let ids: Vec<String> = stdout(&o).split_whitespace().map(str::to_owned).collect();
    assert_eq!(ids.len(), n, "{}", stdout(&o));
    for id in &ids {
        let w = lardon(&c.state, &["wait", id]);
        assert!(w.status.success(), "task {id}: {}\n{}", stderr(&w), logs(&c.procs()));
    }
    start.elapsed()
}

/// Runs `n` `lardon cluster submit` processes at once; the time until the
/// last one ended.
fn direct(c: &Cluster, n: usize, cpus: &str, script: &str) -> Duration {
    let start = Instant::now();
    let children: Vec<_> = (0..n)
        .map(|_| {
            Command::new(bin())
                .args(["cluster", "submit", "--broker", &c.addr, "--capability", "sh@1", "--cpus", cpus])
                .args(["--", "sh", "-c", script])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    start.elapsed()
}

#[test]
fn shipped_tasks_that_fit_run_at_once_as_fast_as_as_many_direct_submits() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = free_port();
    let c = cluster(dir.path(), "4", "8GiB,8", &metrics);
    let through_daemon = shipped(&c, 4, "0.1", "sleep 1");
    let straight = direct(&c, 4, "0.1", "sleep 1");
    eprintln!("4 × sleep 1: shipped {through_daemon:?}, direct {straight:?}");
    // One at a time would be 4 s.
    assert!(through_daemon < Duration::from_millis(2500), "shipped took {through_daemon:?}");
    // Within 10 %, plus a fixed allowance for the daemon's extra hops
    // (the submit and wait commands, the store).
    assert!(
        through_daemon <= straight.mul_f64(1.1) + Duration::from_millis(300),
        "shipped {through_daemon:?} against direct {straight:?}"
    );
    assert_eq!(metric(&metrics, "lardon_broker_tasks_waited_total"), Some(0.0), "{}", logs(&c.procs()));
}

#[test]
fn a_task_the_agent_cannot_admit_yet_waits_at_the_broker_and_starts_when_room_frees() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let metrics = free_port();
    // Four tokens, but a Governor with one CPU: one `--cpus 1` at a time.
    let c = cluster(d, "4", "8GiB,1", &metrics);
    let marks = d.join("marks");
    let script = format!(
        "echo start $(date +%s%N) >> '{m}'; sleep 0.5; echo end $(date +%s%N) >> '{m}'",
        m = marks.display()
    );
    // The broker never holds more at the agent than its Governor admits.
    let watching = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let most = {
        let (watching, addr, state) = (watching.clone(), c.addr.clone(), c.state.clone());
        std::thread::spawn(move || {
            let mut most = 0;
            while watching.load(std::sync::atomic::Ordering::SeqCst) {
                let o = lardon(&state, &["cluster", "status", "--broker", &addr, "--json"]);
                if let Ok(s) = serde_json::from_slice::<serde_json::Value>(&o.stdout) {
                    most = most.max(s["in_flight"].as_u64().unwrap_or(0));
                }
                // A sampling pace (not a synchronisation): leave the CPUs
                // to the processes under test.
                std::thread::sleep(Duration::from_millis(20));
            }
            most
        })
    };
    let took = shipped(&c, 4, "1", &script);
    watching.store(false, std::sync::atomic::Ordering::SeqCst);
    let most = most.join().unwrap();
    let text = std::fs::read_to_string(&marks).unwrap();
    let at = |kind: &str| -> Vec<i64> {
        text.lines().filter_map(|l| l.strip_prefix(kind)?.trim().parse().ok()).collect()
    };
    let (starts, ends) = (at("start "), at("end "));
    assert_eq!((starts.len(), ends.len()), (4, 4), "{text}");
    // One at a time: each start follows the previous end, closely (a
    // bounce waiting for the agent's next one-second sample would not):
    // the middle gap within 50 ms, none past 250 ms (a loaded machine).
    let mut gaps: Vec<i64> = (1..4).map(|i| (starts[i] - ends[i - 1]) / 1_000_000).collect();
    eprintln!("4 × sleep 0.5 on one CPU: {took:?}, end-to-next-start gaps {gaps:?} ms");
    let report = format!("gaps {gaps:?} ms\n{text}\n{}", logs(&c.procs()));
    gaps.sort_unstable();
    assert!(gaps.iter().all(|g| (0..250).contains(g)) && gaps[1] < 50, "{report}");
    assert_eq!(most, 1, "the broker held {most} at an agent that admits one");
    assert_eq!(
        metric(&metrics, "lardon_broker_tasks_waited_total"),
        Some(0.0),
        "no task was bounced\n{}",
        logs(&c.procs())
    );
}

#[test]
fn a_second_stream_under_a_connected_submitter_id_is_refused_and_the_first_keeps_working() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let metrics = free_port();
    let c = cluster(d, "2", "8GiB,8", &metrics);
    let go = d.join("go");
    let first_script = format!(
        "i=0; while [ ! -e '{}' ] && [ $i -lt 2400 ]; do sleep 0.05; i=$((i+1)); done; echo first-done",
        go.display()
    );
    let submit = |script: &str| {
        Command::new(bin())
            .args(["cluster", "submit", "--broker", &c.addr, "--submitter", "same", "--capability", "sh@1"])
            .args(["--", "sh", "-c", script])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let first = submit(&first_script);
    c.until("the first in flight", || c.broker_status().is_some_and(|s| s["in_flight"] == 1));
    let started = Instant::now();
    let second = submit("echo second").wait_with_output().unwrap();
    assert!(started.elapsed() < Duration::from_secs(10), "refused at once, not after a timeout");
    assert_eq!(second.status.code(), Some(2), "{second:?}");
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(
        err.contains("another stream is connected as submitter same") && err.contains("--submitter"),
        "{err}"
    );
    assert!(second.stdout.is_empty(), "the second never ran: {second:?}");
    // The first still hears its answer.
    std::fs::write(&go, "").unwrap();
    let first = first.wait_with_output().unwrap();
    assert!(first.status.success(), "{first:?}\n{}", logs(&c.procs()));
    assert_eq!(String::from_utf8_lossy(&first.stdout), "first-done\n");
    // Once it is gone the id is free again.
    let again = submit("echo again").wait_with_output().unwrap();
    assert!(again.status.success(), "{again:?}");
    assert_eq!(String::from_utf8_lossy(&again.stdout), "again\n");
}
