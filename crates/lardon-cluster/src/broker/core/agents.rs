//! The core's side of the agents' streams: hello, availability, reports,
//! loss, drain and token bounds, and the end of a restart's recovery
//! window for the agents that did not come back.

use std::collections::BTreeSet;

use lardon_proto::cluster as pb;
use tracing::{info, warn};

use super::apply::Reported;
use super::{AgentTx, Core, Peer};
use lardon_cluster_core::wire;
use lardon_cluster_core::{AgentId, TaskId};
use lardon_cluster_core::{Availability, Hello, Report};

impl Core {
    /// An agent said hello (a first connection or a reconnect): what it
    /// held is settled, what it runs that is not its own is cancelled,
    /// cancels asked while it was away reach it.
    pub(super) fn agent_hello(&mut self, hello: Hello, conn: u64, tx: AgentTx) {
        let agent = hello.agent.clone();
        let before = self.router.holding(&agent);
        let running = hello.running.clone();
        let cancels = self.ghosts.remove(&agent).unwrap_or_default();
        info!("agent {agent} connected ({} capabilities, {} tokens)", hello.capabilities.len(), hello.tokens);
        let attempts = self.attempts(&before);
        let events = self.router.hello(hello);
        self.agents.insert(agent.clone(), Peer { conn, tx });
        let touched: Vec<TaskId> = before.into_iter().chain(running.iter().cloned()).collect();
        self.apply(events, &touched, None);
        self.count_requeued(&attempts);
        // What it runs that is not its own here (finished, cancelled or
        // placed elsewhere meanwhile) was cancelled by the router's events;
        // a finished one whose report is pending is re-reported and
        // acknowledged.
        let own: BTreeSet<TaskId> = self.router.holding(&agent).into_iter().collect();
        // Cancels asked while it was away reach it now.
        for task in cancels.into_iter().filter(|t| own.contains(t)) {
            self.to_agent(
                &agent,
                pb::broker_to_agent::Kind::Cancel(pb::CancelTask { task_id: task.to_string() }),
            );
        }
    }

    /// An agent's availability changed (ignored from a replaced stream).
    pub(super) fn agent_update(&mut self, agent: AgentId, conn: u64, availability: Availability) {
        if self.is_current_agent(&agent, conn) {
            let events = self.router.update(&agent, availability);
            self.apply(events, &[], None);
        }
    }

    /// An agent reported on a task: recorded (or ignored when it does not
    /// hold it), then acknowledged.
    pub(super) fn agent_report(
        &mut self,
        agent: AgentId,
        conn: u64,
        task: TaskId,
        report: Report,
        ended: Option<pb::TaskEnded>,
    ) {
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

    /// An agent's stream ended or went silent: what it held is queued again.
    pub(super) fn agent_gone(&mut self, agent: AgentId, conn: u64) {
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

    /// An agent drains: `running` are the tasks it still runs.
    pub(super) fn agent_draining(&mut self, agent: AgentId, conn: u64, running: Vec<TaskId>, reason: String) {
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

    /// An agent's optimizer moved or re-judged its token bound.
    pub(super) fn agent_tokens(&mut self, agent: AgentId, conn: u64, bound: wire::TokenBound) {
        if self.is_current_agent(&agent, conn) {
            self.verdicts.insert(agent.clone(), (bound.verdict, bound.reason));
            let events = self.router.set_tokens(&agent, bound.tokens);
            self.apply(events, &[], None);
        }
    }

    /// The recovery window after a restart has passed: agents that did not
    /// come back lose their tasks, and routes no agent serves are handed
    /// back.
    pub(super) fn recovery_over(&mut self) {
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
