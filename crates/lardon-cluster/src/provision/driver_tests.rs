//! The provisioning loop's tick with a scripted provider and a fake clock.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::*;

const GIB: u64 = 1 << 30;

/// What the fake engine was asked, and the states it will answer.
#[derive(Debug, Default)]
struct Engine {
    calls: Vec<String>,
    states: BTreeMap<String, AllocState>,
    refuse_submit: Option<String>,
    refuse_dry_run: Option<String>,
    next: u32,
}

struct Fake(Arc<Mutex<Engine>>);

impl Provider for Fake {
    fn name(&self) -> &str {
        "fake"
    }
    fn shapes(&self) -> Vec<Shape> {
        vec![Shape {
            name: "one".into(),
            memory: 2 * GIB,
            cpu_millis: 1000,
            nodes: 1,
            walltime: Duration::from_secs(3600),
            capabilities: vec![gcc()],
        }]
    }
    fn dry_run(&mut self, shape: &Shape) -> Result<(), ProviderError> {
        let mut e = self.0.lock().unwrap();
        e.calls.push(format!("dry_run {}", shape.name));
        match e.refuse_dry_run.clone() {
            Some(m) => Err(ProviderError { provider: "fake".into(), message: m }),
            None => Ok(()),
        }
    }
    fn submit(&mut self, shape: &Shape, count: u32) -> Result<Vec<AllocationId>, ProviderError> {
        let mut e = self.0.lock().unwrap();
        e.calls.push(format!("submit {} {count}", shape.name));
        if let Some(m) = e.refuse_submit.clone() {
            return Err(ProviderError { provider: "fake".into(), message: m });
        }
        let mut ids = Vec::new();
        for _ in 0..count {
            e.next += 1;
            let id = e.next.to_string();
            e.states.insert(id.clone(), AllocState::Queued);
            ids.push(AllocationId(id));
        }
        Ok(ids)
    }
    fn status(&mut self, ids: &[AllocationId]) -> Result<Vec<(AllocationId, AllocState)>, ProviderError> {
        let mut e = self.0.lock().unwrap();
        e.calls.push(format!("status {}", ids.len()));
        Ok(ids
            .iter()
            .map(|id| (id.clone(), e.states.get(&id.0).copied().unwrap_or(AllocState::Ended)))
            .collect())
    }
    fn cancel(&mut self, id: &AllocationId) -> Result<(), ProviderError> {
        self.0.lock().unwrap().calls.push(format!("cancel {id}"));
        Ok(())
    }
    fn agent_prefix(&self, id: &AllocationId) -> String {
        format!("fake-{id}")
    }
}

fn gcc() -> Capability {
    Capability::parse("gcc@13:x86_64-linux-gnu").unwrap()
}

fn demand(tasks: u64) -> Vec<Demand> {
    vec![Demand {
        capability: gcc(),
        tasks,
        memory: GIB,
        cpu_millis: 1000,
        duration: Duration::from_secs(1800),
    }]
}

fn setup() -> (Provisioner, Arc<Mutex<Engine>>) {
    let engine = Arc::new(Mutex::new(Engine::default()));
    let limits = Limits { max_allocations: 3, backlog: 3, min_utilization: 0.0 };
    (Provisioner::new(Box::new(Fake(Arc::clone(&engine))), limits), engine)
}

fn calls(e: &Arc<Mutex<Engine>>) -> Vec<String> {
    std::mem::take(&mut e.lock().unwrap().calls)
}

#[test]
fn the_first_tick_dry_runs_then_submits_and_later_ticks_refresh_with_one_status_call() {
    let (mut p, e) = setup();
    let t0 = Instant::now();
    // One allocation: 1 slot × 2 rounds of 30 min = 2 tasks; 3 tasks → 2.
    p.tick(&demand(3), &[], t0);
    assert_eq!(calls(&e), ["dry_run one", "submit one 2"]);
    assert_eq!(p.allocations().len(), 2);
    // Covered now: one status call for both, nothing more asked.
    p.tick(&demand(3), &[], t0 + Duration::from_secs(5));
    assert_eq!(calls(&e), ["status 2"]);
    assert_eq!(p.explain(), ["gcc@13:x86_64-linux-gnu: the allocations asked for cover the queued work"]);
}

#[test]
fn an_agent_saying_hello_marks_its_allocation_started_and_an_ended_one_is_replaced() {
    let (mut p, e) = setup();
    let t0 = Instant::now();
    p.tick(&demand(1), &[], t0);
    assert_eq!(calls(&e), ["dry_run one", "submit one 1"]);
    p.tick(&demand(1), &["fake-1".into(), "fake-10".into()], t0);
    assert!(p.allocations()[0].started);
    assert_eq!(p.allocations()[0].allocation.state, AllocState::Running, "its agent is up: running");
    // Cancelled under it (scancel): the next tick sees it over and asks again.
    e.lock().unwrap().states.insert("1".into(), AllocState::Ended);
    calls(&e);
    p.tick(&demand(1), &[], t0);
    assert_eq!(calls(&e), ["status 1", "submit one 1"]);
    assert_eq!(p.allocations().len(), 1);
    assert_eq!(p.allocations()[0].allocation.id, AllocationId("2".into()));
    assert!(!p.allocations()[0].started, "agent fake-10 is not allocation 1's, nor 2's");
}

#[test]
fn three_allocations_ending_before_their_agent_says_hello_pause_the_provider() {
    let (mut p, e) = setup();
    let t0 = Instant::now();
    for round in 1..=3 {
        p.tick(&demand(1), &[], t0);
        e.lock().unwrap().states.insert(round.to_string(), AllocState::Ended);
    }
    p.tick(&demand(1), &[], t0);
    let lines = p.explain();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with("paused: 3 allocations in a row ended before their agent started"),
        "{lines:?}"
    );
    calls(&e);
    p.tick(&demand(1), &[], t0 + Duration::from_secs(86_400));
    assert_eq!(calls(&e), Vec::<String>::new(), "paused: nothing asked until resumed");
    p.resume();
    p.tick(&demand(1), &[], t0);
    assert_eq!(calls(&e), ["submit one 1"]);
}

#[test]
fn a_refused_submission_backs_off_on_the_fake_clock_and_says_so() {
    let (mut p, e) = setup();
    let t0 = Instant::now();
    e.lock().unwrap().refuse_submit = Some("QOSMaxSubmitJobPerUserLimit".into());
    p.tick(&demand(1), &[], t0); // dry run, 1st failure: wait 0
    p.tick(&demand(1), &[], t0); // 2nd failure: wait 1 min
    assert_eq!(calls(&e), ["dry_run one", "submit one 1", "submit one 1"]);
    p.tick(&demand(1), &[], t0 + Duration::from_secs(59));
    assert_eq!(calls(&e), Vec::<String>::new());
    assert_eq!(p.explain(), ["backing off after failed submissions: next try in 1 min"]);
    e.lock().unwrap().refuse_submit = None;
    p.tick(&demand(1), &[], t0 + Duration::from_secs(60));
    assert_eq!(calls(&e), ["submit one 1"]);
}

#[test]
fn a_failed_dry_run_pauses_before_anything_is_submitted() {
    let (mut p, e) = setup();
    e.lock().unwrap().refuse_dry_run = Some("sbatch: error: invalid partition specified: nope".into());
    p.tick(&demand(5), &[], Instant::now());
    assert_eq!(calls(&e), ["dry_run one"]);
    assert_eq!(
        p.explain(),
        ["paused: the dry run failed: fake: sbatch: error: invalid partition specified: nope"]
    );
    assert_eq!(p.capabilities(), [gcc()]);
}
