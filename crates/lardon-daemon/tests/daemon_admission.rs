//! Admission through the daemon: waiting on memory, rejection, policy,
//! metrics, one daemon per state dir.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use common::*;
use lardon::HostProfile;
use lardon_daemon::{DaemonError, start_in_process};
use lardon_proto::pb::{self, DecisionKind, TaskState};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn mem(mut spec: pb::TaskSpec, bytes: u64) -> pb::TaskSpec {
    spec.estimate = Some(pb::Estimate { memory_fixed: bytes, ..Default::default() });
    spec
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_on_memory_then_starts_after_another_ends() {
    let dir = tempfile::tempdir().unwrap();
    // 6 GiB host, 512 MiB default reserve: 5.5 GiB to hand out, so two 3 GiB tasks cannot overlap.
    let d = start_in_process(config(dir.path(), HostProfile::new(6 * GIB, 16))).unwrap();
    let mut c = client(&d).await;
    let go = dir.path().join("go");
    let first =
        submit(&mut c, mem(sh(&format!("while [ ! -e {} ]; do sleep 0.02; done", go.display())), 3 * GIB))
            .await;
    until(&mut c, &first, "running", |t| state(t) == TaskState::Running).await;
    let second = submit(&mut c, mem(cmd(&["true"]), 3 * GIB)).await;
    let waiting = until(&mut c, &second, "waiting on memory", |t| {
        t.last_decision.as_ref().is_some_and(|d| d.kind == DecisionKind::Wait as i32)
    })
    .await;
    assert_eq!(state(&waiting), TaskState::Pending);
    let decision = waiting.last_decision.unwrap();
    assert_eq!(decision.reason_code, "memory", "{decision:?}");
    assert!(decision.message.contains("GiB"), "{decision:?}");
    let explain =
        c.explain(pb::ExplainRequest { id: second.clone(), history: false }).await.unwrap().into_inner();
    assert_eq!(explain.needs.unwrap().memory_at_batch_min, 3 * GIB);
    let av = explain.availability.unwrap().memory.unwrap();
    assert_eq!(av.reserved, 3 * GIB);
    assert!(av.available < 3 * GIB);

    let released_at = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis();
    std::fs::write(&go, b"").unwrap();
    assert_eq!(state(&wait_end(&mut c, &first).await), TaskState::Completed);
    let t = wait_end(&mut c, &second).await;
    assert_eq!(state(&t), TaskState::Completed);
    assert!(i128::from(t.started_unix_ms.unwrap()) >= released_at as i128, "started before the first ended");
    // Its course: one wait period on memory, closed when it was admitted.
    let explain =
        c.explain(pb::ExplainRequest { id: second.clone(), history: true }).await.unwrap().into_inner();
    let kinds: Vec<&str> = explain.history.iter().map(|h| h.kind.as_str()).collect();
    assert_eq!(kinds, ["waited", "admitted"], "{:?}", explain.history);
    let wait = &explain.history[0];
    assert_eq!(wait.reason_code, "memory");
    assert!(wait.to_unix_ms.is_some_and(|to| to >= wait.from_unix_ms), "{wait:?}");
    assert_eq!(explain.history[1].memory, Some(3 * GIB));
    drop(c);
    d.shutdown().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impossible_task_is_rejected_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let d = start(dir.path());
    let mut c = client(&d).await;
    let id = submit(&mut c, mem(cmd(&["true"]), 64 * GIB)).await;
    let t = wait_end(&mut c, &id).await;
    assert_eq!(state(&t), TaskState::Failed);
    let decision = t.last_decision.unwrap();
    assert_eq!(decision.kind, DecisionKind::Reject as i32);
    assert_eq!(decision.reason_code, "impossible");
    assert!(!t.failure_reason.is_empty());
    assert_eq!(t.attempts, 0);
    drop(c);
    d.shutdown().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_is_validated_persisted_and_reloaded() {
    let dir = tempfile::tempdir().unwrap();
    let d = start(dir.path());
    let mut c = client(&d).await;
    let entry = |k: &str, v: &str| pb::PolicyEntry { key: k.into(), value: v.into(), ..Default::default() };
    let resp = c
        .set_policy(pb::SetPolicyRequest {
            set: vec![entry("max_running", "2"), entry("enforce", "soft")],
            reset: vec![],
        })
        .await
        .unwrap()
        .into_inner();
    let value = |r: &pb::PolicyResponse, k: &str| r.entries.iter().find(|e| e.key == k).unwrap().clone();
    assert_eq!(value(&resp, "max_running").value, "2");
    assert!(value(&resp, "max_running").overridden);
    for (k, v) in [("memory_reserve", "100TiB"), ("nope", "1"), ("psi_cpu", "x"), ("enforce", "sometimes")] {
        let err =
            c.set_policy(pb::SetPolicyRequest { set: vec![entry(k, v)], reset: vec![] }).await.unwrap_err();
        assert!(
            matches!(err.code(), tonic::Code::InvalidArgument | tonic::Code::FailedPrecondition),
            "{k}: {err:?}"
        );
        assert!(err.message().contains(k) || err.message().contains("reserve"), "{k}: {}", err.message());
    }
    drop(c);
    d.shutdown().unwrap();
    let d = start(dir.path());
    let mut c = client(&d).await;
    let resp = c.get_policy(pb::GetPolicyRequest {}).await.unwrap().into_inner();
    assert_eq!(value(&resp, "max_running").value, "2");
    assert_eq!(value(&resp, "enforce").value, "soft");
    let resp = c
        .set_policy(pb::SetPolicyRequest { set: vec![], reset: vec!["max_running".into()] })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(value(&resp, "max_running").value, "none");
    assert!(!value(&resp, "max_running").overridden);
    drop(c);
    d.shutdown().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_daemon_per_state_dir_and_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), HostProfile::new(16 * GIB, 16));
    cfg.metrics_addr = Some("127.0.0.1:0".parse().unwrap());
    let d = start_in_process(cfg).unwrap();
    match start_in_process(config(dir.path(), HostProfile::new(16 * GIB, 16))) {
        Err(DaemonError::AlreadyRunning { pid, .. }) => assert_eq!(pid, Some(std::process::id())),
        other => panic!("second daemon: {other:?}"),
    }
    let mut c = client(&d).await;
    let id = submit(&mut c, cmd(&["true"])).await;
    wait_end(&mut c, &id).await;
    let mut conn = tokio::net::TcpStream::connect(d.metrics_addr().unwrap()).await.unwrap();
    conn.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").await.unwrap();
    let mut text = String::new();
    conn.read_to_string(&mut text).await.unwrap();
    for needle in [
        "lardon_memory_total_bytes 17179869184",
        "lardon_pressure_state{state=\"green\"} 1",
        "lardon_tasks{state=\"completed\"} 1",
        "lardon_decisions_total{kind=\"admit\",reason=\"admitted\"} 1",
    ] {
        assert!(text.contains(needle), "{needle} missing in\n{text}");
    }
    drop(c);
    d.shutdown().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn within_a_priority_a_batched_task_with_more_items_starts_first() {
    let dir = tempfile::tempdir().unwrap();
    // 5.5 GiB to hand out: one 3 GiB task at a time.
    let d = start_in_process(config(dir.path(), HostProfile::new(6 * GIB, 16))).unwrap();
    let mut c = client(&d).await;
    let (go, go2) = (dir.path().join("go"), dir.path().join("go2"));
    let blocking =
        |file: &std::path::Path| sh(&format!("while [ ! -e {} ]; do sleep 0.02; done", file.display()));
    let first = submit(&mut c, mem(blocking(&go), 3 * GIB)).await;
    until(&mut c, &first, "running", |t| state(t) == TaskState::Running).await;
    // Submitted in this order: an unbatched task, then one with 4 items.
    let plain = submit(&mut c, mem(blocking(&go2), 3 * GIB)).await;
    let mut spec = mem(blocking(&go2), 3 * GIB);
    spec.items = Some(4);
    spec.estimate.as_mut().unwrap().batch_max = Some(4);
    let batched = submit(&mut c, spec).await;
    until(&mut c, &plain, "waiting", |t| t.last_decision.is_some()).await;
    until(&mut c, &batched, "waiting", |t| t.last_decision.is_some()).await;
    std::fs::write(&go, b"").unwrap();
    // The daemon passed the items: the batched task goes first.
    until(&mut c, &batched, "running", |t| state(t) == TaskState::Running).await;
    assert_eq!(state(&get(&mut c, &plain).await), TaskState::Pending);
    std::fs::write(&go2, b"").unwrap();
    for id in [&first, &batched, &plain] {
        assert_eq!(state(&wait_end(&mut c, id).await), TaskState::Completed);
    }
    drop(c);
    d.shutdown().unwrap();
}
