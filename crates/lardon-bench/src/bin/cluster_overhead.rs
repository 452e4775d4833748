//! The per-task overhead of the cluster (docs/DESIGN.md §14): one no-op
//! (`true`) at a time, as a distribution, three ways in one run:
//!
//! * **direct gRPC round trip** — a unary `ClusterStatus` call on an open
//!   connection to the broker: the floor any routed task pays at least;
//! * **routed no-op** — `true` submitted through the broker (its
//!   `SubmitStream`, already open) to an agent that admits it with its own
//!   Governor (a simulated 64 GiB / 16-CPU host), starts it as a child
//!   process and reports back; the time from `submit` to the answer;
//! * **local execution** — `true` started and waited for here, the cost a
//!   local fallback pays.
//!
//! Broker, agent and submitter run in this process, over loopback gRPC.
//!
//! `cargo run -p lardon-bench --release --bin cluster_overhead [ITERATIONS]`

use std::sync::Arc;
use std::time::{Duration, Instant};

use lardon::{FakeClock, FakeProbe, Governor, HostPolicy, HostProfile, MonoTime};
use lardon_bench::stats::Distribution;
use lardon_cluster::agent::{Agent, AgentConfig, ProcessExecutor};
use lardon_cluster::broker::{self, BrokerConfig};
use lardon_cluster::{AgentId, Capability, SubmitterId, TaskId};
use lardon_submit::Backoff;
use lardon_submit::client::{self, Answer, RemoteTask, Submitter, SubmitterConfig};

fn main() {
    let iterations = std::env::args().nth(1).and_then(|a| a.parse::<usize>().ok()).unwrap_or(500);
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => fail(&format!("starting the runtime: {e}")),
    };
    let rows = rt.block_on(run(iterations)).unwrap_or_else(|e| fail(&e));
    println!("cluster per-task overhead, one at a time, {iterations} iterations each");
    println!();
    println!("| path | n | p50 | p90 | p99 | max |");
    println!("|---|---|---|---|---|---|");
    for (name, mut d) in rows {
        println!(
            "| {name} | {} | {} | {} | {} | {} |",
            d.len(),
            fmt(d.quantile(0.50)),
            fmt(d.quantile(0.90)),
            fmt(d.quantile(0.99)),
            fmt(d.max())
        );
    }
}

fn fail(why: &str) -> ! {
    eprintln!("cluster_overhead: {why}");
    std::process::exit(1)
}

fn fmt(d: Option<Duration>) -> String {
    d.map_or_else(|| "n/a".into(), |d| format!("{:.0} µs", d.as_secs_f64() * 1e6))
}

fn governor() -> Result<Governor, String> {
    let clock = Arc::new(FakeClock::new(MonoTime(1)));
    let profile = HostProfile::new(64 << 30, 16);
    let probe = FakeProbe::new(profile.clone()).stamped_by(Arc::clone(&clock));
    Governor::with_clock(HostPolicy::default_for(&profile), probe, clock).map_err(|e| e.to_string())
}

async fn run(iterations: usize) -> Result<Vec<(&'static str, Distribution)>, String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(|x| e(&x))?;
    let addr = listener.local_addr().map_err(|x| e(&x))?.to_string();
    let config = BrokerConfig { heartbeat: Duration::from_secs(1), ..BrokerConfig::default() };
    tokio::spawn(broker::serve(listener, config, std::future::pending()));
    let capability = Capability::parse("sh").map_err(|x| e(&x))?;
    let agent = Agent::new(
        AgentConfig {
            broker: addr.clone(),
            agent: AgentId::new("bench").map_err(|x| e(&x))?,
            capabilities: vec![capability.clone()],
            tokens: 4,
            heartbeat: Duration::from_secs(1),
            backoff: Backoff::default(),
            dial: Default::default(),
            ends_at_ms: None,
            drain_grace: None,
            tuning: None,
        },
        governor()?,
        Arc::new(ProcessExecutor),
    )
    .map_err(|x| e(&x))?;
    tokio::spawn(agent.run(std::future::pending()));
    let dial = lardon_submit::dial::Dial::default();
    let connected = async {
        loop {
            if client::status(&addr, &dial).await.is_ok_and(|s| s.agents.len() == 1) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), connected)
        .await
        .map_err(|_| "the agent did not connect")?;

    // Direct round trip: one connection, unary calls.
    let mut broker_client = dial.connect(&addr).await.map_err(|x| e(&x))?;
    let mut direct = Distribution::default();
    for _ in 0..iterations {
        let t = Instant::now();
        broker_client
            .cluster_status(lardon_proto::cluster::ClusterStatusRequest {})
            .await
            .map_err(|x| e(&x))?;
        direct.push(t.elapsed());
    }

    // Routed no-op: the submit stream is opened by a first task, untimed.
    let submitter = Submitter::start(SubmitterConfig {
        broker: addr.clone(),
        submitter: SubmitterId::new("bench").map_err(|x| e(&x))?,
        heartbeat: Duration::from_secs(1),
        backoff: Backoff::default(),
        unreachable_after: None,
        dial: dial.clone(),
    })
    .map_err(|x| e(&x))?;
    let mut routed = Distribution::default();
    for i in 0..=iterations {
        let id = TaskId::new(&format!("noop-{i}")).map_err(|x| e(&x))?;
        let task = RemoteTask::new(id, capability.clone(), vec!["true".into()]);
        let t = Instant::now();
        match submitter.submit(&task).answer().await.map_err(|x| e(&x))? {
            Answer::Done(ended) if ended.success => {}
            other => return Err(format!("task {i}: {other:?}")),
        }
        if i > 0 {
            routed.push(t.elapsed());
        }
    }

    // Local: spawn and wait, as the agent does (tokio's process).
    let mut local = Distribution::default();
    for _ in 0..iterations {
        let t = Instant::now();
        let status = tokio::process::Command::new("true").status().await.map_err(|x| e(&x))?;
        if !status.success() {
            return Err("`true` failed".into());
        }
        local.push(t.elapsed());
    }
    Ok(vec![
        ("direct gRPC round trip (ClusterStatus)", direct),
        ("routed no-op (`true` via broker + agent)", routed),
        ("local execution (`true`)", local),
    ])
}
