//! # Implementation details
//!
//! The Governor's state, touched only under its one lock: policy, active
//! reservations and their totals, pressure, history and ramps.
//!
//! # Invariants (checked by `check` and `debug_assert!`s in debug builds,
//! loom models included)
//! - every total equals the sum over active reservations;
//! - reserved host memory never exceeds the static budget
//!   (`total − reserve`), reserved CPUs never exceed the compute pool,
//!   slots never exceed their capacity;
//! - a reservation id is issued once and released at most once (a second
//!   release finds nothing and changes nothing);
//! - the generation moves only in `Ledger::changed`, which names what
//!   changed; the accounting fields are private, so no caller can change a
//!   reservation without it.

use std::collections::HashMap;
use std::task::Waker;

use crate::contract::Contract;
use crate::envelope::{MAX_RAMPS, Ramp};
use crate::estimate::Class;
use crate::group::GroupName;
use crate::history::History;
use crate::policy::{HostPolicy, HostProfile, PolicyError};
use crate::pressure::{Floors, PressureLevel, PressureMachine, PsiSignal};
use crate::snapshot::Snapshot;

use super::active::{Active, Key};
use super::load::OwnLoad;
use super::packing::Contention;

mod gates;
mod groups;

pub(crate) use groups::GroupBook;

/// What one active reservation holds.
#[derive(Debug, Clone)]
pub(crate) struct Held {
    pub(crate) charged_memory: u64,
    pub(crate) gpu_memory: u64,
    pub(crate) gpu_devices: Vec<u32>,
    pub(crate) cpu_millis: u32,
    pub(crate) io_slots: u32,
    pub(crate) usage: Option<u64>,
    /// Whether it was granted a scratch lease (only then is there one to
    /// end at its release).
    pub(crate) leased: bool,
    /// The group it counts against (docs/DESIGN.md §4, "Group limits").
    pub(crate) group: Option<GroupName>,
}

impl Held {
    fn unmaterialised(&self) -> u64 {
        self.usage.map_or(self.charged_memory, |u| self.charged_memory.saturating_sub(u))
    }
}

/// Sums over active reservations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Totals {
    pub(crate) memory: u64,
    pub(crate) unmaterialised: u64,
    pub(crate) cpu_millis: u64,
    pub(crate) io_slots: u32,
    pub(crate) gpu_memory: Vec<u64>,
    pub(crate) gpu_slots: Vec<u32>,
}

/// What changed, for [`Ledger::changed`]: every generation bump names one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// A reservation was made or released, or its usage report changed
    /// what is available (bumped by the ledger itself).
    Reservations,
    /// A new host sample changed a budget (bumped by the ledger itself).
    Sample,
    /// The policy was replaced (bumped by the ledger itself).
    Policy,
    /// A run was recorded and changed what a class has learned.
    History,
    /// A sequence's throughput moved a capability ramp.
    Ramp,
    /// A scratch volume was added, removed, drained or changed state.
    Volume,
    /// A group's limits were set or removed.
    Groups,
}

/// The accounting fields (`active`, `totals`, `next_id`, `generation`) are
/// private: reservations change only through [`Ledger::hold`],
/// [`Ledger::release`] and [`Ledger::report_usage`], and the generation
/// moves only in [`Ledger::changed`].
#[derive(Debug)]
pub(crate) struct Ledger {
    pub(crate) policy: HostPolicy,
    pub(crate) profile: HostProfile,
    active: Active,
    totals: Totals,
    /// Per-group limits and holdings (private like `totals`: changed only
    /// by hold, release and `set_group_limits`).
    groups: HashMap<GroupName, GroupBook>,
    next_id: u64,
    generation: u64,
    /// The generation last mirrored to `Shared::generation` (only ever
    /// written under this lock, so comparing here replaces a read-modify-
    /// write of the atomic on every publish).
    published: u64,
    pub(crate) pressure: PressureMachine,
    last_sample: Option<Snapshot>,
    budget_fingerprint: Option<Fingerprint>,
    largest_batch: u64,
    /// Lardon's own CPUs averaged like the 1-minute load (the load gate).
    own_load: OwnLoad,
    pub(crate) history: History,
    /// The estimates waiting for memory (batch choice, `packing.rs`).
    pub(crate) contention: Contention,
    pub(crate) ramps: HashMap<(Class, usize), Ramp>,
    ramp_clock: u64,
    pub(crate) volumes: Vec<super::volumes::Volume>,
    /// Threads blocked in `wait_for_change` (they count themselves in and
    /// out under the lock).
    waiters: usize,
    /// Async waiters (and the queue dispatcher) to wake at the next change,
    /// registered under the lock that every change is made under.
    wakers: Vec<Waker>,
}

/// What a host sample changes about budgets; a new sample bumps the
/// generation only when this differs.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Fingerprint {
    level: PressureLevel,
    batch_target: Option<u64>,
    memory: u64,
    gates: [bool; 4],
    gpus: Vec<Option<u64>>,
    cgroup_cpu: Option<(Option<u32>, Option<u32>)>,
}

impl Ledger {
    pub(crate) fn new(policy: HostPolicy, profile: HostProfile) -> Self {
        let gpus = profile.gpus.len();
        Ledger {
            policy,
            profile,
            active: Active::default(),
            totals: Totals { gpu_memory: vec![0; gpus], gpu_slots: vec![0; gpus], ..Totals::default() },
            groups: HashMap::new(),
            next_id: 1,
            generation: 0,
            published: 0,
            pressure: PressureMachine::default(),
            last_sample: None,
            budget_fingerprint: None,
            largest_batch: 1,
            own_load: OwnLoad::default(),
            history: History::default(),
            contention: Contention::default(),
            ramps: HashMap::new(),
            ramp_clock: 0,
            volumes: Vec::new(),
            waiters: 0,
            wakers: Vec::new(),
        }
    }

    /// The one place the generation moves (docs/DESIGN.md §4: on every
    /// reservation made or released, recorded batch, policy change, scratch
    /// change and host sample that changes a budget; never on WAIT or
    /// REJECT).
    pub(crate) fn changed(&mut self, what: Change) {
        let _ = what; // named at every call site, for the reader
        self.generation += 1;
    }

    /// The generation (every change up to it is in this ledger).
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// The generation to mirror to the lock-free reader, if it moved since
    /// the last call (which it then records as published).
    pub(crate) fn unpublished(&mut self) -> Option<u64> {
        if self.published == self.generation {
            return None;
        }
        self.published = self.generation;
        Some(self.generation)
    }

    /// Reservations active now.
    pub(crate) fn reservations(&self) -> usize {
        self.active.len()
    }

    /// Whether reservation `key` is active.
    pub(crate) fn is_active(&self, key: Key) -> bool {
        self.active.contains(key)
    }

    /// Sums over the active reservations.
    #[inline]
    pub(crate) fn totals(&self) -> &Totals {
        &self.totals
    }

    /// The last host sample observed.
    pub(crate) fn last_sample(&self) -> Option<&Snapshot> {
        self.last_sample.as_ref()
    }

    /// Notes the largest `batch_max` seen (the YELLOW halving starts from
    /// the largest batch granted since the last GREEN, docs/DESIGN.md §5).
    #[inline]
    pub(crate) fn note_batch_max(&mut self, batch_max: u64) {
        self.largest_batch = self.largest_batch.max(batch_max);
    }

    /// A thread starts (`true`) or stops blocking in `wait_for_change`.
    pub(crate) fn count_waiter(&mut self, waiting: bool) {
        if waiting {
            self.waiters += 1;
        } else {
            debug_assert!(self.waiters > 0, "a waiter left that never came");
            self.waiters = self.waiters.saturating_sub(1);
        }
    }

    /// Registers `waker` for the next change (once: a waker that wakes the
    /// same task is not added twice).
    pub(crate) fn register_waker(&mut self, waker: &Waker) {
        if !self.wakers.iter().any(|w| w.will_wake(waker)) {
            self.wakers.push(waker.clone());
        }
    }

    /// The wakers to wake for a change, unregistered, except one that wakes
    /// the same task as `scanner`: it stays registered (that waiter's own
    /// scan saw the change, see `Shared::publish_except`).
    pub(crate) fn take_wakers(&mut self, scanner: Option<&Waker>) -> Vec<Waker> {
        match scanner {
            Some(keep) if self.wakers.iter().any(|w| w.will_wake(keep)) => {
                // `Vec::new` does not allocate until a waker is kept out:
                // the common list is the scanner's waker alone.
                let mut fire = Vec::new();
                self.wakers.retain(|w| {
                    let keep = w.will_wake(keep);
                    if !keep {
                        fire.push(w.clone());
                    }
                    keep
                });
                fire
            }
            _ => std::mem::take(&mut self.wakers),
        }
    }

    /// Whether a waker other than one that wakes the same task as
    /// `scanner` is registered: exactly when [`Ledger::take_wakers`] would
    /// hand back a waker to wake (registration keeps no two that wake the
    /// same task).
    #[inline]
    pub(crate) fn has_wakers_besides(&self, scanner: Option<&Waker>) -> bool {
        match (self.wakers.as_slice(), scanner) {
            ([], _) => false,
            ([only], Some(keep)) => !only.will_wake(keep),
            _ => true,
        }
    }

    /// Threads blocked in `wait_for_change` now.
    pub(crate) fn waiters(&self) -> usize {
        self.waiters
    }

    /// Replaces the policy if it is valid for the host and still covers
    /// every active reservation.
    pub(crate) fn set_policy(&mut self, policy: HostPolicy) -> Result<(), PolicyError> {
        policy.validate(&self.profile)?;
        self.covers(&policy)?;
        self.policy = policy;
        self.changed(Change::Policy);
        self.check();
        Ok(())
    }

    /// Host memory that may ever be reserved: `RAM − reserve`. (Our
    /// cgroup's limit lowers what is available now, through the snapshot,
    /// not this static budget, so a limit change can never make existing
    /// reservations exceed it.)
    #[inline]
    pub(crate) fn static_memory_budget(&self) -> u64 {
        self.profile.total_memory.saturating_sub(self.policy.memory_reserve)
    }

    /// The compute pool in thousandths.
    #[inline]
    pub(crate) fn cpu_pool_millis(&self) -> u64 {
        u64::from(self.policy.compute_cpus(&self.profile)) * 1000
    }

    /// CPUs free now, in thousandths: the pool lowered by our cgroup's CPU
    /// quota and cpuset when the last sample knows them, minus what is held.
    #[inline(always)]
    pub(crate) fn cpu_available_millis(&self) -> u64 {
        let mut pool = self.cpu_pool_millis();
        if let Some(cg) = self.last_sample.as_ref().and_then(|s| s.cgroup.as_ref()) {
            if let Some(q) = cg.cpu_quota_millis {
                pool = pool.min(u64::from(q).max(1000));
            }
            if let Some(n) = cg.cpuset_cpus {
                pool = pool.min(u64::from(n.max(1)) * 1000);
            }
        }
        pool.saturating_sub(self.totals.cpu_millis)
    }

    /// Memory free for a new reservation against `snap` (docs/DESIGN.md §4 step 8).
    #[inline]
    pub(crate) fn memory_available(&self, snap: &Snapshot) -> u64 {
        let by_static = self.static_memory_budget().saturating_sub(self.totals.memory);
        let by_host = snap
            .effective_memory_available()
            .saturating_sub(self.policy.memory_reserve)
            .saturating_sub(self.totals.unmaterialised);
        by_static.min(by_host)
    }

    pub(crate) fn gpu_reserve(&self, index: u32) -> u64 {
        self.policy.gpu_memory_reserve.get(index as usize).copied().unwrap_or(0)
    }

    /// Free GPU memory on device `index`; `None` when unknown.
    pub(crate) fn gpu_available(&self, index: u32, snap: &Snapshot) -> Option<u64> {
        let gpu = self.profile.gpus.iter().find(|g| g.index == index)?;
        let reserve = self.gpu_reserve(index);
        let reserved = self.totals.gpu_memory.get(index as usize).copied().unwrap_or(0);
        let by_host = snap.gpu_free(index)?.saturating_sub(reserve).saturating_sub(reserved);
        let by_static = gpu.vram_total.map(|v| v.saturating_sub(reserve).saturating_sub(reserved));
        Some(by_static.map_or(by_host, |s| s.min(by_host)))
    }

    pub(crate) fn gpu_slot_free(&self, index: u32) -> bool {
        self.totals.gpu_slots.get(index as usize).copied().unwrap_or(0) < self.policy.gpu_slots
    }

    pub(crate) fn floors(&self) -> Floors {
        Floors {
            emergency: self.policy.emergency_floor,
            caution_band: self.policy.memory_caution,
            reserve_signal: if self.policy.memory_caution.is_none() {
                Some(self.policy.memory_reserve)
            } else {
                None
            },
        }
    }

    /// Feeds a new host sample to the pressure machine; moves the
    /// generation when budgets changed.
    pub(crate) fn observe_sample(&mut self, snap: &Snapshot) {
        self.own_load.advance(
            snap.captured_at,
            self.granted_cpus(),
            snap.own_cpu,
            f64::from(self.profile.logical_cpus),
        );
        let gates = self.gates(snap);
        // Only memory PSI is a pressure signal. CPU PSI gates admission
        // (busy CPUs say nothing about memory, and RED would also shrink
        // every batch); IO PSI gates IO-slot work only, or one slow disk
        // would throttle every CPU- and memory-bound task.
        let psi = PsiSignal {
            memory: gates[2].then(|| (snap.pressure.memory.unwrap_or(0.0), self.policy.psi_memory)),
        };
        self.pressure.observe(snap, psi, self.floors(), self.largest_batch);
        self.last_sample = Some(snap.clone());
        let fp = Fingerprint {
            level: self.pressure.level(),
            batch_target: self.pressure.batch_target(),
            memory: snap.effective_memory_available(),
            gates,
            gpus: snap.gpus.iter().map(|g| g.free).collect(),
            cgroup_cpu: snap.cgroup.map(|c| (c.cpu_quota_millis, c.cpuset_cpus)),
        };
        if self.pressure.level() != PressureLevel::Green {
            for ramp in self.ramps.values_mut() {
                ramp.reset_unless_fresh();
            }
        }
        let changed = self.budget_fingerprint.as_ref() != Some(&fp);
        self.budget_fingerprint = Some(fp);
        if changed {
            self.changed(Change::Sample);
        }
    }

    /// Whether `snap` is a host sample not yet observed.
    #[inline]
    pub(crate) fn is_new_sample(&self, snap: &Snapshot) -> bool {
        self.last_sample.as_ref().is_none_or(|last| snap.captured_at > last.captured_at)
    }

    /// Holds a granted `contract` (taking its scratch lease, whose path it
    /// fills in); returns its key.
    pub(crate) fn hold(&mut self, contract: &mut Contract) -> Key {
        let id = self.issue();
        if let Some(grant) = contract.scratch.as_mut() {
            grant.path = self.take_lease(grant, id).unwrap_or_default();
        }
        let held = Held {
            charged_memory: contract.charged_memory,
            gpu_memory: contract.gpu_memory,
            gpu_devices: contract.gpu_devices.clone(),
            cpu_millis: contract.cpu_millis,
            io_slots: contract.io_slots,
            usage: None,
            leased: contract.scratch.is_some(),
            group: contract.group.clone(),
        };
        self.hold_as(id, contract.batch, held)
    }

    /// Holds a grant of host memory, CPUs and IO slots only (no GPU, no
    /// scratch: the fast path's), of a batch of `batch`; returns its key.
    #[inline]
    pub(crate) fn hold_plain(
        &mut self,
        batch: u64,
        charged_memory: u64,
        cpu_millis: u32,
        io_slots: u32,
        group: Option<GroupName>,
    ) -> Key {
        let id = self.issue();
        let held = Held {
            charged_memory,
            gpu_memory: 0,
            gpu_devices: Vec::new(),
            cpu_millis,
            io_slots,
            usage: None,
            leased: false,
            group,
        };
        self.hold_as(id, batch, held)
    }

    /// The next reservation sequence number (issued once).
    fn issue(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Holds `held` as reservation `id`, of a batch of `batch`.
    #[inline]
    fn hold_as(&mut self, id: u64, batch: u64, held: Held) -> Key {
        // What YELLOW halves is the largest batch granted within the
        // pressure target: a larger one (the critical floor, packing.rs)
        // would otherwise lift the next halving for every class.
        self.pressure.note_grant(batch.min(self.pressure.batch_target().unwrap_or(u64::MAX)));
        let t = &mut self.totals;
        t.memory += held.charged_memory;
        t.unmaterialised += held.unmaterialised();
        t.cpu_millis += u64::from(held.cpu_millis);
        t.io_slots += held.io_slots;
        for &d in &held.gpu_devices {
            if let Some(m) = t.gpu_memory.get_mut(d as usize) {
                *m += held.gpu_memory;
            }
            if let Some(s) = t.gpu_slots.get_mut(d as usize) {
                *s += 1;
            }
        }
        if held.group.is_some() {
            self.book_hold(&held);
        }
        let key = self.active.insert(id, held);
        self.changed(Change::Reservations);
        self.check();
        key
    }

    /// Releases `key`; `None` when it is not active (nothing changes), else
    /// the scratch lease that ended with it, to clean up outside the lock
    /// (boxed: the common release has none, and returns one word).
    #[inline]
    pub(crate) fn release(&mut self, key: Key) -> Option<Option<Box<super::volumes::LeaseEnd>>> {
        debug_assert!(key.seq < self.next_id, "released an id never issued");
        // Released once: a second release finds nothing and changes nothing.
        let held = self.active.remove(key)?;
        // Only a reservation granted a lease can have one to end.
        let lease = if held.leased { self.end_lease(key.seq).map(Box::new) } else { None };
        debug_assert!(
            held.leased || !self.volumes.iter().any(|v| v.leases.contains_key(&key.seq)),
            "a lease of a reservation granted none"
        );
        let t = &mut self.totals;
        t.memory -= held.charged_memory;
        t.unmaterialised -= held.unmaterialised();
        t.cpu_millis -= u64::from(held.cpu_millis);
        t.io_slots -= held.io_slots;
        for &d in &held.gpu_devices {
            if let Some(m) = t.gpu_memory.get_mut(d as usize) {
                *m -= held.gpu_memory;
            }
            if let Some(s) = t.gpu_slots.get_mut(d as usize) {
                *s -= 1;
            }
        }
        if held.group.is_some() {
            self.book_release(&held);
        }
        self.changed(Change::Reservations);
        self.check();
        Some(lease)
    }

    /// Records measured usage of `key`; false when it is not active.
    pub(crate) fn report_usage(&mut self, key: Key, bytes: u64) -> bool {
        let Some(held) = self.active.get_mut(key) else { return false };
        let before = held.unmaterialised();
        held.usage = Some(bytes);
        let after = held.unmaterialised();
        self.totals.unmaterialised = self.totals.unmaterialised - before + after;
        if before != after {
            self.changed(Change::Reservations);
        }
        self.check();
        true
    }

    /// Whether `policy` still covers every active reservation.
    pub(crate) fn covers(&self, policy: &HostPolicy) -> Result<(), PolicyError> {
        let mut probe = Ledger::new(policy.clone(), self.profile.clone());
        probe.last_sample = self.last_sample.clone();
        let not = |what: String| Err(PolicyError::DoesNotCover(what));
        if self.totals.memory > probe.static_memory_budget() {
            return not(format!("{} B of memory reserved", self.totals.memory));
        }
        if self.totals.cpu_millis > probe.cpu_pool_millis() {
            return not(format!("{} CPUs reserved", crate::format_cpus(self.totals.cpu_millis as u32)));
        }
        if self.totals.io_slots > policy.io_slots {
            return not(format!("{} IO slots held", self.totals.io_slots));
        }
        for gpu in &self.profile.gpus {
            let i = gpu.index as usize;
            if self.totals.gpu_slots.get(i).copied().unwrap_or(0) > policy.gpu_slots {
                return not(format!("GPU {} slots held", gpu.index));
            }
            let reserve = policy.gpu_memory_reserve.get(i).copied().unwrap_or(0);
            if let Some(vram) = gpu.vram_total
                && !gpu.unified
                && self.totals.gpu_memory.get(i).copied().unwrap_or(0) > vram.saturating_sub(reserve)
            {
                return not(format!("GPU {} memory reserved", gpu.index));
            }
        }
        Ok(())
    }

    pub(crate) fn ramp_for(&mut self, key: &(Class, usize), make: impl FnOnce() -> Ramp) -> &mut Ramp {
        self.ramp_clock += 1;
        if !self.ramps.contains_key(key) && self.ramps.len() >= MAX_RAMPS {
            let oldest = self.ramps.iter().min_by_key(|(_, r)| r.touched).map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                self.ramps.remove(&oldest);
            }
        }
        let clock = self.ramp_clock;
        let ramp = self.ramps.entry(key.clone()).or_insert_with(make);
        ramp.touched = clock;
        ramp
    }

    /// Recomputes every total from the active set (debug builds only).
    pub(crate) fn check(&self) {
        #[cfg(debug_assertions)]
        {
            let mut sum = Totals {
                gpu_memory: vec![0; self.profile.gpus.len()],
                gpu_slots: vec![0; self.profile.gpus.len()],
                ..Totals::default()
            };
            for h in self.active.values() {
                sum.memory += h.charged_memory;
                sum.unmaterialised += h.unmaterialised();
                sum.cpu_millis += u64::from(h.cpu_millis);
                sum.io_slots += h.io_slots;
                for &d in &h.gpu_devices {
                    sum.gpu_memory[d as usize] += h.gpu_memory;
                    sum.gpu_slots[d as usize] += 1;
                }
            }
            debug_assert_eq!(sum, self.totals, "totals drifted from the active reservations");
            self.check_groups();
            debug_assert!(self.totals.memory <= self.static_memory_budget(), "memory over the static budget");
            debug_assert!(self.totals.cpu_millis <= self.cpu_pool_millis(), "CPUs over the pool");
            debug_assert!(self.totals.io_slots <= self.policy.io_slots, "IO slots over capacity");
        }
    }
}
