//! Submit → run → complete, environment, logs, bad input.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use common::*;
use lardon_proto::pb::{self, TaskState};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_a_command_with_its_env_and_log() {
    let dir = tempfile::tempdir().unwrap();
    let d = start(dir.path());
    let mut c = client(&d).await;
    let id = submit(
        &mut c,
        sh("echo id=$LARDON_TASK_ID cpus=$LARDON_CPUS mem=$LARDON_MEM_BYTES omp=$OMP_NUM_THREADS sock=$LARDON_SOCKET"),
    )
    .await;
    let t = wait_end(&mut c, &id).await;
    assert_eq!(state(&t), TaskState::Completed, "{t:?}");
    assert_eq!(t.exit_code, Some(0));
    let log = log_text(&mut c, &id).await;
    let sock = d.socket().display().to_string();
    assert!(log.contains(&format!("id={id} cpus=1 mem=0 omp=1 sock={sock}")), "{log}");

    let failing = submit(&mut c, sh("echo oops >&2; exit 3")).await;
    let t = wait_end(&mut c, &failing).await;
    assert_eq!(state(&t), TaskState::Failed);
    assert_eq!(t.exit_code, Some(3));
    assert!(t.failure_reason.contains("exited with code 3"), "{}", t.failure_reason);
    assert!(log_text(&mut c, &failing).await.contains("oops"));
    drop(c);
    d.shutdown().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let d = start(dir.path());
    let mut c = client(&d).await;
    let mut bad_batch = cmd(&["true"]);
    bad_batch.estimate = Some(pb::Estimate { batch_min: Some(4), batch_max: Some(2), ..Default::default() });
    let mut bad_class = cmd(&["true"]);
    bad_class.estimate = Some(pb::Estimate { class: "Bad Class".into(), ..Default::default() });
    let mut bad_after = cmd(&["true"]);
    bad_after.after = vec!["nope".into()];
    let mut missing_after = cmd(&["true"]);
    missing_after.after = vec!["999".into()];
    let cases = [
        (cmd(&[]), "argv"),
        (bad_batch, "batch_max"),
        (bad_class, "class"),
        (bad_after, "after[0]"),
        (missing_after, "after"),
    ];
    // Both paths: read back from a blocking thread, and id-only, awaited
    // on the runtime.
    for id_only in [false, true] {
        for (spec, field) in cases.clone() {
            let err =
                c.submit(pb::SubmitRequest { spec: Some(spec), paused: false, id_only }).await.unwrap_err();
            assert_eq!(err.code(), tonic::Code::InvalidArgument, "{field} ({id_only}): {err:?}");
            assert!(err.message().contains(field), "{field} ({id_only}): {}", err.message());
        }
    }
    let err = c.submit(pb::SubmitRequest { spec: None, paused: false, id_only: false }).await.unwrap_err();
    assert!(err.message().starts_with("spec"), "{}", err.message());
    let err = c.get(pb::GetRequest { id: "x".into(), ..Default::default() }).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    let err = c.get(pb::GetRequest { id: "42".into(), ..Default::default() }).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
    // Still serving.
    let id = submit(&mut c, cmd(&["true"])).await;
    assert_eq!(state(&wait_end(&mut c, &id).await), TaskState::Completed);
    drop(c);
    d.shutdown().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socket_is_private_progress_is_durable_and_missing_programs_fail() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let d = start(dir.path());
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(d.socket()), 0o600);
    assert_eq!(mode(dir.path()), 0o700);
    let mut c = client(&d).await;
    let gate = dir.path().join("gate");
    let id = submit(&mut c, sh(&format!("while [ ! -e {} ]; do sleep 0.02; done", gate.display()))).await;
    until(&mut c, &id, "running", |t| state(t) == TaskState::Running).await;
    c.progress(pb::ProgressRequest { task_id: id.clone(), done: 3, total: 10, message: "three".into() })
        .await
        .unwrap();
    let t = get(&mut c, &id).await;
    let p = t.progress.unwrap();
    assert_eq!((p.done, p.total, p.message.as_str()), (3, 10, "three"));
    let err = c
        .progress(pb::ProgressRequest { task_id: id.clone(), done: 11, total: 10, message: String::new() })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    std::fs::write(&gate, b"").unwrap();
    assert_eq!(state(&wait_end(&mut c, &id).await), TaskState::Completed);

    let missing = submit(&mut c, cmd(&["/nonexistent/lardon-no-such-program"])).await;
    let t = wait_end(&mut c, &missing).await;
    assert_eq!(state(&t), TaskState::Failed);
    assert!(t.failure_reason.contains("cannot start"), "{}", t.failure_reason);
    drop(c);
    d.shutdown().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_host_pins_to_the_compute_pool_and_lists() {
    let dir = tempfile::tempdir().unwrap();
    let d = lardon_daemon::start_in_process(lardon_daemon::DaemonConfig::new(dir.path())).unwrap();
    let mut c = client(&d).await;
    let hello = c.hello(pb::HelloRequest {}).await.unwrap().into_inner();
    assert_eq!(hello.pid, std::process::id());
    let av = c.resources(pb::ResourcesRequest {}).await.unwrap().into_inner().availability.unwrap();
    let pool = av.cpus.unwrap().pool;
    assert!(!pool.is_empty());
    assert!(!av.enforcement.unwrap().why.is_empty());
    // The host gates are lifted (the load gate `off`, PSI thresholds 0),
    // so admission of this memory-less task cannot depend on how busy the
    // shared machine is: the pinning check always runs, never skipped.
    let relax = ["max_load_ratio=off", "psi_cpu=0", "psi_memory=0", "psi_io=0", "emergency_floor=0"]
        .iter()
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap();
            pb::PolicyEntry { key: k.into(), value: v.into(), ..Default::default() }
        })
        .collect();
    c.set_policy(pb::SetPolicyRequest { set: relax, reset: vec![] }).await.unwrap();
    let id = submit(&mut c, sh("grep Cpus_allowed_list /proc/self/status")).await;
    let t = wait_end(&mut c, &id).await;
    assert_eq!(state(&t), TaskState::Completed);
    let log = log_text(&mut c, &id).await;
    let allowed: Vec<u32> =
        lardon_host::parse_cpu_list(log.split(':').nth(1).unwrap().trim()).unwrap().into_iter().collect();
    // A one-CPU grant is pinned to one CPU of the pool (the one the fewest
    // live runs hold), never outside it.
    assert_eq!(allowed.len(), 1, "{log}");
    assert!(allowed.iter().all(|c| pool.contains(c)), "{log} outside the pool {pool:?}");
    drop(c);
    d.shutdown().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_with_filters() {
    let dir = tempfile::tempdir().unwrap();
    let d = start(dir.path());
    let mut c = client(&d).await;
    let id = submit(&mut c, cmd(&["true"])).await;
    wait_end(&mut c, &id).await;
    let other = submit(&mut c, cmd(&["false"])).await;
    wait_end(&mut c, &other).await;
    let listed = |states: Vec<i32>| pb::ListRequest { states, ..Default::default() };
    let all = c.list(listed(vec![])).await.unwrap().into_inner().tasks;
    assert_eq!(all.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(), [id.as_str(), other.as_str()]);
    let failed = c.list(listed(vec![TaskState::Failed as i32])).await.unwrap().into_inner().tasks;
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].id, other);
    let err = c.list(listed(vec![99])).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    drop(c);
    d.shutdown().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_only_submit_answers_the_id_of_a_stored_task() {
    let dir = tempfile::tempdir().unwrap();
    let d = start(dir.path());
    let mut c = client(&d).await;
    let full = c
        .submit(pb::SubmitRequest { spec: Some(cmd(&["true"])), paused: true, id_only: false })
        .await
        .unwrap()
        .into_inner();
    let task = full.task.expect("the task as stored");
    assert_eq!(task.id, full.id);
    assert_eq!(state(&task), TaskState::Paused);

    let short = c
        .submit(pb::SubmitRequest { spec: Some(cmd(&["true"])), paused: true, id_only: true })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(short.task, None, "id_only: no task read back");
    assert_ne!(short.id, full.id);
    // Acknowledged means stored: the reply came after the commit.
    let stored =
        c.get(pb::GetRequest { id: short.id.clone(), ..Default::default() }).await.unwrap().into_inner();
    let stored = stored.task.expect("stored");
    assert_eq!(stored.id, short.id);
    assert_eq!(state(&stored), TaskState::Paused);
    drop(c);
    d.shutdown().unwrap();
}
