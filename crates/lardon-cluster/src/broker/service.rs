//! The tonic side of the broker: each stream's first message is checked
//! (a bad one ends the stream with INVALID_ARGUMENT naming the field),
//! then a reader task validates and forwards every message to the owner
//! task, and a heartbeat goes down the stream at a steady pace. A peer
//! silent for three heartbeats, or whose stream ends, is gone.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lardon_proto::cluster as pb;
use lardon_proto::cluster::broker_server::Broker;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::Stream;
use tokio_stream::wrappers::{ReceiverStream, UnboundedReceiverStream};
use tonic::{Request, Response, Status, Streaming};
use tracing::{debug, warn};

use super::core::Input;
use lardon_cluster_core::wire;

/// Why the broker ends a stream it no longer reads.
const GONE: &str =
    "stream closed by the broker: the peer was silent for three heartbeats or its stream ended";

/// How long a new stream has to send its hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

type Outbound<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// The broker's gRPC service (mount it with
/// [`BrokerServer`](lardon_proto::cluster::broker_server::BrokerServer));
/// cheap to clone, all clones feed the same owner task.
#[derive(Debug, Clone)]
pub struct BrokerService {
    inputs: mpsc::Sender<Input>,
    heartbeat: Duration,
    next_conn: Arc<AtomicU64>,
    provisioner: Option<super::SharedProvisioner>,
}

impl BrokerService {
    pub(super) fn new(
        inputs: mpsc::Sender<Input>,
        heartbeat: Duration,
        provisioner: Option<super::SharedProvisioner>,
    ) -> Self {
        BrokerService { inputs, heartbeat, next_conn: Arc::new(AtomicU64::new(1)), provisioner }
    }

    async fn send(&self, input: Input) -> Result<(), Status> {
        self.inputs.send(input).await.map_err(|_| Status::unavailable("the broker is stopping"))
    }

    /// Sends a heartbeat down `tx` every interval until the stream closes.
    fn beat<T: Send + 'static>(&self, tx: mpsc::UnboundedSender<Result<T, Status>>, make: fn() -> T) {
        let every = self.heartbeat;
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tokio::select! {
                    _ = tick.tick() => if tx.send(Ok(make())).is_err() { break },
                    () = tx.closed() => break,
                }
            }
        });
    }

    /// The next message, or `None` when the stream ended, failed or was
    /// silent for three heartbeats.
    async fn next<T>(&self, inbound: &mut Streaming<T>) -> Option<T> {
        match tokio::time::timeout(self.heartbeat * 3, inbound.message()).await {
            Ok(Ok(Some(m))) => Some(m),
            Ok(Ok(None)) => None,
            Ok(Err(status)) => {
                // Usually the peer exiting; the owner logs what it means
                // (an agent lost, its tasks re-queued).
                debug!("stream ended: {}", status.message());
                None
            }
            Err(_) => {
                warn!("peer silent for three heartbeats: taken as lost");
                None
            }
        }
    }
}

async fn first<T>(inbound: &mut Streaming<T>) -> Result<T, Status> {
    match tokio::time::timeout(HELLO_TIMEOUT, inbound.message()).await {
        Ok(Ok(Some(m))) => Ok(m),
        Ok(Ok(None)) => Err(Status::invalid_argument("hello: the stream ended before it")),
        Ok(Err(status)) => Err(status),
        Err(_) => Err(Status::deadline_exceeded("hello: not sent within 10 s")),
    }
}

fn agent_heartbeat() -> pb::BrokerToAgent {
    pb::BrokerToAgent { kind: Some(pb::broker_to_agent::Kind::Heartbeat(pb::Heartbeat {})) }
}

fn submitter_heartbeat() -> pb::SubmitReply {
    // An empty reply (no task id, no outcome) is a heartbeat.
    pb::SubmitReply::default()
}

#[tonic::async_trait]
impl Broker for BrokerService {
    type AgentStreamStream = Outbound<pb::BrokerToAgent>;
    type SubmitStreamStream = Outbound<pb::SubmitReply>;
    type WatchStream = Outbound<pb::ClusterWatchEvent>;

    async fn agent_stream(
        &self,
        request: Request<Streaming<pb::AgentMessage>>,
    ) -> Result<Response<Self::AgentStreamStream>, Status> {
        let mut inbound = request.into_inner();
        let hello = match first(&mut inbound).await?.kind {
            Some(pb::agent_message::Kind::Hello(h)) => h,
            _ => return Err(Status::invalid_argument("hello: the first message must be the agent's hello")),
        };
        let hello = wire::agent_hello(&hello).map_err(|e| Status::invalid_argument(e.to_string()))?;
        let agent = hello.agent.clone();
        let conn = self.next_conn.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded_channel();
        self.send(Input::AgentHello { hello, conn, tx: tx.clone() }).await?;
        self.beat(tx.clone(), agent_heartbeat);
        let this = self.clone();
        tokio::spawn(async move {
            while let Some(message) = this.next(&mut inbound).await {
                let input = match message.kind {
                    Some(pb::agent_message::Kind::Update(a)) => {
                        Input::AgentUpdate { agent: agent.clone(), conn, availability: wire::update(&a) }
                    }
                    Some(pb::agent_message::Kind::Report(r)) => match wire::report(r) {
                        Ok((task, report, ended)) => {
                            Input::AgentReport { agent: agent.clone(), conn, task, report, ended }
                        }
                        Err(e) => {
                            // A peer that sends garbage is dropped (its
                            // tasks are re-queued), never trusted.
                            let _ = tx.send(Err(Status::invalid_argument(e.to_string())));
                            break;
                        }
                    },
                    Some(pb::agent_message::Kind::Draining(d)) => match wire::draining(&d) {
                        Ok(running) => {
                            let reason: String =
                                d.reason.chars().filter(|c| !c.is_control()).take(wire::MAX_NOTE).collect();
                            Input::AgentDraining { agent: agent.clone(), conn, running, reason }
                        }
                        Err(e) => {
                            let _ = tx.send(Err(Status::invalid_argument(e.to_string())));
                            break;
                        }
                    },
                    Some(pb::agent_message::Kind::Tokens(t)) => match wire::token_bound(&t) {
                        Ok(bound) => Input::AgentTokens { agent: agent.clone(), conn, bound },
                        Err(e) => {
                            let _ = tx.send(Err(Status::invalid_argument(e.to_string())));
                            break;
                        }
                    },
                    Some(pb::agent_message::Kind::Hello(_)) => {
                        let _ = tx.send(Err(Status::invalid_argument("hello: sent twice on one stream")));
                        break;
                    }
                    Some(pb::agent_message::Kind::Heartbeat(_)) | None => continue,
                };
                if this.send(input).await.is_err() {
                    return;
                }
            }
            // End our side too: the heartbeat task would otherwise keep
            // the reply stream alive, and a peer that was only slow (a
            // stall just past three heartbeats) would keep talking into a
            // stream nobody reads instead of reconnecting.
            let _ = tx.send(Err(Status::unavailable(GONE)));
            let _ = this.send(Input::AgentGone { agent, conn }).await;
        });
        Ok(Response::new(Box::pin(UnboundedReceiverStream::new(rx))))
    }

    async fn submit_stream(
        &self,
        request: Request<Streaming<pb::SubmitMessage>>,
    ) -> Result<Response<Self::SubmitStreamStream>, Status> {
        let mut inbound = request.into_inner();
        let hello = match first(&mut inbound).await?.kind {
            Some(pb::submit_message::Kind::Hello(h)) => h,
            _ => {
                return Err(Status::invalid_argument(
                    "hello: the first message must be the submitter's hello",
                ));
            }
        };
        let submitter = wire::submitter_hello(&hello).map_err(|e| Status::invalid_argument(e.to_string()))?;
        let conn = self.next_conn.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded_channel();
        let (accepted, taken) = oneshot::channel();
        let hello = Input::SubmitterHello {
            submitter: submitter.clone(),
            conn,
            tx: tx.clone(),
            accepted: Some(accepted),
        };
        self.send(hello).await?;
        // A second live stream under one id is refused here, before any
        // reply could go astray (ALREADY_EXISTS, naming the id).
        match taken.await {
            Ok(Ok(())) => {}
            Ok(Err(reason)) => return Err(Status::already_exists(reason)),
            Err(_) => return Err(Status::unavailable("the broker is stopping")),
        }
        self.beat(tx.clone(), submitter_heartbeat);
        let this = self.clone();
        tokio::spawn(async move {
            while let Some(message) = this.next(&mut inbound).await {
                let input = match message.kind {
                    Some(pb::submit_message::Kind::Request(spec)) => {
                        let raw: String = spec.task_id.chars().take(128).collect();
                        match wire::task_spec(spec, &submitter) {
                            Ok(job) => Input::Submit { submitter: submitter.clone(), job: Box::new(job) },
                            Err(e) => {
                                let rejected = pb::Rejected { reason: e.to_string() };
                                let outcome = Some(pb::submit_reply::Outcome::Rejected(rejected));
                                let _ = tx.send(Ok(pb::SubmitReply { task_id: raw, outcome }));
                                continue;
                            }
                        }
                    }
                    Some(pb::submit_message::Kind::Cancel(c)) => {
                        match wire::task_id("cancel.task_id", &c.task_id) {
                            Ok(task) => Input::Cancel { submitter: submitter.clone(), task },
                            Err(e) => {
                                let rejected = pb::Rejected { reason: e.to_string() };
                                let outcome = Some(pb::submit_reply::Outcome::Rejected(rejected));
                                let raw: String = c.task_id.chars().take(128).collect();
                                let _ = tx.send(Ok(pb::SubmitReply { task_id: raw, outcome }));
                                continue;
                            }
                        }
                    }
                    Some(pb::submit_message::Kind::Hello(_)) => {
                        let _ = tx.send(Err(Status::invalid_argument("hello: sent twice on one stream")));
                        break;
                    }
                    Some(pb::submit_message::Kind::Heartbeat(_)) | None => continue,
                };
                if this.send(input).await.is_err() {
                    return;
                }
            }
            let _ = tx.send(Err(Status::unavailable(GONE)));
            let _ = this.send(Input::SubmitterGone { submitter, conn }).await;
        });
        Ok(Response::new(Box::pin(UnboundedReceiverStream::new(rx))))
    }

    async fn cluster_status(
        &self,
        _request: Request<pb::ClusterStatusRequest>,
    ) -> Result<Response<pb::ClusterStatusResponse>, Status> {
        let (reply, rx) = oneshot::channel();
        self.send(Input::Status { reply }).await?;
        let status = rx.await.map_err(|_| Status::unavailable("the broker is stopping"))?;
        Ok(Response::new(status))
    }

    async fn watch(
        &self,
        request: Request<pb::ClusterWatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let interval = super::watch::min_interval(request.get_ref())?;
        let (reply, rx) = oneshot::channel();
        self.send(Input::Watch { reply }).await?;
        let snapshots = rx.await.map_err(|_| Status::unavailable("the broker is stopping"))?;
        let (tx, events) = mpsc::channel(1);
        tokio::spawn(super::watch::serve_watcher(snapshots, tx, interval, self.heartbeat));
        Ok(Response::new(Box::pin(ReceiverStream::new(events))))
    }

    async fn provision_explain(
        &self,
        _request: Request<pb::ProvisionExplainRequest>,
    ) -> Result<Response<pb::ProvisionExplainResponse>, Status> {
        let Some(shared) = &self.provisioner else {
            return Ok(Response::new(pb::ProvisionExplainResponse::default()));
        };
        let p = shared.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let allocations = p
            .allocations()
            .iter()
            .map(|t| pb::AllocationStatus {
                id: t.allocation.id.to_string(),
                shape: t.allocation.shape.clone(),
                state: match t.allocation.state {
                    crate::provision::AllocState::Queued => "queued",
                    crate::provision::AllocState::Running => "running",
                    crate::provision::AllocState::Ended => "ended",
                }
                .to_owned(),
                started: t.started,
            })
            .collect();
        Ok(Response::new(pb::ProvisionExplainResponse {
            provider: p.provider().to_owned(),
            holds: p.explain(),
            allocations,
            paused: p.health().paused().unwrap_or_default().to_owned(),
        }))
    }
}
