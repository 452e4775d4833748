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
//!   from argv, never through a shell ([`ProcessExecutor`]); a program its
//!   capability does not list, or a variable that changes what runs
//!   (`LD_PRELOAD`, `PATH`, …), ends it failed before it is admitted
//!   ([`permit`]).
//! * **Memory.** In an allocation, each task that declared its memory is
//!   held to it: in a cgroup of its own where the agent can make one
//!   ([`ConfinedExecutor`] with [`Cgroups`]), else by the soft memory
//!   watchdog ([`WatchedExecutor`] with [`HostRss`], [`watchdog`]), which
//!   kills by the host crate's one RSS rule. Spawning, waiting and killing
//!   are the host crate's process layer, as for the daemon.
//! * **Availability** is what its Governor would admit: its free memory
//!   and CPUs, and no CPU at all while a host gate (foreign load, CPU or
//!   memory pressure, a stale probe) would make any task wait, so the
//!   broker never offers a task the Governor would bounce. It is pushed
//!   whenever it changes: the Governor's generation moves (a reservation
//!   taken or released: a task's end frees its room at once), a host
//!   sample (every second) opens or closes a gate, and at the next sample
//!   after a WAIT (the broker emptied its mirror then).
//! * **Reconnects** with capped exponential backoff; the re-hello lists the
//!   tasks it still runs and those whose end the broker has not
//!   acknowledged, whose reports are sent again, so nothing is lost or run
//!   twice across a broker restart.
//! * **Idle exit** ([`Agent::with_idle_exit`]): an allocation's agent ends
//!   after a while with nothing assigned, running or unacknowledged,
//!   closing its stream, so its allocation ends (COMPLETED on Slurm) and
//!   gives its resources back.
//! * **Walltime and drain.** The hello says when its allocation ends; a
//!   stop request (SIGTERM) drains it ([`drain`](self) rules: nothing new,
//!   unstarted work back to the broker at once, running work finished
//!   within a grace, then exit).
//! * **The optimizer** ([`tuning`]) moves its token bound from its
//!   cgroup's CPU counters and pushes it, with its verdict, to the broker.
//! * **Files.** A task naming input files or outputs runs in a fresh
//!   directory of its own under the work directory
//!   ([`Agent::with_work_dir`]): its inputs are fetched from the broker's
//!   CAS, its outputs uploaded there and reported by digest.

mod advertise;
mod drain;
mod exec;
mod files;
mod host;
pub mod permit;
mod tokens;
pub mod tuning;
pub mod watchdog;

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

use lardon_cluster_core::wire;
use lardon_cluster_core::{AgentId, Capability, TaskId};
use lardon_submit::Backoff;
use lardon_submit::{BadAddress, broker_uri};

pub use exec::{
    ConfinedExecutor, Confinement, Confiner, Executor, MAX_OUTPUT, ProcessExecutor, Running, WatchedExecutor,
};
pub use host::{Cgroups, HostRss};
pub use permit::{Declared, Permit, Programs};
pub use tokens::default_tokens;
pub use tuning::{CpuSource, Tuner, Tuning};
pub use watchdog::{RssSampler, RssSource};

use drain::{Drain, Step, grace_from_end};

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
    pub dial: lardon_submit::dial::Dial,
    /// When its allocation ends, Unix milliseconds (`None`: not known):
    /// the broker gives it no task that would outlast it.
    pub ends_at_ms: Option<u64>,
    /// How long a drain lets running tasks finish (`None`: the time left
    /// before `ends_at_ms` less a margin, else 25 s).
    pub drain_grace: Option<Duration>,
    /// Run the optimizer on its cgroup (`None`: the bound stays `tokens`).
    pub tuning: Option<Tuning>,
}

/// The agent could not start.
#[derive(Debug, Error)]
pub enum AgentError {
    /// The broker address is not a URI.
    #[error(transparent)]
    BadAddress(#[from] BadAddress),
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
    /// The availability last pushed (or said in the hello).
    pushed: Option<pb::Availability>,
    /// Why the Governor would admit no task at all now (a host gate, as of
    /// the last sample), or `None`.
    closed: Option<String>,
    /// A WAIT was reported since the last sample: the broker emptied our
    /// mirror, so the next sample pushes the availability even unchanged.
    waited: bool,
    /// Exit after this long with nothing to do (`None`: never).
    idle_exit: Option<Duration>,
    /// The last moment it held something (or started).
    busy_at: tokio::time::Instant,
    /// The token bound now (the optimizer moves it within 1 ..= `config.tokens`).
    tokens: u32,
    /// Where it is in a stop.
    drain: Drain,
    /// Stop requests (each SIGTERM is one).
    stops: Option<Stops>,
    /// The optimizer and its period.
    tuner: Option<(Tuner, tokio::time::Interval)>,
    /// The optimizer's clock origin.
    started: tokio::time::Instant,
    /// A counter read failed once already (later failures are quiet).
    tune_warned: bool,
    /// The broker acknowledged this connection's drain notice.
    drain_acked: bool,
    /// Where tasks with files get their directories.
    work_dir: std::path::PathBuf,
    /// What its tasks may run and set.
    permit: Permit,
    /// Why the broker could not be reached, logged once per reason.
    unreached: lardon_submit::dial::UnreachedLog,
}

/// How a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SessionEnd {
    /// Never reached the broker.
    Unreached,
    /// Served, then the stream ended: reconnect.
    Served,
    /// Drained or stopped: the agent exits.
    Stopped,
}

/// A stream of stop requests, e.g. one item per SIGTERM.
pub type StopRequests = std::pin::Pin<Box<dyn tokio_stream::Stream<Item = ()> + Send>>;

/// The stop requests, shown by name only.
struct Stops(StopRequests);

impl std::fmt::Debug for Stops {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StopRequests")
    }
}

/// Resolves with the next stop request; never without a stream.
async fn next_stop(stops: &mut Option<Stops>) -> Option<()> {
    use tokio_stream::StreamExt as _;
    match stops {
        Some(s) => s.0.next().await,
        None => std::future::pending().await,
    }
}

/// Resolves at `deadline`; never without one.
async fn until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Resolves at the optimizer's next period; never without one.
async fn tune_tick(tuner: &mut Option<(Tuner, tokio::time::Interval)>) {
    match tuner {
        Some((_, every)) => drop(every.tick().await),
        None => std::future::pending().await,
    }
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
        let tokens = config.tokens.max(1);
        let tuner = config.tuning.clone().map(|t| {
            let mut every = tokio::time::interval(t.every.max(Tuning::MIN_EVERY));
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            (Tuner::new(t.source, t.cpus, tokens), every)
        });
        Ok(Agent {
            tokens,
            drain: Drain::new(),
            stops: None,
            tuner,
            started: tokio::time::Instant::now(),
            tune_warned: false,
            drain_acked: false,
            config,
            governor,
            executor,
            running: HashMap::new(),
            unacked: HashMap::new(),
            ended_tx,
            ended_rx,
            generation: u64::MAX,
            pushed: None,
            closed: None,
            waited: false,
            idle_exit: None,
            busy_at: tokio::time::Instant::now(),
            work_dir: std::env::temp_dir().join("lardon-agent"),
            permit: Permit::default(),
            unreached: lardon_submit::dial::UnreachedLog::default(),
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

    /// Drains on each item of `stops` (one per SIGTERM): the first starts
    /// a drain, the second stops at once (see the `drain` rules in the
    /// module docs); [`Agent::run`] then returns. The session polls the
    /// requests before the broker's messages, so a request already
    /// delivered is handled before any assignment read in the same turn:
    /// pass the signal itself, not a task forwarding it (one more hop for
    /// the request to lose that race).
    #[must_use]
    pub fn with_stop_requests(mut self, stops: StopRequests) -> Self {
        self.stops = Some(Stops(stops));
        self
    }

    /// Tasks with files get their own directory under `dir` (default:
    /// `lardon-agent` in the system's temporary directory).
    #[must_use]
    pub fn with_work_dir(mut self, dir: std::path::PathBuf) -> Self {
        self.work_dir = dir;
        self
    }

    /// Checks every task against `permit` before it is admitted: the
    /// programs each capability may run, the variables a task may set
    /// (default: any program; the refused variables refused).
    #[must_use]
    pub fn with_permit(mut self, permit: Permit) -> Self {
        self.permit = permit;
        self
    }

    /// Runs until `shutdown` resolves (at once, leaving tasks to the
    /// process's end) or a drain ends: connects, serves, and reconnects
    /// with backoff whenever the stream ends.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) {
        let mut shutdown = std::pin::pin!(shutdown);
        let mut wait = self.config.backoff.initial;
        loop {
            let end = tokio::select! {
                end = self.session() => end,
                () = &mut shutdown => return,
            };
            match end {
                SessionEnd::Stopped => return,
                SessionEnd::Served => wait = self.config.backoff.initial,
                SessionEnd::Unreached => {}
            }
            // Cut off from the broker: a stop request or the grace's end
            // still ends the agent (its reports would go with it anyway).
            let idle = self.idle_deadline();
            let sleep = tokio::time::sleep(wait);
            tokio::select! {
                () = sleep => {}
                () = &mut shutdown => return,
                () = until(idle) => {
                    info!("idle for {:?} while disconnected: exiting", self.idle_exit.unwrap_or_default());
                    return;
                }
                Some(()) = next_stop(&mut self.stops) => {
                    let idle = self.running.is_empty() && self.unacked.is_empty();
                    if self.on_stop_request(None) || idle {
                        self.stop_now().await;
                        return;
                    }
                }
                () = until(self.drain.deadline()) => {
                    self.drain.expire();
                    self.stop_now().await;
                    return;
                }
            }
            wait = (wait * 2).min(self.config.backoff.max);
        }
    }

    /// A stop request: the first starts a drain (told to the broker when
    /// connected), the second asks to stop now (returns true).
    fn on_stop_request(&mut self, out: Option<&mpsc::UnboundedSender<pb::AgentMessage>>) -> bool {
        let now_ms = lardon_submit::unix_ms();
        let grace = self
            .config
            .drain_grace
            .or_else(|| grace_from_end(self.config.ends_at_ms, now_ms))
            .unwrap_or(Drain::DEFAULT_GRACE);
        match self.drain.request(tokio::time::Instant::now(), grace) {
            Step::Drain => {
                info!(
                    "stop requested: draining ({} task(s) running, grace {:.1} s)",
                    self.running.len(),
                    grace.as_secs_f64()
                );
                if let Some(out) = out {
                    self.send_draining(out);
                }
                false
            }
            Step::Stop => {
                warn!("stop requested again: cancelling {} running task(s)", self.running.len());
                true
            }
        }
    }

    fn send_draining(&self, out: &mpsc::UnboundedSender<pb::AgentMessage>) {
        let mut running: Vec<String> = self.running.keys().map(ToString::to_string).collect();
        running.sort();
        let draining = pb::Draining { running, reason: "stop requested (SIGTERM)".to_owned() };
        send(out, pb::agent_message::Kind::Draining(draining));
    }

    /// Draining (and the broker knows), nothing runs and every report was
    /// acknowledged: done.
    fn drained(&self) -> bool {
        self.drain.is_draining() && self.drain_acked && self.running.is_empty() && self.unacked.is_empty()
    }

    /// Cancels what still runs and waits (bounded) for the kills; their
    /// reports are dropped: the broker queues those tasks again when this
    /// agent's stream ends.
    async fn stop_now(&mut self) {
        self.drain.expire();
        let mut left = self.running.len();
        for held in self.running.values_mut() {
            if let Some(cancel) = held.cancel.take() {
                let _ = cancel.send(());
            }
        }
        let reaped = async {
            while left > 0 && self.ended_rx.recv().await.is_some() {
                left -= 1;
            }
        };
        if tokio::time::timeout(STOP_WAIT, reaped).await.is_err() {
            warn!("some cancelled tasks did not end within {} s", STOP_WAIT.as_secs());
        }
        self.running.clear();
    }

    /// One optimizer period: sample, maybe move the bound, push it.
    fn tune(&mut self, out: &mpsc::UnboundedSender<pb::AgentMessage>) {
        let busy = u32::try_from(self.running.len()).unwrap_or(u32::MAX);
        let at = self.started.elapsed();
        let Some((tuner, _)) = &mut self.tuner else { return };
        match tuner.tick(at, busy) {
            Ok(Some(bound)) => {
                if bound.tokens != self.tokens {
                    info!("optimizer: {} → {} tokens ({})", self.tokens, bound.tokens, bound.reason);
                    self.tokens = bound.tokens;
                }
                send(out, pb::agent_message::Kind::Tokens(bound));
            }
            Ok(None) => {}
            Err(e) if !self.tune_warned => {
                self.tune_warned = true;
                warn!("optimizer: cannot read the CPU counters ({e}); the token bound holds");
            }
            Err(_) => {}
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
            tokens: self.tokens,
            running,
            ends_at_unix_ms: self.config.ends_at_ms.and_then(|t| i64::try_from(t).ok()).unwrap_or(0),
        };
        pb::AgentMessage { kind: Some(pb::agent_message::Kind::Hello(hello)) }
    }

    /// One connection: how it ended (reaching the broker's answer starts
    /// the backoff over; a drain that ended stops the agent).
    async fn session(&mut self) -> SessionEnd {
        let mut client = match self.config.dial.connect(&self.config.broker).await {
            Ok(client) => client,
            Err(e) => {
                self.unreached.failed(&self.config.broker, &self.config.dial, &e);
                return SessionEnd::Unreached;
            }
        };
        // A fresh sample, so the hello's availability is current.
        self.sample();
        let (out, rx) = mpsc::unbounded_channel();
        self.pushed = Some(self.availability());
        let _ = out.send(self.hello());
        let mut inbound = match client.agent_stream(UnboundedReceiverStream::new(rx)).await {
            Ok(response) => response.into_inner(),
            Err(status) => {
                match self.config.dial.diagnose(&status) {
                    Some(_) => self.unreached.failed(&self.config.broker, &self.config.dial, &status),
                    None => warn!("broker refused the hello: {}", status.message()),
                }
                return SessionEnd::Unreached;
            }
        };
        self.unreached.reached();
        info!("connected to {} as {}", self.config.broker, self.config.agent);
        self.generation = self.governor.generation();
        self.drain_acked = false;
        if self.drain.is_draining() {
            // Reconnected mid-drain: the broker must not give it new work.
            self.send_draining(&out);
        }
        for report in self.unacked.values() {
            send(&out, pb::agent_message::Kind::Report(report.clone()));
        }
        let mut beat = tokio::time::interval(self.config.heartbeat);
        let mut sample = tokio::time::interval(Duration::from_secs(1));
        loop {
            let idle = self.idle_deadline();
            tokio::select! {
                // A stop request first: assignments that arrived with it
                // are then answered as a draining agent's.
                biased;
                Some(()) = next_stop(&mut self.stops) => {
                    if self.on_stop_request(Some(&out)) {
                        self.stop_now().await;
                        return SessionEnd::Stopped;
                    }
                }
                () = until(idle) => {
                    // Dropping `out` ends the stream cleanly: the broker
                    // sees the agent leave, holding nothing.
                    info!("idle for {:?}: exiting", self.idle_exit.unwrap_or_default());
                    return SessionEnd::Stopped;
                }
                () = until(self.drain.deadline()) => {
                    warn!("the drain's grace ran out: cancelling {} running task(s)", self.running.len());
                    self.stop_now().await;
                    return SessionEnd::Stopped;
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
                    self.sample();
                    if std::mem::take(&mut self.waited) {
                        // The broker's mirror is empty: say it again.
                        self.pushed = None;
                    }
                }
                () = tune_tick(&mut self.tuner) => self.tune(&out),
            }
            if self.drained() {
                info!("drained: every task ended and was reported");
                return SessionEnd::Stopped;
            }
            self.push_availability(&out);
        }
        SessionEnd::Served
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
            Some(pb::broker_to_agent::Kind::DrainAck(_)) => self.drain_acked = true,
            Some(pb::broker_to_agent::Kind::Heartbeat(_)) | None => {}
        }
    }

    fn assign(&mut self, spec: pb::TaskSpec, out: &mpsc::UnboundedSender<pb::AgentMessage>) {
        let end = |task_id: String, reason: String| {
            let ended = pb::TaskEnded { success: false, reason, ..Default::default() };
            pb::TaskReport { task_id, report: Some(pb::task_report::Report::Ended(ended)) }
        };
        let raw_id = spec.task_id.clone();
        let mut job = match wire::assignment(spec) {
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
        if let Err(reason) = self.permit.check(&key, &mut job.spec) {
            warn!("task {task}: refused: {reason}");
            send(out, pb::agent_message::Kind::Report(end(raw_id, reason)));
            return;
        }
        let waited = |reason: String| pb::TaskReport {
            task_id: task.to_string(),
            report: Some(pb::task_report::Report::Wait(pb::Waited { reason })),
        };
        if self.drain.is_draining() {
            // Back to its route: this agent takes nothing new.
            send(out, pb::agent_message::Kind::Report(waited("the agent is draining".to_owned())));
            return;
        }
        if self.running.len() >= usize::try_from(self.tokens).unwrap_or(usize::MAX) {
            self.waited = true;
            send(out, pb::agent_message::Kind::Report(waited("all tokens in use".to_owned())));
            return;
        }
        let need = job.need;
        let estimate = Estimate::builder().memory(need.memory).cpu_millis(need.cpu_millis.max(1)).build();
        let reservation = match self.governor.reserve_available(&estimate) {
            Ok(r) => r,
            Err(decision) if decision.kind() == lardon::DecisionKind::Wait => {
                // Maybe a gate closed since the last sample (the mirror
                // could not know): judged again now, so the availability
                // that follows says so.
                self.sample();
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
        let running = if files::has_files(&job.spec) {
            let staging = files::Staging {
                broker: self.config.broker.clone(),
                dial: self.config.dial.clone(),
                root: self.work_dir.join(self.config.agent.as_str()),
            };
            Box::pin(files::run_staged(staging, Arc::clone(&self.executor), job.spec, cancel_rx))
        } else {
            self.executor.run(job.spec, cancel_rx)
        };
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

/// How long a stop waits for its cancelled tasks to be reaped.
const STOP_WAIT: Duration = Duration::from_secs(10);

fn send(out: &mpsc::UnboundedSender<pb::AgentMessage>, kind: pb::agent_message::Kind) {
    // A closed stream is seen by the session loop, which reconnects.
    let _ = out.send(pb::AgentMessage { kind: Some(kind) });
}
