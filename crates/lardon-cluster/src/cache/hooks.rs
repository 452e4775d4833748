//! The pre-route chain: before a task is routed to an agent, each hook in
//! turn may answer it (intercept), refuse it (reject) or let it through
//! (pass); the first answer that is not *pass* wins. The first hook is the
//! cache: a cacheable task whose action digest has a stored result is
//! answered at once, with no agent involved.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use super::key::ActionKey;
use super::reapi;
use super::store::ActionCache;

/// A task as the pre-route hooks see it.
#[derive(Debug, Clone)]
pub struct PreRoute {
    /// Its cache identity, when it was submitted as cacheable.
    pub cacheable: Option<ActionKey>,
}

/// A hook's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum HookVerdict {
    /// Answer the task with this result; it is not routed.
    Intercept(Box<reapi::ActionResult>),
    /// Refuse the task, saying why.
    Reject(String),
    /// Let the next hook (or the router) decide.
    Pass,
}

/// One step of the chain.
pub trait PreRouteHook: Send + Sync + std::fmt::Debug {
    /// Its name, for logs and `lardon cluster status`.
    fn name(&self) -> &str;
    /// Its verdict on `task` at `now`.
    fn check(&self, task: &PreRoute, now: Instant) -> HookVerdict;
}

/// The hooks, in order.
#[derive(Debug, Default)]
pub struct HookChain {
    hooks: Vec<Box<dyn PreRouteHook>>,
}

impl HookChain {
    /// An empty chain (everything passes).
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `hook`.
    #[must_use]
    pub fn with(mut self, hook: Box<dyn PreRouteHook>) -> Self {
        self.hooks.push(hook);
        self
    }

    /// The first verdict that is not [`HookVerdict::Pass`], with the
    /// hook's name; `None` when every hook passes.
    #[must_use]
    pub fn check(&self, task: &PreRoute, now: Instant) -> Option<(&str, HookVerdict)> {
        self.hooks.iter().find_map(|h| match h.check(task, now) {
            HookVerdict::Pass => None,
            v => Some((h.name(), v)),
        })
    }
}

/// How much each lookup weighs in the hit-rate average (1/20).
pub const HIT_RATE_WEIGHT: f64 = 0.05;

/// The share of cacheable tasks answered from the cache, as an
/// exponentially weighted moving average.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HitRate {
    rate: f64,
    alpha: f64,
}

impl HitRate {
    /// Starts at 0; each observation weighs `alpha` (0–1).
    #[must_use]
    pub fn new(alpha: f64) -> Self {
        HitRate { rate: 0.0, alpha: alpha.clamp(0.0, 1.0) }
    }

    /// The current rate (0–1).
    #[must_use]
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// Counts one lookup.
    pub fn observe(&mut self, hit: bool) {
        let x = if hit { 1.0 } else { 0.0 };
        self.rate += self.alpha * (x - self.rate);
    }

    /// The capacity to advertise for `tokens` agent slots: hits cost no
    /// slot, so at hit rate h every slot serves 1 / (1 − h) tasks. The
    /// rate counts at most 0.9 (a 10× raise), so a run of hits cannot
    /// promise without bound.
    #[must_use]
    pub fn advertised(&self, tokens: u32) -> u32 {
        let h = self.rate.min(0.9);
        // Less a hair: 4 / (1 - 0.9) is 40.000000000000004 in floating point.
        let raised = (f64::from(tokens) / (1.0 - h) - 1e-9).ceil();
        if raised >= f64::from(u32::MAX) { u32::MAX } else { raised as u32 }
    }
}

/// The cache hook: intercepts a cacheable task whose action digest has an
/// unexpired result with exit code 0 (a failure is not worth replaying).
#[derive(Debug)]
pub struct CacheHook {
    cache: Arc<Mutex<ActionCache>>,
    hits: Arc<Mutex<HitRate>>,
}

impl CacheHook {
    /// A hook over `cache`, with a hit-rate average weighing each lookup
    /// 1/20.
    #[must_use]
    pub fn new(cache: Arc<Mutex<ActionCache>>) -> Self {
        CacheHook { cache, hits: Arc::new(Mutex::new(HitRate::new(HIT_RATE_WEIGHT))) }
    }

    /// Where the hook keeps its hit rate: the broker reads it to advertise
    /// its capacity ([`HitRate::advertised`]) while the hook, inside the
    /// chain, updates it.
    #[must_use]
    pub fn hits(&self) -> Arc<Mutex<HitRate>> {
        Arc::clone(&self.hits)
    }

    /// The hit rate so far.
    #[must_use]
    pub fn hit_rate(&self) -> HitRate {
        *self.hits.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl PreRouteHook for CacheHook {
    fn name(&self) -> &str {
        "cache"
    }

    fn check(&self, task: &PreRoute, now: Instant) -> HookVerdict {
        let Some(key) = &task.cacheable else { return HookVerdict::Pass };
        let found = self.cache.lock().unwrap_or_else(PoisonError::into_inner).get(&key.digest, now);
        let hit = found.filter(|r| r.exit_code == 0);
        self.hits.lock().unwrap_or_else(PoisonError::into_inner).observe(hit.is_some());
        match hit {
            Some(r) => HookVerdict::Intercept(Box::new(r)),
            None => HookVerdict::Pass,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::time::Duration;

    use super::*;
    use crate::Capability;

    #[derive(Debug)]
    struct Deny;
    impl PreRouteHook for Deny {
        fn name(&self) -> &str {
            "deny"
        }
        fn check(&self, _: &PreRoute, _: Instant) -> HookVerdict {
            HookVerdict::Reject("quota exceeded".into())
        }
    }

    fn key(arg: &str) -> ActionKey {
        ActionKey::new(&Capability::parse("gcc@13").unwrap(), &["gcc".into(), arg.into()], &[], &[], None)
    }

    #[test]
    fn a_cached_success_is_intercepted_before_later_hooks_and_a_miss_passes_on() {
        let t0 = Instant::now();
        let cache = Arc::new(Mutex::new(ActionCache::new(1 << 10, Duration::from_secs(60))));
        let ok = reapi::ActionResult { exit_code: 0, stdout_raw: b"built".to_vec(), ..Default::default() };
        cache.lock().unwrap().put(&key("a.c").digest, ok.clone(), t0).unwrap();
        cache
            .lock()
            .unwrap()
            .put(&key("bad.c").digest, reapi::ActionResult { exit_code: 1, ..Default::default() }, t0)
            .unwrap();
        let chain = HookChain::new().with(Box::new(CacheHook::new(Arc::clone(&cache)))).with(Box::new(Deny));

        let hit = chain.check(&PreRoute { cacheable: Some(key("a.c")) }, t0).unwrap();
        assert_eq!(hit, ("cache", HookVerdict::Intercept(Box::new(ok))));
        let miss = chain.check(&PreRoute { cacheable: Some(key("b.c")) }, t0).unwrap();
        assert_eq!(
            miss,
            ("deny", HookVerdict::Reject("quota exceeded".into())),
            "a miss passes to the next hook"
        );
        let failed = chain.check(&PreRoute { cacheable: Some(key("bad.c")) }, t0).unwrap();
        assert_eq!(failed.0, "deny", "a cached failure is not replayed");
        let not_cacheable = chain.check(&PreRoute { cacheable: None }, t0).unwrap();
        assert_eq!(not_cacheable.0, "deny");
        assert!(HookChain::new().check(&PreRoute { cacheable: None }, t0).is_none());
    }

    #[test]
    fn the_hit_rate_raises_advertised_capacity_within_a_bound() {
        let mut h = HitRate::new(0.5);
        assert_eq!(h.advertised(4), 4);
        h.observe(true);
        assert!((h.rate() - 0.5).abs() < 1e-9);
        assert_eq!(h.advertised(4), 8);
        for _ in 0..100 {
            h.observe(true);
        }
        assert_eq!(h.advertised(4), 40, "at most 10×");
        h.observe(false);
        assert!(h.rate() < 0.6);
    }
}
