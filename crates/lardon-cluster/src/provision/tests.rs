//! The Provisioner's rules on a fake clock (an `Instant` plus offsets: the
//! plan is a pure function of the time it is given).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use super::*;

const GIB: u64 = 1 << 30;
const MIN: Duration = Duration::from_secs(60);

fn cap(text: &str) -> Capability {
    Capability::parse(text).unwrap()
}

fn gcc() -> Capability {
    cap("gcc@13:x86_64-linux-gnu")
}

/// A shape offering gcc.
fn shape(name: &str, memory: u64, cpus: u32, walltime: Duration) -> Shape {
    Shape {
        name: name.into(),
        memory,
        cpu_millis: cpus * 1000,
        nodes: 1,
        walltime,
        capabilities: vec![gcc()],
    }
}

/// `tasks` gcc tasks of 2 GiB, 1 CPU, 10 minutes each (learned).
fn demand(tasks: u64) -> Demand {
    Demand { capability: gcc(), tasks, memory: 2 * GIB, cpu_millis: 1000, duration: 10 * MIN }
}

fn passed() -> Health {
    let mut h = Health::new();
    h.record_dry_run(Ok(()));
    h
}

fn alloc(id: &str, shape: &str, state: AllocState) -> Allocation {
    Allocation { id: AllocationId(id.into()), shape: shape.into(), state }
}

fn limits(max_allocations: u32, backlog: u32) -> Limits {
    Limits { max_allocations, backlog, min_utilization: 0.0 }
}

fn submits(p: &Plan) -> Vec<(String, u32)> {
    p.actions
        .iter()
        .filter_map(|a| match a {
            Action::Submit { shape, count, .. } => Some((shape.clone(), *count)),
            Action::DryRun { .. } => None,
        })
        .collect()
}

#[test]
fn the_smallest_shape_that_fits_and_outlives_a_task_is_asked_for_enough_times() {
    let shapes = [shape("big", 64 * GIB, 16, 60 * MIN), shape("small", 8 * GIB, 4, 60 * MIN)];
    // small: 4 slots (8 GiB / 2 GiB, 4 CPUs) × 6 rounds of 10 min = 24 tasks per allocation.
    let p = plan(&[demand(50)], &shapes, &[], limits(10, 10), &passed(), Instant::now());
    assert_eq!(submits(&p), [("small".to_owned(), 3)], "{p:?}");
    assert!(p.holds.is_empty(), "{:?}", p.holds);
}

#[test]
fn alive_allocations_cover_demand_first() {
    let shapes = [shape("small", 8 * GIB, 4, 60 * MIN)];
    let running = [alloc("1", "small", AllocState::Running), alloc("2", "small", AllocState::Queued)];
    let p = plan(&[demand(48)], &shapes, &running, limits(10, 10), &passed(), Instant::now());
    assert!(p.actions.is_empty());
    assert_eq!(p.holds, [Hold::Covered(gcc())]);
    // An ended allocation covers nothing.
    let ended = [alloc("1", "small", AllocState::Ended)];
    let p = plan(&[demand(10)], &shapes, &ended, limits(10, 10), &passed(), Instant::now());
    assert_eq!(submits(&p), [("small".to_owned(), 1)]);
}

#[test]
fn every_not_provisioning_decision_says_why() {
    let now = Instant::now();
    let big_task = Demand { memory: 64 * GIB, ..demand(1) };
    let p = plan(&[big_task], &[shape("small", 8 * GIB, 4, 60 * MIN)], &[], limits(10, 10), &passed(), now);
    assert_eq!(p.holds.len(), 1);
    assert_eq!(
        p.holds[0].to_string(),
        "gcc@13:x86_64-linux-gnu: no shape fits 64.0 GiB and 1 CPUs (largest: 8.0 GiB and 4 CPUs)"
    );

    let long_task = Demand { duration: 70 * MIN, ..demand(1) };
    let p = plan(&[long_task], &[shape("small", 8 * GIB, 4, 60 * MIN)], &[], limits(10, 10), &passed(), now);
    assert_eq!(
        p.holds[0].to_string(),
        "gcc@13:x86_64-linux-gnu: learned duration 70 min exceeds walltime 60 min"
    );

    let clang = Demand { capability: cap("clang@17:x86_64-linux-gnu"), ..demand(1) };
    let p = plan(&[clang], &[shape("small", 8 * GIB, 4, 60 * MIN)], &[], limits(10, 10), &passed(), now);
    assert_eq!(p.holds, [Hold::NoShapeOffers(cap("clang@17:x86_64-linux-gnu"))]);
    assert!(p.actions.is_empty());
}

#[test]
fn max_allocations_and_backlog_cap_what_is_asked() {
    let shapes = [shape("one", 2 * GIB, 1, 10 * MIN)]; // one task per allocation
    let alive = [alloc("1", "one", AllocState::Running)];
    let p = plan(&[demand(10)], &shapes, &alive, limits(3, 10), &passed(), Instant::now());
    assert_eq!(submits(&p), [("one".to_owned(), 2)]);
    assert_eq!(p.holds, [Hold::MaxAllocations(1)]);
    let p = plan(&[demand(10)], &shapes, &alive, limits(30, 2), &passed(), Instant::now());
    assert_eq!(submits(&p), [("one".to_owned(), 2)]);
    assert_eq!(p.holds, [Hold::BacklogFull(0)]);
    let full = [alloc("1", "one", AllocState::Queued), alloc("2", "one", AllocState::Queued)];
    let p = plan(&[demand(10)], &shapes, &full, limits(30, 2), &passed(), Instant::now());
    assert!(p.actions.is_empty());
    assert_eq!(p.holds[0].to_string(), "2 allocations already queued: backlog reached");
}

#[test]
fn an_allocation_the_work_would_barely_use_is_not_asked_for() {
    let shapes = [shape("small", 8 * GIB, 4, 10 * MIN)]; // 4 slots, one round
    let mut l = limits(10, 10);
    l.min_utilization = 0.5;
    // 5 tasks: one full allocation, and a second one a quarter used.
    let p = plan(&[demand(5)], &shapes, &[], l, &passed(), Instant::now());
    assert_eq!(submits(&p), [("small".to_owned(), 1)]);
    assert_eq!(
        p.holds[0].to_string(),
        "gcc@13:x86_64-linux-gnu: the queued work would use 25 % of another allocation; min_utilization is 50 %"
    );
    // 6 tasks: the second is half used: asked for.
    let p = plan(&[demand(6)], &shapes, &[], l, &passed(), Instant::now());
    assert_eq!(submits(&p), [("small".to_owned(), 2)]);
}

#[test]
fn a_new_provider_dry_runs_before_its_first_submission_and_a_failed_dry_run_pauses_it() {
    let shapes = [shape("small", 8 * GIB, 4, 60 * MIN)];
    let mut h = Health::new();
    let p = plan(&[demand(50)], &shapes, &[], limits(10, 10), &h, Instant::now());
    assert_eq!(p.actions, [Action::DryRun { shape: "small".into() }], "no submission before the dry run");
    h.record_dry_run(Err("sbatch: error: invalid partition".into()));
    let p = plan(&[demand(50)], &shapes, &[], limits(10, 10), &h, Instant::now());
    assert!(p.actions.is_empty());
    assert_eq!(p.holds[0].to_string(), "paused: the dry run failed: sbatch: error: invalid partition");
}

#[test]
fn failed_submissions_climb_the_back_off_ladder_and_the_tenth_pauses() {
    let shapes = [shape("small", 8 * GIB, 4, 60 * MIN)];
    let t0 = Instant::now();
    let mut h = passed();
    let mut now = t0;
    let mut waits = Vec::new();
    for _ in 0..MAX_SUBMIT_FAILURES - 1 {
        let p = plan(&[demand(1)], &shapes, &[], limits(10, 10), &h, now);
        assert_eq!(submits(&p).len(), 1, "it tries once the wait is over: {p:?}");
        h.record_submit(Err("sbatch: error: QOSMaxSubmitJobPerUserLimit".into()), now);
        let wait = h.backing_off(now).map_or(Duration::ZERO, |until| until - now);
        if !wait.is_zero() {
            let p = plan(&[demand(1)], &shapes, &[], limits(10, 10), &h, now + wait - Duration::from_secs(1));
            assert!(p.actions.is_empty(), "a second before the wait ends, nothing");
            assert!(matches!(p.holds[0], Hold::BackingOff { .. }));
        }
        waits.push(wait.as_secs() / 60);
        now += wait;
    }
    assert_eq!(waits, [0, 1, 15, 30, 60, 60, 60, 60, 60]);
    h.record_submit(Err("again".into()), now);
    assert!(h.paused().is_some_and(|p| p.starts_with("10 submissions failed in a row")));
    let p = plan(&[demand(1)], &shapes, &[], limits(10, 10), &h, now + 24 * 60 * MIN);
    assert!(p.actions.is_empty(), "paused until a person resumes it");
    h.resume();
    assert_eq!(submits(&plan(&[demand(1)], &shapes, &[], limits(10, 10), &h, now)).len(), 1);
}

#[test]
fn a_success_clears_the_ladder_and_three_allocations_that_never_start_pause() {
    let t0 = Instant::now();
    let mut h = passed();
    h.record_submit(Err("x".into()), t0);
    h.record_submit(Err("x".into()), t0);
    assert!(h.backing_off(t0).is_some());
    h.record_submit(Ok(()), t0);
    assert_eq!(h.backing_off(t0), None);

    h.record_allocation_end(false, "job 7 FAILED");
    h.record_allocation_end(true, "");
    h.record_allocation_end(false, "job 8 FAILED");
    h.record_allocation_end(false, "job 9 FAILED");
    assert_eq!(h.paused(), None, "an allocation that started resets the count");
    h.record_allocation_end(false, "job 10 NODE_FAIL");
    assert!(
        h.paused().is_some_and(|p| p.contains("3 allocations in a row") && p.contains("job 10 NODE_FAIL"))
    );
}

#[test]
fn a_static_provider_offers_nothing_to_plan_for() {
    let mut p = StaticProvider;
    let shapes = p.shapes();
    let out = plan(&[demand(100)], &shapes, &[], limits(10, 10), &passed(), Instant::now());
    assert!(out.actions.is_empty());
    assert_eq!(out.holds, [Hold::NoShapeOffers(gcc())]);
    assert!(p.submit(&shape("x", GIB, 1, MIN), 1).is_err());
}

#[test]
fn a_task_no_shape_can_ever_run_is_named_with_the_largest_shape() {
    let shapes = [shape("small", 8 * GIB, 4, 60 * MIN), shape("big", 16 * GIB, 2, 30 * MIN)];
    // Fits: small holds 2 GiB, 1 CPU, 10 min.
    assert_eq!(never_fits(&demand(1), &shapes), None);
    // Too big for any node: the largest memory and the most CPUs named.
    let big = Demand { memory: 64 * GIB, ..demand(1) };
    let hold = never_fits(&big, &shapes).expect("64 GiB fits no shape");
    assert_eq!(
        hold.to_string(),
        "gcc@13:x86_64-linux-gnu: no shape fits 64.0 GiB and 1 CPUs (largest: 16.0 GiB and 4 CPUs)"
    );
    let wide = Demand { cpu_millis: 8000, ..demand(1) };
    assert!(matches!(never_fits(&wide, &shapes), Some(Hold::NoShapeFits { cpu_millis: 8000, .. })));
    // 12 GiB fits only `big`, whose 30 min walltime is shorter than 40 min.
    let long = Demand { memory: 12 * GIB, duration: 40 * MIN, ..demand(1) };
    assert_eq!(
        never_fits(&long, &shapes).map(|h| h.to_string()).as_deref(),
        Some("gcc@13:x86_64-linux-gnu: learned duration 40 min exceeds walltime 30 min")
    );
    // The count does not matter: one task is what must fit.
    assert_eq!(never_fits(&Demand { tasks: 1000, ..demand(1) }, &shapes), None);
    // No shape offers it: not provisionable, so not this check's answer.
    let clang = Demand { capability: cap("clang@17"), ..big };
    assert_eq!(never_fits(&clang, &shapes), None);
}
