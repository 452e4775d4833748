//! The core's read-only views: the status (`ClusterStatus` and the
//! `Watch` snapshots), the metrics' counters and gauges, and the
//! invariants tests ask it to check.

use std::collections::BTreeMap;

use lardon_proto::cluster as pb;

use super::Core;
use lardon_cluster_core::TaskPlace;
use lardon_cluster_core::wire;

impl Core {
    /// Publishes the status to `Watch` subscribers if it may have changed
    /// since the last publication (and someone watches); `busy`: more
    /// inputs wait. Returns when to call again if it was put off for
    /// time (see [`crate::broker::watch::Feed::due`]).
    pub(crate) fn publish_watch(&mut self, busy: bool) -> Option<std::time::Instant> {
        let now = std::time::Instant::now();
        match self.watch.due(self.changes, busy, now) {
            crate::broker::watch::Due::Now => {
                let status = self.status();
                self.watch.publish(self.changes, status, now);
                None
            }
            crate::broker::watch::Due::At(at) => Some(at),
            crate::broker::watch::Due::No => None,
        }
    }

    /// The router's invariants, and that the live tasks the core keeps
    /// specs for are exactly those the router knows.
    #[cfg(test)]
    pub(super) fn check(&self) -> Result<(), String> {
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
    pub(super) fn metrics(&self) -> crate::broker::metrics::MetricsSnapshot {
        crate::broker::metrics::MetricsSnapshot {
            counters: self.counters,
            agents: u64::try_from(self.agents.len() + self.ghosts.len()).unwrap_or(u64::MAX),
            submitters: u64::try_from(self.submitters.len()).unwrap_or(u64::MAX),
            load: self.load(),
            tokens: self.capacity().0,
            advertised_tokens: self.capacity().1,
        }
    }

    /// The token bounds of the agents taking work (not recovering, not
    /// draining), and that capacity as advertised: raised by the cache's
    /// hit rate, since a hit holds no token ([`HitRate::advertised`]:
    /// tokens ÷ (1 − rate), the rate counted at most 0.9); without a cache,
    /// the same figure.
    ///
    /// [`HitRate::advertised`]: crate::cache::hooks::HitRate::advertised
    pub(super) fn capacity(&self) -> (u64, u64) {
        let tokens: u64 = self
            .router
            .agents()
            .into_iter()
            .filter(|a| !a.draining && !self.ghosts.contains_key(&a.agent))
            .map(|a| u64::from(a.tokens))
            .sum();
        let advertised = match &self.hits {
            Some(h) => {
                let rate = *h.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                u64::from(rate.advertised(u32::try_from(tokens).unwrap_or(u32::MAX)))
            }
            None => tokens,
        };
        (tokens, advertised)
    }

    /// The cache's hit rate (0–1), 0 without a cache.
    fn hit_rate(&self) -> f64 {
        self.hits.as_ref().map_or(0.0, |h| h.lock().unwrap_or_else(std::sync::PoisonError::into_inner).rate())
    }

    /// Tasks queued and in flight per capability key.
    pub(super) fn load(&self) -> BTreeMap<String, crate::broker::metrics::Load> {
        let mut load: BTreeMap<String, crate::broker::metrics::Load> = BTreeMap::new();
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

    pub(super) fn status(&self) -> pb::ClusterStatusResponse {
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
        let (tokens, advertised_tokens) = self.capacity();
        pb::ClusterStatusResponse {
            agents,
            tokens,
            advertised_tokens,
            cache_hit_rate: self.hit_rate(),
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
