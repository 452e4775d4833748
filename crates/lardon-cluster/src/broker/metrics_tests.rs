//! The core's counters, driven input by input: a WAIT, a run lost with its
//! agent, a late report from the agent that lost it and the real end are
//! each counted once, under their own name.

use lardon_proto::cluster as pb;
use tokio::sync::{mpsc, oneshot};

use super::core::{AgentTx, Core, Input};
use super::metrics::{Counters, MetricsSnapshot};
use crate::store::Store;
use lardon_cluster_core::Capability;
use lardon_cluster_core::{AgentId, SubmitterId, TaskId};
use lardon_cluster_core::{Availability, Hello, Outcome, Report};

fn agent(
    core: &mut Core,
    id: &str,
    conn: u64,
) -> mpsc::UnboundedReceiver<Result<pb::BrokerToAgent, tonic::Status>> {
    let (tx, rx): (AgentTx, _) = mpsc::unbounded_channel();
    let hello = Hello {
        agent: AgentId::new(id).unwrap(),
        capabilities: vec![Capability::parse("sh@1").unwrap()],
        availability: Availability { memory: 1 << 34, cpu_millis: 64_000 },
        tokens: 1,
        running: Vec::new(),
        ends_at_ms: None,
    };
    core.handle(Input::AgentHello { hello, conn, tx });
    rx
}

fn metrics(core: &mut Core) -> MetricsSnapshot {
    let (reply, mut rx) = oneshot::channel();
    core.handle(Input::Metrics { reply });
    rx.try_recv().unwrap()
}

fn report(core: &mut Core, agent: &str, conn: u64, report: Report) {
    let (agent, task) = (AgentId::new(agent).unwrap(), TaskId::new("t1").unwrap());
    core.handle(Input::AgentReport { agent, conn, task, report, ended: None });
}

#[test]
fn each_event_is_counted_once_under_its_own_name() {
    let mut core = Core::restore(Store::in_memory().unwrap(), 1, None).unwrap().0;
    let _a1 = agent(&mut core, "a1", 1);
    let submitter = SubmitterId::new("s").unwrap();
    let (tx, _answers) = mpsc::unbounded_channel();
    core.handle(Input::SubmitterHello { submitter: submitter.clone(), conn: 2, tx, accepted: None });
    let spec = pb::TaskSpec {
        task_id: "t1".into(),
        capability: Some(pb::Capability { name: "sh".into(), version: "1".into(), target: String::new() }),
        need: Some(pb::Need { memory: 0, cpu_millis: 1000 }),
        argv: vec!["true".into()],
        ..Default::default()
    };
    let job = lardon_cluster_core::wire::task_spec(spec, &submitter).unwrap();
    core.handle(Input::Submit { submitter, job: Box::new(job) });
    let m = metrics(&mut core);
    assert_eq!((m.agents, m.submitters, m.load["sh@1:*"].in_flight), (1, 1, 1), "{m:?}");

    // a1's Governor says WAIT: queued again (its mirror is empty now).
    report(&mut core, "a1", 1, Report::Wait);
    assert_eq!(metrics(&mut core).counters, Counters { waited: 1, ..Counters::default() });
    assert_eq!(metrics(&mut core).load["sh@1:*"].queued, 1);
    // a2 takes it and is lost: one run lost, queued again (and back at a1,
    // whose new hello refilled its mirror).
    let _a2 = agent(&mut core, "a2", 3);
    core.handle(Input::AgentGone { agent: AgentId::new("a2").unwrap(), conn: 3 });
    let _a1 = agent(&mut core, "a1", 4);
    assert_eq!(metrics(&mut core).counters, Counters { waited: 1, requeued: 1, ..Counters::default() });
    // a2 comes back and reports the run it lost: late, dropped.
    let _a2 = agent(&mut core, "a2", 5);
    report(&mut core, "a2", 5, Report::Finished(Outcome::Succeeded));
    report(&mut core, "a1", 4, Report::Finished(Outcome::Succeeded));
    let m = metrics(&mut core);
    assert_eq!(
        m.counters,
        Counters { waited: 1, requeued: 1, late_reports: 1, done: 1, ..Counters::default() }
    );
    assert!(m.load.is_empty(), "{m:?}");
}
