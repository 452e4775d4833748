//! Pilot-mode helpers shared by the local and the Slurm tests: a real
//! `lardon broker --provision FILE`, the submitter library, and polls of
//! the broker's status and `explain` with a deadline that only fails.
#![allow(dead_code)]

use std::path::Path;
use std::time::{Duration, Instant};

use lardon_cluster::{Capability, Need, SubmitterId, TaskId};
use lardon_proto::cluster::{ClusterStatusResponse, ProvisionExplainResponse};
use lardon_submit::Backoff;
use lardon_submit::client::{self, Answer, RemoteTask, Submitter, SubmitterConfig, Ticket};

use super::procs::{Proc, logs};

/// Long enough for an allocation to be granted, start and run a task on
/// the loaded 2-core machine; only a failure waits this long.
pub(crate) const WAIT: Duration = Duration::from_secs(90);

/// `lardon broker` at `addr` driving the provision file `toml`.
pub(crate) fn broker(dir: &Path, addr: &str, toml: &str) -> Proc {
    let file = dir.join("provision.toml");
    std::fs::write(&file, toml).unwrap();
    Proc::start(
        dir,
        "broker",
        &["broker", "--listen", addr, "--heartbeat", "1s", "--provision", file.to_str().unwrap()],
    )
}

pub(crate) fn submitter(addr: &str) -> Submitter {
    Submitter::start(SubmitterConfig {
        broker: addr.to_owned(),
        submitter: SubmitterId::new("test").unwrap(),
        heartbeat: Duration::from_secs(1),
        backoff: Backoff { initial: Duration::from_millis(50), max: Duration::from_millis(500) },
        unreachable_after: None,
        dial: Default::default(),
    })
    .unwrap()
}

/// A `sh -c SCRIPT` task of `capability` needing 16 MiB and one CPU.
pub(crate) fn sh(id: &str, capability: &str, script: &str) -> RemoteTask {
    let argv = vec!["sh".into(), "-c".into(), script.into()];
    let mut t = RemoteTask::new(TaskId::new(id).unwrap(), Capability::parse(capability).unwrap(), argv);
    t.need = Need { memory: 16 << 20, cpu_millis: 1000 };
    t
}

pub(crate) async fn answer(ticket: Ticket, procs: &[&Proc]) -> Answer {
    match tokio::time::timeout(WAIT, ticket.answer()).await {
        Ok(a) => a.unwrap(),
        Err(_) => panic!("no answer in {WAIT:?}\n{}", logs(procs)),
    }
}

/// The task succeeded; its standard output.
pub(crate) async fn done(ticket: Ticket, procs: &[&Proc]) -> String {
    match answer(ticket, procs).await {
        Answer::Done(ended) if ended.success => String::from_utf8_lossy(&ended.stdout).into_owned(),
        other => panic!("{other:?}\n{}", logs(procs)),
    }
}

/// Polls the broker's status until `ok` holds.
pub(crate) async fn until_status(
    addr: &str,
    what: &str,
    procs: &[&Proc],
    ok: impl Fn(&ClusterStatusResponse) -> bool,
) -> ClusterStatusResponse {
    let start = Instant::now();
    loop {
        if let Ok(s) = client::status(addr, &Default::default()).await
            && ok(&s)
        {
            return s;
        }
        assert!(start.elapsed() < WAIT, "timed out waiting for {what}\n{}", logs(procs));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls the Provisioner's explanation until `ok` holds.
pub(crate) async fn until_explain(
    addr: &str,
    what: &str,
    procs: &[&Proc],
    ok: impl Fn(&ProvisionExplainResponse) -> bool,
) -> ProvisionExplainResponse {
    let start = Instant::now();
    let mut last = None;
    loop {
        if let Ok(e) = client::explain(addr, &Default::default()).await {
            if ok(&e) {
                return e;
            }
            last = Some(e);
        }
        assert!(start.elapsed() < WAIT, "timed out waiting for {what} (last: {last:?})\n{}", logs(procs));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls until `path` holds `line` `n` times.
pub(crate) async fn until_lines(path: &Path, line: &str, n: usize, procs: &[&Proc]) {
    let start = Instant::now();
    while count(path, line) < n {
        assert!(
            start.elapsed() < WAIT,
            "timed out waiting for {n} × `{line}` in {}\n{}",
            path.display(),
            logs(procs)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub(crate) fn count(path: &Path, line: &str) -> usize {
    std::fs::read_to_string(path).unwrap_or_default().lines().filter(|l| *l == line).count()
}
