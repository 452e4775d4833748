//! Pilot-mode helpers shared by the local and the Slurm tests: a real
//! `lardon broker --provision FILE`, the submitter library, and polls of
//! the broker's status and `explain` with a deadline that only fails
//! (those in [`super::wait`], re-exported here).

use std::path::Path;

use lardon_cluster::{Capability, Need, TaskId};
use lardon_submit::client::{Answer, RemoteTask, Ticket};

use super::procs::{Proc, logs};
pub(crate) use super::remote::submitter;
pub(crate) use super::wait::{WAIT, count, until_explain, until_lines, until_status};

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
