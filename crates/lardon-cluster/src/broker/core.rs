//! The broker's single owner of state: one task drives the [`Router`] and
//! the [`Store`] from the [`Input`]s the streams send it, and sends the
//! resulting messages to the connected peers. State is written before any
//! message that depends on it leaves (an assignment is recorded before the
//! agent sees it, an answer before the agent's report is acknowledged), so
//! a crash at any point loses nothing and runs nothing twice.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use lardon_proto::cluster as pb;
use tokio::sync::{mpsc, oneshot};
use tonic::Status;
use tracing::{error, info, warn};

use crate::cache::hooks::{CacheHook, HookChain, HookVerdict, PreRoute};
use crate::cache::key::ActionKey;
use crate::ids::{AgentId, SubmitterId, TaskId};
use crate::learned::{Learned, class_of};
use crate::messages::{Availability, Delivery, Event, Hello, Outcome, Report, Submitted, TaskPlace};
use crate::router::Router;
use crate::store::{Store, StoreError};
use crate::wire::{self, Job};

pub(crate) use super::provisioning::ProvisionView;

#[path = "core_provision.rs"]
mod provision;

/// Messages to one peer's stream.
pub(crate) type AgentTx = mpsc::UnboundedSender<Result<pb::BrokerToAgent, Status>>;
pub(crate) type SubmitTx = mpsc::UnboundedSender<Result<pb::SubmitReply, Status>>;

/// What the streams tell the core. `conn` tells a stream from the one that
/// replaced it (a reconnect): a late message of the old one is ignored.
#[derive(Debug)]
pub(crate) enum Input {
    AgentHello {
        hello: Hello,
        conn: u64,
        tx: AgentTx,
    },
    AgentUpdate {
        agent: AgentId,
        conn: u64,
        availability: Availability,
    },
    AgentReport {
        agent: AgentId,
        conn: u64,
        task: TaskId,
        report: Report,
        ended: Option<pb::TaskEnded>,
    },
    AgentGone {
        agent: AgentId,
        conn: u64,
    },
    /// The agent drains: `running` are the tasks it still runs.
    AgentDraining {
        agent: AgentId,
        conn: u64,
        running: Vec<TaskId>,
        reason: String,
    },
    /// The agent's optimizer moved or re-judged its token bound.
    AgentTokens {
        agent: AgentId,
        conn: u64,
        bound: wire::TokenBound,
    },
    SubmitterHello {
        submitter: SubmitterId,
        conn: u64,
        tx: SubmitTx,
    },
    Submit {
        submitter: SubmitterId,
        job: Box<Job>,
    },
    Cancel {
        submitter: SubmitterId,
        task: TaskId,
    },
    SubmitterGone {
        submitter: SubmitterId,
        conn: u64,
    },
    Status {
        reply: oneshot::Sender<pb::ClusterStatusResponse>,
    },
    /// A new `Watch` subscriber: its receiver, with a current snapshot in.
    Watch {
        reply: oneshot::Sender<tokio::sync::watch::Receiver<super::watch::Snapshot>>,
    },
    /// The Provisioner's view: queued demand per capability (with the
    /// largest declared need) and the connected agents' ids. Queued tasks
    /// no shape can ever hold are handed back first.
    ProvisionView {
        reply: oneshot::Sender<ProvisionView>,
    },
    /// The recovery window after a restart has passed.
    RecoveryOver,
    /// A task's deadline passed.
    Deadline {
        task: TaskId,
    },
    /// A metrics scrape asks for the counters and gauges.
    Metrics {
        reply: oneshot::Sender<super::metrics::MetricsSnapshot>,
    },
    /// Tests ask the core to check its invariants.
    #[cfg(test)]
    Check {
        reply: oneshot::Sender<Result<(), String>>,
    },
}

impl Input {
    /// Whether handling it may change the state (a read does not move the
    /// change counter).
    fn may_change(&self) -> bool {
        match self {
            Input::Status { .. }
            | Input::Watch { .. }
            | Input::ProvisionView { .. }
            | Input::Metrics { .. } => false,
            #[cfg(test)]
            Input::Check { .. } => false,
            _ => true,
        }
    }
}

#[derive(Debug)]
struct Peer<T> {
    conn: u64,
    tx: T,
}

/// The state the core task owns.
#[derive(Debug)]
pub(crate) struct Core {
    router: Router,
    store: Store,
    /// Live tasks: who submitted them and what to run.
    specs: HashMap<TaskId, (SubmitterId, pb::TaskSpec)>,
    agents: HashMap<AgentId, Peer<AgentTx>>,
    submitters: HashMap<SubmitterId, Peer<SubmitTx>>,
    /// Where deadline timers send [`Input::Deadline`] (`None`: no timers,
    /// as in tests that send it themselves).
    timers: Option<mpsc::Sender<Input>>,
    /// Agents that held tasks before a restart and have not said hello,
    /// with the cancels asked for their tasks meanwhile.
    ghosts: BTreeMap<AgentId, Vec<TaskId>>,
    /// The result cache and the pre-route chain that reads it (`None`: no
    /// cache).
    cache: Option<(super::BrokerCache, HookChain)>,
    /// What the metrics endpoint counts; written here only.
    counters: super::metrics::Counters,
    /// What each task class cost when it ran (persisted in the store).
    learned: Learned,
    /// Each agent's latest optimizer verdict and why.
    verdicts: HashMap<AgentId, (String, String)>,
    /// The wall clock, Unix milliseconds (walltime checks).
    clock: fn() -> u64,
    /// The Provisioner's allocation shapes (empty: none): a provisionable
    /// task none of them can hold is handed back (see [`Core::unfit`]).
    shapes: Vec<crate::provision::Shape>,
    /// Inputs handled that may have changed the state: the `Watch`
    /// sequence.
    changes: u64,
    /// What `Watch` subscribers read.
    watch: super::watch::Feed,
}

/// The system's wall clock, Unix milliseconds.
pub(crate) fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Core {
    /// A core over `store`, with its live tasks restored: queued ones on
    /// their routes, in-flight ones held for their agent's re-hello.
    /// Returns whether anything was restored (then a recovery window is
    /// due).
    pub(crate) fn restore(
        store: Store,
        seed: u64,
        timers: Option<mpsc::Sender<Input>>,
    ) -> Result<(Self, bool), StoreError> {
        let mut core = Core {
            timers,
            router: Router::new(seed),
            store,
            specs: HashMap::new(),
            agents: HashMap::new(),
            submitters: HashMap::new(),
            ghosts: BTreeMap::new(),
            cache: None,
            counters: super::metrics::Counters::default(),
            learned: Learned::new(),
            verdicts: HashMap::new(),
            clock: unix_ms,
            shapes: Vec::new(),
            changes: 0,
            watch: super::watch::Feed::default(),
        };
        core.learned = core.store.learned()?;
        core.router.set_now((core.clock)());
        let live = core.store.live()?;
        let restored = !live.is_empty();
        let mut held: BTreeMap<AgentId, Vec<TaskId>> = BTreeMap::new();
        for task in live {
            let submitter =
                match wire::submitter_hello(&pb::SubmitterHello { submitter_id: task.submitter.clone() }) {
                    Ok(s) => s,
                    Err(e) => {
                        warn!("dropping a stored task of a bad submitter: {e}");
                        continue;
                    }
                };
            let job = match wire::task_spec(task.spec, &submitter) {
                Ok(job) => job,
                Err(e) => {
                    warn!("dropping a stored task that no longer validates: {e}");
                    continue;
                }
            };
            let id = job.request.id.clone();
            if !core.router.restore(job.request, task.attempts) {
                continue;
            }
            if let Some(agent) = task.agent.as_deref().and_then(|a| AgentId::new(a).ok()) {
                held.entry(agent).or_default().push(id.clone());
            }
            core.arm(&id, job.spec.deadline_unix_ms);
            core.specs.insert(id, (submitter, job.spec));
        }
        // Each agent that held tasks becomes a placeholder holding them
        // (no capabilities, no tokens: nothing new goes to it) until it
        // says hello again or the recovery window ends.
        for (agent, running) in held {
            info!("waiting for agent {agent} to reconnect with {} task(s)", running.len());
            let hello = Hello {
                agent: agent.clone(),
                capabilities: Vec::new(),
                availability: Availability::default(),
                tokens: 0,
                running,
                ends_at_ms: None,
            };
            let events = core.router.hello(hello);
            core.apply(events, &[], None);
            core.ghosts.insert(agent, Vec::new());
        }
        info!("broker state: {} live task(s) restored", core.specs.len());
        Ok((core, restored))
    }

    /// Serves cacheable tasks from `cache` (its first pre-route hook) and
    /// caches their successes.
    pub(crate) fn with_cache(mut self, cache: super::BrokerCache) -> Self {
        let chain = HookChain::new().with(Box::new(CacheHook::new(std::sync::Arc::clone(&cache.actions))));
        self.cache = Some((cache, chain));
        self
    }

    /// Tasks queued or in flight, per capability.
    pub(crate) fn demand(&self) -> std::collections::BTreeMap<crate::Capability, u64> {
        self.router.demand()
    }

    /// Replaces the wall clock (tests).
    #[cfg(test)]
    pub(crate) fn with_clock(mut self, clock: fn() -> u64) -> Self {
        self.clock = clock;
        self
    }

    /// What the broker learned of `class` (see [`crate::learned`]).
    #[cfg(test)]
    pub(crate) fn estimate(&self, class: &str) -> Option<crate::learned::Estimate> {
        self.learned.estimate(class)
    }

    /// Publishes the status to `Watch` subscribers if it may have changed
    /// since the last publication (and someone watches); `busy`: more
    /// inputs wait. Returns when to call again if it was put off for
    /// time (see [`super::watch::Feed::due`]).
    pub(crate) fn publish_watch(&mut self, busy: bool) -> Option<std::time::Instant> {
        let now = std::time::Instant::now();
        match self.watch.due(self.changes, busy, now) {
            super::watch::Due::Now => {
                let status = self.status();
                self.watch.publish(self.changes, status, now);
                None
            }
            super::watch::Due::At(at) => Some(at),
            super::watch::Due::No => None,
        }
    }

    /// Handles one input.
    pub(crate) fn handle(&mut self, input: Input) {
        self.router.set_now((self.clock)());
        if input.may_change() {
            self.changes += 1;
        }
        match input {
            Input::AgentHello { hello, conn, tx } => {
                let agent = hello.agent.clone();
                let before = self.router.holding(&agent);
                let running = hello.running.clone();
                let cancels = self.ghosts.remove(&agent).unwrap_or_default();
                info!(
                    "agent {agent} connected ({} capabilities, {} tokens)",
                    hello.capabilities.len(),
                    hello.tokens
                );
                let attempts = self.attempts(&before);
                let events = self.router.hello(hello);
                self.agents.insert(agent.clone(), Peer { conn, tx });
                let touched: Vec<TaskId> = before.into_iter().chain(running.iter().cloned()).collect();
                self.apply(events, &touched, None);
                self.count_requeued(&attempts);
                // What it runs that is not its own here (finished, cancelled
                // or placed elsewhere meanwhile) was cancelled by the
                // router's events; a finished one whose report is pending
                // is re-reported and acknowledged.
                let own: BTreeSet<TaskId> = self.router.holding(&agent).into_iter().collect();
                // Cancels asked while it was away reach it now.
                for task in cancels.into_iter().filter(|t| own.contains(t)) {
                    self.to_agent(
                        &agent,
                        pb::broker_to_agent::Kind::Cancel(pb::CancelTask { task_id: task.to_string() }),
                    );
                }
            }
            Input::AgentUpdate { agent, conn, availability } => {
                if self.is_current_agent(&agent, conn) {
                    let events = self.router.update(&agent, availability);
                    self.apply(events, &[], None);
                }
            }
            Input::AgentReport { agent, conn, task, report, ended } => {
                if !self.is_current_agent(&agent, conn) {
                    return;
                }
                if !self.router.holding(&agent).contains(&task) {
                    self.counters.late_reports += 1;
                } else if report == Report::Wait {
                    self.counters.waited += 1;
                }
                let events = self.router.report(&agent, &task, report);
                // Who ran it is the broker's word, not the agent's claim.
                let ended = ended.map(|e| pb::TaskEnded { agent_id: agent.to_string(), ..e });
                let touched = [task.clone()];
                self.apply(events, &touched, Some(Reported { agent, task, ended }));
            }
            Input::AgentGone { agent, conn } => {
                if self.is_current_agent(&agent, conn) {
                    warn!("agent {agent} lost");
                    self.agents.remove(&agent);
                    self.verdicts.remove(&agent);
                    let held = self.router.holding(&agent);
                    let attempts = self.attempts(&held);
                    let events = self.router.agent_lost(&agent);
                    self.apply(events, &held, None);
                    self.count_requeued(&attempts);
                }
            }
            Input::AgentDraining { agent, conn, running, reason } => {
                if self.is_current_agent(&agent, conn) {
                    let held = self.router.holding(&agent);
                    let returned = held.iter().filter(|t| !running.contains(t)).count();
                    info!(
                        "agent {agent} drains ({reason}): {} task(s) finish there, {returned} queued again",
                        held.len() - returned
                    );
                    let events = self.router.drain(&agent, &running);
                    self.apply(events, &held, None);
                    self.to_agent(&agent, pb::broker_to_agent::Kind::DrainAck(pb::DrainAck {}));
                }
            }
            Input::AgentTokens { agent, conn, bound } => {
                if self.is_current_agent(&agent, conn) {
                    self.verdicts.insert(agent.clone(), (bound.verdict, bound.reason));
                    let events = self.router.set_tokens(&agent, bound.tokens);
                    self.apply(events, &[], None);
                }
            }
            Input::SubmitterHello { submitter, conn, tx } => {
                self.submitters.insert(submitter, Peer { conn, tx });
            }
            Input::Submit { submitter, job } => self.submit(submitter, *job),
            Input::Cancel { submitter, task } => {
                // Only its submitter may cancel a task.
                if self.specs.get(&task).is_some_and(|(s, _)| *s == submitter) {
                    let events = self.router.cancel(&task);
                    self.apply(events, std::slice::from_ref(&task), None);
                }
            }
            Input::SubmitterGone { submitter, conn } => {
                if self.submitters.get(&submitter).is_some_and(|p| p.conn == conn) {
                    self.submitters.remove(&submitter);
                }
            }
            Input::Status { reply } => {
                let _ = reply.send(self.status());
            }
            Input::Watch { reply } => {
                let rx = self.watch.subscribe();
                if !self.watch.is_current(self.changes) {
                    let status = self.status();
                    self.watch.publish(self.changes, status, std::time::Instant::now());
                }
                let _ = reply.send(rx);
            }
            Input::Metrics { reply } => {
                let _ = reply.send(self.metrics());
            }
            #[cfg(test)]
            Input::Check { reply } => {
                let _ = reply.send(self.check());
            }
            Input::ProvisionView { reply } => {
                self.hand_back_unfit();
                let view = self.provision_view();
                let _ = reply.send(view);
            }
            Input::Deadline { task } => {
                let events = self.router.expire(&task);
                self.apply(events, std::slice::from_ref(&task), None);
            }
            Input::RecoveryOver => {
                let ghosts = std::mem::take(&mut self.ghosts);
                for agent in ghosts.into_keys() {
                    warn!("agent {agent} did not come back after the restart: its tasks are queued again");
                    let held = self.router.holding(&agent);
                    let attempts = self.attempts(&held);
                    let events = self.router.agent_lost(&agent);
                    self.apply(events, &held, None);
                    self.count_requeued(&attempts);
                }
                let events = self.router.sweep();
                self.apply(events, &[], None);
            }
        }
    }

    /// Sends [`Input::Deadline`] for `task` at `deadline_unix_ms` (0: none).
    fn arm(&self, task: &TaskId, deadline_unix_ms: i64) {
        let Some(tx) = self.timers.clone() else { return };
        if deadline_unix_ms <= 0 {
            return;
        }
        let now =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
        let left = u128::try_from(deadline_unix_ms).unwrap_or(0).saturating_sub(now);
        let left = std::time::Duration::from_millis(u64::try_from(left).unwrap_or(u64::MAX));
        let task = task.clone();
        tokio::spawn(async move {
            tokio::time::sleep(left).await;
            let _ = tx.send(Input::Deadline { task }).await;
        });
    }

    /// The attempts of those of `tasks` that are live.
    fn attempts(&self, tasks: &[TaskId]) -> Vec<(TaskId, u32)> {
        tasks
            .iter()
            .filter_map(|t| match self.router.place(t)? {
                TaskPlace::Queued { attempts } | TaskPlace::InFlight { attempts, .. } => {
                    Some((t.clone(), attempts))
                }
            })
            .collect()
    }

    /// Counts as re-queued each task still live with more attempts than
    /// `before` (a run lost with its agent; one handed back is not).
    fn count_requeued(&mut self, before: &[(TaskId, u32)]) {
        let again = self.attempts(&before.iter().map(|(t, _)| t.clone()).collect::<Vec<_>>());
        let more = again.iter().filter(|(t, n)| before.iter().any(|(b, m)| b == t && n > m)).count();
        self.counters.requeued += u64::try_from(more).unwrap_or(u64::MAX);
    }

    /// Counts an answer by its kind.
    fn count(&mut self, delivery: &Delivery) {
        let c = &mut self.counters;
        match delivery {
            Delivery::Done(Outcome::Succeeded) => c.done += 1,
            Delivery::Done(Outcome::Failed(_)) => c.failed += 1,
            Delivery::NoExecutor | Delivery::NoShapeFits(_) => c.no_executor += 1,
            Delivery::RunLocally(_) => c.run_locally += 1,
            Delivery::Cancelled => c.cancelled += 1,
            Delivery::Expired => c.expired += 1,
        }
    }

    /// The router's invariants, and that the live tasks the core keeps
    /// specs for are exactly those the router knows.
    #[cfg(test)]
    fn check(&self) -> Result<(), String> {
        self.router.check()?;
        if let Some(t) = self.specs.keys().find(|t| self.router.place(t).is_none()) {
            return Err(format!("task {t} has a spec but the router does not know it"));
        }
        let known = self.router.queued() + self.router.in_flight_total();
        if known != self.specs.len() {
            return Err(format!("the router knows {known} tasks, the core {}", self.specs.len()));
        }
        Ok(())
    }

    /// The counters, and the gauges read now.
    fn metrics(&self) -> super::metrics::MetricsSnapshot {
        super::metrics::MetricsSnapshot {
            counters: self.counters,
            agents: u64::try_from(self.agents.len() + self.ghosts.len()).unwrap_or(u64::MAX),
            submitters: u64::try_from(self.submitters.len()).unwrap_or(u64::MAX),
            load: self.load(),
        }
    }

    /// Tasks queued and in flight per capability key.
    fn load(&self) -> BTreeMap<String, super::metrics::Load> {
        let mut load: BTreeMap<String, super::metrics::Load> = BTreeMap::new();
        for (task, (_, spec)) in &self.specs {
            let Ok(capability) = wire::capability("capability", spec.capability.as_ref()) else { continue };
            let entry = load.entry(capability.key()).or_default();
            match self.router.place(task) {
                Some(TaskPlace::Queued { .. }) => entry.queued += 1,
                Some(TaskPlace::InFlight { .. }) => entry.in_flight += 1,
                None => {}
            }
        }
        load
    }

    /// Whether the CAS still holds every output file of a cached result.
    fn outputs_held(&self, result: &crate::cache::reapi::ActionResult) -> bool {
        let Some((cache, _)) = &self.cache else { return false };
        let digests: Vec<_> = result.output_files.iter().filter_map(|f| f.digest.clone()).collect();
        digests.len() == result.output_files.len()
            && cache
                .cas
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .missing(&digests)
                .is_empty()
    }

    fn is_current_agent(&self, agent: &AgentId, conn: u64) -> bool {
        self.agents.get(agent).is_some_and(|p| p.conn == conn)
    }

    fn submit(&mut self, submitter: SubmitterId, job: Job) {
        let id = job.request.id.clone();
        match self.store.finished(id.as_str()) {
            Ok(Some(reply)) => return self.to_submitter(&submitter, reply),
            Ok(None) => {}
            Err(e) => error!("{e}"),
        }
        let spec = job.spec.clone();
        if spec.cacheable
            && let Some((_, chain)) = &self.cache
        {
            let key = action_key(&job.request.capability, &spec);
            let verdict = chain.check(&PreRoute { cacheable: Some(key) }, std::time::Instant::now());
            // A hit whose output blobs were evicted meanwhile is a miss: the
            // submitter could not fetch them.
            let hit = matches!(&verdict, Some((_, HookVerdict::Intercept(r))) if self.outputs_held(r));
            if hit {
                self.counters.cache_hits += 1;
            } else {
                self.counters.cache_misses += 1;
            }
            match verdict {
                Some((_, HookVerdict::Intercept(result))) if hit => {
                    let ended = pb::TaskEnded {
                        success: true,
                        exit_code: Some(result.exit_code),
                        reason: String::new(),
                        stdout: result.stdout_raw,
                        stderr: result.stderr_raw,
                        outputs: result
                            .output_files
                            .iter()
                            .map(|f| pb::OutputFile {
                                path: f.path.clone(),
                                digest: f.digest.as_ref().map(crate::blobs::to_pb),
                            })
                            .collect(),
                        ..Default::default()
                    };
                    let reply = reply(&id, Delivery::Done(Outcome::Succeeded), Some(ended));
                    if let Err(e) = self.store.finish(id.as_str(), submitter.as_str(), &reply) {
                        error!("{e}");
                    }
                    return self.to_submitter(&submitter, reply);
                }
                Some((hook, HookVerdict::Reject(why))) => {
                    let reply = reply(&id, Delivery::RunLocally(format!("{hook}: {why}")), None);
                    return self.to_submitter(&submitter, reply);
                }
                Some((_, HookVerdict::Pass | HookVerdict::Intercept(_))) | None => {}
            }
        }
        let mut request = job.request;
        // What its class took before beats what the submitter guessed.
        let class = class_of(&request.capability, &spec);
        if let Some(learned) = self.learned.estimate(&class).filter(|e| !e.duration.is_zero()) {
            request.duration_ms = Some(u64::try_from(learned.duration.as_millis()).unwrap_or(u64::MAX));
        }
        // Provisionable, but no shape could ever hold it and no agent here
        // could run it: waiting would only end at its deadline.
        if let Some(reason) = self.unfit(&request.capability, &spec, request.duration_ms) {
            info!("task {id}: no executor: {reason}");
            let delivery = Delivery::NoShapeFits(reason);
            self.count(&delivery);
            return self.to_submitter(&submitter, reply(&id, delivery, None));
        }
        let (submitted, events) = self.router.submit(request);
        if submitted == Submitted::Queued {
            if let Err(e) = self.store.insert(submitter.as_str(), &spec) {
                error!("{e}");
            }
            self.arm(&id, spec.deadline_unix_ms);
            self.specs.insert(id.clone(), (submitter.clone(), spec));
        }
        if submitted == Submitted::AlreadyFinished {
            // Remembered by the router but no longer by the store.
            let reason = "answered before; the answer is no longer kept".to_owned();
            let reply = reply(&id, Delivery::RunLocally(reason), None);
            return self.to_submitter(&submitter, reply);
        }
        self.apply(events, std::slice::from_ref(&id), None);
    }

    /// Records what `events` and the `touched` tasks changed, then sends
    /// the messages. `report` is the agent's report these events answer:
    /// its acknowledgement goes first.
    fn apply(&mut self, events: Vec<Event>, touched: &[TaskId], report: Option<Reported>) {
        let mut places: BTreeSet<TaskId> = touched.iter().cloned().collect();
        let mut outbox = Vec::new();
        let mut ended = None;
        if let Some(Reported { agent, task, ended: result }) = report {
            // Recorded (or a duplicate): the agent may forget it. Told
            // before anything these events send it, so a new assignment of
            // the same task never finds the old run's report still
            // unacknowledged there (the agent would send it again as the
            // new run's).
            let ack = pb::ReportAck { task_id: task.to_string() };
            outbox.push(Out::Agent(agent, pb::broker_to_agent::Kind::Ack(ack)));
            ended = result.map(|e| (task, e));
        }
        for event in events {
            match event {
                Event::Assign { agent, task } => {
                    places.insert(task.clone());
                    if let Some((_, spec)) = self.specs.get(&task) {
                        outbox.push(Out::Agent(agent, pb::broker_to_agent::Kind::Assign(spec.clone())));
                    }
                }
                Event::Cancel { agent, task } => {
                    if let Some(pending) = self.ghosts.get_mut(&agent) {
                        pending.push(task);
                        continue;
                    }
                    outbox.push(Out::Agent(
                        agent,
                        pb::broker_to_agent::Kind::Cancel(pb::CancelTask { task_id: task.to_string() }),
                    ));
                }
                Event::Deliver { submitter, task, delivery } => {
                    self.count(&delivery);
                    let result = match ended.take() {
                        Some((t, e)) if t == task => Some(e),
                        other => {
                            ended = other;
                            None
                        }
                    };
                    // A NoExecutor for a task that was queued (no agent
                    // had the time for it) ends a stored task: durable.
                    let durable = !matches!(delivery, Delivery::NoExecutor) || self.specs.contains_key(&task);
                    let lesson = match (&result, self.specs.get(&task)) {
                        (Some(ended), Some((_, spec))) if ended.success => {
                            wire::capability("capability", spec.capability.as_ref())
                                .ok()
                                .map(|cap| (class_of(&cap, spec), ended.peak_memory, ended.wall_ms))
                        }
                        _ => None,
                    };
                    if let Some((class, peak, wall_ms)) = lesson {
                        self.learn(&class, peak, wall_ms);
                    }
                    if let (Some(ended), Some((cache, _)), Some((_, spec))) =
                        (&result, &self.cache, self.specs.get(&task))
                        && ended.success
                        && spec.cacheable
                    {
                        cache.remember(spec, ended);
                    }
                    let reply = reply(&task, delivery, result);
                    if durable {
                        if let Err(e) = self.store.finish(task.as_str(), submitter.as_str(), &reply) {
                            error!("{e}");
                        }
                        self.specs.remove(&task);
                    }
                    places.remove(&task);
                    outbox.push(Out::Submitter(submitter, reply));
                }
            }
        }
        for task in places {
            let placed = match self.router.place(&task) {
                Some(TaskPlace::Queued { attempts }) => self.store.place(task.as_str(), None, attempts),
                Some(TaskPlace::InFlight { agent, attempts }) => {
                    self.store.place(task.as_str(), Some(agent.as_str()), attempts)
                }
                None => Ok(()),
            };
            if let Err(e) = placed {
                error!("{e}");
            }
        }
        for out in outbox {
            match out {
                Out::Agent(agent, kind) => self.to_agent(&agent, kind),
                Out::Submitter(submitter, reply) => self.to_submitter(&submitter, reply),
            }
        }
    }

    /// Learns a success's measured peak and wall time for its class.
    fn learn(&mut self, class: &str, peak: u64, wall_ms: u64) {
        if self.learned.record(class, peak, wall_ms)
            && let Err(e) = self.store.learn(class, peak, wall_ms)
        {
            error!("{e}");
        }
    }

    fn to_agent(&self, agent: &AgentId, kind: pb::broker_to_agent::Kind) {
        // A closed stream is noticed by its reader, whose AgentGone
        // re-queues what it held.
        if let Some(peer) = self.agents.get(agent) {
            let _ = peer.tx.send(Ok(pb::BrokerToAgent { kind: Some(kind) }));
        }
    }

    fn to_submitter(&self, submitter: &SubmitterId, reply: pb::SubmitReply) {
        // An absent submitter asks again by id and is answered from the
        // store.
        if let Some(peer) = self.submitters.get(submitter) {
            let _ = peer.tx.send(Ok(reply));
        }
    }

    fn status(&self) -> pb::ClusterStatusResponse {
        let agents = self
            .router
            .agents()
            .into_iter()
            .map(|a| pb::AgentStatus {
                recovering: self.ghosts.contains_key(&a.agent),
                draining: a.draining,
                ends_at_unix_ms: a.ends_at_ms.and_then(|t| i64::try_from(t).ok()).unwrap_or(0),
                optimizer_verdict: self.verdicts.get(&a.agent).map(|v| v.0.clone()).unwrap_or_default(),
                optimizer_reason: self.verdicts.get(&a.agent).map(|v| v.1.clone()).unwrap_or_default(),
                agent_id: a.agent.to_string(),
                capabilities: a.capabilities,
                tokens: a.tokens,
                in_flight: u32::try_from(a.in_flight).unwrap_or(u32::MAX),
                availability: Some(pb::Availability {
                    memory: a.mirror.memory,
                    cpu_millis: a.mirror.cpu_millis,
                }),
            })
            .collect();
        pb::ClusterStatusResponse {
            agents,
            queued: u64::try_from(self.router.queued()).unwrap_or(u64::MAX),
            in_flight: u64::try_from(self.router.in_flight_total()).unwrap_or(u64::MAX),
            finished: self.store.finished_count().unwrap_or(0),
            submitters: u32::try_from(self.submitters.len()).unwrap_or(u32::MAX),
            routes: self
                .load()
                .into_iter()
                .map(|(capability, l)| pb::RouteStatus {
                    capability,
                    queued: l.queued,
                    in_flight: l.in_flight,
                })
                .collect(),
        }
    }
}

enum Out {
    Agent(AgentId, pb::broker_to_agent::Kind),
    Submitter(SubmitterId, pb::SubmitReply),
}

/// An agent's report being applied: who sent it (owed an
/// acknowledgement), on which task, and its result if the task ended.
struct Reported {
    agent: AgentId,
    task: TaskId,
    ended: Option<pb::TaskEnded>,
}

/// The cache key of a cacheable task: its capability, argv, every
/// variable it sets (the submitter sends only the ones that matter), its
/// input files' paths and digests, and its declared outputs.
pub(crate) fn action_key(capability: &crate::Capability, spec: &pb::TaskSpec) -> ActionKey {
    let env: Vec<(String, String)> = spec.env.iter().map(|v| (v.name.clone(), v.value.clone())).collect();
    let names: Vec<&str> = spec.env.iter().map(|v| v.name.as_str()).collect();
    let inputs: Vec<crate::cache::key::InputEntry> = spec
        .inputs
        .iter()
        .map(|f| crate::cache::key::InputEntry {
            path: f.path.clone(),
            digest: f.digest.as_ref().map(crate::blobs::from_pb).unwrap_or_default(),
            executable: f.executable,
        })
        .collect();
    ActionKey::with_files(capability, &spec.argv, &env, &names, &inputs, &spec.outputs)
}

/// The submitter's answer for `task`.
fn reply(task: &TaskId, delivery: Delivery, ended: Option<pb::TaskEnded>) -> pb::SubmitReply {
    use pb::submit_reply::Outcome as O;
    let outcome = match delivery {
        Delivery::Done(outcome) => O::Done(ended.unwrap_or_else(|| match outcome {
            Outcome::Succeeded => pb::TaskEnded { success: true, ..Default::default() },
            Outcome::Failed(reason) => pb::TaskEnded { success: false, reason, ..Default::default() },
        })),
        Delivery::NoExecutor => O::NoExecutor(pb::NoExecutor { reason: String::new() }),
        Delivery::NoShapeFits(reason) => O::NoExecutor(pb::NoExecutor { reason }),
        Delivery::RunLocally(reason) => O::RunLocally(pb::RunLocally { reason }),
        Delivery::Cancelled => O::Cancelled(pb::Cancelled {}),
        Delivery::Expired => O::DeadlinePassed(pb::DeadlinePassed {}),
    };
    pb::SubmitReply { task_id: task.to_string(), outcome: Some(outcome) }
}
