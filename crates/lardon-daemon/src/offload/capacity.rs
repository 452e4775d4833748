//! What the agents behind the broker have free, for the `balance` rule:
//! the broker's `ClusterStatus`, cached with its age so that routing asks
//! at most once a second however many tasks arrive (no poll per task, and
//! none at all while nothing is routed).

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use lardon_proto::cluster as pb;

use super::lock;
use super::route::Load;

/// A status younger than this is used as is; an older one is refreshed
/// (in the background: routing never waits on the broker).
const FRESH: Duration = Duration::from_secs(1);

/// A status older than this says nothing: the remote load is unknown.
const STALE: Duration = Duration::from_secs(5);

/// With no usable status, routing waits this long for a fresh one (then
/// the remote load is unknown and the task stays here).
const FIRST_WAIT: Duration = Duration::from_secs(1);

/// The agents' load per capability, from the broker's status.
#[derive(Debug)]
pub(crate) struct Capacity {
    broker: String,
    dial: lardon_submit::dial::Dial,
    rt: tokio::runtime::Handle,
    state: Arc<(Mutex<Cached>, Condvar)>,
}

#[derive(Debug, Default)]
struct Cached {
    status: Option<(Instant, pb::ClusterStatusResponse)>,
    fetching: bool,
}

impl Capacity {
    pub(crate) fn new(broker: &str, dial: &lardon_submit::dial::Dial, rt: tokio::runtime::Handle) -> Self {
        Capacity { broker: broker.to_owned(), dial: dial.clone(), rt, state: Arc::default() }
    }

    /// The load of the agents serving `capability` (a canonical key) as of
    /// the last status, when it is at most 5 s old. A status older than
    /// 1 s is refreshed in the background (one fetch at a time) for the
    /// next task; with none usable, this waits up to 1 s for the fetch
    /// (called on a blocking thread: the fetch runs on the runtime), then
    /// says `None` (unknown).
    pub(crate) fn load(&self, capability: &str) -> Option<Load> {
        let (state, fetched) = &*self.state;
        let mut st = lock(state);
        let age = st.status.as_ref().map(|(at, _)| at.elapsed());
        if age.is_none_or(|a| a >= FRESH) && !st.fetching {
            st.fetching = true;
            self.refresh();
        }
        if age.is_none_or(|a| a >= STALE) {
            st = fetched
                .wait_timeout_while(st, FIRST_WAIT, |c| c.fetching)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        st.status.as_ref().filter(|(at, _)| at.elapsed() < STALE).map(|(_, s)| remote_load(s, capability))
    }

    fn refresh(&self) {
        let (broker, dial, state) = (self.broker.clone(), self.dial.clone(), Arc::clone(&self.state));
        self.rt.spawn(async move {
            let got = tokio::time::timeout(STALE, lardon_submit::client::status(&broker, &dial)).await;
            let (cached, fetched) = &*state;
            let mut st = lock(cached);
            st.fetching = false;
            match got {
                Ok(Ok(status)) => st.status = Some((Instant::now(), status)),
                Ok(Err(e)) => tracing::debug!("balance: broker status unavailable: {e}"),
                Err(_) => tracing::debug!("balance: broker status not answered within {STALE:?}"),
            }
            fetched.notify_all();
        });
    }
}

/// The tokens of the agents that serve `capability` and take work (not
/// draining, not a restart's placeholder), and how many of them are held:
/// by tasks in flight, and by the tasks queued for that capability (which
/// take the next free ones).
pub(crate) fn remote_load(status: &pb::ClusterStatusResponse, capability: &str) -> Load {
    let mut load = Load { used: 0, total: 0 };
    for a in &status.agents {
        if a.draining || a.recovering || !a.capabilities.iter().any(|c| c == capability) {
            continue;
        }
        load.total += u64::from(a.tokens);
        load.used += u64::from(a.in_flight.min(a.tokens));
    }
    let queued = status.routes.iter().filter(|r| r.capability == capability).map(|r| r.queued).sum::<u64>();
    load.used = load.used.saturating_add(queued).min(load.total);
    load
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(id: &str, caps: &[&str], tokens: u32, in_flight: u32) -> pb::AgentStatus {
        pb::AgentStatus {
            agent_id: id.into(),
            capabilities: caps.iter().map(|c| (*c).to_owned()).collect(),
            tokens,
            in_flight,
            ..Default::default()
        }
    }

    #[test]
    fn only_agents_serving_the_capability_and_taking_work_count_and_queued_tasks_hold_tokens() {
        let mut status = pb::ClusterStatusResponse {
            agents: vec![
                agent("a", &["sh@1:*"], 4, 1),
                agent("b", &["gcc@12:*"], 8, 0),
                pb::AgentStatus { draining: true, ..agent("c", &["sh@1:*"], 4, 0) },
                pb::AgentStatus { recovering: true, ..agent("d", &["sh@1:*"], 4, 0) },
                agent("e", &["sh@1:*", "gcc@12:*"], 2, 0),
            ],
            ..Default::default()
        };
        assert_eq!(remote_load(&status, "sh@1:*"), Load { used: 1, total: 6 });
        status.routes.push(pb::RouteStatus { capability: "sh@1:*".into(), queued: 2, in_flight: 1 });
        assert_eq!(remote_load(&status, "sh@1:*"), Load { used: 3, total: 6 });
        status.routes[0].queued = 100;
        assert_eq!(remote_load(&status, "sh@1:*"), Load { used: 6, total: 6 }, "never above all");
        assert_eq!(remote_load(&status, "python@3:*"), Load { used: 0, total: 0 });
    }
}
