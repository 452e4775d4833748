//! Controlling running commands: pause/resume (SIGSTOP/SIGCONT, keeping the
//! reservation), cancel of a whole process group, OOM kill reporting.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::path::Path;

use common::*;
use lardon_proto::pb::{self, TaskState};

/// The scheduler state letter of `pid` (`S`, `T`, …), `None` once gone
/// (or a zombie, which is as good as gone for these tests).
fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let c = stat[stat.rfind(')')? + 2..].chars().next()?;
    (c != 'Z').then_some(c)
}

async fn read_pid(path: &Path) -> u32 {
    eventually("pid file", || std::fs::read_to_string(path).is_ok_and(|s| s.ends_with('\n'))).await;
    std::fs::read_to_string(path).unwrap().trim().parse().unwrap()
}

async fn reserved(c: &mut Client) -> u64 {
    let r = c.resources(pb::ResourcesRequest {}).await.unwrap().into_inner();
    r.availability.unwrap().memory.unwrap().reserved
}

fn action_ok(r: pb::TaskActionResponse) -> pb::TaskActionResult {
    let r = r.results.into_iter().next().unwrap();
    assert!(r.ok, "{r:?}");
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_keeps_the_reservation_and_cancel_kills_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let d = start(dir.path());
    let mut c = client(&d).await;
    let (pid_file, gc_file) = (dir.path().join("pid"), dir.path().join("gc"));
    let mut spec = sh(&format!(
        "sleep 1000 & echo $! > {gc}; echo $$ > {pid}; wait",
        gc = gc_file.display(),
        pid = pid_file.display()
    ));
    spec.estimate = Some(pb::Estimate { memory_fixed: GIB, ..Default::default() });
    let id = submit(&mut c, spec).await;
    let pid = read_pid(&pid_file).await;
    let grandchild = read_pid(&gc_file).await;
    until(&mut c, &id, "running", |t| state(t) == TaskState::Running).await;
    assert_eq!(reserved(&mut c).await, GIB);

    action_ok(
        c.pause(pb::PauseRequest { ids: vec![id.clone()], ..Default::default() }).await.unwrap().into_inner(),
    );
    let t = until(&mut c, &id, "paused", |t| state(t) == TaskState::Paused).await;
    assert!(t.paused_while_running);
    eventually("SIGSTOP", || proc_state(pid) == Some('T') && proc_state(grandchild) == Some('T')).await;
    assert_eq!(reserved(&mut c).await, GIB, "a paused task keeps its reservation");

    action_ok(
        c.resume(pb::ResumeRequest { ids: vec![id.clone()], ..Default::default() })
            .await
            .unwrap()
            .into_inner(),
    );
    until(&mut c, &id, "running again", |t| state(t) == TaskState::Running).await;
    eventually("SIGCONT", || proc_state(pid).is_some_and(|s| s != 'T')).await;

    // Cancel while stopped: the group gets SIGTERM and SIGCONT.
    action_ok(
        c.pause(pb::PauseRequest { ids: vec![id.clone()], ..Default::default() }).await.unwrap().into_inner(),
    );
    eventually("SIGSTOP again", || proc_state(pid) == Some('T')).await;
    action_ok(
        c.cancel(pb::CancelRequest { ids: vec![id.clone()], grace_ms: Some(500), ..Default::default() })
            .await
            .unwrap()
            .into_inner(),
    );
    let t = wait_end(&mut c, &id).await;
    assert_eq!(state(&t), TaskState::Cancelled);
    eventually("the whole group is gone", || proc_state(pid).is_none() && proc_state(grandchild).is_none())
        .await;
    assert_eq!(reserved(&mut c).await, 0);

    // Actions on unknown or ended tasks answer per id, without failing the call.
    let r = c
        .cancel(pb::CancelRequest {
            ids: vec![id.clone(), "77".into(), "zz".into()],
            grace_ms: None,
            ..Default::default()
        })
        .await;
    let r = r.unwrap().into_inner().results;
    assert!(r.iter().all(|x| !x.ok), "{r:?}");
    assert!(r[1].error.contains("no task 77"), "{r:?}");
    drop(c);
    d.shutdown().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_task_pause_resume_and_cancel() {
    let dir = tempfile::tempdir().unwrap();
    let d = start(dir.path());
    let mut c = client(&d).await;
    let paused = c
        .submit(pb::SubmitRequest { spec: Some(cmd(&["true"])), paused: true, id_only: false })
        .await
        .unwrap()
        .into_inner()
        .id;
    assert_eq!(state(&get(&mut c, &paused).await), TaskState::Paused);
    action_ok(
        c.resume(pb::ResumeRequest { ids: vec![paused.clone()], ..Default::default() })
            .await
            .unwrap()
            .into_inner(),
    );
    assert_eq!(state(&wait_end(&mut c, &paused).await), TaskState::Completed);

    let held = c
        .submit(pb::SubmitRequest { spec: Some(cmd(&["true"])), paused: true, id_only: false })
        .await
        .unwrap()
        .into_inner()
        .id;
    action_ok(
        c.cancel(pb::CancelRequest { ids: vec![held.clone()], grace_ms: None, ..Default::default() })
            .await
            .unwrap()
            .into_inner(),
    );
    assert_eq!(state(&wait_end(&mut c, &held).await), TaskState::Cancelled);
    let removed = c.remove(pb::RemoveRequest { ids: vec![held.clone()] }).await.unwrap().into_inner();
    assert!(removed.results[0].ok, "{removed:?}");
    let cleaned =
        c.clean(pb::CleanRequest { states: vec![], successful_only: true }).await.unwrap().into_inner();
    assert_eq!(cleaned.removed, vec![paused.clone()]);
    let err = c.get(pb::GetRequest { id: held, ..Default::default() }).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
    drop(c);
    d.shutdown().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_overrun_costs_a_retry_not_the_task_unless_opted_out() {
    let dir = tempfile::tempdir().unwrap();
    let d = start(dir.path());
    let mut c = client(&d).await;
    let backend = c.resources(pb::ResourcesRequest {}).await.unwrap().into_inner();
    let enforcement = backend.availability.unwrap().enforcement.unwrap();
    assert_ne!(
        enforcement.backend,
        pb::EnforcementBackend::None as i32,
        "this test needs a cgroup backend that limits memory: {}",
        enforcement.why
    );
    let liar = |class: &str, oom_retry: Option<bool>| {
        let mut spec = cmd(&["python3", "-c", "import time; x = b'x' * (600 << 20); time.sleep(1)"]);
        spec.estimate =
            Some(pb::Estimate { memory_fixed: 64 * MIB, class: class.into(), ..Default::default() });
        spec.oom_retry = oom_retry;
        spec
    };
    // Opted out: the first kill fails the task, with the limit and the peak.
    let id = submit(&mut c, liar("no-retry", Some(false))).await;
    let t = wait_end(&mut c, &id).await;
    assert_eq!(state(&t), TaskState::Failed, "{t:?} (backend: {})", enforcement.why);
    assert!(t.failure_reason.starts_with("killed: memory limit of"), "{}", t.failure_reason);
    assert!(
        t.failure_reason.contains("(peak ") && t.failure_reason.contains("--no-oom-retry"),
        "{}",
        t.failure_reason
    );
    // By default: killed, run again at the size learned from the kill, done.
    let id = submit(&mut c, liar("retried", None)).await;
    let t = wait_end(&mut c, &id).await;
    assert_eq!(state(&t), TaskState::Completed, "{t:?}");
    assert!((1..=3).contains(&t.memory_retries), "{t:?}");
    let learned = t.learned.clone().expect("the class learned its size");
    assert!(learned.fixed.is_some_and(|f| f >= 600 * MIB), "{learned:?}");
    let d2 = t.last_decision.clone().unwrap();
    assert!(!d2.message.starts_with("batch 1, 64.0 MiB"), "status shows the current grant: {d2:?}");
    let explain = c.explain(pb::ExplainRequest { id: id.clone(), history: true }).await.unwrap().into_inner();
    let kinds: Vec<&str> = explain.history.iter().map(|h| h.kind.as_str()).collect();
    assert!(kinds.contains(&"memory_retry") && kinds[0] == "admitted", "{kinds:?}");
    drop(c);
    d.shutdown().unwrap();
}
