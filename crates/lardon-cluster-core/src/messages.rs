//! What crosses the router's boundary: a task's need and request, an
//! agent's hello, availability and reports, and the events and deliveries
//! the router answers with.

use crate::capability::Capability;
use crate::ids::{AgentId, SubmitterId, TaskId};

/// What one task needs of an agent: its minimum memory and CPUs (the
/// submitter derives them from the estimate: fixed + per-item × batch_min).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Need {
    /// Bytes.
    pub memory: u64,
    /// Thousandths of a CPU.
    pub cpu_millis: u32,
}

/// An agent's availability as its own Governor reports it (the mirror).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Availability {
    /// Bytes its Governor could grant now.
    pub memory: u64,
    /// Thousandths of a CPU it could grant now.
    pub cpu_millis: u32,
}

impl Availability {
    /// Whether `need` fits. A task holds at least one thousandth of a CPU
    /// at its agent (the agent's Governor reserves no less), so a mirror
    /// with no CPU left — emptied after a WAIT, or an agent whose host
    /// gate is closed — admits nothing, not even a task declaring none.
    pub(crate) fn admits(self, need: Need) -> bool {
        self.memory >= need.memory && self.cpu_millis >= need.cpu_millis.max(1)
    }

    pub(crate) fn charge(&mut self, need: Need) {
        self.memory = self.memory.saturating_sub(need.memory);
        self.cpu_millis = self.cpu_millis.saturating_sub(need.cpu_millis.max(1));
    }
}

/// A task offered for remote execution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Unique across submitters.
    pub id: TaskId,
    /// Who offloads it (fair share is between submitters).
    pub submitter: SubmitterId,
    /// What it must run on.
    pub capability: Capability,
    /// What it needs of an agent.
    pub need: Need,
    /// How long it is expected to run, milliseconds: learned for its class,
    /// else declared (`None`: unknown). No agent whose allocation ends
    /// sooner is given it.
    pub duration_ms: Option<u64>,
}

/// An agent's first message: who it is and what it offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// Its id.
    pub agent: AgentId,
    /// The capabilities it declared (it runs only these).
    pub capabilities: Vec<Capability>,
    /// Its Governor's availability.
    pub availability: Availability,
    /// An upper bound on tasks at once (from its allocation's CPUs, not
    /// the node's). Admission stays the agent's.
    pub tokens: u32,
    /// Tasks it is running (after a broker restart): they stay its own.
    pub running: Vec<TaskId>,
    /// When its allocation ends, Unix milliseconds (`None`: not known).
    pub ends_at_ms: Option<u64>,
}

/// How a task ended at an agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Exit 0.
    Succeeded,
    /// The task itself failed (non-zero exit, killed for memory …): final,
    /// not retried elsewhere.
    Failed(String),
}

/// What an agent reports about a task it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    /// Its Governor said WAIT: the task goes back to its route.
    Wait,
    /// It ended.
    Finished(Outcome),
}

/// What a submitter is told about its task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// It ran remotely and ended so.
    Done(Outcome),
    /// No connected agent declares its capability: run it locally.
    NoExecutor,
    /// Its capability is provisionable, but no allocation shape can ever
    /// hold it and no connected agent could run it: run it locally. The
    /// reason is the Provisioner's ("…: no shape fits 64.0 GiB and 1 CPUs
    /// (largest: 16.0 GiB and 8 CPUs)"); it travels as a "no executor".
    NoShapeFits(String),
    /// Infrastructure failed (agents lost, the last agent gone): run it
    /// locally.
    RunLocally(String),
    /// Cancelled before it started anywhere.
    Cancelled,
    /// Its deadline passed while it waited for an agent; it never started.
    Expired,
}

/// What a transition asks the transport to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Send `task` to `agent`.
    Assign {
        /// Where.
        agent: AgentId,
        /// What.
        task: TaskId,
    },
    /// Tell `submitter` how `task` ended (at most once per task).
    Deliver {
        /// Whose.
        submitter: SubmitterId,
        /// Which.
        task: TaskId,
        /// How.
        delivery: Delivery,
    },
    /// Ask `agent` to cancel `task`, which it runs.
    Cancel {
        /// Where.
        agent: AgentId,
        /// Which.
        task: TaskId,
    },
}

/// What [`Router::submit`](crate::Router::submit) did with a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Submitted {
    /// Queued on its route (assignments, if any, are in the events).
    Queued,
    /// Already known (queued or in flight): the resubmission is dropped.
    AlreadyKnown,
    /// Already finished: answered again from memory, not run twice.
    AlreadyFinished,
    /// No agent for its capability: answered at once.
    NoExecutor,
}

/// Where a live task is ([`Router::place`](crate::Router::place)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskPlace {
    /// Waiting on its route.
    Queued {
        /// Runs lost with their agent so far.
        attempts: u32,
    },
    /// Assigned to `agent`.
    InFlight {
        /// Which agent holds it.
        agent: AgentId,
        /// Runs lost with their agent so far.
        attempts: u32,
    },
}

/// A connected agent as the router sees it
/// ([`Router::agents`](crate::Router::agents)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentView {
    /// Its id.
    pub agent: AgentId,
    /// The capability keys it declared.
    pub capabilities: Vec<String>,
    /// Its token bound.
    pub tokens: u32,
    /// Tasks it holds.
    pub in_flight: usize,
    /// Its availability mirror, charged for assignments since its last
    /// update.
    pub mirror: Availability,
    /// It is draining: nothing new goes to it.
    pub draining: bool,
    /// When its allocation ends, Unix milliseconds (`None`: not known).
    pub ends_at_ms: Option<u64>,
}
