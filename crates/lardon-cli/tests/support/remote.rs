//! The submitter library (`lardon_submit::client`) against a real
//! broker: the test's submitter and a plain shell task.

use std::time::Duration;

use lardon_cluster::{Capability, SubmitterId, TaskId};
use lardon_submit::Backoff;
use lardon_submit::client::{RemoteTask, Submitter, SubmitterConfig};

/// A submitter `test` dialing `addr`: 1 s heartbeats, a fast back-off,
/// never giving up.
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

/// A `sh -c SCRIPT` task of capability `sh@1` declaring nothing.
pub(crate) fn sh(id: &str, script: &str) -> RemoteTask {
    let argv = vec!["sh".into(), "-c".into(), script.into()];
    RemoteTask::new(TaskId::new(id).unwrap(), Capability::parse("sh@1").unwrap(), argv)
}
