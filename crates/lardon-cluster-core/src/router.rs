//! The broker's routing core as pure state transitions: every input (a
//! submission, an agent's hello, update, report or loss, a cancel) returns
//! the [`Event`]s it causes, and nothing here does I/O, sleeps or reads a
//! clock — the transport and the store wrap it (tests drive it directly).
//!
//! * **Routes.** One per canonical capability key; no head-of-line blocking
//!   across capabilities.
//! * **Fair share.** Within a route, deficit round robin across submitters
//!   with a unit cost per task (so an equal share of assignments): each
//!   round gives every waiting submitter one turn; a submitter whose head
//!   task fits no agent is passed over without blocking the others.
//! * **Placement.** Power of two choices among the agents that declared the
//!   capability, hold fewer tasks than their token bound, and whose
//!   availability mirror admits the task's need: of two drawn at random,
//!   the one with more free tokens (then more memory). The mirror is
//!   charged at once, so no agent is handed more than it said it could take
//!   before its next update (no prefetch held by saturated agents).
//! * **Walltime.** An agent whose allocation ends (its hello says when) is
//!   never given a task whose expected duration (learned, else declared)
//!   exceeds the time it has left, measured against the clock the caller
//!   sets ([`Router::set_now`]: the router reads none). Such a task waits
//!   for another agent; when no agent that serves its capability could
//!   ever take it, it is answered [`Delivery::NoExecutor`], as is a task
//!   with no agent at all — unless the capability is provisionable (a new
//!   allocation may have the time).
//! * **Drain.** A draining agent ([`Router::drain`]) is given nothing new;
//!   what it holds but has not started is queued again at once, at the
//!   head of its submitter's queue and without counting an attempt.
//! * **Failure.** A submission with no agent for its capability is answered
//!   [`Delivery::NoExecutor`] at once (the submitter runs it locally),
//!   unless the capability is provisionable ([`Router::set_provisionable`]):
//!   then it waits for the allocation a Provisioner brings (the broker,
//!   which knows the shapes, answers one no shape can hold before routing
//!   it, or takes it back with [`Router::hand_back_queued`]). An
//!   agent's WAIT puts the task back at the head of its submitter's queue
//!   and empties that agent's mirror until its next update.
//!   A lost agent's tasks are queued again with one more attempt; past
//!   [`Router::MAX_ATTEMPTS`] they are handed back to run locally. When
//!   the last agent of a capability goes, its waiting tasks are handed
//!   back too — never a hang.
//! * **Exactly once.** A task id is in one place at a time (queued, or in
//!   flight at one agent); a report from an agent that does not hold the
//!   task is ignored; a finished id is remembered (bounded), so a
//!   resubmission after a broker restart is answered, not run again. A run
//!   an agent was told to stop (its task was placed elsewhere meanwhile) is
//!   stale: the task goes back to that agent only after that run's end was
//!   reported, and never by the agent's hello, so the stale run's end is
//!   never taken for a newer run's ([`stale`]).
//!
//! # Invariants
//! Checked by [`Router::check`] (debug builds after every transition, and
//! by the property tests): every known task is queued in exactly one route
//! or in flight at exactly one agent; no agent is assigned a task while it
//! holds its token bound.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

mod check;
mod handback;
mod parts;
mod stale;

use crate::capability::Capability;
use crate::ids::{AgentId, SubmitterId, TaskId};
use crate::messages::{
    AgentView, Availability, Delivery, Event, Hello, Need, Report, Request, Submitted, TaskPlace,
};
use parts::{Agent, Route, SplitMix};
use stale::StaleRuns;

#[derive(Debug, Clone)]
enum Place {
    Queued,
    InFlight(AgentId),
}

#[derive(Debug, Clone)]
struct Entry {
    request: Request,
    place: Place,
    attempts: u32,
}

/// The routing core of `lardon broker` (see the module docs).
#[derive(Debug, Clone)]
pub struct Router {
    routes: BTreeMap<String, Route>,
    agents: BTreeMap<AgentId, Agent>,
    tasks: HashMap<TaskId, Entry>,
    finished: VecDeque<TaskId>,
    finished_set: BTreeSet<TaskId>,
    rng: SplitMix,
    /// Capabilities a Provisioner can bring agents for: their tasks wait
    /// for one instead of being handed back.
    provisionable: BTreeSet<String>,
    /// The caller's clock, Unix milliseconds (walltime checks).
    now_ms: u64,
    /// Runs agents were told to stop (see [`stale`]).
    stale: StaleRuns,
}

impl Router {
    /// Runs of one task lost with their agent before it is handed back to
    /// run locally.
    pub const MAX_ATTEMPTS: u32 = 3;
    /// Finished ids remembered for answering resubmissions.
    pub const FINISHED_MEMORY: usize = 100_000;

    /// An empty router whose random choices follow `seed`.
    pub fn new(seed: u64) -> Self {
        Router {
            routes: BTreeMap::new(),
            agents: BTreeMap::new(),
            tasks: HashMap::new(),
            finished: VecDeque::new(),
            finished_set: BTreeSet::new(),
            rng: SplitMix(seed),
            provisionable: BTreeSet::new(),
            now_ms: 0,
            stale: StaleRuns::default(),
        }
    }

    /// Capabilities a Provisioner's shapes offer (scale from zero): a task
    /// of one of them is queued even while no agent serves it, and stays
    /// queued when the last agent goes, while an allocation comes.
    pub fn set_provisionable(&mut self, capabilities: &[Capability]) {
        self.provisionable = capabilities.iter().map(Capability::key).collect();
    }

    /// Tasks waiting for an agent, per capability, with the largest
    /// declared need among them (what the Provisioner sizes allocations
    /// for).
    pub fn queued_demand(&self) -> BTreeMap<Capability, (u64, Need)> {
        let mut demand: BTreeMap<Capability, (u64, Need)> = BTreeMap::new();
        for e in self.tasks.values().filter(|e| matches!(e.place, Place::Queued)) {
            let (n, need) = demand.entry(e.request.capability.clone()).or_insert((0, Need::default()));
            *n += 1;
            need.memory = need.memory.max(e.request.need.memory);
            need.cpu_millis = need.cpu_millis.max(e.request.need.cpu_millis);
        }
        demand
    }

    /// Sets the time, Unix milliseconds, that walltime checks measure
    /// against (the router reads no clock; the broker sets it before each
    /// input, tests set it by hand). Never goes back.
    pub fn set_now(&mut self, unix_ms: u64) {
        self.now_ms = self.now_ms.max(unix_ms);
    }

    /// Whether some agent that serves `key` could ever take a task of
    /// `duration_ms` (time left only shrinks).
    fn could_ever(&self, key: &str, duration_ms: Option<u64>) -> bool {
        self.agents.values().any(|a| a.serves(key) && a.has_time(duration_ms, self.now_ms))
    }

    /// Tasks queued or in flight, per capability (what KEDA scales on).
    pub fn demand(&self) -> BTreeMap<Capability, u64> {
        let mut demand = BTreeMap::new();
        for e in self.tasks.values() {
            *demand.entry(e.request.capability.clone()).or_insert(0) += 1;
        }
        demand
    }

    /// Offers a task. See [`Submitted`] for the answers; the events hold
    /// its assignment (or the at-once [`Delivery::NoExecutor`]).
    pub fn submit(&mut self, request: Request) -> (Submitted, Vec<Event>) {
        if self.tasks.contains_key(&request.id) {
            return (Submitted::AlreadyKnown, Vec::new());
        }
        if self.finished_set.contains(&request.id) {
            return (Submitted::AlreadyFinished, Vec::new());
        }
        let key = request.capability.key();
        if !self.could_ever(&key, request.duration_ms) && !self.provisionable.contains(&key) {
            let event = Event::Deliver {
                submitter: request.submitter,
                task: request.id,
                delivery: Delivery::NoExecutor,
            };
            return (Submitted::NoExecutor, vec![event]);
        }
        self.routes.entry(key.clone()).or_default().push(&request.submitter, request.id.clone(), false);
        self.tasks.insert(request.id.clone(), Entry { request, place: Place::Queued, attempts: 0 });
        let events = self.dispatch_route(&key);
        self.debug_check();
        (Submitted::Queued, events)
    }

    /// An agent connects (or reconnects after a broker restart). Tasks it
    /// says it runs that are queued here (resubmitted meanwhile) become its
    /// own again instead of running twice — unless it was told to stop
    /// them before (a stale run, `router/stale.rs`). Every other task it lists
    /// is cancelled at it ([`Event::Cancel`]), and one still live is not
    /// placed on it again until that run's end is reported.
    pub fn hello(&mut self, hello: Hello) -> Vec<Event> {
        // A reconnect: what it no longer says it runs is queued again (the
        // route is not orphaned: the agent is back).
        let mut events = self.lose_agent(&hello.agent, "the agent reconnected", &hello.running, false);
        self.stale.forget_unlisted(&hello.agent, &hello.running.iter().collect());
        let mut agent = Agent {
            capabilities: hello.capabilities.iter().map(Capability::key).collect(),
            mirror: hello.availability,
            tokens: hello.tokens,
            holding: BTreeSet::new(),
            ends_at_ms: hello.ends_at_ms,
            draining: false,
        };
        for id in hello.running {
            let stale = self.stale.has(&hello.agent, &id);
            match self.tasks.get_mut(&id) {
                Some(entry) if matches!(entry.place, Place::Queued) && !stale => {
                    let key = entry.request.capability.key();
                    if let Some(route) = self.routes.get_mut(&key) {
                        route.remove(&entry.request.submitter, &id);
                    }
                    entry.place = Place::InFlight(hello.agent.clone());
                    agent.holding.insert(id);
                }
                // Live, not its own: its run is stale; its report may come
                // any time.
                Some(_) => {
                    self.stale.told_to_stop(&hello.agent, &id);
                    events.push(Event::Cancel { agent: hello.agent.clone(), task: id });
                }
                // Finished (its report may be pending: it is acknowledged
                // and ignored) or unknown.
                None => events.push(Event::Cancel { agent: hello.agent.clone(), task: id }),
            }
        }
        self.agents.insert(hello.agent, agent);
        events.extend(self.dispatch_all());
        self.debug_check();
        events
    }

    /// An agent's Governor changed: its mirror is replaced.
    pub fn update(&mut self, agent: &AgentId, availability: Availability) -> Vec<Event> {
        let Some(a) = self.agents.get_mut(agent) else { return Vec::new() };
        a.mirror = availability;
        let events = self.dispatch_all();
        self.debug_check();
        events
    }

    /// An agent's optimizer moved its token bound: more (or fewer) tasks
    /// may go to it from now on; what it holds stays.
    pub fn set_tokens(&mut self, agent: &AgentId, tokens: u32) -> Vec<Event> {
        let Some(a) = self.agents.get_mut(agent) else { return Vec::new() };
        a.tokens = tokens;
        let events = self.dispatch_all();
        self.debug_check();
        events
    }

    /// An agent drains (SIGTERM: its allocation ends or it is evicted):
    /// nothing new goes to it, and every task it holds that is not in
    /// `running` (assigned but not started) is queued again at once, at
    /// the head of its submitter's queue, without counting an attempt —
    /// it never ran. Routes no other agent serves are handed back.
    pub fn drain(&mut self, agent: &AgentId, running: &[TaskId]) -> Vec<Event> {
        let Some(a) = self.agents.get_mut(agent) else { return Vec::new() };
        a.draining = true;
        let unstarted: Vec<TaskId> = a.holding.iter().filter(|t| !running.contains(t)).cloned().collect();
        for id in &unstarted {
            a.holding.remove(id);
        }
        for id in unstarted.into_iter().rev() {
            if let Some(entry) = self.tasks.get_mut(&id) {
                entry.place = Place::Queued;
                let key = entry.request.capability.key();
                let submitter = entry.request.submitter.clone();
                self.routes.entry(key).or_default().push(&submitter, id, true);
            }
        }
        let mut events = self.sweep_orphans();
        events.extend(self.dispatch_all());
        self.debug_check();
        events
    }

    /// An agent reports on a task. Ignored unless that agent holds it (a
    /// stale run's end lets the task go to that agent again).
    pub fn report(&mut self, agent: &AgentId, task: &TaskId, report: Report) -> Vec<Event> {
        let holds = self.agents.get(agent).is_some_and(|a| a.holding.contains(task));
        if !holds {
            if self.stale.reported(agent, task) && self.tasks.contains_key(task) {
                let events = self.dispatch_all();
                self.debug_check();
                return events;
            }
            return Vec::new();
        }
        if let Some(a) = self.agents.get_mut(agent) {
            a.holding.remove(task);
        }
        let mut events = Vec::new();
        match report {
            Report::Wait => {
                // Its mirror admitted what its Governor would not: the
                // mirror is wrong until the agent's next update, so nothing
                // more goes there meanwhile (no WAIT ping-pong).
                if let Some(a) = self.agents.get_mut(agent) {
                    a.mirror = Availability::default();
                }
                if let Some(entry) = self.tasks.get_mut(task) {
                    entry.place = Place::Queued;
                    let key = entry.request.capability.key();
                    let submitter = entry.request.submitter.clone();
                    self.routes.entry(key).or_default().push(&submitter, task.clone(), true);
                }
            }
            Report::Finished(outcome) => {
                if let Some(event) = self.finish(task, Delivery::Done(outcome)) {
                    events.push(event);
                }
            }
        }
        events.extend(self.dispatch_all());
        self.debug_check();
        events
    }

    /// An agent is gone (stream closed, heartbeats missed, allocation
    /// ended): its tasks are queued again, or handed back past
    /// [`Router::MAX_ATTEMPTS`].
    pub fn agent_lost(&mut self, agent: &AgentId) -> Vec<Event> {
        let mut events = self.lose_agent(agent, "agent lost", &[], true);
        events.extend(self.dispatch_all());
        self.debug_check();
        events
    }

    /// Cancels a task: a queued one is answered at once; one in flight is
    /// cancelled at its agent (its report ends it).
    pub fn cancel(&mut self, task: &TaskId) -> Vec<Event> {
        self.stop(task, Delivery::Cancelled)
    }

    /// Ends `task` before it runs: a queued one leaves its route (an empty
    /// route goes too) and is answered `delivery`; one in flight is
    /// cancelled at its agent (its report ends it).
    fn stop(&mut self, task: &TaskId, delivery: Delivery) -> Vec<Event> {
        let Some(entry) = self.tasks.get(task) else { return Vec::new() };
        let events = match &entry.place {
            Place::InFlight(agent) => vec![Event::Cancel { agent: agent.clone(), task: task.clone() }],
            Place::Queued => {
                let key = entry.request.capability.key();
                let submitter = entry.request.submitter.clone();
                if let Some(route) = self.routes.get_mut(&key) {
                    route.remove(&submitter, task);
                    if route.is_empty() {
                        self.routes.remove(&key);
                    }
                }
                self.finish(task, delivery).into_iter().collect()
            }
        };
        self.debug_check();
        events
    }

    /// Queues a task known from before a broker restart (read back from
    /// the broker's store) with the attempts it had, even when no agent
    /// serves its capability yet: agents are still reconnecting, and
    /// [`Router::sweep`] hands back what none comes for. Nothing is
    /// dispatched here (the agents' hellos do it). Returns false, changing
    /// nothing, for an id already known or finished.
    pub fn restore(&mut self, request: Request, attempts: u32) -> bool {
        if self.tasks.contains_key(&request.id) || self.finished_set.contains(&request.id) {
            return false;
        }
        let key = request.capability.key();
        self.routes.entry(key).or_default().push(&request.submitter, request.id.clone(), false);
        self.tasks.insert(request.id.clone(), Entry { request, place: Place::Queued, attempts });
        self.debug_check();
        true
    }

    /// Hands back, to run locally, every task waiting on a route that no
    /// connected agent serves (the end of a restart's recovery window: the
    /// same answer as when the last agent of a capability goes).
    pub fn sweep(&mut self) -> Vec<Event> {
        let events = self.sweep_orphans();
        self.debug_check();
        events
    }

    /// Where a live task is, with its attempts so far; `None` once it is
    /// finished or if it was never known.
    pub fn place(&self, task: &TaskId) -> Option<TaskPlace> {
        self.tasks.get(task).map(|e| match &e.place {
            Place::Queued => TaskPlace::Queued { attempts: e.attempts },
            Place::InFlight(agent) => TaskPlace::InFlight { agent: agent.clone(), attempts: e.attempts },
        })
    }

    /// The tasks `agent` holds (empty for an unknown agent).
    pub fn holding(&self, agent: &AgentId) -> Vec<TaskId> {
        self.agents.get(agent).map(|a| a.holding.iter().cloned().collect()).unwrap_or_default()
    }

    /// Every connected agent as the router sees it, by id.
    pub fn agents(&self) -> Vec<AgentView> {
        self.agents
            .iter()
            .map(|(id, a)| AgentView {
                agent: id.clone(),
                capabilities: a.capabilities.iter().cloned().collect(),
                tokens: a.tokens,
                in_flight: a.holding.len(),
                mirror: a.mirror,
                draining: a.draining,
                ends_at_ms: a.ends_at_ms,
            })
            .collect()
    }

    /// Tasks in flight at any agent.
    pub fn in_flight_total(&self) -> usize {
        self.tasks.values().filter(|e| matches!(e.place, Place::InFlight(_))).count()
    }

    /// A task's deadline passed: a queued one is answered
    /// [`Delivery::Expired`] and never starts; one in flight is cancelled
    /// at its agent (which also kills it at the deadline). Unknown or
    /// finished ids change nothing.
    pub fn expire(&mut self, task: &TaskId) -> Vec<Event> {
        self.stop(task, Delivery::Expired)
    }

    /// Tasks queued (all routes).
    pub fn queued(&self) -> usize {
        self.tasks.values().filter(|e| matches!(e.place, Place::Queued)).count()
    }

    /// Tasks in flight at `agent`.
    pub fn in_flight(&self, agent: &AgentId) -> usize {
        self.agents.get(agent).map_or(0, |a| a.holding.len())
    }

    fn finish(&mut self, task: &TaskId, delivery: Delivery) -> Option<Event> {
        let entry = self.tasks.remove(task)?;
        self.stale.forget_task(task);
        self.finished.push_back(task.clone());
        self.finished_set.insert(task.clone());
        while self.finished.len() > Self::FINISHED_MEMORY {
            if let Some(old) = self.finished.pop_front() {
                self.finished_set.remove(&old);
            }
        }
        Some(Event::Deliver { submitter: entry.request.submitter, task: task.clone(), delivery })
    }

    /// Removes `agent`; the tasks it held, except those in `still_running`
    /// (left queued-less for the agent's new hello to claim), are queued
    /// again with one more attempt. With `sweep`, routes no agent serves
    /// any more are emptied back to their submitters.
    fn lose_agent(
        &mut self,
        agent: &AgentId,
        why: &str,
        still_running: &[TaskId],
        sweep: bool,
    ) -> Vec<Event> {
        let Some(gone) = self.agents.remove(agent) else { return Vec::new() };
        let mut events = Vec::new();
        for id in gone.holding {
            let Some(entry) = self.tasks.get_mut(&id) else { continue };
            if still_running.contains(&id) {
                // Queued for an instant: the hello claims it straight back.
                entry.place = Place::Queued;
                let key = entry.request.capability.key();
                let submitter = entry.request.submitter.clone();
                self.routes.entry(key).or_default().push(&submitter, id, true);
                continue;
            }
            entry.attempts = entry.attempts.saturating_add(1);
            if entry.attempts >= Self::MAX_ATTEMPTS {
                let reason = format!("{why}: {} attempts on lost agents", entry.attempts);
                events.extend(self.finish(&id, Delivery::RunLocally(reason)));
            } else {
                entry.place = Place::Queued;
                let key = entry.request.capability.key();
                let submitter = entry.request.submitter.clone();
                self.routes.entry(key).or_default().push(&submitter, id, true);
            }
        }
        if sweep {
            events.extend(self.sweep_orphans());
        }
        events
    }

    fn dispatch_all(&mut self) -> Vec<Event> {
        let keys: Vec<String> = self.routes.keys().cloned().collect();
        keys.iter().flat_map(|k| self.dispatch_route(k)).collect()
    }

    /// Deficit round robin with a unit cost: every waiting submitter gets a
    /// turn per round; rounds go on while any turn placed a task.
    fn dispatch_route(&mut self, key: &str) -> Vec<Event> {
        let mut events = Vec::new();
        while let Some(route) = self.routes.get(key) {
            let turns: Vec<SubmitterId> = route.turn.iter().cloned().collect();
            let mut placed_any = false;
            for submitter in turns {
                let head = self
                    .routes
                    .get(key)
                    .and_then(|r| r.queues.get(&submitter))
                    .and_then(|q| q.front().cloned());
                let Some(task) = head else { continue };
                let Some((need, duration)) =
                    self.tasks.get(&task).map(|e| (e.request.need, e.request.duration_ms))
                else {
                    continue;
                };
                let Some(agent) = self.choose(key, &task, need, duration) else {
                    // Time left only shrinks: a task no serving agent has
                    // the time for now never runs here. (A route nobody
                    // serves waits for the sweep: agents may be
                    // reconnecting after a restart.)
                    if !self.provisionable.contains(key)
                        && self.agents.values().any(|a| a.serves(key))
                        && !self.could_ever(key, duration)
                    {
                        events.extend(self.hand_back_timeless(key, &submitter, &task));
                        placed_any = true;
                    }
                    continue;
                };
                if let Some(route) = self.routes.get_mut(key) {
                    if let Some(q) = route.queues.get_mut(&submitter) {
                        q.pop_front();
                        if q.is_empty() {
                            route.queues.remove(&submitter);
                        }
                    }
                    // This submitter's turn is used: to the back.
                    route.turn.retain(|s| s != &submitter);
                    if route.queues.contains_key(&submitter) {
                        route.turn.push_back(submitter.clone());
                    }
                }
                if let Some(a) = self.agents.get_mut(&agent) {
                    a.holding.insert(task.clone());
                    a.mirror.charge(need);
                }
                if let Some(entry) = self.tasks.get_mut(&task) {
                    entry.place = Place::InFlight(agent.clone());
                }
                events.push(Event::Assign { agent, task });
                placed_any = true;
            }
            if !placed_any {
                break;
            }
        }
        if self.routes.get(key).is_some_and(Route::is_empty) {
            self.routes.remove(key);
        }
        events
    }

    /// Power of two choices among the agents that can take `need` now
    /// (and have no stale run of `task` whose end is unreported).
    fn choose(&mut self, key: &str, task: &TaskId, need: Need, duration_ms: Option<u64>) -> Option<AgentId> {
        let now = self.now_ms;
        let able: Vec<&AgentId> = self
            .agents
            .iter()
            .filter(|(id, a)| a.can_take(key, need, duration_ms, now) && !self.stale.blocks(id, task))
            .map(|(id, _)| id)
            .collect();
        let pick = match able.len() {
            0 => return None,
            1 => able[0],
            n => {
                let i = self.rng.below(n);
                let mut j = self.rng.below(n - 1);
                if j >= i {
                    j += 1;
                }
                let score = |id: &AgentId| self.agents.get(id).map(|a| (a.free_tokens(), a.mirror.memory));
                if score(able[j]) > score(able[i]) { able[j] } else { able[i] }
            }
        };
        Some(pick.clone())
    }
}
