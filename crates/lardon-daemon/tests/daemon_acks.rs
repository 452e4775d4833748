//! Acknowledged means durable and visible (docs/DESIGN.md §10): once pause,
//! resume, cancel or submit has replied, `Get` (what `lardon status` shows)
//! already reports the change. No waiting between the reply and the read.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use common::*;
use lardon_proto::pb::{self, TaskState};

fn only(r: pb::TaskActionResponse) -> pb::TaskActionResult {
    let r = r.results.into_iter().next().unwrap();
    assert!(r.ok, "{r:?}");
    r
}

async fn pause(c: &mut Client, id: &str) -> TaskState {
    let r = only(
        c.pause(pb::PauseRequest { ids: vec![id.to_owned()], ..Default::default() })
            .await
            .unwrap()
            .into_inner(),
    );
    TaskState::try_from(r.state).unwrap()
}

async fn resume(c: &mut Client, id: &str) -> TaskState {
    let r = only(
        c.resume(pb::ResumeRequest { ids: vec![id.to_owned()], ..Default::default() })
            .await
            .unwrap()
            .into_inner(),
    );
    TaskState::try_from(r.state).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_right_after_pause_and_resume_of_a_pending_task_shows_them() {
    let dir = tempfile::tempdir().unwrap();
    let d = start(dir.path());
    let mut c = client(&d).await;
    // `b` stays pending: it waits for `a`, which is paused from the start.
    let a = c
        .submit(pb::SubmitRequest { spec: Some(cmd(&["true"])), paused: true, id_only: false })
        .await
        .unwrap();
    let a = a.into_inner().id;
    let mut spec = cmd(&["true"]);
    spec.after = vec![a.clone()];
    let b = c
        .submit(pb::SubmitRequest { spec: Some(spec), paused: false, id_only: false })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(TaskState::try_from(b.task.unwrap().state).unwrap(), TaskState::Pending);
    let b = b.id;
    for round in 0..40 {
        assert_eq!(pause(&mut c, &b).await, TaskState::Paused);
        assert_eq!(state(&get(&mut c, &b).await), TaskState::Paused, "round {round}: pause replied first");
        assert_eq!(resume(&mut c, &b).await, TaskState::Pending);
        assert_eq!(state(&get(&mut c, &b).await), TaskState::Pending, "round {round}: resume replied first");
    }
    // Cancel of a pending task is immediate, and so is what Get says.
    let r = only(
        c.cancel(pb::CancelRequest { ids: vec![b.clone()], grace_ms: None, ..Default::default() })
            .await
            .unwrap()
            .into_inner(),
    );
    assert_eq!(TaskState::try_from(r.state).unwrap(), TaskState::Cancelled);
    assert_eq!(state(&get(&mut c, &b).await), TaskState::Cancelled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_right_after_pause_and_resume_of_a_running_task_shows_them() {
    let dir = tempfile::tempdir().unwrap();
    let d = start(dir.path());
    let mut c = client(&d).await;
    let id = submit(&mut c, sh("sleep 600")).await;
    // Setting up only: the task must be running before it is paused.
    until(&mut c, &id, "running", |t| state(t) == TaskState::Running).await;
    for round in 0..10 {
        assert_eq!(pause(&mut c, &id).await, TaskState::Paused);
        let t = get(&mut c, &id).await;
        assert_eq!(state(&t), TaskState::Paused, "round {round}: pause replied first");
        assert!(t.paused_while_running, "round {round}: {t:?}");
        assert_eq!(resume(&mut c, &id).await, TaskState::Running);
        assert_eq!(state(&get(&mut c, &id).await), TaskState::Running, "round {round}: resume replied first");
    }
    let r = only(
        c.cancel(pb::CancelRequest { ids: vec![id.clone()], grace_ms: Some(0), ..Default::default() })
            .await
            .unwrap()
            .into_inner(),
    );
    // A running task ends at its exit: the reply says what status says now.
    let now = state(&get(&mut c, &id).await);
    assert!(
        TaskState::try_from(r.state).unwrap() == now || now == TaskState::Cancelled,
        "cancel replied {:?}, Get says {now:?}",
        r.state
    );
    assert_eq!(state(&wait_end(&mut c, &id).await), TaskState::Cancelled);
}
