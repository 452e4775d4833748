//! Property tests of the Governor (docs/DESIGN.md §2–§6): random
//! sequences of reserve / release / record_run (completed and killed runs) / set_policy / new host
//! samples never grant more than the budget, never release twice, keep the
//! reported totals equal to the contracts the test still holds, and WAIT or
//! REJECT never move the generation.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use lardon::{
    Availability, CgroupSample, Class, Contract, DecisionKind, Estimate, FakeClock, FakeProbe, Governor,
    GpuSample, HostPolicy, HostProfile, MonoTime, Pressure, Probe, ReleaseError, Reservation, ReservationId,
    RunOutcome, RunRecord, Snapshot, SwapCounters,
};
use proptest::prelude::*;
use proptest::sample::Index;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
const TOTAL: u64 = 16 * GIB;
const VRAM: u64 = 8 * GIB;

/// 16 GiB, 8 logical CPUs, two dedicated 8 GiB GPUs.
fn profile() -> HostProfile {
    HostProfile::new(TOTAL, 8).with_gpu(Some(VRAM), false).with_gpu(Some(VRAM), false)
}

// ---- Operations -----------------------------------------------------------

#[derive(Debug, Clone)]
struct EstimateSpec {
    memory: u64,
    per_item: u64,
    gpu_memory: u64,
    gpu_per_item: u64,
    batch_min: u64,
    batch_max: u64,
    cpu_millis: u32,
    exact: bool,
    gpu_slots: u32,
    io_slots: u32,
    scratch: u64,
    class: &'static str,
}

impl EstimateSpec {
    fn build(&self) -> Estimate {
        let mut b = Estimate::builder()
            .memory(self.memory)
            .memory_per_item(self.per_item)
            .gpu_memory(self.gpu_memory)
            .gpu_memory_per_item(self.gpu_per_item)
            .batch(self.batch_min, self.batch_max)
            .cpu_millis(self.cpu_millis)
            .gpu_slots(self.gpu_slots)
            .io_slots(self.io_slots)
            .scratch(self.scratch)
            .class(self.class);
        if self.exact {
            b = b.cpus_exact();
        }
        b.build()
    }
}

#[derive(Debug, Clone, Copy)]
enum Via {
    /// `Governor::sample()` then `reserve_available` (same host sample).
    Available,
    /// `reserve` against a snapshot taken now and observed first.
    Fresh,
    /// `reserve` against the last snapshot the test took (possibly stale).
    Old,
}

#[derive(Debug, Clone)]
struct SampleSpec {
    advance_ms: u64,
    memory_available: u64,
    swap_in: u64,
    swap_out: u64,
    psi_cpu: Option<f64>,
    psi_memory: Option<f64>,
    psi_io: Option<f64>,
    load: f64,
    gpu_free: [Option<u64>; 2],
    cgroup: Option<(Option<u64>, Option<u32>)>,
    sample_now: bool,
}

#[derive(Debug, Clone)]
struct PolicySpec {
    memory_reserve: u64,
    floor_fraction: u8,
    caution: Option<u64>,
    cpu_reserve: u32,
    gpu_reserve: Vec<u64>,
    max_load_ratio: f64,
    psi_cpu: f64,
    io_slots: u32,
    gpu_slots: u32,
    max_running: Option<u32>,
}

impl PolicySpec {
    fn build(&self) -> HostPolicy {
        let mut p = HostPolicy::default_for(&profile());
        p.memory_reserve = self.memory_reserve;
        p.emergency_floor = match self.floor_fraction {
            0 => 0,
            1 => self.memory_reserve / 2,
            2 => self.memory_reserve,
            _ => self.memory_reserve + 1, // invalid
        };
        p.memory_caution = self.caution;
        p.cpu_reserve = self.cpu_reserve;
        p.gpu_memory_reserve = self.gpu_reserve.clone();
        p.max_load_ratio = Some(self.max_load_ratio);
        p.psi_cpu = self.psi_cpu;
        p.io_slots = self.io_slots;
        p.gpu_slots = self.gpu_slots;
        p.max_running = self.max_running;
        p
    }
}

#[derive(Debug, Clone)]
enum Op {
    Reserve(EstimateSpec, Via),
    DropHandle(Index),
    ReleaseHandle(Index),
    GovernorRelease(Index),
    ReleaseId(Index),
    ReleaseIdAgain(Index),
    ReleaseZombie(Index),
    DropZombie(Index),
    ReportUsage(Index, u64),
    /// Class, items (`None`: unbatched), wall ms, outcome.
    Record(&'static str, Option<u64>, u64, RunOutcome),
    SetPolicy(PolicySpec),
    Sample(SampleSpec),
}

/// Completions with or without a peak, and kills (limit 0 included: it
/// carries nothing).
fn outcome() -> impl Strategy<Value = RunOutcome> {
    prop_oneof![
        Just(RunOutcome::Completed { peak: None }),
        (0..8 * GIB).prop_map(|p| RunOutcome::Completed { peak: Some(p) }),
        (0..8 * GIB).prop_map(|limit| RunOutcome::KilledAtLimit { limit }),
    ]
}

const CLASSES: [&str; 4] = ["default", "render", "ml.train", "Bad Class!"];

fn class() -> impl Strategy<Value = &'static str> {
    prop_oneof![30 => (0usize..3).prop_map(|i| CLASSES[i]), 1 => Just(CLASSES[3])]
}

fn bytes(max: u64) -> impl Strategy<Value = u64> {
    prop_oneof![1 => Just(0u64), 3 => 0..=max]
}

fn estimate() -> impl Strategy<Value = EstimateSpec> {
    (
        (prop_oneof![40 => bytes(3 * GIB), 1 => Just(u64::MAX / 2)], bytes(256 * MIB), 0u64..5, 0u64..60),
        (bytes(3 * GIB), prop_oneof![2 => Just(0u64), 1 => bytes(GIB)]),
        (prop_oneof![1 => Just(0u32), 30 => 1u32..2500], prop_oneof![4 => Just(false), 1 => Just(true)]),
        (
            prop_oneof![3 => Just(0u32), 2 => 1u32..3, 1 => Just(3u32)],
            prop_oneof![3 => Just(0u32), 1 => 1u32..3],
        ),
        (prop_oneof![30 => Just(0u64), 1 => 1u64..GIB], class()),
    )
        .prop_map(
            |(
                (memory, per_item, batch_min, span),
                (gpu_memory, gpu_per_item),
                (cpu_millis, exact),
                (gpu_slots, io_slots),
                (scratch, class),
            )| {
                // batch_min 0 (invalid) one time in 5 by construction; batch_max
                // below batch_min (invalid) when span < 2.
                let batch_max = (batch_min + span).saturating_sub(2);
                // GPU bytes without a GPU slot (invalid) now and then.
                let with_gpu_bytes = gpu_slots > 0 || span % 13 == 0;
                EstimateSpec {
                    memory,
                    per_item,
                    gpu_memory: if with_gpu_bytes { gpu_memory } else { 0 },
                    gpu_per_item: if with_gpu_bytes { gpu_per_item } else { 0 },
                    batch_min: if span % 9 == 0 { 0 } else { batch_min.max(1) },
                    batch_max,
                    cpu_millis,
                    exact,
                    gpu_slots,
                    io_slots,
                    scratch,
                    class,
                }
            },
        )
}

fn via() -> impl Strategy<Value = Via> {
    prop_oneof![Just(Via::Available), Just(Via::Fresh), Just(Via::Old)]
}

fn psi(threshold: f64) -> impl Strategy<Value = Option<f64>> {
    prop_oneof![6 => Just(Some(0.0)), 1 => Just(None), 1 => (0.0..(threshold * 1.5)).prop_map(Some)]
}

fn sample() -> impl Strategy<Value = SampleSpec> {
    (
        (prop_oneof![8 => 0u64..400, 1 => 900u64..1200], prop_oneof![5 => 8 * GIB..=TOTAL, 2 => 0..=TOTAL]),
        (prop_oneof![15 => Just(0u64), 1 => 1u64..4], prop_oneof![15 => Just(0u64), 1 => 1u64..4]),
        (psi(20.0), psi(1.0), psi(80.0), prop_oneof![6 => Just(0.0), 1 => 0.0f64..10.0]),
        [
            prop_oneof![6 => (0..=VRAM).prop_map(Some), 1 => Just(None)],
            prop_oneof![6 => (0..=VRAM).prop_map(Some), 1 => Just(None)],
        ],
        prop_oneof![
            6 => Just(None),
            1 => (prop_oneof![Just(None), (4 * GIB..=TOTAL).prop_map(Some)],
                  prop_oneof![Just(None), (500u32..8000).prop_map(Some)]).prop_map(Some)
        ],
        any::<bool>(),
    )
        .prop_map(
            |(
                (advance_ms, memory_available),
                (swap_in, swap_out),
                (pc, pm, pi, load),
                gpu_free,
                cgroup,
                now,
            )| {
                SampleSpec {
                    advance_ms,
                    memory_available,
                    swap_in,
                    swap_out,
                    psi_cpu: pc,
                    psi_memory: pm,
                    psi_io: pi,
                    load,
                    gpu_free,
                    cgroup,
                    sample_now: now,
                }
            },
        )
}

fn policy() -> impl Strategy<Value = PolicySpec> {
    (
        (prop_oneof![6 => 0..=8 * GIB, 1 => 8 * GIB..=TOTAL + GIB], prop_oneof![7 => 0u8..3, 1 => Just(3u8)]),
        (
            prop_oneof![4 => Just(None), 1 => (0..=TOTAL + GIB).prop_map(Some)],
            prop_oneof![12 => 0u32..8, 1 => Just(8u32)],
        ),
        proptest::collection::vec(prop_oneof![3 => 0..=4 * GIB, 1 => 4 * GIB..=VRAM + 1], 0..3),
        (prop_oneof![8 => Just(0.9), 1 => -0.5f64..1.5], prop_oneof![8 => Just(20.0), 1 => -10.0f64..120.0]),
        (
            prop_oneof![1 => Just(0u32), 8 => 1u32..4],
            prop_oneof![1 => Just(0u32), 8 => 1u32..3],
            prop_oneof![3 => Just(None), 1 => (0u32..5).prop_map(Some)],
        ),
    )
        .prop_map(
            |(
                (memory_reserve, floor_fraction),
                (caution, cpu_reserve),
                gpu_reserve,
                (max_load_ratio, psi_cpu),
                (io_slots, gpu_slots, max_running),
            )| PolicySpec {
                memory_reserve,
                floor_fraction,
                caution,
                cpu_reserve,
                gpu_reserve,
                max_load_ratio,
                psi_cpu,
                io_slots,
                gpu_slots,
                max_running,
            },
        )
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => (estimate(), via()).prop_map(|(e, v)| Op::Reserve(e, v)),
        1 => any::<Index>().prop_map(Op::DropHandle),
        1 => any::<Index>().prop_map(Op::ReleaseHandle),
        1 => any::<Index>().prop_map(Op::GovernorRelease),
        1 => any::<Index>().prop_map(Op::ReleaseId),
        2 => any::<Index>().prop_map(Op::ReleaseIdAgain),
        1 => any::<Index>().prop_map(Op::ReleaseZombie),
        1 => any::<Index>().prop_map(Op::DropZombie),
        1 => (any::<Index>(), 0..4 * GIB).prop_map(|(i, b)| Op::ReportUsage(i, b)),
        3 => (class(), prop_oneof![Just(None), (0u64..50).prop_map(Some)], 0u64..5000, outcome())
            .prop_map(|(c, n, ms, outcome)| Op::Record(c, n, ms, outcome)),
        2 => policy().prop_map(Op::SetPolicy),
        4 => sample().prop_map(Op::Sample),
    ]
}

// ---- The model ------------------------------------------------------------

struct World {
    clock: Arc<FakeClock>,
    probe: Arc<FakeProbe>,
    gov: Governor,
    /// Reservations the test holds and believes active.
    held: Vec<Reservation>,
    /// Handles whose reservation was released by id (inactive).
    zombies: Vec<Reservation>,
    /// Ids already released.
    released: Vec<ReservationId>,
    /// The last snapshot the test took from the probe.
    last_snapshot: Snapshot,
    swap: SwapCounters,
    grants: u64,
}

impl World {
    fn new() -> World {
        let clock = Arc::new(FakeClock::new(MonoTime(5_000_000_000)));
        let probe = Arc::new(FakeProbe::new(profile()).stamped_by(clock.clone()));
        let gov = Governor::with_clock(HostPolicy::default_for(&profile()), probe.clone(), clock.clone())
            .expect("default policy is valid");
        let last_snapshot = probe.snapshot().unwrap();
        World {
            clock,
            probe,
            gov,
            held: Vec::new(),
            zombies: Vec::new(),
            released: Vec::new(),
            last_snapshot,
            swap: SwapCounters::default(),
            grants: 0,
        }
    }

    fn contracts(&self) -> impl Iterator<Item = &Contract> {
        self.held.iter().map(Reservation::contract)
    }

    /// Whether `policy` covers what the test holds (the oracle of `set_policy`).
    fn covers(&self, policy: &HostPolicy) -> bool {
        let prof = profile();
        let memory: u64 = self.contracts().map(|c| c.memory).sum();
        let cpus: u64 = self.contracts().map(|c| u64::from(c.cpu_millis)).sum();
        let io: u32 = self.contracts().map(|c| c.io_slots).sum();
        if memory > TOTAL - policy.memory_reserve.min(TOTAL)
            || cpus > u64::from(policy.compute_cpus(&prof)) * 1000
            || io > policy.io_slots
        {
            return false;
        }
        (0..2u32).all(|d| {
            let on: Vec<_> = self.contracts().filter(|c| c.gpu_devices.contains(&d)).collect();
            let reserve = policy.gpu_memory_reserve.get(d as usize).copied().unwrap_or(0);
            on.len() as u64 <= u64::from(policy.gpu_slots)
                && on.iter().map(|c| c.gpu_memory).sum::<u64>() <= VRAM.saturating_sub(reserve)
        })
    }

    /// Invariants checked after every step.
    fn check(&self) {
        let policy = self.gov.policy();
        let prof = profile();
        let a = self.gov.availability();
        assert_eq!(a.generation, self.gov.generation());

        // Reported totals equal the contracts the test holds.
        let memory: u64 = self.contracts().map(|c| c.memory).sum();
        let cpus: u64 = self.contracts().map(|c| u64::from(c.cpu_millis)).sum();
        let io: u32 = self.contracts().map(|c| c.io_slots).sum();
        assert_eq!(a.reservations, self.held.len(), "active reservations");
        assert_eq!(a.memory_reserved, memory, "reserved memory");
        assert_eq!(a.cpu_reserved_millis, cpus, "reserved CPUs");
        assert_eq!(a.io_reserved, io, "reserved IO slots");
        assert_eq!(a.gpus.len(), 2);
        for g in &a.gpus {
            let on: Vec<_> = self.contracts().filter(|c| c.gpu_devices.contains(&g.index)).collect();
            assert_eq!(g.slots_used as usize, on.len(), "GPU {} slots", g.index);
            assert_eq!(g.reserved, on.iter().map(|c| c.gpu_memory).sum::<u64>(), "GPU {} memory", g.index);
            // Never over budget per GPU.
            assert!(g.slots_used <= policy.gpu_slots, "GPU {} slots over policy", g.index);
            assert!(g.reserved <= VRAM - g.reserve, "GPU {} memory over budget", g.index);
        }

        // Never over budget.
        assert!(memory <= TOTAL - policy.memory_reserve, "memory {memory} over budget");
        assert!(cpus <= u64::from(policy.compute_cpus(&prof)) * 1000, "CPUs {cpus} over the pool");
        assert_eq!(a.cpu_pool_millis, u64::from(policy.compute_cpus(&prof)) * 1000);
        assert!(io <= policy.io_slots, "IO {io} over slots");
        for r in &self.held {
            assert!(r.is_valid(), "{} should be active", r.id());
        }
        for z in &self.zombies {
            assert!(!z.is_valid(), "{} should be released", z.id());
        }
    }

    fn unchanged(&self, before: &Availability, what: &str) {
        assert_eq!(&self.gov.availability(), before, "{what} changed the governor");
        assert_eq!(self.gov.generation(), before.generation, "{what} moved the generation");
    }

    fn step(&mut self, op: Op) {
        match op {
            Op::Reserve(spec, via) => self.reserve(&spec, via),
            Op::DropHandle(i) => {
                if self.held.is_empty() {
                    return;
                }
                let g = self.gov.generation();
                drop(self.held.swap_remove(i.index(self.held.len())));
                assert_eq!(self.gov.generation(), g + 1, "a drop releases once");
            }
            Op::ReleaseHandle(i) => {
                if self.held.is_empty() {
                    return;
                }
                let g = self.gov.generation();
                let r = self.held.swap_remove(i.index(self.held.len()));
                let id = r.id();
                r.release().expect("an active reservation releases");
                self.released.push(id);
                assert_eq!(self.gov.generation(), g + 1);
            }
            Op::GovernorRelease(i) => {
                if self.held.is_empty() {
                    return;
                }
                let g = self.gov.generation();
                let r = self.held.swap_remove(i.index(self.held.len()));
                let id = r.id();
                self.gov.release(r).expect("an active reservation releases");
                self.released.push(id);
                assert_eq!(self.gov.generation(), g + 1);
            }
            Op::ReleaseId(i) => {
                if self.held.is_empty() {
                    return;
                }
                let g = self.gov.generation();
                let r = self.held.swap_remove(i.index(self.held.len()));
                self.gov.release_id(r.id()).expect("an active id releases");
                assert_eq!(self.gov.generation(), g + 1);
                assert!(!r.is_valid());
                self.released.push(r.id());
                self.zombies.push(r);
            }
            Op::ReleaseIdAgain(i) => {
                if self.released.is_empty() {
                    return;
                }
                let id = self.released[i.index(self.released.len())];
                let before = self.gov.availability();
                match self.gov.release_id(id) {
                    Err(ReleaseError::NotActive(got)) => assert_eq!(got, id),
                    other => panic!("second release of {id} was not refused: {other:?}"),
                }
                self.unchanged(&before, "a double release by id");
            }
            Op::ReleaseZombie(i) => {
                if self.zombies.is_empty() {
                    return;
                }
                let z = self.zombies.swap_remove(i.index(self.zombies.len()));
                let id = z.id();
                let before = self.gov.availability();
                assert!(matches!(z.release(), Err(ReleaseError::NotActive(got)) if got == id));
                self.unchanged(&before, "release() of a handle released by id");
            }
            Op::DropZombie(i) => {
                if self.zombies.is_empty() {
                    return;
                }
                let before = self.gov.availability();
                drop(self.zombies.swap_remove(i.index(self.zombies.len())));
                self.unchanged(&before, "dropping a handle released by id");
            }
            Op::ReportUsage(i, bytes) => {
                if let Some(r) = self.held.get(i.index(self.held.len().max(1))) {
                    let g = self.gov.generation();
                    r.report_usage(bytes).expect("active");
                    assert!(self.gov.generation() - g <= 1);
                }
                if let Some(z) = self.zombies.first() {
                    let before = self.gov.availability();
                    assert!(z.report_usage(bytes).is_err());
                    self.unchanged(&before, "usage of a released handle");
                }
            }
            Op::Record(class, items, ms, outcome) => {
                let g = self.gov.generation();
                let wall = Duration::from_millis(ms);
                let record = match items {
                    None => RunRecord::unbatched(wall, outcome),
                    Some(n) => RunRecord::batch(n, wall, outcome),
                };
                let changed = self.gov.record_run(&Class::new(class), record);
                assert_eq!(changed, record.is_informative(), "{record:?}");
                let moved = u64::from(changed);
                assert_eq!(self.gov.generation(), g + moved, "a record moves the generation once, if at all");
            }
            Op::SetPolicy(spec) => {
                let policy = spec.build();
                let expected = policy.validate(&profile()).is_ok() && self.covers(&policy);
                let before = self.gov.availability();
                let old = self.gov.policy();
                match self.gov.set_policy(policy.clone()) {
                    Ok(()) => {
                        assert!(expected, "accepted a policy that is invalid or does not cover: {policy:?}");
                        assert_eq!(self.gov.generation(), before.generation + 1);
                        assert_eq!(self.gov.policy(), policy);
                    }
                    Err(e) => {
                        assert!(!expected, "refused a valid covering policy: {e}");
                        self.unchanged(&before, "a refused policy");
                        assert_eq!(self.gov.policy(), old);
                    }
                }
            }
            Op::Sample(s) => self.new_sample(&s),
        }
    }

    fn new_sample(&mut self, s: &SampleSpec) {
        self.clock.advance(Duration::from_millis(s.advance_ms));
        self.swap.pages_in += s.swap_in;
        self.swap.pages_out += s.swap_out;
        let swap = self.swap;
        self.probe.update(|snap| {
            snap.memory_available = s.memory_available;
            snap.memory_free = s.memory_available / 2;
            snap.swap = Some(swap);
            snap.pressure = Pressure { cpu: s.psi_cpu, memory: s.psi_memory, io: s.psi_io };
            snap.load.one = s.load;
            snap.gpus = (0..2).map(|i| GpuSample { index: i, free: s.gpu_free[i as usize] }).collect();
            snap.cgroup = s.cgroup.map(|(limit, quota)| CgroupSample {
                memory_limit: limit,
                memory_usage: limit.map(|_| GIB),
                cpu_quota_millis: quota,
                cpuset_cpus: None,
            });
        });
        if s.sample_now {
            let g = self.gov.generation();
            self.last_snapshot = self.gov.sample().expect("the fake probe answers");
            assert!(self.gov.generation() - g <= 1, "a sample moves the generation at most once");
        }
    }

    fn reserve(&mut self, spec: &EstimateSpec, via: Via) {
        let estimate = spec.build();
        // Observe the sample first so that the generation can only move
        // because of the reservation itself.
        let result = match via {
            Via::Available => {
                self.clock.advance(Duration::from_millis(1));
                self.last_snapshot = self.gov.sample().expect("the fake probe answers");
                let before = self.gov.availability();
                (before, self.gov.reserve_available(&estimate))
            }
            Via::Fresh => {
                self.clock.advance(Duration::from_millis(1));
                let snap = self.probe.snapshot().unwrap();
                self.gov.observe(&snap);
                self.last_snapshot = snap.clone();
                let before = self.gov.availability();
                (before, self.gov.reserve(&estimate, &snap))
            }
            Via::Old => {
                let snap = self.last_snapshot.clone();
                self.gov.observe(&snap);
                let before = self.gov.availability();
                (before, self.gov.reserve(&estimate, &snap))
            }
        };
        let (before, outcome) = result;
        let valid = estimate.validate().is_ok();
        match outcome {
            Ok(r) => {
                assert!(valid, "granted an invalid estimate {spec:?}");
                assert_eq!(self.gov.generation(), before.generation + 1, "a grant moves the generation once");
                assert!(matches!(r.kind(), DecisionKind::Admit | DecisionKind::ReduceBatch));
                let c = r.contract().clone();
                assert!(c.batch >= spec.batch_min && c.batch <= spec.batch_max, "batch {c:?} for {spec:?}");
                // The grant is the learned sizing (the declared one when
                // nothing was learned), never below the declaration.
                let learned = self.gov.learned(&estimate);
                let sized = learned.map_or(estimate.memory_for(c.batch), |l| Some(l.memory_for(c.batch)));
                assert_eq!(Some(c.memory), sized, "grant for {spec:?}, learned {learned:?}");
                assert!(Some(c.memory) >= estimate.memory_for(c.batch));
                assert!(c.cpu_millis >= 1 && c.cpu_millis <= spec.cpu_millis, "cpus {c:?}");
                if spec.exact {
                    assert_eq!(c.cpu_millis, spec.cpu_millis);
                }
                assert!(c.io_slots <= spec.io_slots && (spec.io_slots == 0 || c.io_slots >= 1));
                assert!(c.gpu_devices.len() as u32 <= spec.gpu_slots);
                assert!(spec.gpu_slots == 0 || !c.gpu_devices.is_empty(), "GPU wanted, none granted");
                let mut devices = c.gpu_devices.clone();
                devices.sort_unstable();
                devices.dedup();
                assert_eq!(devices.len(), c.gpu_devices.len(), "a device granted twice");
                assert!(devices.iter().all(|&d| d < 2));
                assert!(c.scratch.is_none(), "no scratch volume, no lease");
                // The grant fits what was available just before it (as of the
                // last host sample, which is the snapshot used unless `Old`).
                if !matches!(via, Via::Old) {
                    self.fits(&c, &before);
                }
                if let Some(cap) = self.gov.policy().max_running {
                    assert!(before.reservations < cap as usize, "max_running exceeded");
                }
                self.grants += 1;
                self.held.push(r);
            }
            Err(d) => {
                assert!(matches!(d.kind(), DecisionKind::Wait | DecisionKind::Reject), "{d}");
                assert!(d.contract().is_none());
                if !valid {
                    assert_eq!(d.kind(), DecisionKind::Reject, "an invalid estimate must be rejected: {d}");
                }
                self.unchanged(&before, "a WAIT/REJECT");
            }
        }
    }

    fn fits(&self, c: &Contract, before: &Availability) {
        {
            assert!(c.memory <= before.memory_available, "memory {} > {}", c.memory, before.memory_available);
            assert!(u64::from(c.cpu_millis) <= before.cpu_available_millis);
            for &d in &c.gpu_devices {
                let g = &before.gpus[d as usize];
                assert!(g.slots_used < g.slots, "GPU {d} had no free slot");
                if let Some(free) = g.available {
                    assert!(c.gpu_memory <= free, "GPU {d}: {} > {free}", c.gpu_memory);
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, max_shrink_iters: 2000, ..ProptestConfig::default() })]

    #[test]
    fn random_operations_keep_the_governor_within_budget(ops in proptest::collection::vec(op(), 1..80)) {
        let mut w = World::new();
        w.check();
        for op in ops {
            w.step(op);
            w.check();
        }
        // Dropping everything leaves nothing behind.
        let World { gov, held, zombies, .. } = w;
        drop(held);
        drop(zombies);
        let a = gov.availability();
        prop_assert_eq!(a.reservations, 0);
        prop_assert_eq!(a.memory_reserved, 0);
        prop_assert_eq!(a.cpu_reserved_millis, 0);
        prop_assert_eq!(a.io_reserved, 0);
        prop_assert!(a.gpus.iter().all(|g| g.reserved == 0 && g.slots_used == 0));
    }
}

/// A reservation is released exactly once whichever way comes first.
#[test]
fn every_second_release_is_refused() {
    let w = World::new();
    let est = Estimate::builder().memory(GIB).gpu_slots(1).gpu_memory(GIB).io_slots(1).build();
    let r = w.gov.reserve_available(&est).expect("fits");
    let id = r.id();
    w.gov.release_id(id).expect("first release");
    let before = w.gov.availability();
    assert!(w.gov.release_id(id).is_err());
    assert!(matches!(r.release(), Err(ReleaseError::NotActive(_))));
    w.unchanged(&before, "second releases");
    w.check();
    assert_eq!(w.grants, 0);
}
