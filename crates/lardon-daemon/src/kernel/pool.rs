//! The compute pool: the CPUs task processes are pinned to. It follows the
//! policy's `cpu_reserve` (docs/DESIGN.md §3): a policy change recomputes
//! it at once, so `resources` and the pinning of the next run agree.
//!
//! Within the pool, a run granted N whole CPUs is pinned to the N CPUs the
//! fewest live runs hold ([`ComputePool::lease`]), so two one-CPU tasks on
//! a two-CPU pool run on different CPUs instead of both wandering over
//! (or, with a stale pool, sharing) one.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use lardon::HostPolicy;
use lardon_host::{CpuLayout, CpuMask, plan_cpu_pool};

/// The host's CPU layout (none on a fake host: nothing is pinned) and the
/// pool the current policy carves out of it.
#[derive(Debug)]
pub(crate) struct ComputePool {
    layout: Option<CpuLayout>,
    state: Mutex<PoolState>,
}

#[derive(Debug, Default)]
struct PoolState {
    pool: Option<CpuMask>,
    /// Live leases per CPU (a CPU that left the pool keeps its count until
    /// its runs end).
    held: BTreeMap<u32, u32>,
}

/// The CPUs one run is pinned to; given back when dropped.
#[derive(Debug)]
pub(crate) struct CpuLease<'a> {
    pool: &'a ComputePool,
    cpus: Option<CpuMask>,
}

impl CpuLease<'_> {
    /// The CPUs to pin to (`None`: not pinned).
    pub(crate) fn cpus(&self) -> Option<CpuMask> {
        self.cpus.clone()
    }
}

impl Drop for CpuLease<'_> {
    fn drop(&mut self) {
        let Some(cpus) = &self.cpus else { return };
        let mut st = self.pool.lock();
        for cpu in &cpus.0 {
            if let Some(n) = st.held.get_mut(cpu) {
                *n = n.saturating_sub(1);
            }
        }
        st.held.retain(|_, n| *n > 0);
    }
}

impl ComputePool {
    /// The pool of `layout` under `policy`; `None` pins nothing.
    pub(crate) fn new(layout: Option<CpuLayout>, policy: &HostPolicy) -> Self {
        let pool = Self::plan(layout.as_ref(), policy);
        ComputePool { layout, state: Mutex::new(PoolState { pool, held: BTreeMap::new() }) }
    }

    fn lock(&self) -> MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn plan(layout: Option<&CpuLayout>, policy: &HostPolicy) -> Option<CpuMask> {
        layout.map(|l| plan_cpu_pool(l, policy.cpu_reserve).compute)
    }

    /// Recomputes the pool for `policy` (call after the Governor accepted it).
    pub(crate) fn apply(&self, policy: &HostPolicy) {
        let pool = Self::plan(self.layout.as_ref(), policy);
        self.lock().pool = pool;
    }

    /// The whole pool.
    pub(crate) fn current(&self) -> Option<CpuMask> {
        self.lock().pool.clone()
    }

    /// Pins a run granted `whole_cpus` CPUs: the `whole_cpus` pool CPUs the
    /// fewest live leases hold (lowest number on ties). A run that declared
    /// no CPU (`0`), or as many as the pool has, gets the whole pool.
    pub(crate) fn lease(&self, whole_cpus: u32) -> CpuLease<'_> {
        let mut st = self.lock();
        let Some(pool) = st.pool.clone() else { return CpuLease { pool: self, cpus: None } };
        if whole_cpus == 0 || whole_cpus >= pool.count() {
            let cpus = Some(pool);
            drop(st);
            return CpuLease { pool: self, cpus };
        }
        let mut by_load: Vec<(u32, u32)> =
            pool.0.iter().map(|&c| (st.held.get(&c).copied().unwrap_or(0), c)).collect();
        by_load.sort_unstable();
        let chosen: std::collections::BTreeSet<u32> =
            by_load.into_iter().take(whole_cpus as usize).map(|(_, c)| c).collect();
        for &cpu in &chosen {
            *st.held.entry(cpu).or_default() += 1;
        }
        CpuLease { pool: self, cpus: Some(CpuMask(chosen)) }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use lardon::HostProfile;

    use super::*;

    /// 4 CPUs on 2 cores with SMT siblings (0,2) and (1,3).
    fn smt_layout() -> CpuLayout {
        let all: BTreeSet<u32> = (0..4).collect();
        let cores: BTreeMap<u32, (u64, u64)> = [(0, (0, 0)), (1, (0, 1)), (2, (0, 0)), (3, (0, 1))].into();
        CpuLayout { online: all.clone(), allowed: all, cores: Some(cores) }
    }

    fn policy(reserve: u32) -> HostPolicy {
        let mut p = HostPolicy::default_for(&HostProfile::new(16 << 30, 4));
        p.cpu_reserve = reserve;
        p
    }

    fn cpus(pool: &ComputePool) -> Vec<u32> {
        pool.current().map(|m| m.0.into_iter().collect()).unwrap_or_default()
    }

    #[test]
    fn a_policy_change_recomputes_the_pool_at_once() {
        let pool = ComputePool::new(Some(smt_layout()), &policy(2));
        assert_eq!(cpus(&pool), vec![0, 2], "the highest core (1,3) is reserved whole");
        pool.apply(&policy(0));
        assert_eq!(cpus(&pool), vec![0, 1, 2, 3], "cpu_reserve = 0 frees every CPU");
        pool.apply(&policy(1));
        assert_eq!(cpus(&pool), vec![0, 2], "one CPU rounds up to its whole core");
    }

    fn leased(lease: &CpuLease<'_>) -> Vec<u32> {
        lease.cpus().map(|m| m.0.into_iter().collect()).unwrap_or_default()
    }

    #[test]
    fn one_cpu_runs_get_different_cpus_and_give_them_back() {
        let pool = ComputePool::new(Some(smt_layout()), &policy(0));
        let a = pool.lease(1);
        let b = pool.lease(1);
        assert_eq!((leased(&a), leased(&b)), (vec![0], vec![1]), "two one-CPU runs never share a CPU");
        let c = pool.lease(2);
        assert_eq!(leased(&c), vec![2, 3], "the two free CPUs");
        drop(a);
        assert_eq!(leased(&pool.lease(1)), vec![0], "CPU 0 was given back");
        assert_eq!(leased(&pool.lease(0)), vec![0, 1, 2, 3], "no CPU declared: the whole pool");
        assert_eq!(leased(&pool.lease(9)), vec![0, 1, 2, 3], "more than the pool: the whole pool");
    }

    #[test]
    fn a_lease_follows_a_policy_change() {
        let pool = ComputePool::new(Some(smt_layout()), &policy(2));
        assert_eq!(leased(&pool.lease(1)), vec![0]);
        pool.apply(&policy(0));
        let held = pool.lease(1);
        assert_eq!(leased(&held), vec![0]);
        assert_eq!(leased(&pool.lease(1)), vec![1], "CPU 1 joined the pool at once");
    }

    #[test]
    fn a_fake_host_pins_nothing() {
        let pool = ComputePool::new(None, &policy(1));
        pool.apply(&policy(0));
        assert!(pool.current().is_none());
        assert!(pool.lease(1).cpus().is_none());
    }
}
