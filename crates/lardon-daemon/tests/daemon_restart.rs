//! Durability: a batched task's cursor survives a restart (no batch runs
//! twice); unfinished tasks are queued again; finished ones stay finished.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use common::*;
use lardon_proto::pb::{self, TaskState};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_cursor_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let (done, blocked, resumed) =
        (dir.path().join("done"), dir.path().join("blocked"), dir.path().join("resumed"));
    // Batch 3 blocks until the second daemon runs it; every finished batch
    // appends its offset, so a batch run twice would show twice.
    let script = format!(
        "if [ \"$LARDON_ITEM_OFFSET\" = 3 ] && [ ! -e {resumed} ]; then echo $$ > {blocked}; exec sleep 1000; fi; \
         echo \"$LARDON_ITEM_OFFSET $LARDON_BATCH_SIZE\" >> {done}",
        resumed = resumed.display(),
        blocked = blocked.display(),
        done = done.display()
    );
    let mut spec = sh(&script);
    spec.items = Some(6);
    spec.estimate = Some(pb::Estimate { memory_per_item: 10 * MIB, ..Default::default() });

    let d = start(&state);
    let mut c = client(&d).await;
    let id = submit(&mut c, spec).await;
    let finished_before = submit(&mut c, cmd(&["true"])).await;
    wait_end(&mut c, &finished_before).await;
    eventually("batch 3 running", || blocked.exists()).await;
    let t = until(&mut c, &id, "cursor at 3", |t| t.cursor == 3).await;
    assert_eq!(state_of(&t), TaskState::Running);
    assert_eq!(t.contract.unwrap().item_offset, 3);
    let blocked_pid: u32 = std::fs::read_to_string(&blocked).unwrap().trim().parse().unwrap();
    drop(c);
    d.shutdown().unwrap();
    assert!(!std::path::Path::new(&format!("/proc/{blocked_pid}")).exists(), "stopping killed the run");

    std::fs::write(&resumed, b"").unwrap();
    let d = start(&state);
    let mut c = client(&d).await;
    let t = wait_end(&mut c, &id).await;
    assert_eq!(state_of(&t), TaskState::Completed, "{t:?}");
    assert_eq!(t.cursor, 6);
    assert_eq!(t.attempts, 1, "one interrupted attempt");
    let runs = std::fs::read_to_string(&done).unwrap();
    let offsets: Vec<&str> = runs.lines().map(|l| l.split(' ').next().unwrap()).collect();
    assert_eq!(offsets, ["0", "1", "2", "3", "4", "5"], "{runs}");
    assert!(runs.lines().all(|l| l.ends_with(" 1")), "batch size 1: {runs}");
    // The task that had finished stays finished, with its number.
    assert_eq!(state_of(&get(&mut c, &finished_before).await), TaskState::Completed);
    // Ids are never reused.
    let next = submit(&mut c, cmd(&["true"])).await;
    assert_eq!(next, "3");
    drop(c);
    d.shutdown().unwrap();
}

fn state_of(t: &pb::Task) -> TaskState {
    state(t)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_dependents_and_paused_tasks_come_back() {
    let dir = tempfile::tempdir().unwrap();
    let gate = dir.path().join("gate");
    let d = start(dir.path());
    let mut c = client(&d).await;
    let first = submit(&mut c, sh(&format!("while [ ! -e {} ]; do sleep 0.02; done", gate.display()))).await;
    let mut dependent = cmd(&["true"]);
    dependent.after = vec![first.clone()];
    let dependent = submit(&mut c, dependent).await;
    let paused = c
        .submit(pb::SubmitRequest { spec: Some(cmd(&["true"])), paused: true, id_only: false })
        .await
        .unwrap()
        .into_inner()
        .id;
    until(&mut c, &first, "running", |t| state(t) == TaskState::Running).await;
    drop(c);
    d.shutdown().unwrap();

    std::fs::write(&gate, b"").unwrap();
    let d = start(dir.path());
    let mut c = client(&d).await;
    let t = wait_end(&mut c, &first).await;
    assert_eq!(state(&t), TaskState::Completed, "{t:?}");
    assert_eq!(state(&wait_end(&mut c, &dependent).await), TaskState::Completed);
    assert_eq!(state(&get(&mut c, &paused).await), TaskState::Paused);
    c.resume(pb::ResumeRequest { ids: vec![paused.clone()], ..Default::default() }).await.unwrap();
    assert_eq!(state(&wait_end(&mut c, &paused).await), TaskState::Completed);
    drop(c);
    d.shutdown().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn learned_batch_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    // Claims 1 KiB per item; the shell alone measures far more, so the
    // adaptive batch must drop below batch_max, and stay down after a restart.
    let mut spec = cmd(&["true"]);
    spec.items = Some(4);
    spec.estimate = Some(pb::Estimate {
        memory_per_item: 1024,
        batch_min: Some(1),
        batch_max: Some(4),
        class: "liar".into(),
        ..Default::default()
    });
    let d = start(dir.path());
    let mut c = client(&d).await;
    let id = submit(&mut c, spec).await;
    assert_eq!(state(&wait_end(&mut c, &id).await), TaskState::Completed);
    let before = c.explain(pb::ExplainRequest { id: id.clone(), history: false }).await.unwrap().into_inner();
    let learned = before.needs.unwrap().adaptive_batch_max;
    assert!(learned.is_some_and(|b| b < 4), "{learned:?}");
    drop(c);
    d.shutdown().unwrap();
    let d = start(dir.path());
    let mut c = client(&d).await;
    let after = c.explain(pb::ExplainRequest { id, history: false }).await.unwrap().into_inner();
    assert_eq!(after.needs.unwrap().adaptive_batch_max, learned);
    drop(c);
    d.shutdown().unwrap();
}
