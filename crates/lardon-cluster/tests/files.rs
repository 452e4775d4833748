//! Files through the broker's CAS, end to end over loopback gRPC: a broker
//! with its cache, an agent running real processes (a fake Governor), and
//! a submitter. Inputs are uploaded and fetched into a fresh directory per
//! task, outputs come back by digest; a cacheable task's outputs are
//! restored from the cache with no agent connected; bad paths are refused
//! before anything is written.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use lardon::{FakeClock, FakeProbe, Governor, HostPolicy, HostProfile};
use lardon_cluster::agent::{Agent, AgentConfig, ProcessExecutor};
use lardon_cluster::broker::{self, BrokerConfig};
use lardon_cluster::{AgentId, Capability, SubmitterId, TaskId};
use lardon_proto::cluster as pb;
use lardon_submit::Backoff;
use lardon_submit::client::{self, Answer, InputData, RemoteTask, Submitter, SubmitterConfig};
use tokio::sync::oneshot;

const WAIT: Duration = Duration::from_secs(30);

fn governor() -> Governor {
    let clock = Arc::new(FakeClock::new(lardon::MonoTime(1)));
    let profile = HostProfile::new(64 << 30, 16);
    let probe = FakeProbe::new(profile.clone()).stamped_by(clock.clone());
    Governor::with_clock(HostPolicy::default_for(&profile), probe, clock).unwrap()
}

fn fast() -> Backoff {
    Backoff { initial: Duration::from_millis(20), max: Duration::from_millis(200) }
}

async fn until(addr: &str, what: &str, ok: impl Fn(&pb::ClusterStatusResponse) -> bool) {
    let check = async {
        loop {
            if let Ok(s) = client::status(addr, &Default::default()).await
                && ok(&s)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(WAIT, check).await.unwrap_or_else(|_| panic!("timed out waiting for {what}"));
}

/// A broker with a 64 MiB cache; returns its address.
async fn broker() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let config = BrokerConfig {
        heartbeat: Duration::from_secs(1),
        cache: Some(lardon_cluster::cache::store::CacheLimits::new(64 << 20)),
        ..BrokerConfig::default()
    };
    tokio::spawn(broker::serve(listener, config, std::future::pending()));
    addr
}

/// An agent running real processes, its task directories under `work`;
/// drop (or fire) the sender to stop it.
async fn agent(addr: &str, work: &Path) -> (oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
    let config = AgentConfig {
        broker: addr.to_owned(),
        agent: AgentId::new("a1").unwrap(),
        capabilities: vec![Capability::parse("sh").unwrap()],
        tokens: 2,
        heartbeat: Duration::from_secs(1),
        backoff: fast(),
        dial: Default::default(),
        ends_at_ms: None,
        drain_grace: None,
        tuning: None,
    };
    let agent =
        Agent::new(config, governor(), Arc::new(ProcessExecutor)).unwrap().with_work_dir(work.to_path_buf());
    let (stop, stopped) = oneshot::channel::<()>();
    let handle = tokio::spawn(agent.run(async move {
        let _ = stopped.await;
    }));
    until(addr, "the agent to connect", |s| s.agents.len() == 1).await;
    (stop, handle)
}

fn submitter(addr: &str) -> Submitter {
    Submitter::start(SubmitterConfig {
        broker: addr.to_owned(),
        submitter: SubmitterId::new("s1").unwrap(),
        heartbeat: Duration::from_secs(1),
        backoff: fast(),
        unreachable_after: None,
        dial: Default::default(),
    })
    .unwrap()
}

fn sh(id: &str, script: &str) -> RemoteTask {
    RemoteTask::new(
        TaskId::new(id).unwrap(),
        Capability::parse("sh").unwrap(),
        vec!["sh".into(), "-c".into(), script.into()],
    )
}

async fn answer(s: &Submitter, task: &RemoteTask) -> Answer {
    let ticket = s.submit_with_files(task).await.unwrap();
    tokio::time::timeout(WAIT, ticket.answer()).await.expect("an answer").unwrap()
}

fn done(a: Answer) -> pb::TaskEnded {
    match a {
        Answer::Done(ended) => ended,
        other => panic!("{other:?}"),
    }
}

/// Bytes no two positions of which repeat for a while (not all zeros).
fn big(n: usize) -> Vec<u8> {
    (0..n).map(|i| u8::try_from((i * 7 + i / 251) % 256).unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_files_reach_the_task_and_its_outputs_come_back() {
    let addr = broker().await;
    let work = tempfile::tempdir().unwrap();
    let (_stop, _agent) = agent(&addr, work.path()).await;
    let s = submitter(&addr);

    // A blob over the batch limit goes through ByteStream both ways.
    let large = big(5 << 20);
    let mut t = sh("files", "cat in/a.txt b.txt > out.txt && mkdir -p sub && cp big sub/big && pwd > where");
    t.inputs = vec![
        InputData::new("in/a.txt", b"alpha\n".to_vec()),
        InputData::new("b.txt", b"beta\n".to_vec()),
        InputData::new("big", large.clone()),
    ];
    t.outputs = vec!["out.txt".into(), "sub/big".into(), "where".into()];
    let ended = done(answer(&s, &t).await);
    assert!(ended.success, "{ended:?}");
    let outputs = s.download_outputs(&ended).await.unwrap();
    let names: Vec<&str> = outputs.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(names, ["out.txt", "sub/big", "where"]);
    assert_eq!(outputs[0].1, b"alpha\nbeta\n");
    assert!(outputs[1].1 == large, "the large blob round-trips intact");
    let ran_in = String::from_utf8(outputs[2].1.clone()).unwrap();
    assert!(ran_in.trim().starts_with(work.path().to_str().unwrap()), "ran in {ran_in}");

    // A declared output the task did not make fails it, naming the file.
    let mut t = sh("no-output", "true");
    t.outputs = vec!["x.o".into()];
    let ended = done(answer(&s, &t).await);
    assert_eq!((ended.success, ended.reason.as_str()), (false, "outputs[0]: `x.o` was not produced"));
    // An output that is a link out of the directory is refused, not followed.
    let mut t = sh("link-output", "ln -s /etc/passwd x.o");
    t.outputs = vec!["x.o".into()];
    let ended = done(answer(&s, &t).await);
    assert!(!ended.success && ended.reason.contains("symbolic link"), "{ended:?}");
    assert!(ended.outputs.is_empty());

    // Every task's directory is gone once it ended.
    let left: Vec<_> = std::fs::read_dir(work.path().join("a1")).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_hit_restores_the_outputs_with_no_agent() {
    let addr = broker().await;
    let work = tempfile::tempdir().unwrap();
    let (stop, agent) = agent(&addr, work.path()).await;
    let s = submitter(&addr);
    let task = |id: &str, source: &[u8]| {
        let mut t = sh(id, "tr a-z A-Z < x.c > x.o");
        t.inputs = vec![InputData::new("x.c", source.to_vec())];
        t.outputs = vec!["x.o".into()];
        t.cacheable = true;
        t
    };
    let first = done(answer(&s, &task("first", b"int main;")).await);
    assert!(first.success, "{first:?}");
    assert_eq!(s.download_outputs(&first).await.unwrap(), [("x.o".to_owned(), b"INT MAIN;".to_vec())]);

    let _ = stop.send(());
    agent.await.unwrap();
    until(&addr, "the agent to be gone", |s| s.agents.is_empty()).await;

    let again = done(answer(&s, &task("again", b"int main;")).await);
    assert!(again.success);
    assert_eq!(
        s.download_outputs(&again).await.unwrap(),
        [("x.o".to_owned(), b"INT MAIN;".to_vec())],
        "the cached output"
    );
    // Other input content is another action: not in the cache.
    assert_eq!(answer(&s, &task("other", b"int other;")).await, Answer::NoExecutor(String::new()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paths_that_leave_the_task_directory_are_refused() {
    let addr = broker().await;
    let work = tempfile::tempdir().unwrap();
    let (_stop, _agent) = agent(&addr, work.path()).await;
    let s = submitter(&addr);
    for (i, path) in ["../escape", "/tmp/escape", "a/../../escape", ""].into_iter().enumerate() {
        let mut t = sh(&format!("bad-in-{i}"), "true");
        t.inputs = vec![InputData::new(path, b"x".to_vec())];
        match answer(&s, &t).await {
            Answer::Rejected(why) => assert!(why.starts_with("request.inputs[0].path: "), "{why}"),
            other => panic!("{path:?}: {other:?}"),
        }
        let mut t = sh(&format!("bad-out-{i}"), "true");
        t.outputs = vec![path.to_owned()];
        match answer(&s, &t).await {
            Answer::Rejected(why) => assert!(why.starts_with("request.outputs[0]: "), "{why}"),
            other => panic!("{path:?}: {other:?}"),
        }
    }
    assert!(!work.path().join("escape").exists());
    assert!(!work.path().join("a1").exists(), "no task directory was even made");
}
