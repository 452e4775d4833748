//! The in-process cluster: a broker on loopback, three agents with fake
//! Governors (a fake probe on a frozen clock) and a fake executor, and two
//! submitters, all over real gRPC streams. Waits are on events (the
//! executor's start channel, tickets) or on the broker's status, each with
//! a deadline that only fails.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use lardon::{FakeClock, FakeProbe, Governor, HostPolicy, HostProfile};
use lardon_cluster::agent::{Agent, AgentConfig, Executor, Running};
use lardon_cluster::broker::{self, BrokerConfig};
use lardon_cluster::{AgentId, Capability, SubmitterId, TaskId};
use lardon_proto::cluster as pb;
use lardon_submit::Backoff;
use lardon_submit::client::{self, Answer, RemoteTask, Submitter, SubmitterConfig};
use tokio::sync::{mpsc, oneshot, watch};

const WAIT: Duration = Duration::from_secs(30);

/// Records each start as (agent, task) and ends the task when the gate
/// is open (at once if it already is), or when cancelled.
#[derive(Debug)]
struct FakeExec {
    agent: String,
    started: mpsc::UnboundedSender<(String, String)>,
    open: watch::Receiver<bool>,
}

impl Executor for FakeExec {
    fn run(&self, spec: pb::TaskSpec, cancel: oneshot::Receiver<()>) -> Running {
        let agent = self.agent.clone();
        let started = self.started.clone();
        let mut open = self.open.clone();
        Box::pin(async move {
            let _ = started.send((agent.clone(), spec.task_id.clone()));
            tokio::select! {
                _ = open.wait_for(|o| *o) => pb::TaskEnded { success: true, exit_code: Some(0), stdout: agent.into_bytes(), ..Default::default() },
                Ok(()) = cancel => pb::TaskEnded { success: false, reason: "cancelled".into(), ..Default::default() },
            }
        })
    }
}

struct Cluster {
    addr: String,
    started: mpsc::UnboundedReceiver<(String, String)>,
    gate: watch::Sender<bool>,
}

fn governor() -> Governor {
    let clock = Arc::new(FakeClock::new(lardon::MonoTime(1)));
    let profile = HostProfile::new(64 << 30, 16);
    let probe = FakeProbe::new(profile.clone()).stamped_by(clock.clone());
    Governor::with_clock(HostPolicy::default_for(&profile), probe, clock).unwrap()
}

fn fast() -> Backoff {
    Backoff { initial: Duration::from_millis(20), max: Duration::from_millis(200) }
}

/// An agent `id` of `broker` running `caps` with `tokens`, fast back-off,
/// no allocation end, no optimizer.
fn agent_config(broker: &str, id: &str, caps: &[&str], tokens: u32) -> AgentConfig {
    AgentConfig {
        broker: broker.to_owned(),
        agent: AgentId::new(id).unwrap(),
        capabilities: caps.iter().map(|c| Capability::parse(c).unwrap()).collect(),
        tokens,
        heartbeat: Duration::from_secs(1),
        backoff: fast(),
        dial: Default::default(),
        ends_at_ms: None,
        drain_grace: None,
        tuning: None,
    }
}

/// A broker and `agents` (id, capabilities, tokens); the gate starts
/// `open` or closed.
async fn cluster(agents: &[(&str, &[&str], u32)], open: bool) -> Cluster {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let config = BrokerConfig { heartbeat: Duration::from_secs(1), ..BrokerConfig::default() };
    tokio::spawn(broker::serve(listener, config, std::future::pending()));
    let (started_tx, started) = mpsc::unbounded_channel();
    let (gate, open_rx) = watch::channel(open);
    for (id, caps, tokens) in agents {
        let config = agent_config(&addr, id, caps, *tokens);
        let exec = FakeExec { agent: (*id).to_owned(), started: started_tx.clone(), open: open_rx.clone() };
        let agent = Agent::new(config, governor(), Arc::new(exec)).unwrap();
        tokio::spawn(agent.run(std::future::pending()));
    }
    let c = Cluster { addr, started, gate };
    c.until("every agent to connect", |s| s.agents.len() == agents.len()).await;
    c
}

impl Cluster {
    fn submitter(&self, id: &str) -> Submitter {
        Submitter::start(SubmitterConfig {
            broker: self.addr.clone(),
            submitter: SubmitterId::new(id).unwrap(),
            heartbeat: Duration::from_secs(1),
            backoff: fast(),
            unreachable_after: None,
            dial: Default::default(),
        })
        .unwrap()
    }

    /// Polls the broker's status until `ok` holds; fails after [`WAIT`].
    async fn until(&self, what: &str, ok: impl Fn(&pb::ClusterStatusResponse) -> bool) {
        let check = async {
            loop {
                if let Ok(s) = client::status(&self.addr, &Default::default()).await
                    && ok(&s)
                {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(WAIT, check).await.unwrap_or_else(|_| panic!("timed out waiting for {what}"));
    }

    async fn next_start(&mut self) -> (String, String) {
        tokio::time::timeout(WAIT, self.started.recv()).await.expect("a task to start").expect("agents alive")
    }
}

fn task(id: &str, capability: &str) -> RemoteTask {
    RemoteTask::new(TaskId::new(id).unwrap(), Capability::parse(capability).unwrap(), vec!["true".into()])
}

async fn answer(ticket: client::Ticket) -> Answer {
    let id = ticket.id().clone();
    tokio::time::timeout(WAIT, ticket.answer())
        .await
        .unwrap_or_else(|_| panic!("no answer for {id}"))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_run_only_on_agents_that_declared_their_capability() {
    let c =
        cluster(&[("gcc-1", &["gcc@12"], 4), ("gcc-2", &["gcc@12"], 4), ("py-1", &["python@3.11"], 4)], true)
            .await;
    let s1 = c.submitter("s1");
    let s2 = c.submitter("s2");
    let mut tickets = Vec::new();
    for i in 0..12 {
        tickets.push(s1.submit(&task(&format!("g{i}"), "gcc@12")));
        tickets.push(s2.submit(&task(&format!("p{i}"), "python@3.11")));
    }
    let mut ran_on: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for t in tickets {
        let id = t.id().to_string();
        match answer(t).await {
            Answer::Done(ended) => {
                assert!(ended.success);
                ran_on.entry(String::from_utf8(ended.stdout).unwrap()).or_default().push(id);
            }
            other => panic!("{id}: {other:?}"),
        }
    }
    assert!(ran_on["py-1"].iter().all(|t| t.starts_with('p')), "{ran_on:?}");
    assert_eq!(ran_on["py-1"].len(), 12, "{ran_on:?}");
    let gcc: usize = ["gcc-1", "gcc-2"].iter().map(|a| ran_on.get(*a).map_or(0, |v| v.len())).sum();
    assert_eq!(gcc, 12, "{ran_on:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_executor_is_answered_at_once() {
    let c = cluster(&[("gcc-1", &["gcc@12"], 4)], true).await;
    let s = c.submitter("s1");
    assert_eq!(answer(s.submit(&task("t1", "clang@17"))).await, Answer::NoExecutor(String::new()));
    // A malformed request is refused naming the field, also at once.
    let mut bad = task("t2", "gcc@12");
    bad.argv.clear();
    match answer(s.submit(&bad)).await {
        Answer::Rejected(reason) => assert!(reason.starts_with("request.argv"), "{reason}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_submitters_share_one_agent_equally() {
    let mut c = cluster(&[("gcc-1", &["gcc@12"], 1)], false).await;
    let a = c.submitter("a");
    let b = c.submitter("b");
    // The agent holds a's first task while both queue 40 more each
    // (a queued all of its own before b queued any).
    let mut tickets = vec![a.submit(&task("a-first", "gcc@12"))];
    assert_eq!(c.next_start().await.1, "a-first");
    for i in 0..40 {
        tickets.push(a.submit(&task(&format!("a{i}"), "gcc@12")));
    }
    c.until("a's tasks queued", |s| s.queued == 40).await;
    for i in 0..40 {
        tickets.push(b.submit(&task(&format!("b{i}"), "gcc@12")));
    }
    c.until("b's tasks queued", |s| s.queued == 80).await;
    c.gate.send_replace(true);
    let mut order = Vec::new();
    for _ in 0..80 {
        order.push(c.next_start().await.1);
    }
    // Of the next 40 starts, each submitter gets within 10 % of 20.
    let a_share = order[..40].iter().filter(|t| t.starts_with('a')).count();
    assert!((18..=22).contains(&a_share), "a got {a_share} of 40: {order:?}");
    for t in tickets {
        assert!(matches!(answer(t).await, Answer::Done(_)));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_reaches_a_running_task_and_answers_a_queued_one() {
    let mut c = cluster(&[("gcc-1", &["gcc@12"], 1)], false).await;
    let s = c.submitter("s1");
    let running = s.submit(&task("running", "gcc@12"));
    assert_eq!(c.next_start().await.1, "running");
    let queued = s.submit(&task("queued", "gcc@12"));
    c.until("the second task queued", |st| st.queued == 1).await;
    s.cancel(&TaskId::new("queued").unwrap());
    assert_eq!(answer(queued).await, Answer::Cancelled);
    s.cancel(&TaskId::new("running").unwrap());
    match answer(running).await {
        Answer::Done(ended) => assert_eq!((ended.success, ended.reason.as_str()), (false, "cancelled")),
        other => panic!("{other:?}"),
    }
    // The agent's token is free again: the next task runs.
    c.gate.send_replace(true);
    assert!(matches!(answer(s.submit(&task("after", "gcc@12"))).await, Answer::Done(e) if e.success));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resubmission_by_id_is_answered_once_and_not_run_again() {
    let mut c = cluster(&[("gcc-1", &["gcc@12"], 2)], true).await;
    let s = c.submitter("s1");
    assert!(matches!(answer(s.submit(&task("once", "gcc@12"))).await, Answer::Done(e) if e.success));
    assert_eq!(c.next_start().await.1, "once");
    // Asked again (as after a reconnect): the stored answer, no new run.
    assert!(matches!(answer(s.submit(&task("once", "gcc@12"))).await, Answer::Done(e) if e.success));
    assert!(c.started.try_recv().is_err(), "ran twice");
    let st = client::status(&c.addr, &Default::default()).await.unwrap();
    assert_eq!((st.finished, st.queued, st.in_flight), (1, 0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_that_passes_in_the_queue_is_answered_and_the_task_never_starts() {
    let mut c = cluster(&[("gcc-1", &["gcc@12"], 1)], false).await;
    let s = c.submitter("s1");
    let busy = s.submit(&task("busy", "gcc@12"));
    assert_eq!(c.next_start().await.1, "busy");
    let mut late = task("late", "gcc@12");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    late.deadline_unix_ms = Some(i64::try_from(now.as_millis()).unwrap() + 300);
    assert_eq!(answer(s.submit(&late)).await, Answer::DeadlinePassed);
    c.gate.send_replace(true);
    assert!(matches!(answer(busy).await, Answer::Done(e) if e.success));
    assert!(c.started.try_recv().is_err(), "the expired task started");
}

/// A cacheable task's success is cached by the broker; the same task
/// submitted again is answered from the cache with no agent connected,
/// while a task not marked cacheable gets "no executor".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_success_is_answered_with_no_agent_connected() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let config = BrokerConfig {
        heartbeat: Duration::from_secs(1),
        cache: Some(lardon_cluster::cache::store::CacheLimits::new(1 << 20)),
        ..BrokerConfig::default()
    };
    tokio::spawn(broker::serve(listener, config, std::future::pending()));
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let (_gate, open_rx) = watch::channel(true);
    let config = agent_config(&addr, "a1", &["gcc@12"], 1);
    let exec = FakeExec { agent: "a1".into(), started: started_tx, open: open_rx };
    let agent = Agent::new(config, governor(), Arc::new(exec)).unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let agent = tokio::spawn(agent.run(async move {
        let _ = stopped.await;
    }));
    let c =
        Cluster { addr: addr.clone(), started: mpsc::unbounded_channel().1, gate: watch::channel(true).0 };
    c.until("the agent to connect", |s| s.agents.len() == 1).await;

    let s = c.submitter("s1");
    let task = |id: &str, cacheable: bool| {
        let mut t = RemoteTask::new(
            TaskId::new(id).unwrap(),
            Capability::parse("gcc@12").unwrap(),
            vec!["gcc".into(), "-c".into(), "x.c".into()],
        );
        t.cacheable = cacheable;
        t
    };
    match answer(s.submit(&task("first", true))).await {
        Answer::Done(ended) => assert_eq!((ended.success, ended.stdout.as_slice()), (true, &b"a1"[..])),
        other => panic!("{other:?}"),
    }
    assert_eq!(started.recv().await.map(|(_, t)| t).as_deref(), Some("first"));

    let _ = stop.send(());
    agent.await.unwrap();
    c.until("the agent to be gone", |s| s.agents.is_empty()).await;

    match answer(s.submit(&task("again", true))).await {
        Answer::Done(ended) => {
            assert_eq!((ended.success, ended.stdout.as_slice()), (true, &b"a1"[..]), "the cached output")
        }
        other => panic!("not answered from the cache: {other:?}"),
    }
    assert!(started.try_recv().is_err(), "nothing ran");
    assert!(
        matches!(answer(s.submit(&task("plain", false))).await, Answer::NoExecutor(_)),
        "only cacheable tasks"
    );

    // The hit rate (an EWMA weighing each lookup 1/20: one miss, one hit:
    // 0.05) raises the capacity the broker advertises: an agent with 4
    // tokens, and one more hit (0.0975), is advertised as
    // ceil(4 / (1 - 0.0975)) = 5 tokens.
    let (started_tx, _started) = mpsc::unbounded_channel();
    let (_gate, open_rx) = watch::channel(true);
    let config = agent_config(&addr, "a2", &["gcc@12"], 4);
    let exec = FakeExec { agent: "a2".into(), started: started_tx, open: open_rx };
    let agent = Agent::new(config, governor(), Arc::new(exec)).unwrap();
    tokio::spawn(agent.run(std::future::pending()));
    c.until("a2 to connect", |s| s.agents.len() == 1).await;
    assert!(matches!(answer(s.submit(&task("third", true))).await, Answer::Done(_)), "a hit");
    c.until("the hit rate to raise the advertised capacity", |s| {
        s.tokens == 4 && s.advertised_tokens == 5 && (s.cache_hit_rate - 0.0975).abs() < 1e-9
    })
    .await;
}

/// Ends each task at once, reporting that it took an hour (as measured).
#[derive(Debug)]
struct TookAnHour;

impl Executor for TookAnHour {
    fn run(&self, _: pb::TaskSpec, _: oneshot::Receiver<()>) -> Running {
        Box::pin(async {
            pb::TaskEnded {
                success: true,
                exit_code: Some(0),
                wall_ms: 3_600_000,
                peak_memory: 1 << 30,
                ..Default::default()
            }
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_class_learned_to_take_longer_than_any_agent_has_left_is_answered_like_no_executor() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let config = BrokerConfig { heartbeat: Duration::from_secs(1), ..BrokerConfig::default() };
    tokio::spawn(broker::serve(listener, config, std::future::pending()));
    let now_ms = u64::try_from(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis(),
    )
    .unwrap();
    // The agent's allocation ends in ten minutes.
    let config =
        AgentConfig { ends_at_ms: Some(now_ms + 600_000), ..agent_config(&addr, "a1", &["gcc@12"], 2) };
    tokio::spawn(Agent::new(config, governor(), Arc::new(TookAnHour)).unwrap().run(std::future::pending()));
    let c =
        Cluster { addr: addr.clone(), started: mpsc::unbounded_channel().1, gate: watch::channel(true).0 };
    c.until("a1 with its allocation's end", |s| s.agents.iter().any(|a| a.ends_at_unix_ms > 0)).await;
    let s = c.submitter("s1");
    // Declared longer than the ten minutes left: never sent there.
    let mut long = task("declared-long", "gcc@12");
    long.expected_duration = Some(Duration::from_secs(3600));
    assert_eq!(answer(s.submit(&long)).await, Answer::NoExecutor(String::new()));
    // Nothing known of `cc1plus` yet: it runs, and is measured at an hour.
    let mut first = task("first", "gcc@12");
    first.argv = vec!["/usr/lib/gcc/cc1plus".into()];
    assert!(matches!(answer(s.submit(&first)).await, Answer::Done(e) if e.success));
    // Learned: the next of its class is not sent to ten minutes, even with
    // a submitter's guess of one minute.
    let mut second = task("second", "gcc@12");
    second.argv = vec!["cc1plus".into(), "-O2".into()];
    second.expected_duration = Some(Duration::from_secs(60));
    assert_eq!(answer(s.submit(&second)).await, Answer::NoExecutor(String::new()));
    // A class of its own (named by the submitter) starts from nothing.
    let mut named = task("named", "gcc@12");
    named.argv = vec!["cc1plus".into()];
    named.class = Some("tiny-units".into());
    assert!(matches!(answer(s.submit(&named)).await, Answer::Done(e) if e.success));
}
