//! Stale runs: a run an agent was told to stop (its task was queued again
//! and placed elsewhere while the agent was away) must never have its end
//! taken for the result of a newer run of the same task at the same
//! agent. Reports carry only the task id, so the router keeps the task
//! off that agent until the stale run's end was reported, and the agent's
//! hello never claims it back. These are the interleavings the thousand
//! random faults (`broker::fault_tests`) hit now and then, made exact.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use lardon_cluster_core::{
    AgentId, Availability, Capability, Delivery, Hello, Need, Outcome, Report, Request, Router, SubmitterId,
    TaskId,
};

mod router_support;

use router_support::{assigned, cancelled, delivered};

const GIB: u64 = 1 << 30;

fn agent(id: &str, tokens: u32, running: &[&str]) -> Hello {
    Hello {
        agent: AgentId::new(id).unwrap(),
        capabilities: vec![Capability::parse("gcc@12").unwrap()],
        availability: Availability { memory: 64 * GIB, cpu_millis: 64_000 },
        tokens,
        running: running.iter().map(|t| TaskId::new(t).unwrap()).collect(),
        ends_at_ms: None,
    }
}

fn req(id: &str) -> Request {
    Request {
        id: TaskId::new(id).unwrap(),
        submitter: SubmitterId::new("s").unwrap(),
        capability: Capability::parse("gcc@12").unwrap(),
        need: Need { memory: GIB, cpu_millis: 1000 },
        duration_ms: None,
    }
}

fn id(s: &str) -> AgentId {
    AgentId::new(s).unwrap()
}

fn task(s: &str) -> TaskId {
    TaskId::new(s).unwrap()
}

fn cancelled_run() -> Report {
    Report::Finished(Outcome::Failed("cancelled".into()))
}

/// t runs at a; a's connection drops (t goes to b); a comes back still
/// running t and is told to stop it; b is lost. The stale run's end was
/// not reported yet, so t must not go back to a: were it assigned there,
/// a would take the assignment for the run it is stopping, and the
/// "cancelled" end of that run would answer t.
#[test]
fn a_stale_runs_end_never_answers_a_newer_run_on_the_same_agent() {
    let mut r = Router::new(1);
    r.hello(agent("a", 1, &[]));
    assert_eq!(assigned(&r.submit(req("t")).1), vec![("a".into(), "t".into())]);
    r.hello(agent("b", 1, &[]));
    assert_eq!(assigned(&r.agent_lost(&id("a"))), vec![("b".into(), "t".into())]);
    let ev = r.hello(agent("a", 1, &["t"]));
    assert_eq!(cancelled(&ev), vec![("a".into(), "t".into())], "a is told to stop its stale run: {ev:?}");
    assert!(assigned(&ev).is_empty(), "{ev:?}");

    let ev = r.agent_lost(&id("b"));
    assert!(assigned(&ev).is_empty(), "t must wait for the stale run's end, not go to a: {ev:?}");
    assert_eq!(r.queued(), 1);

    // The stale run ends: its report answers nothing, and only now t may
    // run at a again.
    let ev = r.report(&id("a"), &task("t"), cancelled_run());
    assert!(delivered(&ev).is_empty(), "a stale run's end answered t: {ev:?}");
    assert_eq!(assigned(&ev), vec![("a".into(), "t".into())]);
    let ev = r.report(&id("a"), &task("t"), Report::Finished(Outcome::Succeeded));
    assert_eq!(delivered(&ev), vec![("t".into(), Delivery::Done(Outcome::Succeeded))]);
    r.check().unwrap();
}

/// The stale run's end was reported (and ignored) but its acknowledgement
/// was lost with a's connection: a says hello again still listing t,
/// while t waits on its route. The hello must not claim t back, or the
/// "cancelled" report a sends again would answer it.
#[test]
fn a_hello_never_claims_back_a_task_whose_stale_run_it_still_lists() {
    let mut r = Router::new(1);
    // c serves the capability with no room: the route is never orphaned.
    r.hello(agent("c", 0, &[]));
    r.hello(agent("a", 1, &[]));
    r.submit(req("t"));
    r.hello(agent("b", 1, &[]));
    assert_eq!(assigned(&r.agent_lost(&id("a"))), vec![("b".into(), "t".into())]);
    assert_eq!(cancelled(&r.hello(agent("a", 1, &["t"]))), vec![("a".into(), "t".into())]);
    assert_eq!(assigned(&r.submit(req("u")).1), vec![("a".into(), "u".into())]);
    assert!(assigned(&r.agent_lost(&id("b"))).is_empty(), "a is busy with u: t waits");
    assert!(delivered(&r.report(&id("a"), &task("t"), cancelled_run())).is_empty());

    // a's connection drops before the acknowledgement reaches it.
    r.agent_lost(&id("a"));
    let ev = r.hello(agent("a", 1, &["t", "u"]));
    assert_eq!(cancelled(&ev), vec![("a".into(), "t".into())], "{ev:?}");
    assert_eq!(r.holding(&id("a")), vec![task("u")], "u is a's own again, t is not");
    let ev = r.report(&id("a"), &task("t"), cancelled_run());
    assert!(delivered(&ev).is_empty(), "the resent stale report answered t: {ev:?}");

    // u ends; t runs at a afresh and its own end answers it.
    let ev = r.report(&id("a"), &task("u"), Report::Finished(Outcome::Succeeded));
    assert_eq!(delivered(&ev), vec![("u".into(), Delivery::Done(Outcome::Succeeded))]);
    assert_eq!(assigned(&ev), vec![("a".into(), "t".into())]);
    let ev = r.report(&id("a"), &task("t"), Report::Finished(Outcome::Succeeded));
    assert_eq!(delivered(&ev), vec![("t".into(), Delivery::Done(Outcome::Succeeded))]);
    r.check().unwrap();
}

/// A hello that no longer lists the stale run (its end was acknowledged,
/// or the agent restarted) frees the task for that agent at once.
#[test]
fn a_hello_without_the_stale_run_frees_the_task_for_that_agent() {
    let mut r = Router::new(1);
    r.hello(agent("a", 1, &[]));
    r.submit(req("t"));
    r.hello(agent("b", 1, &[]));
    r.agent_lost(&id("a"));
    r.hello(agent("a", 1, &["t"]));
    assert!(assigned(&r.agent_lost(&id("b"))).is_empty());
    // a restarted: it forgot the run.
    let ev = r.hello(agent("a", 1, &[]));
    assert_eq!(assigned(&ev), vec![("a".into(), "t".into())], "{ev:?}");
    r.check().unwrap();
}
