//! The cluster view's state: the last snapshot the broker's `Watch`
//! stream sent, whether that stream is alive, and the selected agent.
//! Pure: events and time come in as arguments, so every rule has a
//! deterministic test.

use lardon_proto::cluster as pb;

use crate::theme::Semantic;

/// The connection to the broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BrokerLink {
    /// No event yet.
    Connecting,
    /// The stream is alive: the figures are the broker's latest.
    Live,
    /// The stream broke (or went silent) and is being subscribed again;
    /// the figures shown are from before. Holds the reason.
    Lost(String),
}

/// An agent as one row shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentRow {
    /// Its id.
    pub id: String,
    /// The capability keys it declared, joined by spaces.
    pub capabilities: String,
    /// Its token bound.
    pub tokens: u32,
    /// Tasks it holds.
    pub in_flight: u32,
    /// Bytes its Governor could grant (as the broker's mirror has it).
    pub memory: u64,
    /// Thousandths of a CPU it could grant.
    pub cpu_millis: u32,
    /// What it can take now, in a word.
    pub availability: Availability,
}

/// Whether an agent can take more work, as the broker sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Availability {
    /// Free tokens and room in its mirror.
    Available,
    /// Every token is in use.
    Full,
    /// Its mirror is empty (it said WAIT, or its Governor has no room).
    NoRoom,
    /// A placeholder after a broker restart, waiting for it to reconnect.
    Recovering,
}

impl Availability {
    /// The word shown, and what it means.
    pub fn label(self) -> (&'static str, Semantic) {
        match self {
            Self::Available => ("available", Semantic::Healthy),
            Self::Full => ("full", Semantic::Warning),
            Self::NoRoom => ("no room", Semantic::Warning),
            Self::Recovering => ("recovering", Semantic::Error),
        }
    }
}

/// What `lardon top --cluster` knows.
#[derive(Debug, Clone)]
pub struct ClusterState {
    broker: String,
    link: BrokerLink,
    status: Option<pb::ClusterStatusResponse>,
    /// The broker's change counter of the shown status.
    sequence: Option<u64>,
    /// When the shown status was last confirmed: its event or a heartbeat
    /// (Unix ms).
    received_ms: Option<i64>,
    selected: usize,
}

impl ClusterState {
    /// Nothing known yet about the broker at `broker`.
    pub fn new(broker: impl Into<String>) -> Self {
        Self {
            broker: broker.into(),
            link: BrokerLink::Connecting,
            status: None,
            sequence: None,
            received_ms: None,
            selected: 0,
        }
    }

    /// Takes one event of the broker's `Watch` stream at `now_ms`, or why
    /// the stream broke. Every event carries the whole status (a heartbeat
    /// repeats it, confirming the figures are current). A failure keeps
    /// the last figures (marked stale by the link) rather than blanking
    /// the screen.
    pub fn apply(&mut self, watched: Result<pb::ClusterWatchEvent, String>, now_ms: i64) {
        match watched {
            Ok(event) => {
                if let Some(mut status) = event.status {
                    status.agents.sort_by(|a, b| a.agent_id.cmp(&b.agent_id));
                    status.routes.sort_by(|a, b| a.capability.cmp(&b.capability));
                    self.status = Some(status);
                    self.sequence = Some(event.sequence);
                    self.clamp_selection();
                }
                self.received_ms = Some(now_ms);
                self.link = BrokerLink::Live;
            }
            Err(reason) => self.link = BrokerLink::Lost(reason),
        }
    }

    /// The broker's change counter of the shown figures (`None` before
    /// the first event).
    pub fn sequence(&self) -> Option<u64> {
        self.sequence
    }

    /// Moves the selection by `delta` rows, within the agents.
    pub fn move_selection(&mut self, delta: isize) {
        self.selected = self.selected.saturating_add_signed(delta);
        self.clamp_selection();
    }

    fn clamp_selection(&mut self) {
        self.selected = self.selected.min(self.agents().len().saturating_sub(1));
    }

    /// The broker's address as given.
    pub fn broker(&self) -> &str {
        &self.broker
    }

    /// The connection.
    pub fn link(&self) -> &BrokerLink {
        &self.link
    }

    /// The index of the selected agent row.
    pub fn selected(&self) -> usize {
        self.selected
    }

    /// Milliseconds since the shown figures were last confirmed.
    pub fn age_ms(&self, now_ms: i64) -> Option<u64> {
        self.received_ms.map(|at| u64::try_from(now_ms.saturating_sub(at)).unwrap_or(0))
    }

    /// The agents, by id.
    pub fn agents(&self) -> Vec<AgentRow> {
        let Some(status) = &self.status else { return Vec::new() };
        status
            .agents
            .iter()
            .map(|a| {
                let avail = a.availability.unwrap_or_default();
                let availability = if a.recovering {
                    Availability::Recovering
                } else if a.in_flight >= a.tokens {
                    Availability::Full
                } else if avail.memory == 0 || avail.cpu_millis == 0 {
                    Availability::NoRoom
                } else {
                    Availability::Available
                };
                AgentRow {
                    id: a.agent_id.clone(),
                    capabilities: a.capabilities.join(" "),
                    tokens: a.tokens,
                    in_flight: a.in_flight,
                    memory: avail.memory,
                    cpu_millis: avail.cpu_millis,
                    availability,
                }
            })
            .collect()
    }

    /// Per capability with live tasks: (key, queued, in flight), by key.
    pub fn routes(&self) -> Vec<(String, u64, u64)> {
        self.status
            .as_ref()
            .map(|s| s.routes.iter().map(|r| (r.capability.clone(), r.queued, r.in_flight)).collect())
            .unwrap_or_default()
    }

    /// The cluster's totals, or `None` before the first answer.
    pub fn totals(&self) -> Option<Totals> {
        let s = self.status.as_ref()?;
        Some(Totals {
            agents: s.agents.len(),
            queued: s.queued,
            in_flight: s.in_flight,
            finished: s.finished,
            submitters: s.submitters,
            tokens: s.agents.iter().map(|a| u64::from(a.tokens)).sum(),
        })
    }
}

/// The cluster's totals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    /// Agents connected.
    pub agents: usize,
    /// Tasks waiting for an agent.
    pub queued: u64,
    /// Tasks at agents.
    pub in_flight: u64,
    /// Tasks answered since the broker's state began.
    pub finished: u64,
    /// Submitters connected.
    pub submitters: u32,
    /// Tokens of all agents.
    pub tokens: u64,
}
