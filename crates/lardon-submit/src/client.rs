//! The submitter side of the broker: a small library for anything that
//! offloads work (`lardon cluster submit` now, an offloading daemon later).
//!
//! [`Submitter::start`] spawns one task that keeps a `SubmitStream` open,
//! reconnecting with backoff; [`Submitter::submit`] returns a [`Ticket`]
//! that resolves with the task's [`Answer`], matched by id. Every task not
//! yet answered is sent again by id after a reconnect (the broker drops
//! duplicates and answers finished ones from its store), so a broker
//! restart loses no answer and runs nothing twice.
//!
//! A task with input files ([`RemoteTask::inputs`]) is submitted with
//! [`Submitter::submit_with_files`], which uploads what the broker's CAS
//! lacks first; its declared outputs come back as digests in the answer
//! and are fetched with [`Submitter::download_outputs`].

use std::collections::HashMap;
use std::time::{Duration, Instant};

use lardon_proto::cluster as pb;
use thiserror::Error;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tracing::warn;

use lardon_cluster_core::{Capability, Need, SubmitterId, TaskId, wire};

use crate::blobs::{BlobClient, TransferError, digest_of, reapi};
use crate::{Backoff, BadAddress, broker_uri};

/// A task to run remotely.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteTask {
    /// Unique across submitters (prefix it with the host).
    pub id: TaskId,
    /// What it must run on.
    pub capability: Capability,
    /// What it needs of an agent.
    pub need: Need,
    /// The program and its arguments (never run through a shell).
    pub argv: Vec<String>,
    /// Variables set over the agent's environment.
    pub env: Vec<(String, String)>,
    /// Bytes written to its stdin.
    pub stdin: Vec<u8>,
    /// Unix milliseconds after which the agent kills it (`None`: no
    /// deadline).
    pub deadline_unix_ms: Option<i64>,
    /// Its result depends only on its capability, argv, env and input
    /// files: the broker may answer it from its cache.
    pub cacheable: bool,
    /// Its class for the broker's learned estimates (`None`: its
    /// capability and program name).
    pub class: Option<String>,
    /// How long it is expected to run (`None`: unknown); what the broker
    /// learned of its class takes precedence.
    pub expected_duration: Option<std::time::Duration>,
    /// Files written into the task's fresh working directory at the agent.
    pub inputs: Vec<InputData>,
    /// Files (relative to that directory) uploaded when it succeeds.
    pub outputs: Vec<String>,
}

/// One input file of a [`RemoteTask`]: where the agent writes it and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputData {
    /// Relative to the task's directory (`/`-separated, no `..`).
    pub path: String,
    /// Its bytes.
    pub data: Vec<u8>,
    /// Sets the owner's execute bit.
    pub executable: bool,
}

impl InputData {
    /// A plain (not executable) file at `path` holding `data`.
    pub fn new(path: impl Into<String>, data: Vec<u8>) -> Self {
        InputData { path: path.into(), data, executable: false }
    }
}

impl RemoteTask {
    /// A task running `argv` on `capability`, needing one CPU and no
    /// declared memory.
    pub fn new(id: TaskId, capability: Capability, argv: Vec<String>) -> Self {
        RemoteTask {
            id,
            capability,
            need: Need { memory: 0, cpu_millis: 1000 },
            argv,
            env: Vec::new(),
            stdin: Vec::new(),
            deadline_unix_ms: None,
            cacheable: false,
            class: None,
            expected_duration: None,
            inputs: Vec::new(),
            outputs: Vec::new(),
        }
    }

    /// The wire form.
    pub fn to_spec(&self) -> pb::TaskSpec {
        pb::TaskSpec {
            task_id: self.id.to_string(),
            capability: Some(wire::capability_to_pb(&self.capability)),
            need: Some(pb::Need { memory: self.need.memory, cpu_millis: self.need.cpu_millis }),
            argv: self.argv.clone(),
            env: self.env.iter().map(|(n, v)| pb::EnvVar { name: n.clone(), value: v.clone() }).collect(),
            stdin: self.stdin.clone(),
            deadline_unix_ms: self.deadline_unix_ms.unwrap_or(0),
            cacheable: self.cacheable,
            class: self.class.clone().unwrap_or_default(),
            expected_duration_ms: self
                .expected_duration
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            inputs: self
                .inputs
                .iter()
                .map(|f| pb::InputFile {
                    path: f.path.clone(),
                    digest: Some(crate::blobs::to_pb(&digest_of(&f.data))),
                    executable: f.executable,
                })
                .collect(),
            outputs: self.outputs.clone(),
        }
    }
}

/// How a submitted task was answered.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// It ran at an agent and ended so (success, exit code, output).
    Done(pb::TaskEnded),
    /// No executor: run it locally. The reason is empty when no connected
    /// agent declares its capability; otherwise it says why none ever will
    /// (a provisionable capability no allocation shape can hold: "…: no
    /// shape fits 64.0 GiB and 1 CPUs (largest: 16.0 GiB and 8 CPUs)").
    NoExecutor(String),
    /// Infrastructure failed (its agents were lost): run it locally.
    RunLocally(String),
    /// Cancelled before it started anywhere.
    Cancelled,
    /// The broker refused it: the request was malformed (the reason names
    /// the field), or the broker refused this submitter's stream because
    /// another live stream holds its id (the task never reached it).
    Rejected(String),
    /// No broker could be reached for the configured time: run it locally.
    Unreachable,
    /// Its deadline passed while it waited for an agent; it never started.
    DeadlinePassed,
}

/// The submitter is gone (its task ended).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("the cluster client stopped before the task was answered")]
pub struct Stopped;

/// A submitted task's answer, to await.
#[derive(Debug)]
pub struct Ticket {
    id: TaskId,
    rx: oneshot::Receiver<Answer>,
}

impl Ticket {
    /// The task's id.
    pub fn id(&self) -> &TaskId {
        &self.id
    }

    /// Waits for the answer.
    ///
    /// # Errors
    /// [`Stopped`] when the client's task ended first.
    pub async fn answer(self) -> Result<Answer, Stopped> {
        self.rx.await.map_err(|_| Stopped)
    }
}

/// How a submitter connects.
#[derive(Debug, Clone)]
pub struct SubmitterConfig {
    /// The broker (`HOST:PORT` or a URI).
    pub broker: String,
    /// Who submits (fair share is between submitters).
    pub submitter: SubmitterId,
    /// How often it sends a heartbeat (at most the broker's interval).
    pub heartbeat: Duration,
    /// Between connection attempts.
    pub backoff: Backoff,
    /// Answer [`Answer::Unreachable`] to tasks waiting while no broker has
    /// answered for this long (`None`: keep trying).
    pub unreachable_after: Option<Duration>,
    /// TLS and join token to dial with.
    pub dial: crate::dial::Dial,
}

enum Command {
    Submit(Box<pb::TaskSpec>, oneshot::Sender<Answer>),
    Cancel(TaskId),
}

/// A handle on the submitter task; cheap to clone. The task ends when
/// every handle is dropped.
#[derive(Debug, Clone)]
pub struct Submitter {
    tx: mpsc::UnboundedSender<Command>,
    submitter: SubmitterId,
    broker: String,
    dial: crate::dial::Dial,
    /// The CAS client, connected on first use.
    blobs: std::sync::Arc<tokio::sync::OnceCell<BlobClient>>,
    /// Whether its stream to the broker is open now.
    connected: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Command::Submit(spec, _) => write!(f, "Submit({})", spec.task_id),
            Command::Cancel(id) => write!(f, "Cancel({id})"),
        }
    }
}

impl Submitter {
    /// Starts the submitter task (inside a Tokio runtime).
    ///
    /// # Errors
    /// [`BadAddress`] for a bad broker address.
    pub fn start(config: SubmitterConfig) -> Result<Self, BadAddress> {
        let broker = broker_uri(&config.broker)?;
        let (tx, rx) = mpsc::unbounded_channel();
        let submitter = config.submitter.clone();
        let dial = config.dial.clone();
        let connected = std::sync::Arc::<std::sync::atomic::AtomicBool>::default();
        let state = Loop {
            config: SubmitterConfig { broker: broker.clone(), ..config },
            rx,
            outstanding: HashMap::new(),
            cancels: Vec::new(),
            connected: std::sync::Arc::clone(&connected),
            unreached: crate::dial::UnreachedLog::default(),
        };
        tokio::spawn(state.run());
        Ok(Submitter { tx, submitter, broker, dial, blobs: std::sync::Arc::default(), connected })
    }

    /// Whether its stream to the broker is open now (the broker accepted
    /// its hello and the stream has not ended since).
    pub fn connected(&self) -> bool {
        self.connected.load(std::sync::atomic::Ordering::SeqCst)
    }

    async fn blobs(&self) -> Result<BlobClient, TransferError> {
        self.blobs.get_or_try_init(|| BlobClient::connect(&self.broker, &self.dial)).await.cloned()
    }

    /// Uploads `task`'s input files that the broker's CAS lacks, then
    /// submits it (as [`Submitter::submit`]).
    ///
    /// # Errors
    /// [`TransferError`] when the CAS cannot be reached or refuses a blob;
    /// nothing was submitted then.
    pub async fn submit_with_files(&self, task: &RemoteTask) -> Result<Ticket, TransferError> {
        self.upload_inputs(task).await?;
        Ok(self.submit(task))
    }

    /// Uploads `task`'s input files that the broker's CAS lacks, without
    /// submitting it (for a caller that decides at the last moment whether
    /// to [`Submitter::submit`] it). A malformed task uploads nothing.
    ///
    /// # Errors
    /// [`TransferError`] when the CAS cannot be reached or refuses a blob.
    pub async fn upload_inputs(&self, task: &RemoteTask) -> Result<(), TransferError> {
        let valid = wire::task_spec(task.to_spec(), &self.submitter).is_ok();
        if valid && !task.inputs.is_empty() {
            let blobs: Vec<(reapi::Digest, &[u8])> =
                task.inputs.iter().map(|f| (digest_of(&f.data), f.data.as_slice())).collect();
            self.blobs().await?.upload(&blobs).await?;
        }
        Ok(())
    }

    /// Fetches the output files a task's answer names, as (path, bytes)
    /// in the answer's order, each checked against its digest.
    ///
    /// # Errors
    /// [`TransferError`] when the CAS cannot be reached, or a blob is
    /// missing (evicted) or corrupt.
    pub async fn download_outputs(
        &self,
        ended: &pb::TaskEnded,
    ) -> Result<Vec<(String, Vec<u8>)>, TransferError> {
        if ended.outputs.is_empty() {
            return Ok(Vec::new());
        }
        let digests: Vec<reapi::Digest> = ended
            .outputs
            .iter()
            .map(|o| o.digest.as_ref().map(crate::blobs::from_pb).unwrap_or_default())
            .collect();
        let mut got = self.blobs().await?.download(&digests).await?;
        ended
            .outputs
            .iter()
            .zip(digests)
            .map(|(o, d)| {
                // A path named twice shares its blob.
                let data = got.get(&d.hash).cloned().or_else(|| got.remove(&d.hash));
                data.map(|data| (o.path.clone(), data)).ok_or(TransferError::Missing(d.hash))
            })
            .collect()
    }

    /// Submits `task`; a malformed one is answered [`Answer::Rejected`]
    /// at once, without a round trip.
    pub fn submit(&self, task: &RemoteTask) -> Ticket {
        let (tx, rx) = oneshot::channel();
        let spec = task.to_spec();
        match wire::task_spec(spec.clone(), &self.submitter).map_err(|e| e.to_string()) {
            Err(reason) => drop(tx.send(Answer::Rejected(reason))),
            Ok(_) => {
                if let Err(mpsc::error::SendError(Command::Submit(_, tx))) =
                    self.tx.send(Command::Submit(Box::new(spec), tx))
                {
                    drop(tx); // the ticket then says Stopped
                }
            }
        }
        Ticket { id: task.id.clone(), rx }
    }

    /// Cancels a task: answered [`Answer::Cancelled`] if it had not
    /// started, else ended at its agent (failed, `cancelled`).
    pub fn cancel(&self, task: &TaskId) {
        let _ = self.tx.send(Command::Cancel(task.clone()));
    }
}

struct Loop {
    config: SubmitterConfig,
    rx: mpsc::UnboundedReceiver<Command>,
    /// Unanswered tasks: the spec (to send again), who waits, and whether
    /// it was ever sent on a stream the broker accepted.
    outstanding: HashMap<String, Outstanding>,
    /// Cancels asked for while disconnected.
    cancels: Vec<TaskId>,
    /// Set while a stream is open (see [`Submitter::connected`]).
    connected: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Why the broker could not be reached, logged once per reason.
    unreached: crate::dial::UnreachedLog,
}

/// One unanswered task.
struct Outstanding {
    spec: pb::TaskSpec,
    waiters: Vec<oneshot::Sender<Answer>>,
    /// Sent on a stream the broker accepted: the broker may hold it, so
    /// only its answer (or [`Answer::Unreachable`]) ends it.
    sent: bool,
}

impl Outstanding {
    fn answer(self, answer: &Answer) {
        for w in self.waiters {
            let _ = w.send(answer.clone());
        }
    }
}

fn answer(reply: pb::SubmitReply) -> Option<Answer> {
    use pb::submit_reply::Outcome as O;
    Some(match reply.outcome? {
        O::Done(ended) => Answer::Done(ended),
        O::NoExecutor(n) => Answer::NoExecutor(n.reason),
        O::RunLocally(r) => Answer::RunLocally(r.reason),
        O::Cancelled(_) => Answer::Cancelled,
        O::Rejected(r) => Answer::Rejected(r.reason),
        O::DeadlinePassed(_) => Answer::DeadlinePassed,
    })
}

impl Loop {
    async fn run(mut self) {
        let mut wait = self.config.backoff.initial;
        let mut last_contact = Instant::now();
        loop {
            let session = self.session().await;
            self.connected.store(false, std::sync::atomic::Ordering::SeqCst);
            match session {
                Session::Closed => return,
                Session::Served => {
                    wait = self.config.backoff.initial;
                    last_contact = Instant::now();
                }
                Session::Failed => {}
            }
            if self.config.unreachable_after.is_some_and(|limit| last_contact.elapsed() >= limit) {
                for (_, task) in self.outstanding.drain() {
                    task.answer(&Answer::Unreachable);
                }
            }
            // Wait out the backoff, taking commands meanwhile.
            let sleep = tokio::time::sleep(wait);
            tokio::pin!(sleep);
            loop {
                tokio::select! {
                    () = &mut sleep => break,
                    command = self.rx.recv() => match command {
                        None => return,
                        Some(Command::Submit(spec, tx)) => {
                            self.track(*spec, tx);
                        }
                        // Sent once connected again.
                        Some(Command::Cancel(id)) => self.cancels.push(id),
                    },
                }
            }
            wait = (wait * 2).min(self.config.backoff.max);
        }
    }

    fn track(&mut self, spec: pb::TaskSpec, tx: oneshot::Sender<Answer>) -> bool {
        let entry = self.outstanding.entry(spec.task_id.clone());
        let new = matches!(entry, std::collections::hash_map::Entry::Vacant(_));
        entry.or_insert_with(|| Outstanding { spec, waiters: Vec::new(), sent: false }).waiters.push(tx);
        new
    }

    async fn session(&mut self) -> Session {
        let mut client = match self.config.dial.connect(&self.config.broker).await {
            Ok(client) => client,
            Err(e) => {
                self.unreached.failed(&self.config.broker, &self.config.dial, &e);
                return Session::Failed;
            }
        };
        let (out, rx) = mpsc::unbounded_channel();
        let hello = pb::SubmitterHello { submitter_id: self.config.submitter.to_string() };
        let _ = out.send(pb::SubmitMessage { kind: Some(pb::submit_message::Kind::Hello(hello)) });
        let mut inbound = match client.submit_stream(UnboundedReceiverStream::new(rx)).await {
            Ok(r) => r.into_inner(),
            Err(status) if status.code() == tonic::Code::AlreadyExists => {
                self.refused(status.message());
                return Session::Failed;
            }
            Err(status) => {
                match self.config.dial.diagnose(&status) {
                    Some(_) => self.unreached.failed(&self.config.broker, &self.config.dial, &status),
                    None => warn!("broker refused the submitter: {}", status.message()),
                }
                return Session::Failed;
            }
        };
        self.unreached.reached();
        self.connected.store(true, std::sync::atomic::Ordering::SeqCst);
        let request =
            |spec: pb::TaskSpec| pb::SubmitMessage { kind: Some(pb::submit_message::Kind::Request(spec)) };
        for task in self.outstanding.values_mut() {
            task.sent = true;
            let _ = out.send(request(task.spec.clone()));
        }
        for id in self.cancels.drain(..) {
            let cancel = pb::CancelTask { task_id: id.to_string() };
            let _ = out.send(pb::SubmitMessage { kind: Some(pb::submit_message::Kind::Cancel(cancel)) });
        }
        let mut beat = tokio::time::interval(self.config.heartbeat);
        loop {
            tokio::select! {
                message = tokio::time::timeout(self.config.heartbeat * 3, inbound.message()) => match message {
                    Ok(Ok(Some(reply))) => {
                        let id = reply.task_id.clone();
                        if let Some(a) = answer(reply)
                            && let Some(task) = self.outstanding.remove(&id)
                        {
                            task.answer(&a);
                        }
                    }
                    _ => return Session::Served,
                },
                command = self.rx.recv() => match command {
                    None => return Session::Closed,
                    Some(Command::Submit(spec, tx)) => {
                        let id = spec.task_id.clone();
                        if self.track((*spec).clone(), tx) {
                            if let Some(task) = self.outstanding.get_mut(&id) {
                                task.sent = true;
                            }
                            let _ = out.send(request(*spec));
                        }
                    }
                    Some(Command::Cancel(id)) => {
                        let cancel = pb::CancelTask { task_id: id.to_string() };
                        let _ = out.send(pb::SubmitMessage { kind: Some(pb::submit_message::Kind::Cancel(cancel)) });
                    }
                },
                _ = beat.tick() => {
                    let _ = out.send(pb::SubmitMessage { kind: Some(pb::submit_message::Kind::Heartbeat(pb::Heartbeat {})) });
                }
            }
        }
    }
}

impl Loop {
    /// The broker refused this submitter's stream: another live stream
    /// holds its id. Tasks never sent are answered [`Answer::Rejected`]
    /// with the broker's reason (they never reached it, so running them
    /// elsewhere runs nothing twice); tasks sent before stay outstanding,
    /// as the refused stream may be this client's own half-open one, which
    /// the broker drops within three heartbeats (the next attempt then
    /// succeeds).
    fn refused(&mut self, reason: &str) {
        warn!("broker refused the submitter's stream: {reason}");
        // What was asked for meanwhile counts as not sent either.
        while let Ok(command) = self.rx.try_recv() {
            match command {
                Command::Submit(spec, tx) => {
                    self.track(*spec, tx);
                }
                Command::Cancel(id) => self.cancels.push(id),
            }
        }
        let unsent: Vec<String> =
            self.outstanding.iter().filter(|(_, t)| !t.sent).map(|(id, _)| id.clone()).collect();
        let answer = Answer::Rejected(format!("the broker refused this submitter's stream: {reason}"));
        for id in unsent {
            if let Some(task) = self.outstanding.remove(&id) {
                task.answer(&answer);
            }
        }
    }
}

enum Session {
    /// Every handle was dropped.
    Closed,
    /// Connected, then the stream ended.
    Served,
    /// Could not connect.
    Failed,
}

/// `ClusterStatus` failed.
#[derive(Debug, Error)]
pub enum StatusError {
    /// The address is not valid.
    #[error(transparent)]
    Address(#[from] BadAddress),
    /// Nothing answers there.
    #[error("cannot reach the broker at {broker}: {source}")]
    Unreachable {
        /// The address dialled.
        broker: String,
        /// What the transport said.
        #[source]
        source: tonic::transport::Error,
    },
    /// The broker answered with an error.
    #[error("broker: {}", .0.message())]
    Call(#[from] tonic::Status),
}

/// The broker's Provisioner: its allocations and why it is not asking
/// for more (empty provider: it runs none).
///
/// # Errors
/// [`StatusError`] when the broker is unreachable or refuses.
pub async fn explain(
    broker: &str,
    dial: &crate::dial::Dial,
) -> Result<pb::ProvisionExplainResponse, StatusError> {
    broker_uri(broker)?;
    let mut client = dial
        .connect(broker)
        .await
        .map_err(|source| StatusError::Unreachable { broker: broker.to_owned(), source })?;
    Ok(client.provision_explain(pb::ProvisionExplainRequest {}).await?.into_inner())
}

/// Asks the broker at `broker` (`HOST:PORT` or a URI) for its status.
///
/// # Errors
/// [`StatusError`].
pub async fn status(
    broker: &str,
    dial: &crate::dial::Dial,
) -> Result<pb::ClusterStatusResponse, StatusError> {
    broker_uri(broker)?;
    let mut client = dial
        .connect(broker)
        .await
        .map_err(|source| StatusError::Unreachable { broker: broker.to_owned(), source })?;
    Ok(client.cluster_status(pb::ClusterStatusRequest {}).await?.into_inner())
}

/// Subscribes to the broker's `Watch` stream at `broker`: its status at
/// once, then after each change (no two events closer than
/// `min_interval_ms`; 0 for the broker's default of 100 ms) and a
/// heartbeat when nothing changed (see `heartbeat_ms` in each event).
///
/// # Errors
/// [`StatusError`]: unreachable, or refused (a bad `min_interval_ms` is
/// INVALID_ARGUMENT naming it).
pub async fn watch(
    broker: &str,
    dial: &crate::dial::Dial,
    min_interval_ms: u32,
) -> Result<tonic::Streaming<pb::ClusterWatchEvent>, StatusError> {
    broker_uri(broker)?;
    let mut client = dial
        .connect(broker)
        .await
        .map_err(|source| StatusError::Unreachable { broker: broker.to_owned(), source })?;
    Ok(client.watch(pb::ClusterWatchRequest { min_interval_ms }).await?.into_inner())
}
