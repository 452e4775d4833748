//! Learning through the Governor (docs/DESIGN.md §6): what `record_run`
//! does to the next admission and its grant, and the `learned` /
//! `batch_target` queries.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use crate::{
    Class, Contract, DecisionKind, Estimate, FakeClock, FakeProbe, Governor, HostPolicy, HostProfile,
    MonoTime, ReasonCode, RunOutcome, RunRecord, Snapshot, Source,
};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
/// 16 GiB − 2 GiB reserve.
const BUDGET: u64 = 14 * GIB;

struct Rig {
    clock: Arc<FakeClock>,
    probe: Arc<FakeProbe>,
    gov: Governor,
}

impl Rig {
    fn new() -> Rig {
        let profile = HostProfile::new(16 * GIB, 8);
        let clock = Arc::new(FakeClock::new(MonoTime(1_000_000_000)));
        let probe = Arc::new(FakeProbe::new(profile.clone()).stamped_by(clock.clone()));
        let mut p = HostPolicy::default_for(&profile);
        p.memory_reserve = 2 * GIB;
        p.emergency_floor = GIB;
        p.memory_caution = None;
        let gov = Governor::with_clock(p, probe.clone(), clock.clone()).unwrap();
        Rig { clock, probe, gov }
    }

    fn snap(&self) -> Snapshot {
        self.clock.advance(Duration::from_millis(1));
        crate::Probe::snapshot(&*self.probe).unwrap()
    }

    fn grant(&self, e: &Estimate) -> Contract {
        let d = self.gov.decide(e, &self.snap());
        assert!(d.is_granted(), "{d:?}");
        d.contract().unwrap().clone()
    }

    fn kill(&self, class: &str, items: Option<u64>, limit: u64) -> bool {
        let outcome = RunOutcome::KilledAtLimit { limit };
        self.record(class, items, outcome)
    }

    fn complete(&self, class: &str, items: Option<u64>, peak: u64) -> bool {
        self.record(class, items, RunOutcome::Completed { peak: Some(peak) })
    }

    fn record(&self, class: &str, items: Option<u64>, outcome: RunOutcome) -> bool {
        let record = match items {
            None => RunRecord::unbatched(Duration::from_secs(1), outcome),
            Some(n) => RunRecord::batch(n, Duration::from_secs(1), outcome),
        };
        self.gov.record_run(&Class::new(class), record)
    }
}

fn liar() -> Estimate {
    Estimate::builder().memory(200 * MIB).class("liar").build()
}

/// The batched task of the report: 32 MiB + 10 MiB per item, batch 1..32.
fn b6() -> Estimate {
    Estimate::builder().memory(32 * MIB).memory_per_item(10 * MIB).batch(1, 32).class("b6").build()
}

#[test]
fn an_unbatched_class_is_granted_its_learned_size() {
    let r = Rig::new();
    assert_eq!(r.grant(&liar()).memory, 200 * MIB);
    assert_eq!(r.gov.learned(&liar()), None, "nothing learned yet");
    assert!(r.complete("liar", None, GIB));
    let c = r.grant(&liar());
    assert_eq!((c.memory, c.batch), (GIB, 1));
    let learned = r.gov.learned(&liar()).unwrap();
    assert_eq!((learned.fixed, learned.samples), (GIB, 1));
    assert_eq!(
        learned.learned_fixed.unwrap().source.to_string(),
        "measured peak of run 1 (unbatched, 1.0 GiB)"
    );
    // Reserved at the learned size: the budget counts 1 GiB.
    let held = r.gov.reserve(&liar(), &r.snap()).unwrap();
    assert_eq!(r.gov.availability().memory_reserved, GIB);
    drop(held);
}

#[test]
fn killed_at_its_limit_the_next_grant_doubles_until_a_run_completes() {
    let r = Rig::new();
    // Granted 200 MiB, killed at 284 MiB (grant + slack).
    assert!(r.kill("liar", None, 284 * MIB));
    let second = r.grant(&liar()).memory;
    assert!(second >= 568 * MIB, "{second}");
    assert_eq!(r.gov.history(&Class::new("liar")), [], "the kill limit is never recorded as a peak");
    assert_eq!(
        r.gov.learned(&liar()).unwrap().lower_bound,
        Some(Source::LowerBound { run: 1, items: 0, limit: 284 * MIB })
    );
    assert!(r.kill("liar", None, second + 84 * MIB));
    let third = r.grant(&liar()).memory;
    assert!(third >= 2 * (second + 84 * MIB), "{third}");
    // It fits: completes at 1 GiB; the next grant is the measured size.
    assert!(r.complete("liar", None, GIB));
    assert_eq!(r.grant(&liar()).memory, GIB);
    assert_eq!(r.gov.learned(&liar()).unwrap().lower_bound, None);
}

#[test]
fn a_need_beyond_the_host_is_rejected_with_the_learned_reason() {
    let r = Rig::new();
    r.kill("liar", None, 10 * GIB);
    assert_eq!(r.grant(&liar()).memory, BUDGET, "capped at what the host could ever grant");
    r.kill("liar", None, BUDGET + 64 * MIB);
    let d = r.gov.decide(&liar(), &r.snap());
    assert_eq!((d.kind(), d.reason()), (DecisionKind::Reject, ReasonCode::Impossible));
    assert!(d.message().contains("lower bound after kill at"), "{}", d.message());
}

#[test]
fn a_batch_is_granted_fixed_plus_batch_times_the_learned_per_item_cost() {
    let r = Rig::new();
    assert_eq!(r.grant(&b6()).memory, 32 * MIB + 32 * 10 * MIB);
    // Batch of 32 measured at 16 MiB + 40 MiB per item.
    assert!(r.complete("b6", Some(32), 16 * MIB + 32 * 40 * MIB));
    let learned = r.gov.learned(&b6()).unwrap();
    let per_item = (16 * MIB + 32 * 40 * MIB - 32 * MIB).div_ceil(32);
    assert_eq!((learned.per_item, learned.batch_target), (per_item, 8));
    let c = r.grant(&b6());
    assert_eq!(c.batch, 8);
    assert_eq!(c.memory, 32 * MIB + 8 * per_item, "not 32 MiB + 8 × 10 MiB = 112 MiB");
    assert_eq!(c.memory, learned.memory_for(8));
    assert!(c.memory >= 16 * MIB + 8 * 40 * MIB, "covers what a batch of 8 really uses");
}

#[test]
fn a_killed_batch_is_rerun_smaller_at_a_larger_size() {
    let r = Rig::new();
    // The batch of 32 at 352 MiB killed at 352 + 64 MiB slack.
    assert!(r.kill("b6", Some(32), 416 * MIB));
    let c = r.grant(&b6());
    assert_eq!((c.batch, c.memory), (13, 32 * MIB + 13 * 24 * MIB));
    assert_eq!(r.gov.history(&Class::new("b6")), []);
    assert!(r.complete("b6", Some(13), 16 * MIB + 13 * 40 * MIB));
    let c = r.grant(&b6());
    assert_eq!(c.batch, 8);
    assert!(c.memory >= 16 * MIB + 8 * 40 * MIB);
}

#[test]
fn the_learned_per_item_size_bounds_the_batch_by_memory() {
    let r = Rig::new();
    let e = Estimate::builder().memory_per_item(MIB).batch(1, 64).class("x").build();
    r.complete("x", Some(4), 4 * GIB);
    // Target floor(64 × 1 MiB / 1 GiB) = 1 — but with batch_min 1 and 14
    // GiB free, the grant is 1 item at 1 GiB, not 64 at 1 MiB.
    let c = r.grant(&e);
    assert_eq!((c.batch, c.memory), (1, GIB));
    let big = Estimate::builder().memory_per_item(0).batch(1, 64).class("x").build();
    let c = r.grant(&big);
    assert_eq!((c.batch, c.memory), (14, 14 * GIB), "no declared per-item cost: memory bounds the batch");
}

#[test]
fn records_that_carry_nothing_change_nothing() {
    let r = Rig::new();
    assert!(r.complete("b6", Some(32), 16 * MIB + 32 * 40 * MIB));
    let before = (r.gov.learned(&b6()), r.grant(&b6()), r.gov.history(&Class::new("b6")));
    let g = r.gov.generation();
    for _ in 0..16 {
        assert!(!r.record("b6", Some(0), RunOutcome::Completed { peak: Some(MIB) }));
        assert!(!r.record("b6", Some(8), RunOutcome::Completed { peak: None }));
        assert!(!r.record("b6", None, RunOutcome::Completed { peak: None }));
        assert!(!r.kill("b6", Some(0), GIB));
    }
    assert_eq!(r.gov.generation(), g, "the generation did not move");
    let after = (r.gov.learned(&b6()), r.grant(&b6()), r.gov.history(&Class::new("b6")));
    assert_eq!(after, before, "the heavy sample is still there; the target did not spring back");
}

#[test]
fn batch_target_applies_history_then_pressure() {
    let r = Rig::new();
    assert_eq!(r.gov.batch_target(&b6()), 32);
    r.complete("b6", Some(32), 16 * MIB + 32 * 40 * MIB);
    assert_eq!(r.gov.batch_target(&b6()), 8);
    assert_eq!(r.gov.batch_target(&b6()), r.grant(&b6()).batch, "the target is what is granted");
    assert_eq!(r.gov.batch_target(&liar()), 1);
}
