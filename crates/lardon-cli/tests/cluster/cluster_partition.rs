//! A network partition with real processes (docs/DESIGN.md §14): one
//! agent runs inside a network namespace, joined to the host by a veth
//! pair, and dials the broker on the host side's address; another agent
//! runs on the host. Mid-task the link is cut (`ip link set … down`): the
//! broker notices by missed heartbeats and re-queues the cut-off agent's
//! task to the other agent, whose run answers it. The cut-off run then
//! ends too; when the link comes back the agent reconnects and reports it,
//! and that late result is dropped: the answer stays the second run's, the
//! broker counted one completion and one late report.
//!
//! Needs root and iproute2 (`ip netns`); without them the test fails
//! saying so, it never skips. Namespace and link are removed on drop.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::support;
use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::procs::{Proc, agent_args, logs};
use crate::support::remote::sh;
use crate::support::wait::until_status;
use lardon_cluster::SubmitterId;
use lardon_submit::Backoff;
use lardon_submit::client::{self, Answer, Submitter, SubmitterConfig};

const WAIT: Duration = Duration::from_secs(60);

/// `ip ARGS…`, failing the test with ip's own words.
fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap_or_else(|e| {
        panic!("this test needs iproute2's `ip` (and root) to make a network namespace: {e}")
    });
    assert!(
        out.status.success(),
        "`ip {}` failed (this test needs root to make a network namespace): {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

/// A network namespace joined to the host by a veth pair: the host side
/// has `.1`, the namespace side `.2` of a /30. Removed on drop.
struct Netns {
    name: String,
    host_if: String,
    host_addr: String,
}

impl Netns {
    fn new() -> Netns {
        let pid = std::process::id();
        let name = format!("lardon-part-{pid}");
        // Names of at most 15 bytes; a /30 of its own per test process.
        let (host_if, ns_if) = (format!("lph{}", pid % 1_000_000), format!("lpn{}", pid % 1_000_000));
        let net = format!("10.213.{}", (pid % 63) * 4);
        let host_addr = format!("{net}.1");
        let ns = Netns { name: name.clone(), host_if: host_if.clone(), host_addr: host_addr.clone() };
        ip(&["netns", "add", &name]);
        ip(&["link", "add", &host_if, "type", "veth", "peer", "name", &ns_if]);
        ip(&["link", "set", &ns_if, "netns", &name]);
        ip(&["addr", "add", &format!("{host_addr}/30"), "dev", &host_if]);
        ip(&["link", "set", &host_if, "up"]);
        ip(&["-n", &name, "addr", "add", &format!("{net}.2/30"), "dev", &ns_if]);
        ip(&["-n", &name, "link", "set", &ns_if, "up"]);
        ip(&["-n", &name, "link", "set", "lo", "up"]);
        ns
    }

    fn link(&self, up: bool) {
        ip(&["link", "set", &self.host_if, if up { "up" } else { "down" }]);
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting one end of a veth pair deletes both.
        let _ = Command::new("ip").args(["link", "del", &self.host_if]).output();
        let _ = Command::new("ip").args(["netns", "del", &self.name]).output();
    }
}

/// One sample of the broker's Prometheus metrics.
fn metric(addr: &str, name: &str) -> Option<f64> {
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    text.lines().find_map(|l| l.strip_prefix(&format!("{name} "))?.parse().ok())
}

async fn until_metric(addr: &str, name: &str, procs: &[&Proc], ok: impl Fn(f64) -> bool) {
    let start = Instant::now();
    while !metric(addr, name).is_some_and(&ok) {
        assert!(
            start.elapsed() < WAIT,
            "timed out waiting on {name} (now {:?})\n{}",
            metric(addr, name),
            logs(procs)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn wait_file(path: &Path, line: &str, procs: &[&Proc]) {
    let start = Instant::now();
    while !std::fs::read_to_string(path).unwrap_or_default().lines().any(|l| l == line) {
        assert!(
            start.elapsed() < WAIT,
            "timed out waiting for `{line}` in {}\n{}",
            path.display(),
            logs(procs)
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

async fn answer(ticket: client::Ticket, procs: &[&Proc]) -> Answer {
    match tokio::time::timeout(WAIT, ticket.answer()).await {
        Ok(a) => a.unwrap(),
        Err(_) => panic!("no answer\n{}", logs(procs)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_agents_task_is_requeued_and_its_late_result_dropped() {
    // Declared first, dropped last: the processes go before their link.
    let ns = Netns::new();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let port =
        std::net::TcpListener::bind(format!("{}:0", ns.host_addr)).unwrap().local_addr().unwrap().port();
    let addr = format!("{}:{port}", ns.host_addr);
    let metrics = crate::support::procs::free_port();
    let broker = Proc::start(
        d,
        "broker",
        &["broker", "--listen", &addr, "--insecure", "--heartbeat", "1s", "--metrics-listen", &metrics],
    );
    let mut inside = Command::new("ip");
    inside
        .args(["netns", "exec", &ns.name])
        .arg(support::bin())
        .args(agent_args(&addr, "inside", "sh@1", "1"));
    let inside = Proc::start_command(d, "inside", inside);
    until_status(&addr, "the agent in the namespace", &[&broker, &inside], |s| s.agents.len() == 1).await;

    let s = Submitter::start(SubmitterConfig {
        broker: addr.clone(),
        submitter: SubmitterId::new("test").unwrap(),
        heartbeat: Duration::from_secs(1),
        backoff: Backoff { initial: Duration::from_millis(50), max: Duration::from_millis(500) },
        unreachable_after: None,
        dial: Default::default(),
    })
    .unwrap();
    // Work crosses the link while it is up.
    for i in 0..3 {
        match answer(s.submit(&sh(&format!("warm-{i}"), "echo ok")), &[&broker, &inside]).await {
            Answer::Done(e) => assert!(e.success && e.stdout == b"ok\n", "{e:?}"),
            other => panic!("{other:?}"),
        }
    }

    // The first run marks itself and waits for `release`; a second run
    // finds the mark and ends at once.
    let runs = d.join("runs");
    let script = format!(
        "cd '{}'; echo start >> runs; if [ -e mark ]; then echo second; else touch mark; \
         i=0; while [ ! -e release ] && [ $i -lt 2400 ]; do sleep 0.05; i=$((i+1)); done; echo first-ended >> runs; echo first; fi",
        d.display()
    );
    let victim = s.submit(&sh("victim", &script));
    wait_file(&runs, "start", &[&broker, &inside]);
    until_status(&addr, "the task at the inside agent", &[&broker, &inside], |st| {
        st.agents.iter().any(|a| a.agent_id == "inside" && a.in_flight == 1)
    })
    .await;
    let outside = Proc::start(d, "outside", &agent_args(&addr, "outside", "sh@1", "1"));
    let procs = [&broker, &inside, &outside];
    until_status(&addr, "the host agent", &procs, |st| st.agents.len() == 2).await;

    ns.link(false);
    until_status(&addr, "the broker to drop the cut-off agent", &procs, |st| {
        st.agents.iter().map(|a| a.agent_id.as_str()).collect::<Vec<_>>() == ["outside"]
    })
    .await;
    match answer(victim, &procs).await {
        Answer::Done(e) => assert!(e.success && e.stdout == b"second\n", "answered by the second run: {e:?}"),
        other => panic!("{other:?}\n{}", logs(&procs)),
    }
    until_metric(&metrics, "lardon_broker_tasks_requeued_total", &procs, |v| v == 1.0).await;

    // The cut-off run ends while the link is down; its report waits.
    std::fs::write(d.join("release"), b"").unwrap();
    wait_file(&runs, "first-ended", &procs);
    ns.link(true);
    until_status(&addr, "the cut-off agent to come back, holding nothing", &procs, |st| {
        st.agents.len() == 2 && st.agents.iter().all(|a| a.in_flight == 0)
    })
    .await;
    until_metric(&metrics, "lardon_broker_late_reports_total", &procs, |v| v >= 1.0).await;

    // One completion for the victim: the late one changed nothing.
    assert_eq!(metric(&metrics, "lardon_broker_tasks_done_total"), Some(4.0), "{}", logs(&procs));
    let starts = std::fs::read_to_string(&runs).unwrap().lines().filter(|l| *l == "start").count();
    assert_eq!(starts, 2, "ran once on each side of the cut");
    match answer(s.submit(&sh("victim", &script)), &procs).await {
        Answer::Done(e) => assert_eq!(e.stdout, b"second\n", "the stored answer is still the second run's"),
        other => panic!("{other:?}"),
    }
    let st = client::status(&addr, &Default::default()).await.unwrap();
    assert_eq!((st.finished, st.queued, st.in_flight), (4, 0, 0));
    // And the agent that was cut off takes work again.
    let mut ok = 0;
    for i in 0..4 {
        if let Answer::Done(e) = answer(s.submit(&sh(&format!("after-{i}"), "echo ok")), &procs).await {
            ok += usize::from(e.success);
        }
    }
    assert_eq!(ok, 4);
}
