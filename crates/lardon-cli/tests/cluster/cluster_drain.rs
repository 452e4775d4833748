//! Agent lifecycle with real processes on loopback (docs/DESIGN.md §14): a
//! real `lardon broker` and `lardon agent`s (admitting against a simulated
//! host) running real child processes. SIGTERM drains an agent: the tasks
//! it was given but had not started (held on the wire by a proxy) run
//! elsewhere at once, its running
//! task finishes there once, and it exits 0; a second SIGTERM cancels what
//! still runs, which runs again elsewhere. `lardon cluster status` shows
//! each agent's allocation end and its optimizer's verdict, and a task
//! longer than any allocation is answered like no executor.
//!
//! Waits poll the broker's status, the tasks' own log or the process, with
//! a deadline that only fails.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::support;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use lardon_submit::client::{self, Answer, Ticket};

use crate::support::procs::{Proc, free_port, logs};
use crate::support::remote::{sh, submitter};
use crate::support::wait::{until_line, until_status};

const WAIT: Duration = Duration::from_secs(60);

fn broker(dir: &Path, addr: &str) -> Proc {
    // Heartbeats of 5 s: an agent whose downstream the test holds for a
    // moment is not taken as lost (that takes three).
    Proc::start(dir, "broker", &["broker", "--listen", addr, "--heartbeat", "5s"])
}

fn agent(dir: &Path, addr: &str, id: &str, tokens: &str, extra: &[&str]) -> Proc {
    let mut args = vec![
        "agent",
        "--broker",
        addr,
        "--id",
        id,
        "--capability",
        "sh@1",
        "--tokens",
        tokens,
        "--heartbeat",
        "5s",
        "--simulate-host",
        "8GiB,8",
    ];
    args.extend(extra);
    Proc::start(dir, id, &args)
}

async fn done(ticket: Ticket, procs: &[&Proc]) {
    match tokio::time::timeout(WAIT, ticket.answer()).await {
        Ok(Ok(Answer::Done(ended))) => assert!(ended.success, "{ended:?}\n{}", logs(procs)),
        Ok(other) => panic!("{other:?}\n{}", logs(procs)),
        Err(_) => panic!("no answer\n{}", logs(procs)),
    }
}

fn count(path: &Path, line: &str) -> usize {
    std::fs::read_to_string(path).unwrap_or_default().lines().filter(|l| *l == line).count()
}

/// A task that logs its start, runs until `gate` exists, and logs its end.
fn gated(dir: &Path, name: &str) -> String {
    format!(
        "cd '{}'; echo start {name} >> log; i=0; while [ ! -e gate ] && [ $i -lt 2400 ]; do sleep 0.05; i=$((i+1)); done; echo end {name} >> log",
        dir.display()
    )
}

/// A loopback TCP proxy in front of the broker whose broker-to-agent
/// direction can be held: what the broker sends meanwhile (assignments)
/// waits in the proxy, as assignments in flight on the wire do when a
/// SIGTERM comes. Returns its address and the gate (true: flowing).
async fn holding_proxy(broker: String) -> (String, tokio::sync::watch::Sender<bool>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (gate, open) = tokio::sync::watch::channel(true);
    tokio::spawn(async move {
        while let Ok((agent, _)) = listener.accept().await {
            let Ok(upstream) = tokio::net::TcpStream::connect(&broker).await else { continue };
            let (mut agent_rd, mut agent_wr) = agent.into_split();
            let (mut up_rd, mut up_wr) = upstream.into_split();
            tokio::spawn(async move { tokio::io::copy(&mut agent_rd, &mut up_wr).await });
            let mut open = open.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let n = match up_rd.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    if open.wait_for(|o| *o).await.is_err() || agent_wr.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    (addr, gate)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_sends_unstarted_tasks_elsewhere_at_once_finishes_the_running_one_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let log = d.join("log");
    let addr = free_port();
    let b = broker(d, &addr);
    let (via_proxy, downstream) = holding_proxy(addr.clone()).await;
    let mut a1 = agent(d, &via_proxy, "a1", "4", &["--drain-grace", "120s", "--no-optimizer"]);
    until_status(&addr, "a1", &[&b, &a1], |s| s.agents.len() == 1).await;
    let s = submitter(&addr);
    let run = s.submit(&sh("run", &gated(d, "run")));
    until_line(&log, "start run", &[&b, &a1]).await;

    // The next three are assigned to a1 but held on their way to it: a1
    // has been given them and has not started them when its SIGTERM comes.
    downstream.send(false).unwrap();
    let unstarted: Vec<Ticket> = (1..=3)
        // Each logs the agent that ran it (its parent).
        .map(|i| {
            s.submit(&sh(&format!("u{i}"), &format!("cd '{}'; echo ran u{i} at $PPID >> log", d.display())))
        })
        .collect();
    until_status(&addr, "four tasks assigned to a1", &[&b, &a1], |st| {
        st.agents.iter().any(|a| a.agent_id == "a1" && a.in_flight == 4)
    })
    .await;
    let a2 = agent(d, &addr, "a2", "4", &["--no-optimizer"]);
    until_status(&addr, "a2", &[&b, &a1, &a2], |st| st.agents.len() == 2).await;
    a1.signal("TERM");

    // The unstarted ones run at a2 while `run` still runs at a1: at once,
    // not after a heartbeat timeout (a1 stays connected throughout).
    for ticket in unstarted {
        done(ticket, &[&b, &a1, &a2]).await;
    }
    assert_eq!(count(&log, "end run"), 0, "the running task is still running");
    until_status(&addr, "a1 draining, holding only `run`", &[&b, &a1, &a2], |st| {
        st.agents.iter().any(|a| a.agent_id == "a1" && a.draining && a.in_flight == 1)
    })
    .await;
    // The held assignments reach a1 now: it sends them back unstarted.
    downstream.send(true).unwrap();
    assert_eq!(a1.wait_exit(Duration::ZERO), None, "a1 waits for its running task");
    std::fs::write(d.join("gate"), "").unwrap();
    done(run, &[&b, &a1, &a2]).await;
    assert_eq!(a1.wait_exit(WAIT), Some(Some(0)), "a1 exits 0 once drained\n{}", logs(&[&a1]));
    let lines = std::fs::read_to_string(&log).unwrap();
    assert_eq!((count(&log, "start run"), count(&log, "end run")), (1, 1), "{lines}");
    for i in 1..=3 {
        let at_a2 = format!("ran u{i} at {}", a2.pid());
        assert_eq!(count(&log, &at_a2), 1, "u{i} ran once, at a2:\n{lines}");
    }
    assert_eq!(lines.lines().count(), 5, "nothing else ran:\n{lines}");
    let a1_log = std::fs::read_to_string(&a1.log).unwrap();
    assert!(a1_log.contains("draining") && a1_log.contains("drained"), "{a1_log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigterm_cancels_the_running_task_which_runs_again_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let log = d.join("log");
    let addr = free_port();
    let b = broker(d, &addr);
    let mut a1 = agent(d, &addr, "a1", "1", &["--drain-grace", "120s", "--no-optimizer"]);
    until_status(&addr, "a1", &[&b, &a1], |st| st.agents.len() == 1).await;
    let s = submitter(&addr);
    let run = s.submit(&sh("run", &gated(d, "run")));
    until_line(&log, "start run", &[&b, &a1]).await;
    let a2 = agent(d, &addr, "a2", "1", &["--no-optimizer"]);
    until_status(&addr, "a2", &[&b, &a1, &a2], |st| st.agents.len() == 2).await;

    a1.signal("TERM");
    until_status(&addr, "a1 draining", &[&b, &a1, &a2], |st| {
        st.agents.iter().any(|a| a.agent_id == "a1" && a.draining)
    })
    .await;
    assert_eq!(count(&log, "start run"), 1, "the drain lets it run");
    a1.signal("TERM");
    assert_eq!(a1.wait_exit(WAIT), Some(Some(0)), "a1 exits 0 on the second SIGTERM\n{}", logs(&[&a1]));
    // Cancelled there, queued again at the broker, started at a2.
    until_line(&log, "start run", &[&b, &a2]).await;
    let start = Instant::now();
    while count(&log, "start run") < 2 {
        assert!(start.elapsed() < WAIT, "not started again\n{}", logs(&[&b, &a1, &a2]));
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    std::fs::write(d.join("gate"), "").unwrap();
    done(run, &[&b, &a1, &a2]).await;
    assert_eq!((count(&log, "start run"), count(&log, "end run")), (2, 1), "cut at a1, finished at a2");
}

fn cli_status(addr: &str, json: bool) -> String {
    let mut args = vec!["cluster", "status", "--broker", addr];
    if json {
        args.push("--json");
    }
    let out = Command::new(support::bin()).args(&args).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_the_allocation_end_and_the_optimizers_verdict_and_too_long_a_task_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let addr = free_port();
    let b = broker(d, &addr);
    // The optimizer reads this agent's own cgroup CPU counters every 200 ms.
    let a1 = agent(d, &addr, "a1", "3", &["--walltime", "1h", "--optimize-every", "200ms"]);
    until_status(&addr, "a verdict from a1's optimizer", &[&b, &a1], |st| {
        st.agents.iter().any(|a| !a.optimizer_verdict.is_empty())
    })
    .await;
    let st = client::status(&addr, &Default::default()).await.unwrap();
    let a = &st.agents[0];
    assert!(["grow", "shrink", "hold"].contains(&a.optimizer_verdict.as_str()), "{a:?}");
    assert!(a.optimizer_reason.contains("tokens busy"), "{a:?}");
    assert!((1..=3).contains(&a.tokens), "within 1..=--tokens: {a:?}");
    assert!(a.ends_at_unix_ms > 0, "{a:?}");

    let json: serde_json::Value = serde_json::from_str(&cli_status(&addr, true)).unwrap();
    let agent = &json["agents"][0];
    assert!(agent["optimizer"]["verdict"].is_string() && agent["optimizer"]["reason"].is_string(), "{json}");
    assert!(agent["ends_at_unix_ms"].is_u64() && agent["draining"] == false, "{json}");
    let text = cli_status(&addr, false);
    assert!(text.contains("allocation ends in 59m") || text.contains("allocation ends in 1h00m"), "{text}");
    assert!(text.contains("    optimizer: "), "{text}");

    // Two hours expected, one hour left: no agent could take it.
    let out = Command::new(support::bin())
        .args(["cluster", "submit", "--broker", &addr, "--capability", "sh@1", "--expected-duration", "2h"])
        .args(["--", "true"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("no agent runs sh@1"), "{stderr}");
    let out = Command::new(support::bin())
        .args(["cluster", "submit", "--broker", &addr, "--capability", "sh@1", "--expected-duration", "1m"])
        .args(["--", "echo", "fits"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "fits\n", "{}", String::from_utf8_lossy(&out.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inside_a_slurm_job_the_allocations_end_comes_from_slurm_job_end_time() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let addr = free_port();
    let b = broker(d, &addr);
    let args = ["agent", "--broker", &addr, "--id", "job", "--capability", "sh@1", "--no-optimizer"];
    let a = Proc::start_env(d, "job", &args, &[("SLURM_JOB_END_TIME", "4102444800")]);
    until_status(&addr, "the job's agent", &[&b, &a], |st| st.agents.len() == 1).await;
    let st = client::status(&addr, &Default::default()).await.unwrap();
    assert_eq!(st.agents[0].ends_at_unix_ms, 4_102_444_800_000);
    // A malformed value is refused naming it, before dialling anything.
    let out = Command::new(support::bin())
        .args(["agent", "--broker", &addr, "--capability", "sh@1"])
        .env("SLURM_JOB_END_TIME", "tomorrow")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("SLURM_JOB_END_TIME: `tomorrow` is not Unix seconds"),
        "{stderr}"
    );
}
