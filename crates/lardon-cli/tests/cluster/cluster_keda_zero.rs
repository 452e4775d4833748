//! Scale from zero with KEDA, real processes on loopback: a broker started
//! with `--scaled-capability sh@1 --keda-listen …` and no agent queues a
//! task of that capability (KEDA's scaler sees it and says "active")
//! instead of answering "no executor"; an agent that then starts — what
//! KEDA would do — runs it. Another capability is still answered at once.
//!
//! Waits poll with a deadline that only fails.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::support;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lardon_proto::keda::external_scaler_client::ExternalScalerClient;
use lardon_proto::keda::{GetMetricsRequest, ScaledObjectRef};

use crate::support::procs::{Proc, agent_args, free_port, logs};

const WAIT: Duration = Duration::from_secs(60);

/// KEDA's view of capability `sh@1`: whether it is active and its metric.
async fn keda_view(keda: &str) -> (bool, i64) {
    let mut c = ExternalScalerClient::connect(format!("http://{keda}")).await.unwrap();
    let so = ScaledObjectRef {
        name: "agents".into(),
        namespace: "lardon".into(),
        scaler_metadata: [("capability".to_owned(), "sh@1".to_owned())].into_iter().collect(),
    };
    let active = c.is_active(so.clone()).await.unwrap().into_inner().result;
    let spec = c.get_metric_spec(so.clone()).await.unwrap().into_inner();
    let metric_name = spec.metric_specs[0].metric_name.clone();
    let r = c.get_metrics(GetMetricsRequest { scaled_object_ref: Some(so), metric_name }).await.unwrap();
    (active, r.into_inner().metric_values[0].metric_value)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scaled_capability_waits_for_the_agent_keda_starts() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (addr, keda) = (free_port(), free_port());
    let b = Proc::start(
        d,
        "broker",
        &[
            "broker",
            "--listen",
            &addr,
            "--keda-listen",
            &keda,
            "--heartbeat",
            "1s",
            "--scaled-capability",
            "sh@1",
        ],
    );

    // The broker answers before anything is submitted (a submit to a
    // broker not yet listening is answered "unreachable").
    let start = Instant::now();
    while !Command::new(support::bin())
        .args(["cluster", "status", "--broker", &addr])
        .output()
        .unwrap()
        .status
        .success()
    {
        assert!(start.elapsed() < WAIT, "the broker never answered\n{}", logs(&[&b]));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // No agent yet: the task waits, and KEDA sees demand for it.
    let child = Command::new(support::bin())
        .args(["cluster", "submit", "--broker", &addr, "--capability", "sh@1", "--", "sh", "-c", "echo ran"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        // The broker may not listen yet: a refused connection is retried.
        if ExternalScalerClient::connect(format!("http://{keda}")).await.is_ok()
            && keda_view(&keda).await == (true, 1)
        {
            break;
        }
        assert!(start.elapsed() < WAIT, "KEDA never saw the waiting task\n{}", logs(&[&b]));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A capability nobody scales is still answered at once.
    let other = Command::new(support::bin())
        .args(["cluster", "submit", "--broker", &addr, "--capability", "clang@17", "--", "true"])
        .output()
        .unwrap();
    assert!(!other.status.success(), "clang@17 has no agent and no scaler, yet it ran");
    assert!(
        String::from_utf8_lossy(&other.stderr).contains("no agent runs clang@17"),
        "{}",
        String::from_utf8_lossy(&other.stderr)
    );

    // What KEDA would do: start an agent. It runs the waiting task.
    let a = Proc::start(d, "agent", &agent_args(&addr, "a1", "sh@1", "1"));
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stderr), logs(&[&b, &a]));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ran");
    let start = Instant::now();
    while keda_view(&keda).await != (false, 0) {
        assert!(start.elapsed() < WAIT, "KEDA still sees demand after the task ended\n{}", logs(&[&b, &a]));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[test]
fn a_scaled_capability_without_a_scaler_is_refused_at_start() {
    let out = Command::new(support::bin())
        .args(["broker", "--listen", "127.0.0.1:0", "--scaled-capability", "sh@1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--scaled-capability") && err.contains("--keda-listen"), "{err}");
    let out = Command::new(support::bin())
        .args([
            "broker",
            "--listen",
            "127.0.0.1:0",
            "--keda-listen",
            "127.0.0.1:0",
            "--scaled-capability",
            "sh@@",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--scaled-capability"));
}
