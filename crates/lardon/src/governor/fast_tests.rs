//! The fast path of admission (`fast.rs`) against the full order: on
//! random hosts, policies, ledgers (reservations held, classes learned,
//! memory contended, pressure), estimates, snapshots (observed or new,
//! fresh or stale, edited figures), running counts and holds, a fast grant
//! is exactly the decision the full order gives.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::cell::Cell;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use super::admission::{Hold, evaluate_in_order};
use super::fast;
use super::tests::Rig;
use crate::{
    CgroupSample, Decision, DecisionKind, Estimate, HostProfile, Probe, RunOutcome, RunRecord, Snapshot,
};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// One random situation and the request asked in it.
#[derive(Debug, Clone)]
struct Case {
    gpu: Option<bool>,
    total_gib: u64,
    cpus: u32,
    max_running: Option<u32>,
    io_slots: u32,
    caution: bool,
    held: Vec<(u64, u32)>,
    learned: Option<(u64, u64)>,
    contended: bool,
    sample: Figures,
    query: Query,
    estimate: Request,
    running: usize,
    hold: Option<(u64, u64, u32)>,
    /// Limits of group `g` (running, memory MiB, CPU millis): every other
    /// held reservation and the request are of it.
    group: Option<(Option<u32>, Option<u64>, Option<u64>)>,
}

/// Host figures of a snapshot.
#[derive(Debug, Clone)]
struct Figures {
    available_gib: u64,
    load: f64,
    psi_cpu: Option<f64>,
    psi_memory: Option<f64>,
    psi_io: Option<f64>,
    cgroup: Option<(u64, u32)>,
}

/// Which snapshot the request is asked against.
#[derive(Debug, Clone)]
enum Query {
    /// The observed sample itself.
    Observed,
    /// The observed sample's time with other figures (the same host
    /// sample as far as the ledger knows).
    SameTime(Figures),
    /// A new sample, `ms` later.
    Newer(u64, Figures),
    /// The observed sample, asked `ms` later (1000 is the freshness limit).
    Later(u64),
    /// A sample from the future.
    Future,
}

#[derive(Debug, Clone)]
struct Request {
    memory_mib: u64,
    per_item_mib: u64,
    batch: (u64, u64),
    cpu_millis: u32,
    exact: bool,
    io_slots: u32,
    gpu_slots: u32,
    scratch: bool,
    class: &'static str,
    /// Items left, which raise the target to the critical floor once the
    /// class has a measured run (packing.rs).
    items_left: Option<u64>,
}

fn figures() -> impl Strategy<Value = Figures> {
    let psi = || prop_oneof![2 => Just(None), 16 => Just(Some(0.0)), 1 => (0.0..100.0f64).prop_map(Some)];
    (
        1u64..64,
        prop_oneof![24 => Just(0.0), 6 => 0.0..20.0f64, 1 => Just(-1.0), 1 => Just(f64::NAN), 2 => Just(-0.0)],
        psi(),
        psi(),
        psi(),
        proptest::option::of((1u64..40, 500u32..16_000)),
    )
        .prop_map(|(available_gib, load, psi_cpu, psi_memory, psi_io, cgroup)| Figures {
            available_gib,
            load,
            psi_cpu,
            psi_memory,
            psi_io,
            cgroup,
        })
}

fn query() -> impl Strategy<Value = Query> {
    prop_oneof![
        8 => Just(Query::Observed),
        1 => figures().prop_map(Query::SameTime),
        1 => (1u64..2000, figures()).prop_map(|(ms, f)| Query::Newer(ms, f)),
        2 => prop_oneof![Just(1000u64), Just(1001), 0u64..1200].prop_map(Query::Later),
        1 => Just(Query::Future),
    ]
}

fn request() -> impl Strategy<Value = Request> {
    (
        prop_oneof![Just(0u64), 1u64..4096],
        prop_oneof![Just(0u64), 1u64..256],
        (prop_oneof![1 => Just(0u64), 20 => 1u64..8], 0u64..40),
        prop_oneof![1 => Just(0u32), 15 => 1u32..4000, 4 => 4000u32..12_000],
        prop::bool::weighted(0.2),
        prop_oneof![3 => Just(0u32), 1 => 1u32..3],
        prop_oneof![6 => Just(0u32), 1 => Just(1u32)],
        prop_oneof![6 => Just(false), 1 => Just(true)],
        prop_oneof![12 => Just("a"), 6 => Just("b"), 1 => Just("Bad")],
        prop_oneof![2 => Just(None), 1 => (0u64..400).prop_map(Some)],
    )
        .prop_map(
            |(
                memory_mib,
                per_item_mib,
                (min, extra),
                cpu_millis,
                exact,
                io_slots,
                gpu_slots,
                scratch,
                class,
                items_left,
            )| {
                // Mostly a valid range, sometimes an inverted one.
                let max = if extra == 39 { min.saturating_sub(1) } else { min + extra };
                Request {
                    memory_mib,
                    per_item_mib,
                    batch: (min, max),
                    cpu_millis,
                    exact,
                    io_slots,
                    gpu_slots,
                    scratch,
                    class,
                    items_left,
                }
            },
        )
}

fn case() -> impl Strategy<Value = Case> {
    (
        (prop_oneof![3 => Just(None), 1 => any::<bool>().prop_map(Some)], 4u64..64, 1u32..33),
        (proptest::option::of(1u32..4), 1u32..3, any::<bool>()),
        proptest::collection::vec((1u64..6144, 100u32..4000), 0..4),
        (proptest::option::of((1u64..4096, 1u64..512)), any::<bool>()),
        (figures(), query(), request()),
        (0usize..6, proptest::option::of((0u64..8, 0u64..4000, 0u32..2))),
        proptest::option::of((
            proptest::option::of(1u32..4),
            proptest::option::of(1u64..8192),
            proptest::option::of(500u64..8000),
        )),
    )
        .prop_map(
            |(
                (gpu, total_gib, cpus),
                (max_running, io_slots, caution),
                held,
                (learned, contended),
                (sample, query, estimate),
                (running, hold),
                group,
            )| Case {
                gpu,
                total_gib,
                cpus,
                max_running,
                io_slots,
                caution,
                held,
                learned,
                contended,
                sample,
                query,
                estimate,
                running,
                hold,
                group,
            },
        )
}

/// `base` with `f`'s figures.
fn with_figures(mut s: Snapshot, f: &Figures) -> Snapshot {
    s.memory_available = f.available_gib * GIB;
    s.load.one = f.load;
    s.pressure.cpu = f.psi_cpu;
    s.pressure.memory = f.psi_memory;
    s.pressure.io = f.psi_io;
    s.cgroup = f.cgroup.map(|(limit_gib, cpu)| CgroupSample {
        memory_limit: Some(limit_gib * GIB),
        memory_usage: Some(GIB),
        cpu_quota_millis: Some(cpu),
        cpuset_cpus: None,
    });
    s
}

fn build(r: &Request) -> Estimate {
    let mut b = Estimate::builder()
        .memory(r.memory_mib * MIB)
        .memory_per_item(r.per_item_mib * MIB)
        .batch(r.batch.0, r.batch.1)
        .cpu_millis(r.cpu_millis)
        .io_slots(r.io_slots)
        .gpu_slots(r.gpu_slots)
        .class(r.class);
    if r.exact {
        b = b.cpus_exact();
    }
    if r.scratch {
        b = b.scratch(GIB);
    }
    if let Some(items) = r.items_left {
        b = b.items_left(items);
    }
    b.build()
}

/// Sets up `c`'s situation, then asks the fast path and the full order
/// the same question under one lock hold. Returns (fast granted, full
/// granted in full).
fn compare(c: &Case) -> Result<(bool, bool), TestCaseError> {
    let mut profile = HostProfile::new(c.total_gib * GIB, c.cpus);
    if let Some(unified) = c.gpu {
        profile = profile.with_gpu(Some(8 * GIB), unified);
    }
    let rig = Rig::with(profile, |p| {
        p.max_running = c.max_running;
        p.io_slots = c.io_slots;
        if !c.caution {
            p.memory_caution = None;
        }
    });
    // The observed sample (it may set the pressure level).
    rig.clock.advance(Duration::from_millis(1));
    let observed = with_figures(rig.probe.snapshot().unwrap(), &c.sample);
    rig.gov.observe(&observed);
    let group = crate::GroupName::new("g").unwrap();
    if let Some((max_running, memory_mib, cpu_millis)) = c.group {
        let limits = crate::GroupLimits { max_running, memory: memory_mib.map(|m| m * MIB), cpu_millis };
        rig.gov.set_group_limits(&group, limits);
    }
    // What the ledger holds and has learned.
    let mut kept = Vec::new();
    for (i, &(mib, millis)) in c.held.iter().enumerate() {
        let mut e = Estimate::builder().memory(mib * MIB).cpu_millis(millis).class("held").build();
        if c.group.is_some() && i % 2 == 0 {
            e = e.with_group(Some(group.clone()));
        }
        if let Ok(r) = rig.gov.reserve(&e, &observed) {
            kept.push(r);
        }
    }
    if let Some((peak_mib, per_item_mib)) = c.learned {
        let class = crate::Class::new("a");
        rig.gov.record_run(
            &class,
            RunRecord::unbatched(
                Duration::from_secs(1),
                RunOutcome::Completed { peak: Some(peak_mib * MIB) },
            ),
        );
        rig.gov.record_run(
            &class,
            RunRecord::batch(
                4,
                Duration::from_secs(1),
                RunOutcome::Completed { peak: Some(per_item_mib * 4 * MIB) },
            ),
        );
    }
    if c.contended {
        // A WAIT for memory makes memory contended for a second.
        let hog = Estimate::builder().memory(c.total_gib * 2 * GIB).build();
        let _ = rig.gov.decide(&hog, &observed);
    }
    let query = match &c.query {
        Query::Observed => observed.clone(),
        Query::SameTime(f) => with_figures(observed.clone(), f),
        Query::Newer(ms, f) => {
            rig.clock.advance(Duration::from_millis(*ms));
            with_figures(rig.probe.snapshot().unwrap(), f)
        }
        Query::Later(ms) => {
            rig.clock.advance(Duration::from_millis(*ms));
            observed.clone()
        }
        Query::Future => {
            let mut s = observed.clone();
            s.captured_at = rig.gov.now() + Duration::from_millis(5);
            s
        }
    };
    let mut est = build(&c.estimate);
    if c.group.is_some() {
        est = est.with_group(Some(group));
    }
    let hold = c.hold.map(|(gib, cpu_millis, io_slots)| Hold { memory: gib * GIB, cpu_millis, io_slots });
    let now = rig.gov.now();
    let mut ledger = rig.gov.shared.lock();
    let fast = fast::check(&ledger, &est, &query, now, c.running, hold.as_ref());
    let full = evaluate_in_order(&mut ledger, &est, &query, now, c.running, hold.as_ref());
    if let Some(grant) = fast {
        prop_assert_eq!(&full, &Decision::Admit(grant.contract(&est)), "fast {:?}", grant);
    }
    Ok((fast.is_some(), full.kind() == DecisionKind::Admit))
}

/// The rule: whenever the fast path grants, the full order gives exactly
/// that ADMIT. Also checks the comparison is not vacuous: the fast path
/// grants in a good share of the cases (and most full ADMITs without GPU
/// or scratch against the observed sample are fast ones).
#[test]
fn a_fast_grant_is_exactly_the_full_orders_decision() {
    let mut runner = TestRunner::new(Config { cases: 2000, failure_persistence: None, ..Config::default() });
    let (fast, admits) = (Cell::new(0u32), Cell::new(0u32));
    runner
        .run(&case(), |c| {
            let (f, a) = compare(&c)?;
            fast.set(fast.get() + u32::from(f));
            admits.set(admits.get() + u32::from(a));
            Ok(())
        })
        .unwrap();
    // Not vacuous: the fast path answers a good share of the cases, and
    // most full ADMITs (those with a GPU, scratch or a new sample are not
    // its to answer).
    let (fast, admits) = (fast.get(), admits.get());
    assert!(fast >= 100, "only {fast} of 2000 cases took the fast path ({admits} full ADMITs)");
    assert!(fast * 2 >= admits, "the fast path answered only {fast} of {admits} full ADMITs");
}

/// The warm case the admission bench measures (an unbatched-or-batched
/// request that fits, GREEN host, observed snapshot) takes the fast path,
/// and `reserve` then holds exactly what the full order grants.
#[test]
fn the_common_request_is_granted_by_the_fast_path() {
    let rig = Rig::with(HostProfile::new(64 * GIB, 16), |_| {});
    let snap = rig.gov.sample().unwrap();
    let est = Estimate::builder().memory(GIB).memory_per_item(64 * MIB).batch(1, 16).class("bench").build();
    let now = rig.gov.now();
    let grant = {
        let ledger = rig.gov.shared.lock();
        fast::check(&ledger, &est, &snap, now, 0, None).expect("the common request is a fast grant")
    };
    assert_eq!((grant.batch, grant.memory, grant.cpu_millis), (16, 2 * GIB, 1000));
    let full = rig.gov.decide(&est, &snap);
    assert_eq!(full, Decision::Admit(grant.contract(&est)));
    let r = rig.gov.reserve(&est, &snap).unwrap();
    assert_eq!(r.contract(), &grant.contract(&est));
    assert_eq!(rig.gov.availability().reservations, 1);
    drop(r);
    assert_eq!(rig.gov.availability().reservations, 0);
}

/// The fast path's division-free memory test says what comparing
/// `capacity` says, on every combination of boundary figures (zero sizes,
/// exact fits, one short, products past 64 bits).
#[test]
fn fits_at_least_is_capacity_compared() {
    use super::admission::{capacity, fits_at_least};
    let figures =
        [0, 1, 2, 3, 7, 8, 9, 64 * MIB, GIB, GIB + 1, u64::MAX / 3, u64::MAX / 2, u64::MAX - 1, u64::MAX];
    let mut checked = 0;
    for available in figures {
        for fixed in figures {
            for per_item in figures {
                for n in figures {
                    assert_eq!(
                        fits_at_least(available, fixed, per_item, n),
                        capacity(available, fixed, per_item) >= n,
                        "available {available}, fixed {fixed}, per item {per_item}, n {n}"
                    );
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(checked, figures.len().pow(4));
}
