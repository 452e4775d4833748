//! The daemon's log lines, captured by a test subscriber: the start-up
//! summary (budgets, enforcement and why, policy source, socket), a `warn`
//! for every refusal and fallback, a `debug` line for every decision.
//!
//! One test in this binary: the subscriber is process-global, so a second
//! test running at the same time would write into the same capture.
//! Break the code to see it fail: drop the `log_start` call in
//! `server.rs`, or the `tracing::warn!` in `service::status`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex, MutexGuard};

use common::*;
use lardon::HostProfile;
use lardon_daemon::start_in_process;
use lardon_proto::pb::{self, TaskState};
use tracing_subscriber::fmt::MakeWriter;

const GIB: u64 = 1 << 30;

/// Every formatted line, in order.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Capture {
    fn lock(&self) -> MutexGuard<'_, Vec<u8>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.lock()).into_owned()
    }

    /// The captured lines at `level` that contain every one of `parts`.
    fn lines(&self, level: &str, parts: &[&str]) -> Vec<String> {
        self.text()
            .lines()
            .filter(|l| l.contains(level) && parts.iter().all(|p| l.contains(p)))
            .map(str::to_owned)
            .collect()
    }

    fn assert_line(&self, level: &str, parts: &[&str]) {
        assert!(!self.lines(level, parts).is_empty(), "no {level} line with {parts:?} in:\n{}", self.text());
    }
}

struct CaptureWriter(Capture);

impl Write for CaptureWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Capture {
    type Writer = CaptureWriter;

    fn make_writer(&'a self) -> Self::Writer {
        CaptureWriter(self.clone())
    }
}

fn install() -> Capture {
    let capture = Capture::default();
    tracing_subscriber::fmt()
        .with_env_filter("warn,lardon=debug,lardon_daemon=debug,lardon_host=debug")
        .with_ansi(false)
        .with_writer(capture.clone())
        .init();
    capture
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_logs_its_start_every_refusal_and_fallback_and_every_decision() {
    let capture = install();
    let dir = tempfile::tempdir().unwrap();
    let d = start_in_process(config(dir.path(), HostProfile::new(4 * GIB, 2))).unwrap();
    let socket = d.socket().display().to_string();

    // Start-up: what it governs, how it enforces and why, where the policy
    // came from, where it listens.
    capture.assert_line("INFO", &["budgets: memory", "of 4.0 GiB", "compute pool"]);
    capture.assert_line("INFO", &["enforcement: hard via"]);
    capture.assert_line("INFO", &["policy: the host's defaults"]);
    capture.assert_line("INFO", &["listening on", &socket]);

    let mut c = client(&d).await;
    // Every decision at debug.
    let id = submit(&mut c, cmd(&["true"])).await;
    assert_eq!(state(&wait_end(&mut c, &id).await), TaskState::Completed);
    capture.assert_line("DEBUG", &[&format!("task {id}: admit")]);

    // A REJECT at warn, with its reason.
    let mut huge = cmd(&["true"]);
    huge.estimate = Some(pb::Estimate { memory_fixed: 64 * GIB, ..Default::default() });
    let id = submit(&mut c, huge).await;
    assert_eq!(state(&wait_end(&mut c, &id).await), TaskState::Failed);
    capture.assert_line("WARN", &[&format!("task {id}: rejected")]);

    // Refusals at warn: a malformed submit names its field; a conflicting
    // action names the task; an invalid policy value names the key.
    let mut bad = cmd(&["true"]);
    bad.estimate = Some(pb::Estimate { batch_min: Some(4), batch_max: Some(2), ..Default::default() });
    c.submit(pb::SubmitRequest { spec: Some(bad), paused: false, id_only: false }).await.unwrap_err();
    capture.assert_line("WARN", &["refused", "batch_max"]);
    let err = c.submit(pb::SubmitRequest { spec: None, paused: false, id_only: false }).await.unwrap_err();
    capture.assert_line("WARN", &["submit refused", err.message()]);
    let done =
        c.pause(pb::PauseRequest { ids: vec![id.clone()], ..Default::default() }).await.unwrap().into_inner();
    assert!(!done.results[0].ok, "{done:?}");
    capture.assert_line("WARN", &[&format!("request refused for task {id}")]);
    let err = c
        .set_policy(pb::SetPolicyRequest {
            set: vec![pb::PolicyEntry { key: "psi_memory".into(), value: "-3".into(), ..Default::default() }],
            reset: vec![],
        })
        .await
        .unwrap_err();
    capture.assert_line("WARN", &["request refused", "psi_memory"]);
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");

    // A persisted override that no longer fits the host: the fallback is
    // logged at start, and the start line says where the policy came from.
    c.set_policy(pb::SetPolicyRequest {
        set: vec![pb::PolicyEntry {
            key: "memory_reserve".into(),
            value: "3GiB".into(),
            ..Default::default()
        }],
        reset: vec![],
    })
    .await
    .unwrap();
    drop(c);
    d.shutdown().unwrap();
    capture.assert_line("INFO", &["stopping"]);
    let d = start_in_process(config(dir.path(), HostProfile::new(4 * GIB, 2))).unwrap();
    capture
        .assert_line("INFO", &["policy: the host's defaults with 1 persisted override(s): memory_reserve="]);
    d.shutdown().unwrap();
    let d = start_in_process(config(dir.path(), HostProfile::new(2 * GIB, 2))).unwrap();
    let fallback = capture.lines("WARN", &["persisted policy"]);
    assert!(capture.lines("WARN", &["enforcement:"]).is_empty(), "a cgroup backend is no fallback");
    let ignored = capture.lines("WARN", &["ignoring persisted policy override"]);
    assert!(!fallback.is_empty() || !ignored.is_empty(), "no fallback warning in:\n{}", capture.text());
    d.shutdown().unwrap();

    // No cgroup hierarchy to write (a fixture root with none): enforcement
    // falls back to the RSS watchdog, at warn, with the reason.
    let empty = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), HostProfile::new(4 * GIB, 2));
    cfg.cgroup_root = lardon_host::HostRoot::under(empty.path());
    let d = start_in_process(cfg).unwrap();
    capture.assert_line("WARN", &["enforcement: hard requested, none applies", "RSS"]);
    d.shutdown().unwrap();
}
