//! How the core carries out what the router decided: records the changes
//! in the store, then sends the messages (state is written before any
//! message that depends on it leaves).

use std::collections::BTreeSet;

use lardon_proto::cluster as pb;
use tracing::error;

use super::Core;
use lardon_cluster_core::learned::class_of;
use lardon_cluster_core::wire;
use lardon_cluster_core::{AgentId, SubmitterId, TaskId};
use lardon_cluster_core::{Delivery, Event, Outcome, TaskPlace};

impl Core {
    /// Records what `events` and the `touched` tasks changed, then sends
    /// the messages. `report` is the agent's report these events answer:
    /// its acknowledgement goes first.
    pub(super) fn apply(&mut self, events: Vec<Event>, touched: &[TaskId], report: Option<Reported>) {
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

    pub(super) fn to_agent(&self, agent: &AgentId, kind: pb::broker_to_agent::Kind) {
        // A closed stream is noticed by its reader, whose AgentGone
        // re-queues what it held.
        if let Some(peer) = self.agents.get(agent) {
            let _ = peer.tx.send(Ok(pb::BrokerToAgent { kind: Some(kind) }));
        }
    }

    pub(super) fn to_submitter(&self, submitter: &SubmitterId, reply: pb::SubmitReply) {
        // An absent submitter asks again by id and is answered from the
        // store.
        if let Some(peer) = self.submitters.get(submitter) {
            let _ = peer.tx.send(Ok(reply));
        }
    }
}

enum Out {
    Agent(AgentId, pb::broker_to_agent::Kind),
    Submitter(SubmitterId, pb::SubmitReply),
}

/// An agent's report being applied: who sent it (owed an
/// acknowledgement), on which task, and its result if the task ended.
pub(super) struct Reported {
    pub(super) agent: AgentId,
    pub(super) task: TaskId,
    pub(super) ended: Option<pb::TaskEnded>,
}

/// The submitter's answer for `task`.
pub(super) fn reply(task: &TaskId, delivery: Delivery, ended: Option<pb::TaskEnded>) -> pb::SubmitReply {
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
