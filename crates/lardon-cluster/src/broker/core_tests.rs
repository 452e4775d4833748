//! The owner task's restart rules, driven input by input on a real store:
//! what is restored, who gets what when agents come back, and what the end
//! of the recovery window does.

use lardon_proto::cluster as pb;
use tokio::sync::{mpsc, oneshot};

use super::core::{AgentTx, Core, Input};
use crate::store::Store;
use lardon_cluster_core::Capability;
use lardon_cluster_core::{AgentId, SubmitterId, TaskId};
use lardon_cluster_core::{Availability, Hello};

fn spec(id: &str) -> pb::TaskSpec {
    pb::TaskSpec {
        task_id: id.into(),
        capability: Some(pb::Capability { name: "sh".into(), version: "1".into(), target: String::new() }),
        need: Some(pb::Need { memory: 0, cpu_millis: 1000 }),
        argv: vec!["true".into()],
        ..Default::default()
    }
}

/// A core restored from a store where `held` was at agent `a1` and
/// `queued` waited, as a broker killed at that moment left it.
fn restarted(dir: &std::path::Path) -> Core {
    let store = Store::open(dir).unwrap_or_else(|e| panic!("{e}"));
    store.insert("s", &spec("held")).unwrap_or_else(|e| panic!("{e}"));
    store.place("held", Some("a1"), 0).unwrap_or_else(|e| panic!("{e}"));
    store.insert("s", &spec("queued")).unwrap_or_else(|e| panic!("{e}"));
    let (core, restored) = Core::restore(store, 1, None).unwrap_or_else(|e| panic!("{e}"));
    assert!(restored);
    core
}

fn hello(
    core: &mut Core,
    agent: &str,
    running: &[&str],
    conn: u64,
) -> mpsc::UnboundedReceiver<Result<pb::BrokerToAgent, tonic::Status>> {
    let (tx, rx): (AgentTx, _) = mpsc::unbounded_channel();
    let hello = Hello {
        agent: AgentId::new(agent).unwrap_or_else(|e| panic!("{e}")),
        capabilities: vec![Capability::parse("sh@1").unwrap_or_else(|e| panic!("{e}"))],
        availability: Availability { memory: 1 << 34, cpu_millis: 64_000 },
        tokens: 4,
        running: running.iter().map(|t| TaskId::new(t).unwrap_or_else(|e| panic!("{e}"))).collect(),
        ends_at_ms: None,
    };
    core.handle(Input::AgentHello { hello, conn, tx });
    rx
}

fn drain(rx: &mut mpsc::UnboundedReceiver<Result<pb::BrokerToAgent, tonic::Status>>) -> Vec<String> {
    let mut got = Vec::new();
    while let Ok(Ok(m)) = rx.try_recv() {
        match m.kind {
            Some(pb::broker_to_agent::Kind::Assign(s)) => got.push(format!("assign {}", s.task_id)),
            Some(pb::broker_to_agent::Kind::Cancel(c)) => got.push(format!("cancel {}", c.task_id)),
            Some(pb::broker_to_agent::Kind::Ack(a)) => got.push(format!("ack {}", a.task_id)),
            Some(pb::broker_to_agent::Kind::DrainAck(_)) => got.push("drain ack".to_owned()),
            Some(pb::broker_to_agent::Kind::Heartbeat(_)) | None => {}
        }
    }
    got
}

fn status(core: &mut Core) -> pb::ClusterStatusResponse {
    let (reply, mut rx) = oneshot::channel();
    core.handle(Input::Status { reply });
    rx.try_recv().unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn a_held_task_waits_for_its_agent_and_never_goes_to_another() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let mut core = restarted(dir.path());
    let s = status(&mut core);
    assert_eq!((s.queued, s.in_flight), (1, 1));
    assert!(s.agents.iter().any(|a| a.agent_id == "a1" && a.recovering && a.in_flight == 1), "{s:?}");
    // Another agent comes first: it gets the queued task, not the held one.
    let mut b = hello(&mut core, "b", &[], 1);
    assert_eq!(drain(&mut b), vec!["assign queued".to_owned()]);
    // a1 comes back still running it: it stays a1's, nothing is sent.
    let mut a1 = hello(&mut core, "a1", &["held"], 2);
    assert_eq!(drain(&mut a1), Vec::<String>::new());
    let s = status(&mut core);
    assert!(s.agents.iter().all(|a| !a.recovering), "{s:?}");
    assert_eq!((s.queued, s.in_flight), (0, 2));
}

#[test]
fn a_cancel_asked_while_its_agent_is_away_reaches_it_on_return() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let mut core = restarted(dir.path());
    let (tx, _rx) = mpsc::unbounded_channel();
    let submitter = SubmitterId::new("s").unwrap_or_else(|e| panic!("{e}"));
    core.handle(Input::SubmitterHello { submitter: submitter.clone(), conn: 1, tx, accepted: None });
    core.handle(Input::Cancel { submitter, task: TaskId::new("held").unwrap_or_else(|e| panic!("{e}")) });
    let mut a1 = hello(&mut core, "a1", &["held"], 2);
    assert!(drain(&mut a1).contains(&"cancel held".to_owned()));
}

#[test]
fn an_agent_that_does_not_come_back_loses_its_task_to_another_at_the_end_of_the_window() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let mut core = restarted(dir.path());
    let mut b = hello(&mut core, "b", &[], 1);
    assert_eq!(drain(&mut b), vec!["assign queued".to_owned()]);
    core.handle(Input::RecoveryOver);
    assert_eq!(drain(&mut b), vec!["assign held".to_owned()]);
    let s = status(&mut core);
    assert_eq!((s.agents.len(), s.queued, s.in_flight), (1, 0, 2));
}

/// The broker's clock in these tests: a fixed instant.
fn at_noon() -> u64 {
    1_700_000_000_000
}

fn submit(core: &mut Core, id: &str, argv0: &str, expected_ms: u64) {
    let submitter = SubmitterId::new("s").unwrap_or_else(|e| panic!("{e}"));
    let spec = pb::TaskSpec { argv: vec![argv0.into()], expected_duration_ms: expected_ms, ..spec(id) };
    let job = lardon_cluster_core::wire::task_spec(spec, &submitter).unwrap_or_else(|e| panic!("{e}"));
    core.handle(Input::Submit { submitter, job: Box::new(job) });
}

fn ended(core: &mut Core, agent: &str, conn: u64, task: &str, peak: u64, wall_ms: u64) {
    let report = pb::TaskReport {
        task_id: task.into(),
        report: Some(pb::task_report::Report::Ended(pb::TaskEnded {
            success: true,
            exit_code: Some(0),
            peak_memory: peak,
            wall_ms,
            ..Default::default()
        })),
    };
    let (task, report, ended) = lardon_cluster_core::wire::report(report).unwrap_or_else(|e| panic!("{e}"));
    let agent = AgentId::new(agent).unwrap_or_else(|e| panic!("{e}"));
    core.handle(Input::AgentReport { agent, conn, task, report, ended });
}

fn replies(rx: &mut mpsc::UnboundedReceiver<Result<pb::SubmitReply, tonic::Status>>) -> Vec<String> {
    let mut got = Vec::new();
    while let Ok(Ok(r)) = rx.try_recv() {
        let what = match r.outcome {
            Some(pb::submit_reply::Outcome::Done(_)) => "done",
            Some(pb::submit_reply::Outcome::NoExecutor(_)) => "no executor",
            Some(_) => "other",
            None => continue,
        };
        got.push(format!("{} {what}", r.task_id));
    }
    got
}

#[test]
fn what_a_class_took_is_learned_kept_across_a_restart_and_keeps_it_off_agents_that_end_too_soon() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let store = Store::open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    let (core, _) = Core::restore(store, 1, None).unwrap_or_else(|e| panic!("{e}"));
    let mut core = core.with_clock(at_noon);
    let (tx, mut answers) = mpsc::unbounded_channel();
    let submitter = SubmitterId::new("s").unwrap_or_else(|e| panic!("{e}"));
    core.handle(Input::SubmitterHello { submitter, conn: 1, tx, accepted: None });
    // a1's allocation ends in 10 minutes.
    let (tx, mut a1): (AgentTx, _) = mpsc::unbounded_channel();
    let hello = Hello {
        agent: AgentId::new("a1").unwrap_or_else(|e| panic!("{e}")),
        capabilities: vec![Capability::parse("sh@1").unwrap_or_else(|e| panic!("{e}"))],
        availability: Availability { memory: 1 << 34, cpu_millis: 64_000 },
        tokens: 4,
        running: Vec::new(),
        ends_at_ms: Some(at_noon() + 600_000),
    };
    core.handle(Input::AgentHello { hello, conn: 7, tx });
    // Nothing learned, nothing declared: it runs there, and took an hour.
    submit(&mut core, "first", "/opt/render/bin/render", 0);
    assert_eq!(drain(&mut a1), vec!["assign first".to_owned()]);
    ended(&mut core, "a1", 7, "first", 3 << 30, 3_600_000);
    assert_eq!(replies(&mut answers), vec!["first done".to_owned()]);
    let class = "sh@1:*/render";
    let learned = core.estimate(class).unwrap_or_else(|| panic!("{class} was learned"));
    assert_eq!((learned.peak, learned.duration.as_secs()), (3 << 30, 3600));
    // The next of its class (another path, same program) is never sent to
    // a1's 10 minutes, even though its submitter guessed 1 minute: no
    // agent could ever take it, so it is answered like no executor.
    submit(&mut core, "second", "render", 60_000);
    assert_eq!(drain(&mut a1), vec!["ack first".to_owned()]);
    assert_eq!(replies(&mut answers), vec!["second no executor".to_owned()]);
    // Another class with nothing learned still goes there.
    submit(&mut core, "other", "true", 0);
    assert_eq!(drain(&mut a1), vec!["assign other".to_owned()]);
    // A restart keeps what was learned.
    drop(core);
    let store = Store::open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    let (core, _) = Core::restore(store, 1, None).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(core.estimate(class), Some(learned));
}

#[test]
fn a_draining_agent_is_acknowledged_its_unstarted_tasks_go_elsewhere_and_status_says_so() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let store = Store::open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    let (mut core, _) = Core::restore(store, 1, None).unwrap_or_else(|e| panic!("{e}"));
    let mut a1 = hello(&mut core, "a1", &[], 1);
    for t in ["run", "u1"] {
        submit(&mut core, t, "true", 0);
    }
    assert_eq!(drain(&mut a1), vec!["assign run".to_owned(), "assign u1".to_owned()]);
    let mut b = hello(&mut core, "b", &[], 2);
    let agent = AgentId::new("a1").unwrap_or_else(|e| panic!("{e}"));
    let running = vec![TaskId::new("run").unwrap_or_else(|e| panic!("{e}"))];
    core.handle(Input::AgentDraining { agent, conn: 1, running, reason: "SIGTERM".into() });
    assert_eq!(drain(&mut a1), vec!["drain ack".to_owned()]);
    assert_eq!(drain(&mut b), vec!["assign u1".to_owned()], "at once, not after a heartbeat timeout");
    let s = status(&mut core);
    assert!(s.agents.iter().any(|a| a.agent_id == "a1" && a.draining && a.in_flight == 1), "{s:?}");
    // The optimizer's verdict shows in the status.
    let agent = AgentId::new("b").unwrap_or_else(|e| panic!("{e}"));
    let bound = lardon_cluster_core::wire::TokenBound {
        tokens: 1,
        verdict: "shrink".into(),
        reason: "throttled 30 %".into(),
    };
    core.handle(Input::AgentTokens { agent, conn: 2, bound });
    let s = status(&mut core);
    let b = s.agents.iter().find(|a| a.agent_id == "b").unwrap_or_else(|| panic!("{s:?}"));
    assert_eq!(
        (b.tokens, b.optimizer_verdict.as_str(), b.optimizer_reason.as_str()),
        (1, "shrink", "throttled 30 %")
    );
}

/// The Provisioner sizes a capability's queued work with what its classes
/// measured (peak memory and wall time, from the store's learned
/// estimates), not with the submitter's declaration. Break it: build the
/// view from `queued_demand` alone and the memory stays the declared 0 and
/// no duration is known.
#[test]
fn the_provisioner_sees_what_the_queued_tasks_classes_measured() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let store = Store::open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    let (core, _) = Core::restore(store, 1, None).unwrap_or_else(|e| panic!("{e}"));
    let mut core = core.with_clock(at_noon);
    let capability = Capability::parse("sh@1").unwrap_or_else(|e| panic!("{e}"));
    core.set_shapes(vec![sh_shape(8 << 30, 4 * 3600)], &[]);
    let (tx, _answers) = mpsc::unbounded_channel();
    let submitter = SubmitterId::new("s").unwrap_or_else(|e| panic!("{e}"));
    core.handle(Input::SubmitterHello { submitter, conn: 1, tx, accepted: None });
    let mut a1 = hello(&mut core, "a1", &[], 7);
    submit(&mut core, "first", "/opt/render/bin/render", 0);
    assert_eq!(drain(&mut a1), vec!["assign first".to_owned()]);
    ended(&mut core, "a1", 7, "first", 3 << 30, 3_600_000);
    let agent = AgentId::new("a1").unwrap_or_else(|e| panic!("{e}"));
    core.handle(Input::AgentGone { agent, conn: 7 });
    // No agent now: the capability is provisionable, so these wait.
    submit(&mut core, "second", "render", 60_000);
    submit(&mut core, "third", "true", 120_000);
    let (reply, mut rx) = oneshot::channel();
    core.handle(Input::ProvisionView { reply });
    let view = rx.try_recv().unwrap_or_else(|e| panic!("{e}"));
    let (tasks, need) = view.queued.get(&capability).copied().unwrap_or_else(|| panic!("{view:?}"));
    assert_eq!((tasks, need.memory), (2, 3 << 30), "the learned peak of render's class: {view:?}");
    assert_eq!(
        view.durations.get("sh@1:*").copied(),
        Some(std::time::Duration::from_secs(3600)),
        "the longest of render's learned hour and true's declared 2 minutes"
    );
    assert!(view.agents.is_empty());
}

/// A shape offering sh@1: `memory` bytes, 2 CPUs, `walltime_s` seconds.
fn sh_shape(memory: u64, walltime_s: u64) -> crate::provision::Shape {
    crate::provision::Shape {
        name: "small".into(),
        memory,
        cpu_millis: 2000,
        nodes: 1,
        walltime: std::time::Duration::from_secs(walltime_s),
        capabilities: vec![Capability::parse("sh@1").unwrap_or_else(|e| panic!("{e}"))],
    }
}

fn submit_needing(core: &mut Core, id: &str, argv0: &str, memory: u64) {
    let submitter = SubmitterId::new("s").unwrap_or_else(|e| panic!("{e}"));
    let spec = pb::TaskSpec {
        argv: vec![argv0.into()],
        need: Some(pb::Need { memory, cpu_millis: 1000 }),
        ..spec(id)
    };
    let job = lardon_cluster_core::wire::task_spec(spec, &submitter).unwrap_or_else(|e| panic!("{e}"));
    core.handle(Input::Submit { submitter, job: Box::new(job) });
}

/// The "no executor" answers with their reasons; any other answer fails.
fn no_executors(rx: &mut mpsc::UnboundedReceiver<Result<pb::SubmitReply, tonic::Status>>) -> Vec<String> {
    let mut got = Vec::new();
    while let Ok(Ok(r)) = rx.try_recv() {
        match r.outcome {
            Some(pb::submit_reply::Outcome::NoExecutor(n)) => {
                got.push(format!("{}: {}", r.task_id, n.reason))
            }
            other => panic!("{}: {other:?}", r.task_id),
        }
    }
    got
}

/// A provisionable task that no allocation shape can ever hold is answered
/// "no executor" with the Provisioner's reason at once (and a queued one
/// at the next provisioning tick), not left to wait for its deadline —
/// unless a connected agent could run it. Break it: drop the `unfit`
/// check in `submit` and "huge" waits, unanswered.
#[test]
fn a_provisionable_task_no_shape_can_hold_is_handed_back_unless_an_agent_could_run_it() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let store = Store::open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    let (core, _) = Core::restore(store, 1, None).unwrap_or_else(|e| panic!("{e}"));
    let mut core = core.with_clock(at_noon);
    core.set_shapes(vec![sh_shape(1 << 30, 3600)], &[]);
    let (tx, mut answers) = mpsc::unbounded_channel();
    let submitter = SubmitterId::new("s").unwrap_or_else(|e| panic!("{e}"));
    core.handle(Input::SubmitterHello { submitter, conn: 1, tx, accepted: None });

    // No agent, 4 GiB, the only shape 1 GiB: answered at once, saying why.
    submit_needing(&mut core, "huge", "big", 4 << 30);
    assert_eq!(
        no_executors(&mut answers),
        ["huge: sh@1:*: no shape fits 4.0 GiB and 1 CPUs (largest: 1.0 GiB and 2 CPUs)"]
    );
    // One that fits waits for its allocation.
    submit_needing(&mut core, "fits", "small", 512 << 20);
    assert!(no_executors(&mut answers).is_empty());
    assert_eq!(status(&mut core).queued, 1);

    // A connected agent serving sh@1 could run the big one: routed to it.
    let mut a1 = hello(&mut core, "a1", &[], 1);
    submit_needing(&mut core, "huge2", "big", 4 << 30);
    assert_eq!(drain(&mut a1), ["assign fits", "assign huge2"]);
    assert!(no_executors(&mut answers).is_empty());

    // Its class learns a 2 GiB peak: a later one declaring nothing is
    // answered from what it learned.
    ended(&mut core, "a1", 1, "huge2", 2 << 30, 1000);
    let _ = answers.try_recv(); // huge2's result
    // No room at a1 now: the next one queues while a1 could still run it.
    let agent = AgentId::new("a1").unwrap_or_else(|e| panic!("{e}"));
    core.handle(Input::AgentUpdate { agent: agent.clone(), conn: 1, availability: Availability::default() });
    submit_needing(&mut core, "queued", "big", 0);
    assert!(no_executors(&mut answers).is_empty(), "a1 could run it: it waits");
    core.handle(Input::AgentGone { agent, conn: 1 });
    assert!(no_executors(&mut answers).is_empty(), "provisionable: it still waits");
    // At the next provisioning tick it is handed back, with the reason.
    let (reply, mut rx) = oneshot::channel();
    core.handle(Input::ProvisionView { reply });
    let view = rx.try_recv().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        no_executors(&mut answers),
        ["queued: sh@1:*: no shape fits 2.0 GiB and 1 CPUs (largest: 1.0 GiB and 2 CPUs)"]
    );
    // Only `fits` (back from the lost agent) is left to provision for.
    let sh = Capability::parse("sh@1").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(view.queued.get(&sh).map(|(n, need)| (*n, need.memory)), Some((1, 512 << 20)), "{view:?}");
    let (reply, mut rx) = oneshot::channel();
    core.handle(Input::Check { reply });
    assert_eq!(rx.try_recv().unwrap_or_else(|e| panic!("{e}")), Ok(()));
    // Answered for good: asked again, the store answers the same.
    submit_needing(&mut core, "queued", "big", 0);
    assert_eq!(
        no_executors(&mut answers),
        ["queued: sh@1:*: no shape fits 2.0 GiB and 1 CPUs (largest: 1.0 GiB and 2 CPUs)"]
    );
}

/// A capability an outside scaler starts agents for (`--scaled-capability`,
/// KEDA) waits for an agent even with no agent and a Provisioner whose
/// shapes do not offer it — never "no executor", never handed back as
/// "no shape fits". Another capability is still answered at once. Break
/// it: drop `scaled` from `set_shapes` and "big-py" is answered at once.
#[test]
fn a_scaled_capability_waits_for_an_agent_and_is_never_handed_back() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let store = Store::open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    let (core, _) = Core::restore(store, 1, None).unwrap_or_else(|e| panic!("{e}"));
    let mut core = core.with_clock(at_noon);
    let py = Capability::parse("py@3").unwrap_or_else(|e| panic!("{e}"));
    core.set_shapes(vec![sh_shape(1 << 30, 3600)], std::slice::from_ref(&py));
    let (tx, mut answers) = mpsc::unbounded_channel();
    let submitter = SubmitterId::new("s").unwrap_or_else(|e| panic!("{e}"));
    core.handle(Input::SubmitterHello { submitter: submitter.clone(), conn: 1, tx, accepted: None });
    let submit = |core: &mut Core, id: &str, name: &str, memory: u64| {
        let spec = pb::TaskSpec {
            capability: Some(pb::Capability {
                name: name.into(),
                version: "3".into(),
                target: String::new(),
            }),
            need: Some(pb::Need { memory, cpu_millis: 1000 }),
            ..spec(id)
        };
        let job = lardon_cluster_core::wire::task_spec(spec, &submitter).unwrap_or_else(|e| panic!("{e}"));
        core.handle(Input::Submit { submitter: submitter.clone(), job: Box::new(job) });
    };
    submit(&mut core, "big-py", "py", 64 << 30);
    assert!(no_executors(&mut answers).is_empty(), "a scaled capability waits for its agent");
    let (reply, mut rx) = oneshot::channel();
    core.handle(Input::ProvisionView { reply });
    let _ = rx.try_recv();
    assert!(no_executors(&mut answers).is_empty(), "nor is it handed back at a tick");
    assert_eq!(status(&mut core).queued, 1);
    submit(&mut core, "rb", "ruby", 0);
    assert_eq!(no_executors(&mut answers), ["rb: "], "an unscaled capability with no agent: at once");
}

/// The fault tests' flake, made exact: t runs at a; a's stream drops (t
/// goes to b); a comes back still running t and is told to stop it; b is
/// lost. t must not go back to a before that stale run's end is reported,
/// and that ("cancelled") end must not answer t: only a new run's does.
#[test]
fn a_cancelled_stale_run_never_answers_its_task_when_the_task_comes_back() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let store = Store::open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    let (mut core, _) = Core::restore(store, 1, None).unwrap_or_else(|e| panic!("{e}"));
    let (tx, mut answers) = mpsc::unbounded_channel();
    let submitter = SubmitterId::new("s").unwrap_or_else(|e| panic!("{e}"));
    core.handle(Input::SubmitterHello { submitter, conn: 1, tx, accepted: None });
    let mut a = hello(&mut core, "a", &[], 1);
    submit(&mut core, "t", "true", 0);
    assert_eq!(drain(&mut a), vec!["assign t".to_owned()]);
    let mut b = hello(&mut core, "b", &[], 2);
    core.handle(Input::AgentGone { agent: AgentId::new("a").unwrap_or_else(|e| panic!("{e}")), conn: 1 });
    assert_eq!(drain(&mut b), vec!["assign t".to_owned()]);
    let mut a = hello(&mut core, "a", &["t"], 3);
    assert_eq!(drain(&mut a), vec!["cancel t".to_owned()]);
    core.handle(Input::AgentGone { agent: AgentId::new("b").unwrap_or_else(|e| panic!("{e}")), conn: 2 });
    assert_eq!(drain(&mut a), Vec::<String>::new(), "t went back to a before its stale run ended");

    let report = |success: bool| {
        let ended = pb::TaskEnded {
            success,
            reason: if success { String::new() } else { "cancelled".into() },
            ..Default::default()
        };
        let report =
            pb::TaskReport { task_id: "t".into(), report: Some(pb::task_report::Report::Ended(ended)) };
        let (task, report, ended) =
            lardon_cluster_core::wire::report(report).unwrap_or_else(|e| panic!("{e}"));
        let agent = AgentId::new("a").unwrap_or_else(|e| panic!("{e}"));
        Input::AgentReport { agent, conn: 3, task, report, ended }
    };
    core.handle(report(false));
    assert_eq!(replies(&mut answers), Vec::<String>::new(), "the stale run's end answered t");
    assert_eq!(drain(&mut a), vec!["ack t".to_owned(), "assign t".to_owned()]);
    core.handle(report(true));
    assert_eq!(replies(&mut answers), vec!["t done".to_owned()]);
}
