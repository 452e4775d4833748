//! A secured cluster with real processes on loopback: `lardon broker`
//! with mutual TLS (`lardon cert`'s CA), a join token and the KEDA scaler;
//! an agent and `lardon cluster submit|status [--watch]` dialling with their client
//! certificate and the token. A client without a certificate, with one
//! from another CA, or without the token is refused; while a task is
//! queued or running the KEDA scaler reports it, and reports 0 after.
//!
//! Waits poll with a deadline that only fails.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::support;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use lardon_proto::keda::external_scaler_client::ExternalScalerClient;
use lardon_proto::keda::{GetMetricsRequest, ScaledObjectRef};
use lardon_tls::{JoinToken, Role, init_ca, issue};

use crate::support::procs::{Proc, agent_args, free_port, logs};

const WAIT: Duration = Duration::from_secs(60);

fn run(args: &[&str]) -> Output {
    Command::new(support::bin()).args(args).output().unwrap()
}

/// The flags of a client holding `agent-1`'s certificate and the token.
fn creds(d: &Path) -> Vec<String> {
    [
        "--tls-dir",
        d.join("agent").to_str().unwrap(),
        "--tls-name",
        "agent-1",
        "--join-token-file",
        d.join("token").to_str().unwrap(),
    ]
    .map(String::from)
    .to_vec()
}

fn with<'a>(args: &[&'a str], extra: &'a [String]) -> Vec<&'a str> {
    args.iter().copied().chain(extra.iter().map(String::as_str)).collect()
}

async fn keda_metric(keda: &str) -> i64 {
    let mut c = ExternalScalerClient::connect(format!("http://{keda}")).await.unwrap();
    let so = ScaledObjectRef {
        name: "agents".into(),
        namespace: "lardon".into(),
        scaler_metadata: [("capability".to_owned(), "sh@1".to_owned())].into_iter().collect(),
    };
    let spec = c.get_metric_spec(so.clone()).await.unwrap().into_inner();
    let metric_name = spec.metric_specs[0].metric_name.clone();
    let r = c.get_metrics(GetMetricsRequest { scaled_object_ref: Some(so), metric_name }).await.unwrap();
    r.into_inner().metric_values[0].metric_value
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secured_broker_serves_its_cluster_refuses_strangers_and_reports_demand_to_keda() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    init_ca(&d.join("ca")).unwrap();
    issue(&d.join("ca"), "broker", Role::Server, &["127.0.0.1".into()], 30, &d.join("broker")).unwrap();
    issue(&d.join("ca"), "agent-1", Role::Client, &[], 30, &d.join("agent")).unwrap();
    JoinToken::generate().unwrap().write_new(&d.join("token")).unwrap();
    let (addr, keda) = (free_port(), free_port());
    let token = d.join("token");
    let token = token.to_str().unwrap();
    let broker_tls = d.join("broker");
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
            "--tls-dir",
            broker_tls.to_str().unwrap(),
            "--join-token-file",
            token,
        ],
    );
    let creds = creds(d);
    let agent_args = with(&agent_args(&addr, "a1", "sh@1", "1"), &creds);
    let a = Proc::start(d, "agent", &agent_args);

    let status = with(&["cluster", "status", "--broker", &addr, "--json"], &creds);
    let start = Instant::now();
    loop {
        let o = run(&status);
        if o.status.success() {
            let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            if v["agents"].as_array().is_some_and(|a| a.len() == 1) {
                break;
            }
        }
        assert!(start.elapsed() < WAIT, "the agent never joined\n{}", logs(&[&b, &a]));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A task that runs until the test lets it end: demand is 1 meanwhile.
    let go = d.join("go");
    let script = format!(
        "i=0; while [ ! -e '{}' ] && [ $i -lt 2400 ]; do sleep 0.05; i=$((i+1)); done; echo done",
        go.display()
    );
    let submit = with(&["cluster", "submit", "--broker", &addr, "--capability", "sh@1"], &creds);
    let mut submit: Vec<&str> = submit;
    submit.extend(["--", "sh", "-c", &script]);
    let child = Command::new(support::bin())
        .args(&submit)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while keda_metric(&keda).await != 1 {
        assert!(start.elapsed() < WAIT, "KEDA never saw the task\n{}", logs(&[&b, &a]));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    std::fs::write(&go, "").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stderr), logs(&[&b, &a]));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "done");
    let start = Instant::now();
    while keda_metric(&keda).await != 0 {
        assert!(start.elapsed() < WAIT, "KEDA still sees the task\n{}", logs(&[&b, &a]));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Strangers: no certificate; the certificate but no token; a
    // certificate from another CA with the right token.
    let plain = run(&["cluster", "status", "--broker", &addr]);
    assert!(
        !plain.status.success(),
        "a client without a certificate was served: {}{}",
        String::from_utf8_lossy(&plain.stdout),
        String::from_utf8_lossy(&plain.stderr)
    );
    let agent_tls = d.join("agent");
    let no_token = run(&[
        "cluster",
        "status",
        "--broker",
        &addr,
        "--tls-dir",
        agent_tls.to_str().unwrap(),
        "--tls-name",
        "agent-1",
    ]);
    assert!(!no_token.status.success());
    assert!(
        String::from_utf8_lossy(&no_token.stderr).contains("join token"),
        "{}",
        String::from_utf8_lossy(&no_token.stderr)
    );
    // Watch: the cluster's own get the snapshot at once; without the
    // token it is refused like every other call.
    let watch = with(&["cluster", "status", "--broker", &addr, "--watch", "--json"], &creds);
    let mut watcher = Command::new(support::bin()).args(&watch).stdout(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(watcher.stdout.take().unwrap()), &mut line)
        .unwrap();
    let _ = watcher.kill();
    let _ = watcher.wait();
    let first: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
    assert_eq!(first["agents"].as_array().map(Vec::len), Some(1), "{line}");
    let watch_no_token = run(&[
        "cluster",
        "status",
        "--broker",
        &addr,
        "--watch",
        "--tls-dir",
        agent_tls.to_str().unwrap(),
        "--tls-name",
        "agent-1",
    ]);
    assert!(!watch_no_token.status.success());
    assert!(
        String::from_utf8_lossy(&watch_no_token.stderr).contains("join token"),
        "{}",
        String::from_utf8_lossy(&watch_no_token.stderr)
    );
    init_ca(&d.join("other-ca")).unwrap();
    issue(&d.join("other-ca"), "agent-1", Role::Client, &[], 30, &d.join("intruder")).unwrap();
    let intruder = d.join("intruder");
    let stranger = run(&[
        "cluster",
        "status",
        "--broker",
        &addr,
        "--tls-dir",
        intruder.to_str().unwrap(),
        "--tls-name",
        "agent-1",
        "--join-token-file",
        token,
    ]);
    assert!(!stranger.status.success(), "a certificate from another CA was accepted");
}
