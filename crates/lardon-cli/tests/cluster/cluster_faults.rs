//! Cluster faults with real processes on loopback: a real `lardon broker`
//! and `lardon agent`s (admitting against a simulated host, so the
//! machine's load does not decide), tasks that are real child processes,
//! and the submitter library in the test. An agent SIGKILLed mid-task has
//! its task re-queued and finished once elsewhere; a broker killed with -9
//! and restarted on its state loses nothing and runs nothing twice.
//!
//! Waits poll the broker's status or the tasks' own log with a deadline
//! that only fails.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use lardon_submit::client::{self, Answer, Ticket};

use crate::support::procs::{Proc, free_port, logs};
use crate::support::remote::{sh, submitter};
use crate::support::wait::{until_line, until_status};

const WAIT: Duration = Duration::from_secs(60);

fn broker(dir: &Path, addr: &str, name: &str) -> Proc {
    let state = dir.join("state");
    let state = state.to_str().unwrap();
    Proc::start(
        dir,
        name,
        &["broker", "--listen", addr, "--state", state, "--heartbeat", "1s", "--recovery", "20s"],
    )
}

fn agent(dir: &Path, addr: &str, id: &str, tokens: &str) -> Proc {
    Proc::start(dir, id, &crate::support::procs::agent_args(addr, id, "sh@1", tokens))
}

async fn answer(ticket: Ticket, procs: &[&Proc]) -> Answer {
    match tokio::time::timeout(WAIT, ticket.answer()).await {
        Ok(a) => a.unwrap(),
        Err(_) => panic!("no answer\n{}", logs(procs)),
    }
}

fn count(path: &Path, line: &str) -> usize {
    std::fs::read_to_string(path).unwrap_or_default().lines().filter(|l| *l == line).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_killed_mid_task_has_its_task_finished_once_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let addr = free_port();
    let b = broker(d, &addr, "broker");
    let mut a1 = agent(d, &addr, "a1", "1");
    let mut a2 = agent(d, &addr, "a2", "1");
    until_status(&addr, "two agents", &[&b, &a1, &a2], |s| s.agents.len() == 2).await;

    // The first run records its pid and sleeps; a second run finds the
    // mark and ends.
    let runs = d.join("runs");
    let script = format!(
        "cd '{}'; echo start >> runs; if [ -e mark ]; then echo end >> runs; else echo $$ > pid; touch mark; exec sleep 600; fi",
        d.display()
    );
    let s = submitter(&addr);
    let ticket = s.submit(&sh("victim", &script));
    until_line(&runs, "start", &[&b, &a1, &a2]).await;
    let mut holder = String::new();
    until_status(&addr, "the task in flight", &[&b, &a1, &a2], |st| {
        st.agents.iter().any(|a| a.in_flight == 1)
    })
    .await;
    if let Ok(st) = client::status(&addr, &Default::default()).await {
        holder = st.agents.iter().find(|a| a.in_flight == 1).map(|a| a.agent_id.clone()).unwrap_or_default();
    }
    let (victim, other) = if holder == "a1" { (&mut a1, "a2") } else { (&mut a2, "a1") };
    victim.kill9();
    // The orphaned first run would go with the allocation's cgroup in a
    // real engine; here the test ends it.
    if let Ok(pid) = std::fs::read_to_string(d.join("pid")) {
        let _ = Command::new("kill").args(["-9", pid.trim()]).status();
    }

    match answer(ticket, &[&b, &a1, &a2]).await {
        Answer::Done(ended) => assert!(ended.success, "{ended:?}"),
        other => panic!("{other:?}\n{}", logs(&[&b, &a1, &a2])),
    }
    assert_eq!((count(&runs, "start"), count(&runs, "end")), (2, 1), "started twice, finished once");
    let st = client::status(&addr, &Default::default()).await.unwrap();
    assert_eq!((st.agents.len(), st.finished, st.queued, st.in_flight), (1, 1, 0, 0));
    assert_eq!(st.agents[0].agent_id, other);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_killed_and_restarted_loses_nothing_and_runs_nothing_twice() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let addr = free_port();
    let mut b = broker(d, &addr, "broker");
    let a = agent(d, &addr, "a1", "1");
    until_status(&addr, "the agent", &[&b, &a], |s| s.agents.len() == 1).await;

    let log = d.join("log");
    let s = submitter(&addr);
    // `held` runs until `go` exists; `queued` waits behind it (one token).
    let held = s.submit(&sh(
        "held",
        &format!(
            "cd '{}'; echo start-held >> log; i=0; while [ ! -e go ] && [ $i -lt 2400 ]; do sleep 0.05; i=$((i+1)); done; echo end-held >> log",
            d.display()
        ),
    ));
    until_line(&log, "start-held", &[&b, &a]).await;
    let queued = s.submit(&sh("queued", &format!("cd '{}'; echo run-queued >> log", d.display())));
    until_status(&addr, "the second task queued", &[&b, &a], |st| st.queued == 1 && st.in_flight == 1).await;

    b.kill9();
    // `held` ends while no broker listens: the agent keeps it, says it
    // holds it in its next hello, and reports it then.
    std::fs::write(d.join("go"), "").unwrap();
    until_line(&log, "end-held", &[&b, &a]).await;
    let b2 = broker(d, &addr, "broker-2");

    for (name, ticket) in [("held", held), ("queued", queued)] {
        match answer(ticket, &[&b2, &a]).await {
            Answer::Done(ended) => assert!(ended.success, "{name}: {ended:?}"),
            other => panic!("{name}: {other:?}\n{}", logs(&[&b, &b2, &a])),
        }
    }
    let lines = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        (count(&log, "start-held"), count(&log, "end-held"), count(&log, "run-queued")),
        (1, 1, 1),
        "each ran exactly once:\n{lines}"
    );
    until_status(&addr, "both answers recorded", &[&b2, &a], |st| {
        st.finished == 2 && st.queued == 0 && st.in_flight == 0
    })
    .await;
}
