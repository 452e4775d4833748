//! The routing rules, one test each, and a property test over random
//! sequences of submissions, agent faults, WAITs, reports and cancels:
//! no task lost, none delivered twice, no agent over its token bound.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::{BTreeMap, BTreeSet};

use lardon_cluster_core::{
    AgentId, Availability, Capability, Delivery, Event, Hello, Need, Outcome, Report, Request, Router,
    Submitted, SubmitterId, TaskId, TaskPlace,
};
use proptest::prelude::*;

mod router_support;

use router_support::{assigned, delivered};

const GIB: u64 = 1 << 30;

fn cap(s: &str) -> Capability {
    Capability::parse(s).unwrap()
}

fn agent(id: &str, caps: &[&str], tokens: u32) -> Hello {
    Hello {
        agent: AgentId::new(id).unwrap(),
        capabilities: caps.iter().map(|c| cap(c)).collect(),
        availability: Availability { memory: 64 * GIB, cpu_millis: 64_000 },
        tokens,
        running: Vec::new(),
        ends_at_ms: None,
    }
}

fn req(id: &str, submitter: &str, capability: &str) -> Request {
    Request {
        id: TaskId::new(id).unwrap(),
        submitter: SubmitterId::new(submitter).unwrap(),
        capability: cap(capability),
        need: Need { memory: GIB, cpu_millis: 1000 },
        duration_ms: None,
    }
}

/// An agent whose allocation ends at `ends_at_ms`.
fn ending(id: &str, caps: &[&str], tokens: u32, ends_at_ms: u64) -> Hello {
    Hello { ends_at_ms: Some(ends_at_ms), ..agent(id, caps, tokens) }
}

/// A request expected to run `duration_ms`.
fn timed(id: &str, capability: &str, duration_ms: u64) -> Request {
    Request { duration_ms: Some(duration_ms), ..req(id, "s", capability) }
}

#[test]
fn tasks_go_only_to_agents_that_declared_their_capability() {
    let mut r = Router::new(1);
    r.hello(agent("a-gcc", &["gcc@12:x86_64"], 4));
    r.hello(agent("a-py", &["python@3.11"], 4));
    let (s, ev) = r.submit(req("t1", "s1", "python@3.11"));
    assert_eq!(s, Submitted::Queued);
    assert_eq!(assigned(&ev), vec![("a-py".into(), "t1".into())]);
    let (_, ev) = r.submit(req("t2", "s1", "gcc@12:x86_64"));
    assert_eq!(assigned(&ev), vec![("a-gcc".into(), "t2".into())]);
}

#[test]
fn no_executor_is_answered_at_once() {
    let mut r = Router::new(1);
    r.hello(agent("a", &["gcc@12"], 4));
    let (s, ev) = r.submit(req("t1", "s1", "clang@17"));
    assert_eq!(s, Submitted::NoExecutor);
    assert_eq!(delivered(&ev), vec![("t1".into(), Delivery::NoExecutor)]);
    assert_eq!(r.queued(), 0);
}

#[test]
fn a_provisionable_capability_waits_for_an_allocation_instead_of_no_executor() {
    let mut r = Router::new(1);
    r.set_provisionable(&[cap("gcc@13:x86_64-linux-gnu")]);
    // No agent at all: gcc waits (scale from zero), clang is still answered at once.
    let (s, ev) = r.submit(req("t1", "s1", "gcc@13:x86_64-linux-gnu"));
    assert_eq!(s, Submitted::Queued);
    assert!(ev.is_empty(), "{ev:?}");
    let (s, _) = r.submit(req("t2", "s1", "clang@17"));
    assert_eq!(s, Submitted::NoExecutor);
    let demand = r.queued_demand();
    assert_eq!(
        demand.get(&cap("gcc@13:x86_64-linux-gnu")),
        Some(&(1, Need { memory: GIB, cpu_millis: 1000 }))
    );
    // The allocation's agent comes: it runs the task.
    let ev = r.hello(agent("slurm-7", &["gcc@13:x86_64-linux-gnu"], 1));
    assert_eq!(assigned(&ev), vec![("slurm-7".into(), "t1".into())]);
    assert!(r.queued_demand().is_empty(), "in flight is not queued demand");
    // Its allocation is cancelled mid-task: the task is queued again, not
    // handed back, while the next allocation comes.
    let ev = r.agent_lost(&AgentId::new("slurm-7").unwrap());
    assert!(delivered(&ev).is_empty(), "{ev:?}");
    assert_eq!(r.place(&TaskId::new("t1").unwrap()), Some(TaskPlace::Queued { attempts: 1 }));
    let ev = r.hello(agent("slurm-8", &["gcc@13:x86_64-linux-gnu"], 1));
    assert_eq!(assigned(&ev), vec![("slurm-8".into(), "t1".into())]);
    let ev = r.report(
        &AgentId::new("slurm-8").unwrap(),
        &TaskId::new("t1").unwrap(),
        Report::Finished(Outcome::Succeeded),
    );
    assert_eq!(delivered(&ev), vec![("t1".into(), Delivery::Done(Outcome::Succeeded))]);
}

#[test]
fn two_submitters_share_equally_whoever_came_first() {
    let mut r = Router::new(7);
    // s1 queues 100 before s2 queues any; no agent yet has room.
    r.hello(agent("a", &["gcc@12"], 0));
    for i in 0..100 {
        r.submit(req(&format!("s1-{i}"), "s1", "gcc@12"));
    }
    for i in 0..100 {
        r.submit(req(&format!("s2-{i}"), "s2", "gcc@12"));
    }
    // Capacity for 60 arrives; of those, each submitter gets within 10 % of 30.
    let ev = r.hello(agent("a", &["gcc@12"], 60));
    let got = assigned(&ev);
    assert_eq!(got.len(), 60);
    let s1 = got.iter().filter(|(_, t)| t.starts_with("s1-")).count();
    assert!((27..=33).contains(&s1), "s1 got {s1} of 60");
}

#[test]
fn power_of_two_choices_prefers_the_less_loaded_agent_and_never_exceeds_tokens() {
    let mut r = Router::new(3);
    r.hello(agent("big", &["gcc@12"], 8));
    r.hello(agent("small", &["gcc@12"], 2));
    let mut per: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..10 {
        let (_, ev) = r.submit(req(&format!("t{i}"), "s", "gcc@12"));
        for (a, _) in assigned(&ev) {
            *per.entry(a).or_default() += 1;
        }
    }
    assert_eq!(per.get("big"), Some(&8), "{per:?}");
    assert_eq!(per.get("small"), Some(&2), "{per:?}");
    let (_, ev) = r.submit(req("t10", "s", "gcc@12"));
    assert!(assigned(&ev).is_empty(), "no agent holds more than its tokens");
    assert_eq!(r.queued(), 1);
}

#[test]
fn the_mirror_is_charged_so_no_agent_gets_more_than_it_said_it_could_take() {
    let mut r = Router::new(1);
    let mut h = agent("a", &["gcc@12"], 10);
    h.availability = Availability { memory: 2 * GIB + GIB / 2, cpu_millis: 8000 };
    r.hello(h);
    let ev: Vec<Event> = (0..4).flat_map(|i| r.submit(req(&format!("t{i}"), "s", "gcc@12")).1).collect();
    assert_eq!(assigned(&ev).len(), 2, "2.5 GiB takes two 1 GiB tasks before the next update");
    let ev = r.update(&AgentId::new("a").unwrap(), Availability { memory: 4 * GIB, cpu_millis: 8000 });
    assert_eq!(assigned(&ev).len(), 2);
}

#[test]
fn a_mirror_with_no_cpu_offers_nothing_even_to_a_task_declaring_none() {
    let mut r = Router::new(1);
    let mut h = agent("a", &["gcc@12"], 4);
    // An agent whose host gate is closed, or whose mirror a WAIT emptied.
    h.availability = Availability { memory: 64 * GIB, cpu_millis: 0 };
    r.hello(h);
    let free = Request { need: Need { memory: 0, cpu_millis: 0 }, ..req("free", "s", "gcc@12") };
    let (_, ev) = r.submit(free);
    assert!(assigned(&ev).is_empty(), "nothing is offered to an agent that admits nothing: {ev:?}");
    // Its gate opens: the push offers it at once.
    let ev = r.update(&AgentId::new("a").unwrap(), Availability { memory: 64 * GIB, cpu_millis: 1 });
    assert_eq!(assigned(&ev), vec![("a".into(), "free".into())]);
    // Charged one thousandth: nothing more fits until the next update.
    let (_, ev) = r.submit(Request { need: Need { memory: 0, cpu_millis: 0 }, ..req("more", "s", "gcc@12") });
    assert!(assigned(&ev).is_empty(), "{ev:?}");
}

#[test]
fn a_wait_at_the_agent_sends_the_task_back_to_the_head_of_its_route() {
    let mut r = Router::new(1);
    r.hello(agent("a", &["gcc@12"], 1));
    r.submit(req("first", "s", "gcc@12"));
    r.submit(req("second", "s", "gcc@12"));
    let a = AgentId::new("a").unwrap();
    // Its Governor waits: the task returns, first in line, and the agent's
    // mirror says it has no room now.
    let ev = r.update(&a, Availability::default());
    assert!(ev.is_empty());
    let ev = r.report(&a, &TaskId::new("first").unwrap(), Report::Wait);
    assert!(assigned(&ev).is_empty(), "no room in the mirror: {ev:?}");
    let ev = r.update(&a, Availability { memory: 8 * GIB, cpu_millis: 4000 });
    assert_eq!(assigned(&ev), vec![("a".into(), "first".into())]);
}

#[test]
fn a_lost_agents_tasks_run_elsewhere_and_repeated_loss_hands_them_back() {
    let mut r = Router::new(1);
    r.hello(agent("a", &["gcc@12"], 1));
    r.hello(agent("b", &["gcc@12"], 0));
    r.submit(req("t", "s", "gcc@12"));
    assert_eq!(r.in_flight(&AgentId::new("a").unwrap()), 1);
    // b gets room; a dies: t moves to b.
    r.hello(agent("b", &["gcc@12"], 1));
    let ev = r.agent_lost(&AgentId::new("a").unwrap());
    assert_eq!(assigned(&ev), vec![("b".into(), "t".into())]);
    r.hello(agent("c", &["gcc@12"], 1));
    let ev = r.agent_lost(&AgentId::new("b").unwrap());
    assert_eq!(assigned(&ev), vec![("c".into(), "t".into())]);
    // Third loss: handed back to run locally (never a hang).
    let ev = r.agent_lost(&AgentId::new("c").unwrap());
    assert!(matches!(delivered(&ev).as_slice(), [(t, Delivery::RunLocally(_))] if t == "t"), "{ev:?}");
}

#[test]
fn when_the_last_agent_goes_waiting_tasks_are_handed_back() {
    let mut r = Router::new(1);
    r.hello(agent("a", &["gcc@12"], 0));
    r.submit(req("t", "s", "gcc@12"));
    let ev = r.agent_lost(&AgentId::new("a").unwrap());
    assert!(matches!(delivered(&ev).as_slice(), [(t, Delivery::RunLocally(_))] if t == "t"), "{ev:?}");
}

#[test]
fn results_are_delivered_once_and_resubmissions_are_not_run_twice() {
    let mut r = Router::new(1);
    r.hello(agent("a", &["gcc@12"], 1));
    r.submit(req("t", "s", "gcc@12"));
    assert_eq!(r.submit(req("t", "s", "gcc@12")).0, Submitted::AlreadyKnown);
    let a = AgentId::new("a").unwrap();
    let t = TaskId::new("t").unwrap();
    let ev = r.report(&a, &t, Report::Finished(Outcome::Succeeded));
    assert_eq!(delivered(&ev), vec![("t".into(), Delivery::Done(Outcome::Succeeded))]);
    assert!(r.report(&a, &t, Report::Finished(Outcome::Succeeded)).is_empty(), "a late duplicate is ignored");
    assert!(r.report(&AgentId::new("b").unwrap(), &t, Report::Wait).is_empty(), "a stranger's report too");
    assert_eq!(r.submit(req("t", "s", "gcc@12")).0, Submitted::AlreadyFinished);
}

#[test]
fn after_a_broker_restart_an_agents_running_task_stays_its_own() {
    // The new broker knows nothing; the submitter resubmits t before the
    // agent's hello arrives; the hello claims t, so it does not run twice.
    let mut r = Router::new(1);
    r.hello(agent("idle", &["gcc@12"], 0));
    r.submit(req("t", "s", "gcc@12"));
    let mut h = agent("a", &["gcc@12"], 2);
    h.running = vec![TaskId::new("t").unwrap()];
    let ev = r.hello(h);
    assert!(assigned(&ev).is_empty(), "t is already running at a: {ev:?}");
    assert_eq!(r.in_flight(&AgentId::new("a").unwrap()), 1);
    assert_eq!(r.queued(), 0);
}

#[test]
fn cancel_answers_a_queued_task_and_reaches_a_running_one() {
    let mut r = Router::new(1);
    r.hello(agent("a", &["gcc@12"], 1));
    r.submit(req("run", "s", "gcc@12"));
    r.submit(req("wait", "s", "gcc@12"));
    let ev = r.cancel(&TaskId::new("wait").unwrap());
    assert_eq!(delivered(&ev), vec![("wait".into(), Delivery::Cancelled)]);
    let ev = r.cancel(&TaskId::new("run").unwrap());
    assert_eq!(
        ev,
        vec![Event::Cancel { agent: AgentId::new("a").unwrap(), task: TaskId::new("run").unwrap() }]
    );
}

#[derive(Debug, Clone)]
enum Op {
    Submit { task: u8, submitter: u8, capability: u8 },
    Hello { agent: u8, tokens: u8, caps: u8 },
    Lost { agent: u8 },
    Finish { agent: u8, pick: u8 },
    Wait { agent: u8, pick: u8 },
    Update { agent: u8, memory_gib: u8 },
    Cancel { task: u8 },
    Drain { agent: u8, keep: u8 },
    Tokens { agent: u8, tokens: u8 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..40u8, 0..3u8, 0..2u8).prop_map(|(task, submitter, capability)| Op::Submit { task, submitter, capability }),
        1 => (0..4u8, 0..4u8, 1..4u8).prop_map(|(agent, tokens, caps)| Op::Hello { agent, tokens, caps }),
        1 => (0..4u8).prop_map(|agent| Op::Lost { agent }),
        3 => (0..4u8, any::<u8>()).prop_map(|(agent, pick)| Op::Finish { agent, pick }),
        1 => (0..4u8, any::<u8>()).prop_map(|(agent, pick)| Op::Wait { agent, pick }),
        1 => (0..4u8, 0..8u8).prop_map(|(agent, memory_gib)| Op::Update { agent, memory_gib }),
        1 => (0..40u8).prop_map(|task| Op::Cancel { task }),
        1 => (0..4u8, any::<u8>()).prop_map(|(agent, keep)| Op::Drain { agent, keep }),
        1 => (0..4u8, 1..5u8).prop_map(|(agent, tokens)| Op::Tokens { agent, tokens }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]
    #[test]
    fn random_faults_lose_nothing_and_deliver_once(ops in proptest::collection::vec(op(), 1..120), seed in any::<u64>()) {
        let caps = ["gcc@12", "python@3.11"];
        let mut r = Router::new(seed);
        // What each agent holds per the events, and each task's fate.
        let mut holding: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut tokens: BTreeMap<String, u32> = BTreeMap::new();
        let mut submitted: BTreeSet<String> = BTreeSet::new();
        let mut delivered_once: BTreeMap<String, usize> = BTreeMap::new();
        let mut apply = |ev: Vec<Event>, holding: &mut BTreeMap<String, BTreeSet<String>>| {
            for e in ev {
                match e {
                    Event::Assign { agent, task } => {
                        for h in holding.values_mut() {
                            prop_assert!(!h.contains(task.as_str()), "{task} assigned while held elsewhere");
                        }
                        holding.entry(agent.to_string()).or_default().insert(task.to_string());
                    }
                    // NoExecutor answers a submission the router never kept.
                    Event::Deliver { delivery: Delivery::NoExecutor, .. } => {}
                    Event::Deliver { task, .. } => *delivered_once.entry(task.to_string()).or_default() += 1,
                    Event::Cancel { .. } => {}
                }
            }
            Ok(())
        };
        for op in ops {
            let ev = match op {
                Op::Submit { task, submitter, capability } => {
                    let id = format!("t{task}");
                    let (s, ev) = r.submit(req(&id, &format!("s{submitter}"), caps[usize::from(capability)]));
                    if s == Submitted::Queued {
                        prop_assert!(submitted.insert(id.clone()), "{id} accepted twice");
                    }
                    ev
                }
                Op::Hello { agent, tokens: t, caps: c } => {
                    let name = format!("a{agent}");
                    holding.remove(&name);
                    tokens.insert(name.clone(), u32::from(t));
                    let declared: Vec<&str> =
                        caps.iter().enumerate().filter(|(i, _)| c & (1 << i) != 0).map(|(_, s)| *s).collect();
                    r.hello(self::agent(&name, &declared, u32::from(t)))
                }
                Op::Lost { agent } => {
                    let name = format!("a{agent}");
                    holding.remove(&name);
                    r.agent_lost(&AgentId::new(&name).unwrap())
                }
                Op::Finish { agent, pick } | Op::Wait { agent, pick } => {
                    let name = format!("a{agent}");
                    let held: Vec<String> = holding.get(&name).map(|h| h.iter().cloned().collect()).unwrap_or_default();
                    if held.is_empty() { continue; }
                    let task = held[usize::from(pick) % held.len()].clone();
                    if let Some(h) = holding.get_mut(&name) { h.remove(&task); }
                    let report = if matches!(op, Op::Wait { .. }) { Report::Wait } else { Report::Finished(Outcome::Succeeded) };
                    r.report(&AgentId::new(&name).unwrap(), &TaskId::new(&task).unwrap(), report)
                }
                Op::Update { agent, memory_gib } => r.update(
                    &AgentId::new(&format!("a{agent}")).unwrap(),
                    Availability { memory: u64::from(memory_gib) * GIB, cpu_millis: 64_000 },
                ),
                Op::Cancel { task } => r.cancel(&TaskId::new(&format!("t{task}")).unwrap()),
                Op::Drain { agent, keep } => {
                    // It says it still runs the held tasks whose bit is set
                    // in `keep`; the rest go back.
                    let name = format!("a{agent}");
                    let held: Vec<String> = holding.get(&name).map(|h| h.iter().cloned().collect()).unwrap_or_default();
                    let running: Vec<String> =
                        held.iter().enumerate().filter(|(i, _)| keep & (1 << (i % 8)) != 0).map(|(_, t)| t.clone()).collect();
                    if let Some(h) = holding.get_mut(&name) { h.retain(|t| running.contains(t)); }
                    let ids: Vec<TaskId> = running.iter().map(|t| TaskId::new(t).unwrap()).collect();
                    r.drain(&AgentId::new(&name).unwrap(), &ids)
                }
                Op::Tokens { agent, tokens: t } => {
                    let name = format!("a{agent}");
                    if tokens.contains_key(&name) {
                        // Shrinking below what it holds is allowed (the
                        // tasks stay); the check below is against the most
                        // it was ever allowed.
                        let most = tokens.get(&name).copied().unwrap_or(0).max(u32::from(t));
                        tokens.insert(name.clone(), most);
                    }
                    r.set_tokens(&AgentId::new(&name).unwrap(), u32::from(t))
                }
            };
            apply(ev, &mut holding)?;
            prop_assert_eq!(r.check(), Ok(()));
            for (name, h) in &holding {
                prop_assert!(h.len() as u32 <= tokens.get(name).copied().unwrap_or(0), "{name} over its tokens");
                prop_assert_eq!(r.in_flight(&AgentId::new(name).unwrap()), h.len());
            }
        }
        for (task, n) in &delivered_once {
            prop_assert_eq!(*n, 1usize, "{} delivered {} times", task, n);
        }
        // Nothing lost: every accepted task is delivered, queued or held.
        let held: usize = holding.values().map(BTreeSet::len).sum();
        prop_assert_eq!(submitted.len(), delivered_once.len() + r.queued() + held);
    }
}

#[test]
fn no_task_goes_to_an_agent_whose_allocation_ends_before_the_task_would() {
    let mut r = Router::new(1);
    r.set_now(1_000_000);
    // a1 has 10 minutes left, a2 two hours.
    r.hello(ending("a1", &["gcc@12"], 4, 1_000_000 + 600_000));
    r.hello(ending("a2", &["gcc@12"], 1, 1_000_000 + 7_200_000));
    // A 30-minute task: only a2 has the time.
    let (s, ev) = r.submit(timed("long", "gcc@12", 1_800_000));
    assert_eq!((s, assigned(&ev)), (Submitted::Queued, vec![("a2".into(), "long".into())]));
    // a2 is full: the next long one waits for it rather than going to a1.
    let (s, ev) = r.submit(timed("long2", "gcc@12", 1_800_000));
    assert_eq!((s, assigned(&ev)), (Submitted::Queued, vec![]));
    // A 5-minute task (of another submitter: one submitter's queue is
    // FIFO) fits a1's 10 minutes.
    let (_, ev) =
        r.submit(Request { submitter: SubmitterId::new("s2").unwrap(), ..timed("short", "gcc@12", 300_000) });
    assert_eq!(assigned(&ev), vec![("a1".into(), "short".into())]);
    // An unknown duration holds nothing back.
    let (_, ev) = r.submit(req("unknown", "s2", "gcc@12"));
    assert_eq!(assigned(&ev), vec![("a1".into(), "unknown".into())]);
    // Time passes: 8 minutes later a1 has 2 minutes left, too few for 5.
    r.set_now(1_000_000 + 480_000);
    let (_, ev) = r
        .submit(Request { submitter: SubmitterId::new("s2").unwrap(), ..timed("short2", "gcc@12", 300_000) });
    assert_eq!(assigned(&ev), vec![], "a2 is full and a1 has 2 minutes left");
    // a2 frees: long2 goes there.
    let ev = r.report(
        &AgentId::new("a2").unwrap(),
        &TaskId::new("long").unwrap(),
        Report::Finished(Outcome::Succeeded),
    );
    assert_eq!(assigned(&ev), vec![("a2".into(), "long2".into())]);
}

#[test]
fn a_task_no_agent_could_ever_take_is_answered_like_no_executor() {
    let mut r = Router::new(1);
    r.set_now(0);
    r.hello(ending("a1", &["gcc@12"], 1, 600_000));
    // Longer than any allocation here: answered at once, never queued.
    let (s, ev) = r.submit(timed("huge", "gcc@12", 3_600_000));
    assert_eq!(s, Submitted::NoExecutor);
    assert_eq!(delivered(&ev), vec![("huge".into(), Delivery::NoExecutor)]);
    // One that fits now waits behind a busy agent…
    r.submit(timed("busy", "gcc@12", 60_000));
    let (s, _) = r.submit(timed("later", "gcc@12", 300_000));
    assert_eq!(s, Submitted::Queued);
    // … until the agent's time left no longer covers it: handed back at
    // the next dispatch, not left to wait for ever.
    r.set_now(400_000);
    let ev = r.report(
        &AgentId::new("a1").unwrap(),
        &TaskId::new("busy").unwrap(),
        Report::Finished(Outcome::Succeeded),
    );
    assert_eq!(
        delivered(&ev),
        vec![("busy".into(), Delivery::Done(Outcome::Succeeded)), ("later".into(), Delivery::NoExecutor)]
    );
    assert_eq!((r.queued(), r.check()), (0, Ok(())));
    // An agent with no end known takes anything.
    r.hello(agent("a2", &["gcc@12"], 1));
    let (_, ev) = r.submit(timed("huge2", "gcc@12", 3_600_000));
    assert_eq!(assigned(&ev), vec![("a2".into(), "huge2".into())]);
}

#[test]
fn a_draining_agent_gets_nothing_new_and_its_unstarted_tasks_go_elsewhere_at_once() {
    let mut r = Router::new(1);
    r.hello(agent("a1", &["gcc@12"], 4));
    for t in ["run", "u1", "u2"] {
        r.submit(req(t, "s", "gcc@12"));
    }
    assert_eq!(r.in_flight(&AgentId::new("a1").unwrap()), 3);
    r.hello(agent("a2", &["gcc@12"], 4));
    // a1 drains still running `run`: u1 and u2 go to a2 at once, with no
    // attempt counted (they never ran).
    let ev = r.drain(&AgentId::new("a1").unwrap(), &[TaskId::new("run").unwrap()]);
    let mut got = assigned(&ev);
    got.sort();
    assert_eq!(got, vec![("a2".into(), "u1".into()), ("a2".into(), "u2".into())]);
    assert_eq!(
        r.place(&TaskId::new("u1").unwrap()),
        Some(TaskPlace::InFlight { agent: AgentId::new("a2").unwrap(), attempts: 0 })
    );
    assert!(r.agents().iter().any(|a| a.agent.as_str() == "a1" && a.draining));
    // New work never goes to it, though it has free tokens.
    let (_, ev) = r.submit(req("new", "s", "gcc@12"));
    assert_eq!(assigned(&ev), vec![("a2".into(), "new".into())]);
    // Its running task still reports normally, once.
    let ev = r.report(
        &AgentId::new("a1").unwrap(),
        &TaskId::new("run").unwrap(),
        Report::Finished(Outcome::Succeeded),
    );
    assert_eq!(delivered(&ev), vec![("run".into(), Delivery::Done(Outcome::Succeeded))]);
    // A WAIT for a task it no longer holds (an assignment that crossed the
    // drain notice) changes nothing.
    assert!(r.report(&AgentId::new("a1").unwrap(), &TaskId::new("u1").unwrap(), Report::Wait).is_empty());
    assert_eq!(r.check(), Ok(()));
}

#[test]
fn when_the_only_agent_of_a_capability_drains_its_waiting_tasks_are_handed_back() {
    let mut r = Router::new(1);
    r.hello(agent("a1", &["gcc@12"], 1));
    r.submit(req("run", "s", "gcc@12"));
    r.submit(req("waiting", "s", "gcc@12"));
    let ev = r.drain(&AgentId::new("a1").unwrap(), &[TaskId::new("run").unwrap()]);
    assert_eq!(
        delivered(&ev),
        vec![("waiting".into(), Delivery::RunLocally("no agent for gcc@12:* any more".into()))]
    );
    let (s, _) = r.submit(req("new", "s", "gcc@12"));
    assert_eq!(s, Submitted::NoExecutor, "a draining agent serves nothing new");
}

#[test]
fn the_optimizers_bound_limits_what_an_agent_is_given() {
    let mut r = Router::new(1);
    r.hello(agent("a1", &["gcc@12"], 1));
    for t in ["t1", "t2", "t3"] {
        r.submit(req(t, "s", "gcc@12"));
    }
    let a1 = AgentId::new("a1").unwrap();
    assert_eq!(r.in_flight(&a1), 1);
    // Grown to 3: two more go at once.
    assert_eq!(assigned(&r.set_tokens(&a1, 3)).len(), 2);
    // Shrunk to 1: what it holds stays, nothing new until it is under 1.
    assert!(r.set_tokens(&a1, 1).is_empty());
    assert_eq!(r.in_flight(&a1), 3);
    r.submit(req("t4", "s", "gcc@12"));
    let ev = r.report(&a1, &TaskId::new("t1").unwrap(), Report::Finished(Outcome::Succeeded));
    assert_eq!(assigned(&ev), vec![], "2 held, bound 1");
}

#[test]
fn after_a_restart_restored_tasks_wait_for_their_agents_and_the_sweep_hands_back_the_rest() {
    let mut r = Router::new(1);
    // Read back from the store: no agent connected yet, yet nothing is
    // answered "no executor".
    assert!(r.restore(req("held", "s", "gcc@12"), 1));
    assert!(r.restore(req("queued", "s", "gcc@12"), 0));
    assert!(r.restore(req("orphan", "s", "clang@17"), 0));
    assert!(!r.restore(req("held", "s", "gcc@12"), 0), "an id is restored once");
    // The agent that ran `held` is a placeholder holding it: no tokens,
    // no capabilities, so nothing new goes to it.
    let ghost = Hello { running: vec![TaskId::new("held").unwrap()], ..agent("a", &[], 0) };
    assert!(r.hello(ghost).is_empty());
    assert_eq!(
        r.place(&TaskId::new("held").unwrap()),
        Some(TaskPlace::InFlight { agent: AgentId::new("a").unwrap(), attempts: 1 })
    );
    // Another agent takes the queued task, never the held one.
    let ev = r.hello(agent("b", &["gcc@12"], 4));
    assert_eq!(assigned(&ev), vec![("b".into(), "queued".into())]);
    // The end of the window: the route nobody serves is handed back.
    let ev = r.sweep();
    assert_eq!(
        delivered(&ev),
        vec![("orphan".into(), Delivery::RunLocally("no agent for clang@17:* any more".into()))]
    );
    r.check().unwrap();
}

#[test]
fn a_wait_empties_the_agents_mirror_until_its_next_update() {
    let mut r = Router::new(1);
    r.hello(agent("a", &["gcc@12"], 4));
    r.submit(req("t", "s", "gcc@12"));
    let a = AgentId::new("a").unwrap();
    // The mirror still admits the task, but the Governor said WAIT (say,
    // host pressure): it is not sent straight back to the same agent.
    let ev = r.report(&a, &TaskId::new("t").unwrap(), Report::Wait);
    assert!(assigned(&ev).is_empty(), "{ev:?}");
    assert_eq!(r.queued(), 1);
    let ev = r.update(&a, Availability { memory: 8 * GIB, cpu_millis: 4000 });
    assert_eq!(assigned(&ev), vec![("a".into(), "t".into())]);
}

#[test]
fn a_passed_deadline_answers_a_queued_task_and_cancels_a_running_one() {
    let mut r = Router::new(1);
    r.hello(agent("a", &["gcc@12"], 1));
    r.submit(req("running", "s", "gcc@12"));
    r.submit(req("waiting", "s", "gcc@12"));
    let ev = r.expire(&TaskId::new("waiting").unwrap());
    assert_eq!(delivered(&ev), vec![("waiting".into(), Delivery::Expired)]);
    assert_eq!(r.queued(), 0);
    let ev = r.expire(&TaskId::new("running").unwrap());
    assert_eq!(
        ev,
        vec![Event::Cancel { agent: AgentId::new("a").unwrap(), task: TaskId::new("running").unwrap() }]
    );
    assert!(r.expire(&TaskId::new("waiting").unwrap()).is_empty(), "answered once");
    r.check().unwrap();
}
