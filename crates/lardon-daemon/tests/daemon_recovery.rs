//! Crash recovery in process: a store left as a crash leaves it (a task
//! RUNNING with the handle of a live process group) is recovered at start:
//! the orphaned group is killed, the task runs again, finished work stays
//! finished. (The kill -9 test of the real binary lives with the CLI.)
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::os::unix::process::{CommandExt, ExitStatusExt};

use common::*;
use lardon_daemon::runner::orphans::{RunHandle, start_time};
use lardon_daemon::spec::{TaskSpec, TaskState as Stored};
use lardon_daemon::store::{NewTask, Outcome, Store};
use lardon_proto::pb::TaskState;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphans_are_killed_and_interrupted_tasks_run_again() {
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let mut orphan = std::process::Command::new("sleep").arg("1000").process_group(0).spawn().unwrap();
    {
        let mut store = Store::open(dir.path().join(lardon_proto::paths::DB_FILE)).unwrap();
        let append = |tag: &str| {
            TaskSpec::command(["sh".to_owned(), "-c".to_owned(), format!("echo {tag} >> {}", ran.display())])
        };
        let done = store.insert_task(&NewTask::new(append("done"))).unwrap();
        store.start_attempt(done).unwrap();
        store.finish(done, &Outcome { state: Stored::Completed, exit_code: Some(0), reason: None }).unwrap();
        let running = store.insert_task(&NewTask::new(append("again"))).unwrap();
        store.start_attempt(running).unwrap();
        let handle = RunHandle { pgid: orphan.id(), start: start_time(orphan.id()) };
        store.set_run_handle(running, Some(&handle.encode())).unwrap();
        let mut once = append("never");
        once.retry_on_interrupt = false;
        let no_retry = store.insert_task(&NewTask::new(once)).unwrap();
        store.start_attempt(no_retry).unwrap();
    }
    let d = start(dir.path());
    let status = orphan.wait().unwrap();
    assert_eq!(status.signal(), Some(9), "the orphaned group was killed");
    let mut c = client(&d).await;
    let t = wait_end(&mut c, "2").await;
    assert_eq!(state(&t), TaskState::Completed);
    assert_eq!(t.attempts, 1);
    let t = get(&mut c, "3").await;
    assert_eq!(state(&t), TaskState::Failed);
    assert!(t.failure_reason.contains("interrupted"), "{}", t.failure_reason);
    assert_eq!(state(&get(&mut c, "1").await), TaskState::Completed);
    assert_eq!(std::fs::read_to_string(&ran).unwrap(), "again\n", "nothing completed ran twice");
    drop(c);
    d.shutdown().unwrap();
}
