//! The broker's single owner of state: one task (on a thread of its own,
//! `broker/mod.rs`, so its commits hold no worker of the serving runtime)
//! drives the [`Router`] and
//! the [`Store`] from the [`Input`]s the streams send it, and sends the
//! resulting messages to the connected peers. State is written before any
//! message that depends on it leaves (an assignment is recorded before the
//! agent sees it, an answer before the agent's report is acknowledged), so
//! a crash at any point loses nothing and runs nothing twice.
//!
//! Here: the inputs, the state and its restoring, and the dispatch of each
//! input. Beside it: the agents' streams (`core/agents.rs`), submissions
//! (`core/submit.rs`), carrying out the router's events (`core/apply.rs`),
//! the read-only views (`core/views.rs`) and provisioning
//! (`core/provision.rs`).

use std::collections::{BTreeMap, HashMap};

use lardon_proto::cluster as pb;
use tokio::sync::{mpsc, oneshot};
use tonic::Status;
use tracing::{info, warn};

use crate::cache::hooks::{CacheHook, HookChain};
use crate::store::{Store, StoreError};
use lardon_cluster_core::Router;
use lardon_cluster_core::learned::Learned;
use lardon_cluster_core::wire::{self, Job};
use lardon_cluster_core::{AgentId, SubmitterId, TaskId};
use lardon_cluster_core::{Availability, Delivery, Hello, Outcome, Report, TaskPlace};

pub(crate) use super::provisioning::ProvisionView;

mod agents;
mod apply;
mod provision;
mod submit;
mod views;

pub(crate) use submit::action_key;

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
    /// A submitter's stream opened. `accepted` (when given) hears whether
    /// the core took it: a second live stream under one submitter id is
    /// refused, with the reason (the first keeps its answers).
    SubmitterHello {
        submitter: SubmitterId,
        conn: u64,
        tx: SubmitTx,
        accepted: Option<oneshot::Sender<Result<(), String>>>,
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
    /// The cache hook's hit rate (`None`: no cache), read for the
    /// advertised capacity in the status.
    hits: Option<std::sync::Arc<std::sync::Mutex<crate::cache::hooks::HitRate>>>,
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
            hits: None,
            counters: super::metrics::Counters::default(),
            learned: Learned::new(),
            verdicts: HashMap::new(),
            clock: lardon_submit::unix_ms,
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
        let hook = CacheHook::new(std::sync::Arc::clone(&cache.actions));
        self.hits = Some(hook.hits());
        let chain = HookChain::new().with(Box::new(hook));
        self.cache = Some((cache, chain));
        self.hand_back_queued_without_inputs();
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

    /// What the broker learned of `class` (see [`lardon_cluster_core::learned`]).
    #[cfg(test)]
    pub(crate) fn estimate(&self, class: &str) -> Option<lardon_cluster_core::learned::Estimate> {
        self.learned.estimate(class)
    }

    /// Handles one input.
    pub(crate) fn handle(&mut self, input: Input) {
        self.router.set_now((self.clock)());
        if input.may_change() {
            self.changes += 1;
        }
        match input {
            Input::AgentHello { hello, conn, tx } => self.agent_hello(hello, conn, tx),
            Input::AgentUpdate { agent, conn, availability } => self.agent_update(agent, conn, availability),
            Input::AgentReport { agent, conn, task, report, ended } => {
                self.agent_report(agent, conn, task, report, ended);
            }
            Input::AgentGone { agent, conn } => self.agent_gone(agent, conn),
            Input::AgentDraining { agent, conn, running, reason } => {
                self.agent_draining(agent, conn, running, reason);
            }
            Input::AgentTokens { agent, conn, bound } => self.agent_tokens(agent, conn, bound),
            Input::SubmitterHello { submitter, conn, tx, accepted } => {
                let taken = self.submitter_hello(submitter, conn, tx);
                if let Some(accepted) = accepted {
                    let _ = accepted.send(taken);
                }
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
            Input::RecoveryOver => self.recovery_over(),
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

    /// Takes a submitter's new stream, unless another stream under the
    /// same id is still open: answers go to one stream per id, so a second
    /// one would silently take the first one's answers (and the first
    /// would wait for ever). A stream whose client is gone (its reply
    /// channel closed) is replaced at once; a half-open one is dropped
    /// within three heartbeats, and the refused client retries.
    fn submitter_hello(&mut self, submitter: SubmitterId, conn: u64, tx: SubmitTx) -> Result<(), String> {
        if self.submitters.get(&submitter).is_some_and(|p| p.conn != conn && !p.tx.is_closed()) {
            warn!("submitter {submitter}: a second stream refused (one is connected under that id)");
            return Err(format!(
                "submitter_id: another stream is connected as submitter {submitter}; \
                 give each client its own id (lardon cluster submit --submitter), \
                 or wait until that one ends"
            ));
        }
        self.submitters.insert(submitter, Peer { conn, tx });
        Ok(())
    }

    fn is_current_agent(&self, agent: &AgentId, conn: u64) -> bool {
        self.agents.get(agent).is_some_and(|p| p.conn == conn)
    }
}
