//! The broker's `Watch` stream against a real broker, agent and submitter
//! over loopback gRPC (docs/DESIGN.md §14): a watcher hears the snapshot,
//! then each change (a submit queued, its run, its answer) without asking
//! again; sequences grow; a quiet broker sends heartbeats; a watcher that
//! never reads holds nothing up and then gets the latest state; a bad
//! `min_interval_ms` is refused naming the field.

use std::sync::Arc;
use std::time::Duration;

use lardon::{FakeClock, FakeProbe, Governor, HostPolicy, HostProfile};
use lardon_proto::cluster as pb;
use lardon_proto::cluster::broker_server::{Broker as _, BrokerServer};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, oneshot};
use tokio::time::Instant;
use tokio_stream::{Stream, StreamExt as _};

use super::{BrokerConfig, BrokerService};
use crate::agent::{Agent, AgentConfig, Executor, Running};
use crate::{AgentId, Capability, SubmitterId, TaskId};
use lardon_submit::Backoff;
use lardon_submit::client::{self, Answer, RemoteTask, StatusError, Submitter, SubmitterConfig};

const HEARTBEAT: Duration = Duration::from_millis(200);
/// Longest any awaited event may take before the test fails.
const WAIT: Duration = Duration::from_secs(30);

/// Each run waits for a permit of `gate`, then succeeds.
#[derive(Debug)]
struct Gated {
    gate: Arc<Semaphore>,
}

impl Executor for Gated {
    fn run(&self, _spec: pb::TaskSpec, cancel: oneshot::Receiver<()>) -> Running {
        let gate = Arc::clone(&self.gate);
        Box::pin(async move {
            tokio::select! {
                permit = gate.acquire_owned() => {
                    permit.unwrap().forget();
                    pb::TaskEnded { success: true, exit_code: Some(0), ..Default::default() }
                }
                Ok(()) = cancel => pb::TaskEnded { success: false, reason: "cancelled".into(), ..Default::default() },
            }
        })
    }
}

fn governor() -> Governor {
    let clock = Arc::new(FakeClock::new(lardon::MonoTime(1)));
    let profile = HostProfile::new(64 << 30, 16);
    let probe = FakeProbe::new(profile.clone()).stamped_by(clock.clone());
    Governor::with_clock(HostPolicy::default_for(&profile), probe, clock).unwrap()
}

fn backoff() -> Backoff {
    Backoff { initial: Duration::from_millis(10), max: Duration::from_millis(100) }
}

/// A broker served on loopback; its service is returned too, so a test
/// can call `watch` on it directly and hold the stream unread.
async fn broker() -> (String, BrokerService) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let config = BrokerConfig { heartbeat: HEARTBEAT, ..BrokerConfig::default() };
    let service = super::start(&config).unwrap();
    let server = tonic::transport::Server::builder().add_service(BrokerServer::new(service.clone()));
    tokio::spawn(server.serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)));
    (addr, service)
}

fn agent(addr: &str, tokens: u32, gate: &Arc<Semaphore>) {
    let config = AgentConfig {
        broker: addr.to_owned(),
        agent: AgentId::new("a1").unwrap(),
        capabilities: vec![Capability::parse("sh@1").unwrap()],
        tokens,
        heartbeat: HEARTBEAT,
        backoff: backoff(),
        dial: Default::default(),
        ends_at_ms: None,
        drain_grace: None,
        tuning: None,
    };
    let agent = Agent::new(config, governor(), Arc::new(Gated { gate: Arc::clone(gate) })).unwrap();
    tokio::spawn(agent.run(std::future::pending()));
}

fn submitter(addr: &str) -> Submitter {
    Submitter::start(SubmitterConfig {
        broker: addr.to_owned(),
        submitter: SubmitterId::new("s1").unwrap(),
        heartbeat: HEARTBEAT,
        backoff: backoff(),
        unreachable_after: None,
        dial: Default::default(),
    })
    .unwrap()
}

fn task(id: &str) -> RemoteTask {
    RemoteTask::new(TaskId::new(id).unwrap(), Capability::parse("sh@1").unwrap(), vec!["true".into()])
}

/// Reads events until one satisfies `ok`, checking on the way that
/// sequences never go back, that a new state has a new sequence and a
/// heartbeat repeats the last one. Returns the matching event.
struct Reader<S> {
    events: S,
    last: Option<pb::ClusterWatchEvent>,
    read: usize,
}

impl<S: Stream<Item = Result<pb::ClusterWatchEvent, tonic::Status>> + Unpin> Reader<S> {
    fn new(events: S) -> Self {
        Reader { events, last: None, read: 0 }
    }

    async fn until(
        &mut self,
        what: &str,
        ok: impl Fn(&pb::ClusterWatchEvent) -> bool,
    ) -> pb::ClusterWatchEvent {
        let deadline = Instant::now() + WAIT;
        loop {
            let event = match tokio::time::timeout_at(deadline, self.events.next()).await {
                Ok(Some(Ok(event))) => event,
                other => panic!("waiting for {what}: {other:?}; last event {:?}", self.last),
            };
            self.read += 1;
            assert!(event.status.is_some(), "every event carries the status: {event:?}");
            assert_eq!(event.heartbeat_ms, 200, "the broker's heartbeat interval");
            if let Some(last) = &self.last {
                if event.heartbeat {
                    assert_eq!(event.sequence, last.sequence, "a heartbeat repeats the sequence");
                    assert_eq!(event.status, last.status, "a heartbeat repeats the state");
                } else {
                    assert!(event.sequence > last.sequence, "{} after {}", event.sequence, last.sequence);
                    assert_ne!(event.status, last.status, "a change event brings a new state");
                }
            } else {
                assert!(!event.heartbeat, "the first event is the snapshot, not a heartbeat");
            }
            self.last = Some(event.clone());
            if ok(&event) {
                return event;
            }
        }
    }
}

fn status(event: &pb::ClusterWatchEvent) -> &pb::ClusterStatusResponse {
    event.status.as_ref().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_hears_the_snapshot_then_each_change_then_heartbeats() {
    let (addr, _service) = broker().await;
    let events = client::watch(&addr, &Default::default(), 10).await.unwrap();
    let mut watcher = Reader::new(events);
    let first = watcher.until("the snapshot", |_| true).await;
    assert!(status(&first).agents.is_empty());

    let gate = Arc::new(Semaphore::new(0));
    agent(&addr, 1, &gate);
    watcher.until("the agent", |e| status(e).agents.len() == 1).await;
    let s = submitter(&addr);
    watcher.until("the submitter", |e| status(e).submitters == 1).await;
    let first = s.submit(&task("t1"));
    watcher.until("t1 at the agent", |e| status(e).in_flight == 1).await;
    let second = s.submit(&task("t2"));
    // One token: t2 waits while t1 runs.
    let e = watcher.until("t2 queued", |e| status(e).queued == 1).await;
    assert_eq!(status(&e).in_flight, 1);
    assert_eq!(status(&e).routes.len(), 1, "{e:?}");
    gate.add_permits(2);
    assert!(matches!(first.answer().await.unwrap(), Answer::Done(e) if e.success));
    assert!(matches!(second.answer().await.unwrap(), Answer::Done(e) if e.success));
    let done = watcher
        .until("both answered", |e| {
            let s = status(e);
            s.finished == 2 && s.queued == 0 && s.in_flight == 0
        })
        .await;
    assert!(done.sequence > 0);
    // Quiet now: heartbeats, with the same state and sequence.
    watcher.until("a heartbeat", |e| e.heartbeat).await;
}

/// A watcher that never reads (its stream held, not polled) does not
/// hold up routing; when it reads, it gets the latest state after at most
/// one stale event, however many changes it missed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_that_never_reads_holds_nothing_up_then_gets_the_latest_state() {
    let (addr, service) = broker().await;
    let request = tonic::Request::new(pb::ClusterWatchRequest { min_interval_ms: 10 });
    let mut watcher = Reader::new(service.watch(request).await.unwrap().into_inner());
    let first = watcher.until("the snapshot", |_| true).await;

    let gate = Arc::new(Semaphore::new(Semaphore::MAX_PERMITS));
    agent(&addr, 4, &gate);
    let s = submitter(&addr);
    const TASKS: u64 = 50;
    let tickets: Vec<_> = (0..TASKS).map(|i| s.submit(&task(&format!("t{i}")))).collect();
    for ticket in tickets {
        let answer = tokio::time::timeout(WAIT, ticket.answer()).await.expect("answered while unwatched");
        assert!(matches!(answer, Ok(Answer::Done(ref e)) if e.success), "{answer:?}");
    }
    // A second subscription makes the owner publish the state as it is
    // now (a new watcher's first snapshot is current), and that state is
    // final: every answer was given.
    let request = tonic::Request::new(pb::ClusterWatchRequest { min_interval_ms: 10 });
    let mut second = Reader::new(service.watch(request).await.unwrap().into_inner());
    let now = second.until("the second watcher's snapshot", |_| true).await;
    assert_eq!((status(&now).finished, status(&now).queued, status(&now).in_flight), (TASKS, 0, 0));
    let last = watcher
        .until("the latest state", |e| {
            let s = status(e);
            s.finished == TASKS && s.queued == 0 && s.in_flight == 0
        })
        .await;
    // The snapshot, at most one stale event held for it, then the latest.
    assert!(watcher.read <= 3, "{} events for {} changes", watcher.read, last.sequence - first.sequence);
    assert!(last.sequence - first.sequence >= 2 * TASKS, "each task is a submit and a report");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_min_interval_is_refused_naming_the_field() {
    let (addr, _service) = broker().await;
    for bad in [1, 60_001] {
        match client::watch(&addr, &Default::default(), bad).await {
            Err(StatusError::Call(status)) => {
                assert_eq!(status.code(), tonic::Code::InvalidArgument);
                assert!(status.message().starts_with("min_interval_ms: "), "{}", status.message());
            }
            Err(e) => panic!("{bad}: {e}"),
            Ok(_) => panic!("min_interval_ms {bad} was accepted"),
        }
    }
}
