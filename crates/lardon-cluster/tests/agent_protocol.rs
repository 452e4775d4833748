//! The agent against a scripted broker (a test double of the gRPC
//! service): what its hellos say across reconnects, that an ended task's
//! report is kept and sent again until the broker acknowledges it, and
//! that admission stays the agent's (capabilities it did not declare,
//! its Governor's WAIT and REJECT), and how it drains on a stop request.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use lardon::{FakeClock, FakeProbe, Governor, HostPolicy, HostProfile};
use lardon_cluster::agent::{Agent, AgentConfig, Executor, Running};
use lardon_cluster::{AgentId, Capability};
use lardon_proto::cluster as pb;
use lardon_proto::cluster::broker_server::{Broker, BrokerServer};
use lardon_submit::Backoff;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_stream::Stream;
use tokio_stream::wrappers::{TcpListenerStream, UnboundedReceiverStream};
use tonic::{Request, Response, Status, Streaming};

const WAIT: Duration = Duration::from_secs(30);

type Down = mpsc::UnboundedSender<Result<pb::BrokerToAgent, Status>>;

/// Hands each agent connection to the test.
#[derive(Debug, Clone)]
struct Scripted {
    conns: mpsc::UnboundedSender<(Streaming<pb::AgentMessage>, Down)>,
}

#[tonic::async_trait]
impl Broker for Scripted {
    type AgentStreamStream = Pin<Box<dyn Stream<Item = Result<pb::BrokerToAgent, Status>> + Send>>;
    type SubmitStreamStream = Pin<Box<dyn Stream<Item = Result<pb::SubmitReply, Status>> + Send>>;
    type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::ClusterWatchEvent, Status>> + Send>>;

    async fn agent_stream(
        &self,
        request: Request<Streaming<pb::AgentMessage>>,
    ) -> Result<Response<Self::AgentStreamStream>, Status> {
        let (tx, rx) = mpsc::unbounded_channel();
        let _ = self.conns.send((request.into_inner(), tx));
        Ok(Response::new(Box::pin(UnboundedReceiverStream::new(rx))))
    }

    async fn submit_stream(
        &self,
        _: Request<Streaming<pb::SubmitMessage>>,
    ) -> Result<Response<Self::SubmitStreamStream>, Status> {
        Err(Status::unimplemented("scripted"))
    }

    async fn cluster_status(
        &self,
        _: Request<pb::ClusterStatusRequest>,
    ) -> Result<Response<pb::ClusterStatusResponse>, Status> {
        Err(Status::unimplemented("scripted"))
    }

    async fn watch(
        &self,
        _: Request<pb::ClusterWatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        Err(Status::unimplemented("scripted"))
    }

    async fn provision_explain(
        &self,
        _: Request<pb::ProvisionExplainRequest>,
    ) -> Result<Response<pb::ProvisionExplainResponse>, Status> {
        Err(Status::unimplemented("scripted"))
    }
}

/// Ends every task at once, successfully.
#[derive(Debug)]
struct Instant;

impl Executor for Instant {
    fn run(&self, _: pb::TaskSpec, _: oneshot::Receiver<()>) -> Running {
        Box::pin(async { pb::TaskEnded { success: true, exit_code: Some(0), ..Default::default() } })
    }
}

struct Conn {
    up: Streaming<pb::AgentMessage>,
    down: Down,
}

impl Conn {
    /// The next message that is not a heartbeat.
    async fn next(&mut self) -> pb::agent_message::Kind {
        loop {
            let m = tokio::time::timeout(WAIT, self.up.message()).await.expect("a message").unwrap().unwrap();
            match m.kind {
                Some(pb::agent_message::Kind::Heartbeat(_))
                | Some(pb::agent_message::Kind::Update(_))
                | None => {}
                Some(kind) => return kind,
            }
        }
    }

    /// The next availability update (heartbeats and other messages
    /// skipped).
    async fn update(&mut self) -> pb::Availability {
        loop {
            let m = tokio::time::timeout(WAIT, self.up.message()).await.expect("an update").unwrap().unwrap();
            if let Some(pb::agent_message::Kind::Update(a)) = m.kind {
                return a;
            }
        }
    }

    async fn hello(&mut self) -> pb::AgentHello {
        match self.next().await {
            pb::agent_message::Kind::Hello(h) => h,
            other => panic!("expected a hello, got {other:?}"),
        }
    }

    async fn report(&mut self) -> pb::TaskReport {
        match self.next().await {
            pb::agent_message::Kind::Report(r) => r,
            other => panic!("expected a report, got {other:?}"),
        }
    }

    fn send(&self, kind: pb::broker_to_agent::Kind) {
        self.down.send(Ok(pb::BrokerToAgent { kind: Some(kind) })).unwrap();
    }

    /// Ends the stream from the broker's side (the agent reconnects).
    fn drop_stream(self) {
        let _ = self.down.send(Err(Status::unavailable("scripted broker restarts")));
    }
}

async fn setup(memory: u64) -> mpsc::UnboundedReceiver<(Streaming<pb::AgentMessage>, Down)> {
    setup_with(memory, Arc::new(Instant), None, |agent| {
        tokio::spawn(agent.run(std::future::pending()));
    })
    .await
}

/// A scripted broker and agent `a1` (executor `exec`), handed to `start`.
async fn setup_with(
    memory: u64,
    exec: Arc<dyn Executor>,
    drain_grace: Option<Duration>,
    start: impl FnOnce(Agent),
) -> mpsc::UnboundedReceiver<(Streaming<pb::AgentMessage>, Down)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (conns, rx) = mpsc::unbounded_channel();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(BrokerServer::new(Scripted { conns }))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    let clock = Arc::new(FakeClock::new(lardon::MonoTime(1)));
    let profile = HostProfile::new(memory, 8);
    let probe = Arc::new(FakeProbe::new(profile.clone()).stamped_by(clock.clone()));
    PROBE.with(|p| *p.borrow_mut() = Some(Arc::clone(&probe)));
    let governor = Governor::with_clock(HostPolicy::default_for(&profile), probe, clock).unwrap();
    let config = AgentConfig {
        broker: addr,
        agent: AgentId::new("a1").unwrap(),
        capabilities: vec![Capability::parse("gcc@12").unwrap()],
        tokens: 2,
        heartbeat: Duration::from_secs(1),
        backoff: Backoff { initial: Duration::from_millis(10), max: Duration::from_millis(50) },
        dial: Default::default(),
        ends_at_ms: None,
        drain_grace,
        tuning: None,
    };
    start(Agent::new(config, governor, exec).unwrap());
    rx
}

thread_local! {
    /// The probe of the agent [`setup_with`] made last on this thread, for
    /// a test that scripts the host.
    static PROBE: std::cell::RefCell<Option<Arc<FakeProbe>>> = const { std::cell::RefCell::new(None) };
}

/// Ends each task when the test says so.
#[derive(Debug)]
struct OnceGated(std::sync::Mutex<Option<oneshot::Receiver<()>>>);

impl Executor for OnceGated {
    fn run(&self, _: pb::TaskSpec, _: oneshot::Receiver<()>) -> Running {
        let gate = self.0.lock().unwrap().take();
        Box::pin(async move {
            if let Some(gate) = gate {
                let _ = gate.await;
            }
            pb::TaskEnded { success: true, exit_code: Some(0), ..Default::default() }
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_agent_exits_closing_its_stream_but_never_while_it_holds_work() {
    let (gate, gated) = oneshot::channel();
    let executor = Arc::new(OnceGated(std::sync::Mutex::new(Some(gated))));
    // Heartbeats every second; idle exit after half of one.
    let handle = Arc::new(std::sync::Mutex::new(None));
    let slot = Arc::clone(&handle);
    let mut conns = setup_with(16 << 30, executor, None, move |agent| {
        let run = agent.with_idle_exit(Duration::from_millis(500)).run(std::future::pending());
        *slot.lock().unwrap() = Some(tokio::spawn(run));
    })
    .await;
    let agent = handle.lock().unwrap().take().expect("the agent started");
    let mut c = accept(&mut conns).await;
    c.hello().await;
    c.send(pb::broker_to_agent::Kind::Assign(spec("t1", "gcc@12", 1 << 20)));
    // Three of its own heartbeats (3 s, six idle-exit times) while t1 runs:
    // it stays.
    let mut beats = 0;
    while beats < 3 {
        let m = tokio::time::timeout(WAIT, c.up.message()).await.expect("a message").unwrap();
        match m.and_then(|m| m.kind) {
            Some(pb::agent_message::Kind::Heartbeat(_)) => beats += 1,
            Some(pb::agent_message::Kind::Update(_)) => {}
            other => panic!("the agent left or spoke while running t1: {other:?}"),
        }
    }
    assert!(!agent.is_finished(), "it exited while running a task");
    gate.send(()).unwrap();
    assert_eq!(c.report().await.task_id, "t1");
    // Reported but not acknowledged: still held, so it stays (three beats).
    let mut beats = 0;
    while beats < 3 {
        let m = tokio::time::timeout(WAIT, c.up.message()).await.expect("a message").unwrap();
        match m.and_then(|m| m.kind) {
            Some(pb::agent_message::Kind::Heartbeat(_)) => beats += 1,
            Some(pb::agent_message::Kind::Update(_)) => {}
            other => panic!("the agent left or spoke with an unacknowledged report: {other:?}"),
        }
    }
    c.send(pb::broker_to_agent::Kind::Ack(pb::ReportAck { task_id: "t1".into() }));
    // Acknowledged: nothing held; the stream ends cleanly and run returns.
    loop {
        match tokio::time::timeout(WAIT, c.up.message()).await.expect("the stream to end") {
            Ok(Some(m)) => assert!(
                matches!(
                    m.kind,
                    Some(pb::agent_message::Kind::Heartbeat(_) | pb::agent_message::Kind::Update(_))
                ),
                "{m:?}"
            ),
            Ok(None) => break,
            Err(status) => panic!("the stream failed instead of ending: {status:?}"),
        }
    }
    // Returned: it will not reconnect.
    tokio::time::timeout(WAIT, agent).await.expect("the agent to return").unwrap();
}

async fn accept(rx: &mut mpsc::UnboundedReceiver<(Streaming<pb::AgentMessage>, Down)>) -> Conn {
    let (up, down) = tokio::time::timeout(WAIT, rx.recv()).await.expect("a connection").unwrap();
    Conn { up, down }
}

fn spec(id: &str, capability: &str, memory: u64) -> pb::TaskSpec {
    let cap = Capability::parse(capability).unwrap();
    pb::TaskSpec {
        task_id: id.into(),
        capability: Some(lardon_cluster_core::wire::capability_to_pb(&cap)),
        need: Some(pb::Need { memory, cpu_millis: 1000 }),
        argv: vec!["true".into()],
        ..Default::default()
    }
}

fn ended(r: &pb::TaskReport) -> &pb::TaskEnded {
    match &r.report {
        Some(pb::task_report::Report::Ended(e)) => e,
        other => panic!("expected an end, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unacknowledged_report_is_held_and_sent_again_after_a_reconnect() {
    let mut conns = setup(16 << 30).await;
    let mut c = accept(&mut conns).await;
    let hello = c.hello().await;
    assert_eq!((hello.agent_id.as_str(), hello.tokens, hello.running.len()), ("a1", 2, 0));
    assert_eq!(hello.capabilities[0].name, "gcc");
    assert!(hello.availability.unwrap().memory > 0, "the hello carries a sampled availability");

    c.send(pb::broker_to_agent::Kind::Assign(spec("t1", "gcc@12", 1 << 20)));
    let r = c.report().await;
    assert_eq!(r.task_id, "t1");
    assert!(ended(&r).success);
    // The broker goes away before acknowledging: the agent says it still
    // holds t1 and reports it again.
    c.drop_stream();
    let mut c = accept(&mut conns).await;
    assert_eq!(c.hello().await.running, vec!["t1".to_owned()]);
    assert_eq!(c.report().await.task_id, "t1");
    // Acknowledged: forgotten, and the next hello no longer lists it.
    c.send(pb::broker_to_agent::Kind::Ack(pb::ReportAck { task_id: "t1".into() }));
    // A duplicate assignment of an acknowledged task would run it again,
    // so the ack must be processed before the next hello: an assignment
    // after it shows the agent has read it.
    c.send(pb::broker_to_agent::Kind::Assign(spec("t2", "gcc@12", 1 << 20)));
    assert_eq!(c.report().await.task_id, "t2");
    c.send(pb::broker_to_agent::Kind::Ack(pb::ReportAck { task_id: "t2".into() }));
    c.send(pb::broker_to_agent::Kind::Assign(spec("t3", "gcc@12", 1 << 20)));
    assert_eq!(c.report().await.task_id, "t3");
    c.drop_stream();
    let mut c = accept(&mut conns).await;
    assert_eq!(c.hello().await.running, vec!["t3".to_owned()], "acknowledged t1 and t2 are forgotten");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_stays_the_agents() {
    let mut conns = setup(4 << 30).await;
    let mut c = accept(&mut conns).await;
    c.hello().await;
    // A capability it did not declare: ended, failed, never run.
    c.send(pb::broker_to_agent::Kind::Assign(spec("other", "clang@17", 0)));
    let r = c.report().await;
    assert!(ended(&r).reason.contains("not one this agent declared"), "{r:?}");
    // More memory than this host could ever give: its Governor rejects.
    c.send(pb::broker_to_agent::Kind::Assign(spec("huge", "gcc@12", 64 << 30)));
    let r = c.report().await;
    assert!(ended(&r).reason.starts_with("refused by the agent's Governor"), "{r:?}");
    // A malformed assignment is refused naming the field.
    let mut bad = spec("bad", "gcc@12", 0);
    bad.argv.clear();
    c.send(pb::broker_to_agent::Kind::Assign(bad));
    let r = c.report().await;
    assert!(ended(&r).reason.starts_with("assign.argv"), "{r:?}");
}

/// Runs each task until the gate opens, or until it is cancelled.
#[derive(Debug)]
struct Gated(watch::Receiver<bool>);

impl Executor for Gated {
    fn run(&self, _: pb::TaskSpec, cancel: oneshot::Receiver<()>) -> Running {
        let mut open = self.0.clone();
        Box::pin(async move {
            tokio::select! {
                _ = open.wait_for(|o| *o) => pb::TaskEnded { success: true, exit_code: Some(0), ..Default::default() },
                Ok(()) = cancel => pb::TaskEnded { success: false, reason: "cancelled".into(), ..Default::default() },
            }
        })
    }
}

/// An agent with a gated executor, a stop-request channel and a drain
/// grace; `done` resolves when its run returns.
struct Draining {
    conns: mpsc::UnboundedReceiver<(Streaming<pb::AgentMessage>, Down)>,
    stop: mpsc::UnboundedSender<()>,
    gate: watch::Sender<bool>,
    done: oneshot::Receiver<()>,
}

async fn draining(grace: Duration) -> Draining {
    let (gate, open) = watch::channel(false);
    let (stop, stops) = mpsc::unbounded_channel();
    let (finished, done) = oneshot::channel();
    let conns = setup_with(16 << 30, Arc::new(Gated(open)), Some(grace), move |agent| {
        let agent = agent.with_stop_requests(Box::pin(UnboundedReceiverStream::new(stops)));
        tokio::spawn(async move {
            agent.run(std::future::pending()).await;
            let _ = finished.send(());
        });
    })
    .await;
    Draining { conns, stop, gate, done }
}

/// Assigns `id` and waits until the agent has taken it: an assignment it
/// refuses at once, sent after, is answered after it.
async fn start(c: &mut Conn, id: &str) {
    c.send(pb::broker_to_agent::Kind::Assign(spec(id, "gcc@12", 1 << 20)));
    c.send(pb::broker_to_agent::Kind::Assign(spec(&format!("{id}-probe"), "clang@17", 0)));
    assert_eq!(c.report().await.task_id, format!("{id}-probe"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_request_drains_sends_new_work_back_and_exits_once_all_is_reported_and_acknowledged() {
    let mut a = draining(Duration::from_secs(600)).await;
    let mut c = accept(&mut a.conns).await;
    c.hello().await;
    start(&mut c, "t1").await;
    a.stop.send(()).unwrap();
    match c.next().await {
        pb::agent_message::Kind::Draining(d) => assert_eq!(d.running, vec!["t1".to_owned()]),
        other => panic!("expected the drain notice, got {other:?}"),
    }
    // Work that still arrives goes straight back.
    c.send(pb::broker_to_agent::Kind::Assign(spec("t2", "gcc@12", 1 << 20)));
    let r = c.report().await;
    assert_eq!(r.task_id, "t2");
    assert!(
        matches!(&r.report, Some(pb::task_report::Report::Wait(w)) if w.reason.contains("draining")),
        "{r:?}"
    );
    c.send(pb::broker_to_agent::Kind::DrainAck(pb::DrainAck {}));
    // The running task finishes and is reported; the agent waits for the
    // broker to acknowledge it before it exits.
    a.gate.send(true).unwrap();
    let r = c.report().await;
    assert!(r.task_id == "t1" && ended(&r).success, "{r:?}");
    assert!(a.done.try_recv().is_err(), "still waiting for the ack");
    c.send(pb::broker_to_agent::Kind::Ack(pb::ReportAck { task_id: "t1".into() }));
    tokio::time::timeout(WAIT, a.done).await.expect("the agent exits once drained").unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_grace_runs_out_the_running_task_is_cancelled_and_not_reported() {
    let mut a = draining(Duration::from_millis(300)).await;
    let mut c = accept(&mut a.conns).await;
    c.hello().await;
    start(&mut c, "t1").await;
    a.stop.send(()).unwrap();
    assert!(matches!(c.next().await, pb::agent_message::Kind::Draining(_)));
    c.send(pb::broker_to_agent::Kind::DrainAck(pb::DrainAck {}));
    // The gate never opens: 300 ms later the agent cancels t1 and exits.
    tokio::time::timeout(WAIT, a.done).await.expect("the agent exits at the grace's end").unwrap();
    // Its stream ends with no report of t1: the broker queues it again.
    while let Ok(Some(m)) = tokio::time::timeout(WAIT, c.up.message()).await.expect("the stream ends") {
        assert!(
            !matches!(m.kind, Some(pb::agent_message::Kind::Report(ref r)) if r.task_id == "t1"),
            "a cancelled task is not reported: {m:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_stop_request_cancels_at_once() {
    // A grace far longer than the test's patience: only the second
    // request can end it in time.
    let mut a = draining(Duration::from_secs(600)).await;
    let mut c = accept(&mut a.conns).await;
    c.hello().await;
    start(&mut c, "t1").await;
    a.stop.send(()).unwrap();
    assert!(matches!(c.next().await, pb::agent_message::Kind::Draining(_)));
    a.stop.send(()).unwrap();
    tokio::time::timeout(WAIT, a.done).await.expect("the agent exits on the second request").unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_host_gate_is_advertised_as_no_cpu_and_its_opening_is_pushed() {
    let mut conns = setup(16 << 30).await;
    let probe = PROBE.with(|p| p.borrow().clone()).unwrap();
    let mut c = accept(&mut conns).await;
    let open = c.hello().await.availability.unwrap();
    assert!(open.cpu_millis > 0, "{open:?}");
    // Foreign load past the gate (0.9 × the 8-CPU pool): the Governor
    // would admit nothing, so the agent offers no CPU at its next sample.
    probe.update(|s| s.load.one = 20.0);
    let closed = c.update().await;
    assert_eq!((closed.cpu_millis, closed.memory), (0, open.memory), "{closed:?}");
    // The load goes: the next sample offers the CPUs again.
    probe.update(|s| s.load.one = 0.0);
    let reopened = c.update().await;
    assert_eq!(reopened, open);
    // Closed between two samples: the assignment the mirror allowed is
    // told WAIT, and the update that follows offers nothing.
    probe.update(|s| s.load.one = 20.0);
    c.send(pb::broker_to_agent::Kind::Assign(spec("t1", "gcc@12", 1 << 20)));
    match c.report().await.report {
        Some(pb::task_report::Report::Wait(w)) => assert!(w.reason.contains("load"), "{w:?}"),
        other => panic!("expected a WAIT, got {other:?}"),
    }
    assert_eq!(c.update().await.cpu_millis, 0);
}
