//! The broker's Prometheus endpoint over a real socket: an in-process
//! broker with its metrics served on loopback, one agent whose fake
//! executor holds each task until a gate opens, and a submitter. Each
//! scrape is parsed as the text exposition format (every sample's family
//! declared by HELP and TYPE, values numbers) and the figures are checked
//! to move with what the broker routed.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use lardon::{FakeClock, FakeProbe, Governor, HostPolicy, HostProfile};
use lardon_cluster::agent::{Agent, AgentConfig, Executor, Running};
use lardon_cluster::broker::{self, BrokerConfig, MetricsBoard};
use lardon_cluster::{AgentId, Capability, SubmitterId, TaskId};
use lardon_proto::cluster as pb;
use lardon_submit::Backoff;
use lardon_submit::client::{self, Answer, RemoteTask, Submitter, SubmitterConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{oneshot, watch};

const WAIT: Duration = Duration::from_secs(30);

/// Ends each task when the gate is open: `false` fails, anything else
/// succeeds.
#[derive(Debug)]
struct GatedExec {
    open: watch::Receiver<bool>,
}

impl Executor for GatedExec {
    fn run(&self, spec: pb::TaskSpec, _cancel: oneshot::Receiver<()>) -> Running {
        let mut open = self.open.clone();
        Box::pin(async move {
            let _ = open.wait_for(|o| *o).await;
            let success = spec.argv.first().is_none_or(|a| a != "false");
            pb::TaskEnded { success, exit_code: Some(i32::from(!success)), ..Default::default() }
        })
    }
}

fn governor() -> Governor {
    let clock = Arc::new(FakeClock::new(lardon::MonoTime(1)));
    let profile = HostProfile::new(64 << 30, 16);
    let probe = FakeProbe::new(profile.clone()).stamped_by(clock.clone());
    Governor::with_clock(HostPolicy::default_for(&profile), probe, clock).unwrap()
}

/// One scrape, parsed: sample (`name` or `name{labels}`) → value. Fails
/// on anything that is not the exposition format.
type Samples = BTreeMap<String, f64>;

async fn scrape(addr: &str, path: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes()).await.unwrap();
    let mut raw = String::new();
    tokio::time::timeout(WAIT, s.read_to_string(&mut raw)).await.expect("the response").unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").expect("a head and a body");
    let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .expect("a Content-Length")
        .parse()
        .unwrap();
    assert_eq!(length, body.len(), "Content-Length");
    if status == 200 {
        assert!(head.contains("Content-Type: text/plain; version=0.0.4"), "{head}");
    }
    (status, body.to_owned())
}

fn parse(text: &str) -> Samples {
    let mut typed = BTreeMap::new();
    let mut samples = Samples::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            assert!(["counter", "gauge"].contains(&kind), "{line}");
            typed.insert(name.to_owned(), kind.to_owned());
            continue;
        }
        if line.starts_with("# HELP ") {
            continue;
        }
        assert!(!line.starts_with('#') && !line.is_empty(), "unexpected line `{line}`");
        let (sample, value) = line.rsplit_once(' ').unwrap();
        let name = sample.split('{').next().unwrap();
        assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'), "{name}");
        let kind = typed.get(name).unwrap_or_else(|| panic!("{name}: no TYPE before it"));
        if kind == "counter" {
            assert!(name.ends_with("_total"), "counter {name} must end in _total");
        }
        if let Some(labels) = sample.strip_prefix(name) {
            assert!(labels.is_empty() || (labels.starts_with('{') && labels.ends_with("\"}")), "{sample}");
        }
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("{line}: not a number"));
        assert!(samples.insert(sample.to_owned(), value).is_none(), "{sample} twice");
    }
    samples
}

async fn metrics(addr: &str) -> Samples {
    let (status, body) = scrape(addr, "/metrics").await;
    assert_eq!(status, 200, "{body}");
    parse(&body)
}

/// Scrapes until `ok` holds; fails after [`WAIT`] showing the last scrape.
async fn until(addr: &str, what: &str, ok: impl Fn(&Samples) -> bool) -> Samples {
    let start = std::time::Instant::now();
    loop {
        let m = metrics(addr).await;
        if ok(&m) {
            return m;
        }
        assert!(start.elapsed() < WAIT, "timed out waiting for {what}: {m:#?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn get(m: &Samples, sample: &str) -> f64 {
    *m.get(sample).unwrap_or_else(|| panic!("no {sample} in {m:#?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scrapes_show_the_figures_move_as_tasks_are_routed() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let board = MetricsBoard::new();
    let metrics_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let maddr = metrics_listener.local_addr().unwrap().to_string();
    tokio::spawn(broker::serve_metrics(metrics_listener, board.clone(), std::future::pending()));
    // Before any broker is attached the endpoint says so, not zeros.
    assert_eq!(scrape(&maddr, "/metrics").await.0, 503);
    let config = BrokerConfig {
        heartbeat: Duration::from_secs(1),
        cache: Some(lardon_cluster::cache::store::CacheLimits::new(1 << 20)),
        metrics: Some(board),
        ..BrokerConfig::default()
    };
    tokio::spawn(broker::serve(listener, config, std::future::pending()));
    // The broker attaches to the board once its task starts.
    let start = std::time::Instant::now();
    while scrape(&maddr, "/metrics").await.0 == 503 {
        assert!(start.elapsed() < WAIT, "the broker never attached to the metrics board");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let m = metrics(&maddr).await;
    assert_eq!((get(&m, "lardon_broker_agents"), get(&m, "lardon_broker_tasks_done_total")), (0.0, 0.0));
    assert_eq!(scrape(&maddr, "/other").await.0, 404);
    for (request, status) in [("POST /metrics HTTP/1.1\r\n\r\n", 405), ("nonsense\r\n\r\n", 400)] {
        let mut s = tokio::net::TcpStream::connect(&maddr).await.unwrap();
        s.write_all(request.as_bytes()).await.unwrap();
        let mut raw = String::new();
        tokio::time::timeout(WAIT, s.read_to_string(&mut raw)).await.expect("an answer").unwrap();
        assert!(raw.starts_with(&format!("HTTP/1.1 {status} ")), "{request:?}: {raw}");
    }

    let (gate, open) = watch::channel(false);
    let agent = AgentConfig {
        broker: addr.clone(),
        agent: AgentId::new("a1").unwrap(),
        capabilities: vec![Capability::parse("gcc@12").unwrap()],
        tokens: 2,
        heartbeat: Duration::from_secs(1),
        backoff: Backoff { initial: Duration::from_millis(20), max: Duration::from_millis(200) },
        dial: Default::default(),
        ends_at_ms: None,
        drain_grace: None,
        tuning: None,
    };
    let agent = Agent::new(agent, governor(), Arc::new(GatedExec { open })).unwrap();
    tokio::spawn(agent.run(std::future::pending()));
    until(&maddr, "the agent", |m| get(m, "lardon_broker_agents") == 1.0).await;

    let s = Submitter::start(SubmitterConfig {
        broker: addr.clone(),
        submitter: SubmitterId::new("s1").unwrap(),
        heartbeat: Duration::from_secs(1),
        backoff: Backoff { initial: Duration::from_millis(20), max: Duration::from_millis(200) },
        unreachable_after: None,
        dial: Default::default(),
    })
    .unwrap();
    let task = |id: &str, argv0: &str, cacheable: bool| {
        let mut t = RemoteTask::new(
            TaskId::new(id).unwrap(),
            Capability::parse("gcc@12").unwrap(),
            vec![argv0.into()],
        );
        t.cacheable = cacheable;
        t
    };
    // Three tasks on a two-token agent: two in flight, one queued, all
    // under the capability's label.
    let tickets: Vec<_> = [("ok", "true"), ("bad", "false"), ("third", "true")]
        .iter()
        .map(|(id, a)| s.submit(&task(id, a, true)))
        .collect();
    let m = until(&maddr, "two in flight and one queued", |m| {
        get(m, "lardon_broker_tasks_in_flight") == 2.0 && get(m, "lardon_broker_tasks_queued") == 1.0
    })
    .await;
    let key = Capability::parse("gcc@12").unwrap().key();
    assert_eq!(get(&m, &format!("lardon_broker_capability_tasks_in_flight{{capability=\"{key}\"}}")), 2.0);
    assert_eq!(get(&m, &format!("lardon_broker_capability_tasks_queued{{capability=\"{key}\"}}")), 1.0);
    assert_eq!(get(&m, "lardon_broker_submitters"), 1.0);
    // ClusterStatus carries the same per-capability figures.
    let st = client::status(&addr, &Default::default()).await.unwrap();
    assert_eq!(st.routes, vec![pb::RouteStatus { capability: key.clone(), queued: 1, in_flight: 2 }]);
    assert_eq!(get(&m, "lardon_broker_cache_misses_total"), 3.0);

    gate.send_replace(true);
    for t in tickets {
        assert!(matches!(tokio::time::timeout(WAIT, t.answer()).await.unwrap().unwrap(), Answer::Done(_)));
    }
    let m = metrics(&maddr).await;
    assert_eq!(get(&m, "lardon_broker_tasks_done_total"), 2.0);
    assert_eq!(get(&m, "lardon_broker_tasks_failed_total"), 1.0);
    assert_eq!((get(&m, "lardon_broker_tasks_queued"), get(&m, "lardon_broker_tasks_in_flight")), (0.0, 0.0));

    // The same cacheable success again: a hit, no run.
    let again = s.submit(&task("ok-again", "true", true));
    assert!(matches!(tokio::time::timeout(WAIT, again.answer()).await.unwrap().unwrap(), Answer::Done(_)));
    let nobody = s.submit(&RemoteTask::new(
        TaskId::new("nobody").unwrap(),
        Capability::parse("clang@17").unwrap(),
        vec!["clang".into()],
    ));
    assert_eq!(
        tokio::time::timeout(WAIT, nobody.answer()).await.unwrap().unwrap(),
        Answer::NoExecutor(String::new())
    );
    let m = metrics(&maddr).await;
    assert_eq!(get(&m, "lardon_broker_cache_hits_total"), 1.0);
    assert_eq!(get(&m, "lardon_broker_no_executor_total"), 1.0);
    assert_eq!(get(&m, "lardon_broker_tasks_done_total"), 2.0, "a cache hit is not a run");
    let st = client::status(&addr, &Default::default()).await.unwrap();
    assert_eq!(st.finished, 4);
}
