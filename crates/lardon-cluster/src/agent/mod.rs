//! `lardon agent`: dials out to the broker, says hello (id, capabilities,
//! availability, token bound, the tasks it still holds), then runs what it
//! is assigned (docs/DESIGN.md §14).
//!
//! * **Admission stays the agent's.** Every assignment goes through its own
//!   [`Governor`]; a WAIT goes back to the broker (the task returns to its
//!   route), a REJECT ends the task failed with the Governor's reason.
//!   Tokens are only an upper bound ([`default_tokens`]).
//! * **Only what it declared.** An assignment for a capability the agent
//!   did not declare, or that does not validate, ends failed; tasks run
//!   from argv, never through a shell ([`ProcessExecutor`]).
//! * **Availability** is pushed whenever the Governor's generation moves
//!   (its own reservations, and host samples taken every second), and at
//!   the next sample after a WAIT (the broker emptied its mirror then).
//! * **Reconnects** with capped exponential backoff; the re-hello lists the
//!   tasks it still runs and those whose end the broker has not
//!   acknowledged, whose reports are sent again, so nothing is lost or run
//!   twice across a broker restart.
//! * **Idle exit** ([`Agent::with_idle_exit`]): an allocation's agent ends
//!   after a while with nothing assigned, running or unacknowledged,
//!   closing its stream, so its allocation ends (COMPLETED on Slurm) and
//!   gives its resources back.

mod exec;
mod tokens;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use lardon::{Estimate, Governor};
use lardon_proto::cluster as pb;
use thiserror::Error;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tracing::{info, warn};

use crate::capability::Capability;
use crate::ids::{AgentId, TaskId};
use crate::wire;

pub use exec::{ConfinedExecutor, Confinement, Confiner, Executor, MAX_OUTPUT, ProcessExecutor, Running};
pub use tokens::default_tokens;

/// Exponential backoff between connection attempts, capped.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    /// The first wait.
    pub initial: Duration,
    /// The longest wait.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { initial: Duration::from_millis(200), max: Duration::from_secs(5) }
    }
}

/// How an agent runs.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The broker's URI, e.g. `http://127.0.0.1:7700`.
    pub broker: String,
    /// Its id (unique among the broker's agents).
    pub agent: AgentId,
    /// What it runs (only these).
    pub capabilities: Vec<Capability>,
    /// Upper bound on tasks at once.
    pub tokens: u32,
    /// How often it sends a heartbeat (at most the broker's interval); a
    /// broker silent for three of these is taken as gone.
    pub heartbeat: Duration,
    /// Between connection attempts.
    pub backoff: Backoff,
    /// TLS and join token to dial with.
    pub dial: crate::dial::Dial,
}

/// The agent could not start.
#[derive(Debug, Error)]
pub enum AgentError {
    /// The broker address is not a URI.
    #[error("--broker: `{0}` is not a valid address (expected HOST:PORT or http://HOST:PORT)")]
    BadAddress(String),
    /// No capability was declared.
    #[error("--capability: an agent declares at least one")]
    NoCapability,
}

/// A task this agent holds.
#[derive(Debug)]
struct Held {
    cancel: Option<oneshot::Sender<()>>,
}

/// One agent: its config, Governor and executor, and what it holds across
/// reconnects.
#[derive(Debug)]
pub struct Agent {
    config: AgentConfig,
    governor: Governor,
    executor: Arc<dyn Executor>,
    running: HashMap<TaskId, Held>,
    /// Ended tasks whose report the broker has not acknowledged.
    unacked: HashMap<TaskId, pb::TaskReport>,
    ended_tx: mpsc::UnboundedSender<(TaskId, pb::TaskEnded)>,
    ended_rx: mpsc::UnboundedReceiver<(TaskId, pb::TaskEnded)>,
    generation: u64,
    /// A WAIT was reported since the last sample: the broker emptied our
    /// mirror, so the next sample pushes the availability even unchanged.
    waited: bool,
    /// Exit after this long with nothing to do (`None`: never).
    idle_exit: Option<Duration>,
    /// The last moment it held something (or started).
    busy_at: tokio::time::Instant,
}

/// `HOST:PORT` or a URI, as a URI.
///
/// # Errors
/// [`AgentError::BadAddress`].
pub fn broker_uri(addr: &str) -> Result<String, AgentError> {
    let uri = if addr.contains("://") { addr.to_owned() } else { format!("http://{addr}") };
    tonic::transport::Endpoint::from_shared(uri.clone())
        .map_err(|_| AgentError::BadAddress(addr.to_owned()))?;
    Ok(uri)
}

impl Agent {
    /// An agent admitting through `governor` and running with `executor`.
    ///
    /// # Errors
    /// [`AgentError`] for a bad address or no capability.
    pub fn new(
        config: AgentConfig,
        governor: Governor,
        executor: Arc<dyn Executor>,
    ) -> Result<Self, AgentError> {
        if config.capabilities.is_empty() {
            return Err(AgentError::NoCapability);
        }
        let config = AgentConfig { broker: broker_uri(&config.broker)?, ..config };
        let (ended_tx, ended_rx) = mpsc::unbounded_channel();
        Ok(Agent {
            config,
            governor,
            executor,
            running: HashMap::new(),
            unacked: HashMap::new(),
            ended_tx,
            ended_rx,
            generation: u64::MAX,
            waited: false,
            idle_exit: None,
            busy_at: tokio::time::Instant::now(),
        })
    }

    /// Makes the agent exit after `idle` with nothing assigned, running or
    /// waiting for the broker's acknowledgement (connected or not), closing
    /// its stream: [`Agent::run`] returns.
    #[must_use]
    pub fn with_idle_exit(mut self, idle: Duration) -> Self {
        self.idle_exit = Some(idle);
        self
    }

    /// When the agent exits for idleness, if it is idle now.
    fn idle_deadline(&mut self) -> Option<tokio::time::Instant> {
        let idle = self.idle_exit?;
        if !self.running.is_empty() || !self.unacked.is_empty() {
            self.busy_at = tokio::time::Instant::now();
            return None;
        }
        Some(self.busy_at + idle)
    }

    /// Runs until `shutdown` resolves (or, with an idle exit, until idle
    /// that long): connects, serves, and reconnects with backoff whenever
    /// the stream ends.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) {
        let mut shutdown = std::pin::pin!(shutdown);
        let mut wait = self.config.backoff.initial;
        loop {
            let served = tokio::select! {
                served = self.session() => served,
                () = &mut shutdown => return,
            };
            let served = match served {
                Session::IdleExit => return,
                Session::Ended { served } => served,
            };
            if served {
                wait = self.config.backoff.initial;
            }
            let idle = self.idle_deadline();
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = &mut shutdown => return,
                () = until(idle) => {
                    info!("idle for {:?} while disconnected: exiting", self.idle_exit.unwrap_or_default());
                    return;
                }
            }
            wait = (wait * 2).min(self.config.backoff.max);
        }
    }

    fn availability(&self) -> pb::Availability {
        let a = self.governor.availability();
        pb::Availability {
            memory: a.memory_available,
            cpu_millis: u32::try_from(a.cpu_available_millis).unwrap_or(u32::MAX),
        }
    }

    fn hello(&self) -> pb::AgentMessage {
        let mut running: Vec<String> =
            self.running.keys().chain(self.unacked.keys()).map(ToString::to_string).collect();
        running.sort();
        running.dedup();
        let hello = pb::AgentHello {
            agent_id: self.config.agent.to_string(),
            capabilities: self.config.capabilities.iter().map(wire::capability_to_pb).collect(),
            availability: Some(self.availability()),
            tokens: self.config.tokens,
            running,
        };
        pb::AgentMessage { kind: Some(pb::agent_message::Kind::Hello(hello)) }
    }

    /// One connection: says whether it got as far as the broker's answer
    /// (then the backoff starts over), or ended for idleness.
    async fn session(&mut self) -> Session {
        let failed = Session::Ended { served: false };
        let Ok(mut client) = self.config.dial.connect(&self.config.broker).await else {
            return failed;
        };
        // A fresh sample, so the hello's availability is current.
        let _ = self.governor.sample();
        let (out, rx) = mpsc::unbounded_channel();
        let _ = out.send(self.hello());
        let mut inbound = match client.agent_stream(UnboundedReceiverStream::new(rx)).await {
            Ok(response) => response.into_inner(),
            Err(status) => {
                warn!("broker refused the hello: {}", status.message());
                return failed;
            }
        };
        info!("connected to {} as {}", self.config.broker, self.config.agent);
        self.generation = self.governor.generation();
        for report in self.unacked.values() {
            send(&out, pb::agent_message::Kind::Report(report.clone()));
        }
        let mut beat = tokio::time::interval(self.config.heartbeat);
        let mut sample = tokio::time::interval(Duration::from_secs(1));
        loop {
            let idle = self.idle_deadline();
            tokio::select! {
                () = until(idle) => {
                    // Dropping `out` ends the stream cleanly: the broker
                    // sees the agent leave, holding nothing.
                    info!("idle for {:?}: exiting", self.idle_exit.unwrap_or_default());
                    return Session::IdleExit;
                }
                message = tokio::time::timeout(self.config.heartbeat * 3, inbound.message()) => {
                    match message {
                        Ok(Ok(Some(m))) => self.on_message(m, &out),
                        Ok(Ok(None)) => { warn!("the broker closed the stream"); break }
                        Ok(Err(status)) => { warn!("broker stream failed: {}", status.message()); break }
                        Err(_) => { warn!("the broker is silent: reconnecting"); break }
                    }
                }
                Some((task, ended)) = self.ended_rx.recv() => {
                    self.running.remove(&task);
                    let report = pb::TaskReport {
                        task_id: task.to_string(),
                        report: Some(pb::task_report::Report::Ended(ended)),
                    };
                    self.unacked.insert(task, report.clone());
                    send(&out, pb::agent_message::Kind::Report(report));
                }
                _ = beat.tick() => send(&out, pb::agent_message::Kind::Heartbeat(pb::Heartbeat {})),
                _ = sample.tick() => {
                    let _ = self.governor.sample();
                    if std::mem::take(&mut self.waited) {
                        self.generation = u64::MAX;
                    }
                }
            }
            self.push_availability(&out);
        }
        Session::Ended { served: true }
    }

    /// Sends the availability when the Governor's generation moved.
    fn push_availability(&mut self, out: &mpsc::UnboundedSender<pb::AgentMessage>) {
        let generation = self.governor.generation();
        if generation != self.generation {
            self.generation = generation;
            send(out, pb::agent_message::Kind::Update(self.availability()));
        }
    }

    fn on_message(&mut self, message: pb::BrokerToAgent, out: &mpsc::UnboundedSender<pb::AgentMessage>) {
        match message.kind {
            Some(pb::broker_to_agent::Kind::Assign(spec)) => self.assign(spec, out),
            Some(pb::broker_to_agent::Kind::Cancel(c)) => {
                if let Ok(task) = wire::task_id("cancel.task_id", &c.task_id)
                    && let Some(held) = self.running.get_mut(&task)
                    && let Some(cancel) = held.cancel.take()
                {
                    let _ = cancel.send(());
                }
            }
            Some(pb::broker_to_agent::Kind::Ack(a)) => {
                if let Ok(task) = wire::task_id("ack.task_id", &a.task_id) {
                    self.unacked.remove(&task);
                }
            }
            Some(pb::broker_to_agent::Kind::Heartbeat(_)) | None => {}
        }
    }

    fn assign(&mut self, spec: pb::TaskSpec, out: &mpsc::UnboundedSender<pb::AgentMessage>) {
        let end = |task_id: String, reason: String| {
            let ended = pb::TaskEnded { success: false, reason, ..Default::default() };
            pb::TaskReport { task_id, report: Some(pb::task_report::Report::Ended(ended)) }
        };
        let raw_id = spec.task_id.clone();
        let job = match wire::assignment(spec) {
            Ok(job) => job,
            Err(e) => {
                warn!("refusing an assignment: {e}");
                if wire::task_id("assign.task_id", &raw_id).is_ok() {
                    send(out, pb::agent_message::Kind::Report(end(raw_id, e.to_string())));
                }
                return;
            }
        };
        let task = job.id.clone();
        if self.running.contains_key(&task) {
            return; // Already running it: a duplicate.
        }
        if let Some(report) = self.unacked.get(&task) {
            send(out, pb::agent_message::Kind::Report(report.clone()));
            return;
        }
        let key = job.capability.key();
        if !self.config.capabilities.iter().any(|c| c.key() == key) {
            let reason = format!("capability {key} is not one this agent declared");
            send(out, pb::agent_message::Kind::Report(end(raw_id, reason)));
            return;
        }
        let waited = |reason: String| pb::TaskReport {
            task_id: task.to_string(),
            report: Some(pb::task_report::Report::Wait(pb::Waited { reason })),
        };
        if self.running.len() >= usize::try_from(self.config.tokens).unwrap_or(usize::MAX) {
            self.waited = true;
            send(out, pb::agent_message::Kind::Report(waited("all tokens in use".to_owned())));
            return;
        }
        let need = job.need;
        let estimate = Estimate::builder().memory(need.memory).cpu_millis(need.cpu_millis.max(1)).build();
        let reservation = match self.governor.reserve_available(&estimate) {
            Ok(r) => r,
            Err(decision) if decision.kind() == lardon::DecisionKind::Wait => {
                self.waited = true;
                send(out, pb::agent_message::Kind::Report(waited(decision.to_string())));
                return;
            }
            Err(decision) => {
                let reason = format!("refused by the agent's Governor: {decision}");
                send(out, pb::agent_message::Kind::Report(end(raw_id, reason)));
                return;
            }
        };
        let (cancel_tx, cancel_rx) = oneshot::channel();
        self.running.insert(task.clone(), Held { cancel: Some(cancel_tx) });
        let running = self.executor.run(job.spec, cancel_rx);
        let ended_tx = self.ended_tx.clone();
        tokio::spawn(async move {
            let ended = running.await;
            // Released before the report, so the availability that follows
            // it counts the room it frees.
            drop(reservation);
            let _ = ended_tx.send((task, ended));
        });
    }
}

/// How a session ended.
enum Session {
    /// The stream ended; `served`: it got as far as the broker's answer.
    Ended { served: bool },
    /// Idle for the idle-exit time: the agent stops.
    IdleExit,
}

/// Resolves at `deadline`, never without one.
async fn until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

fn send(out: &mpsc::UnboundedSender<pb::AgentMessage>, kind: pb::agent_message::Kind) {
    // A closed stream is seen by the session loop, which reconnects.
    let _ = out.send(pb::AgentMessage { kind: Some(kind) });
}
