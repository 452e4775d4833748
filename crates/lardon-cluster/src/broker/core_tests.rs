//! The owner task's restart rules, driven input by input on a real store:
//! what is restored, who gets what when agents come back, and what the end
//! of the recovery window does.

use lardon_proto::cluster as pb;
use tokio::sync::{mpsc, oneshot};

use super::core::{AgentTx, Core, Input};
use crate::capability::Capability;
use crate::ids::{AgentId, SubmitterId, TaskId};
use crate::messages::{Availability, Hello};
use crate::store::Store;

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
    core.handle(Input::SubmitterHello { submitter: submitter.clone(), conn: 1, tx });
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

#[test]
fn the_provisioner_sees_the_learned_wall_time_of_successes_on_the_cores_clock() {
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use crate::messages::{Outcome, Report};

    let now = Arc::new(Mutex::new(Instant::now()));
    let read = Arc::clone(&now);
    let clock =
        super::core::Clock(Arc::new(move || *read.lock().unwrap_or_else(std::sync::PoisonError::into_inner)));
    let advance = |d: Duration| *now.lock().unwrap_or_else(std::sync::PoisonError::into_inner) += d;
    let store = Store::in_memory().unwrap_or_else(|e| panic!("{e}"));
    let (core, _) = Core::restore(store, 1, None).unwrap_or_else(|e| panic!("{e}"));
    let mut core = core.with_clock(clock);
    let submitter = SubmitterId::new("s").unwrap_or_else(|e| panic!("{e}"));
    let (tx, _rx) = mpsc::unbounded_channel();
    core.handle(Input::SubmitterHello { submitter: submitter.clone(), conn: 1, tx });
    let mut a = hello(&mut core, "a1", &[], 1);
    let agent = AgentId::new("a1").unwrap_or_else(|e| panic!("{e}"));
    let view = |core: &mut Core| {
        let (reply, mut rx) = oneshot::channel();
        core.handle(Input::ProvisionView { reply });
        rx.try_recv().unwrap_or_else(|e| panic!("{e}"))
    };
    // Three runs: 5 min and 2 min successes, a 60 min failure.
    for (id, minutes, success) in [("t1", 5, true), ("t2", 2, true), ("t3", 60, false)] {
        let job = crate::wire::task_spec(spec(id), &submitter).unwrap_or_else(|e| panic!("{e}"));
        core.handle(Input::Submit { submitter: submitter.clone(), job: Box::new(job) });
        assert!(drain(&mut a).contains(&format!("assign {id}")));
        advance(Duration::from_secs(60 * minutes));
        let outcome = if success { Outcome::Succeeded } else { Outcome::Failed("exit 1".into()) };
        core.handle(Input::AgentReport {
            agent: agent.clone(),
            conn: 1,
            task: TaskId::new(id).unwrap_or_else(|e| panic!("{e}")),
            report: Report::Finished(outcome),
            ended: Some(pb::TaskEnded { success, ..Default::default() }),
        });
    }
    let v = view(&mut core);
    assert_eq!(v.durations.get("sh@1:*"), Some(&Duration::from_secs(300)), "{:?}", v.durations);
    assert_eq!(v.agents, ["a1"]);
}
