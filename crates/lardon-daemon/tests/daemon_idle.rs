//! An idle daemon wakes for nothing (docs/DESIGN.md §8): its event pump
//! blocks on the queue's events, and `log --follow` on file-change
//! notifications and the task's end. The loops count their wake-ups in
//! `lardon_loop_wakeups_total`, read here through the metrics endpoint.
//!
//! These tests let time pass (`QUIET`) to give a polling loop the chance to
//! wake: nothing is synchronised by that wait, it is the observation
//! window. Break the code to watch them fail: give the pump back its
//! `recv_timeout(100 ms)` loop (counting each pass), or re-read a followed
//! log on a 100 ms timer instead of on notifications.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write as _;
use std::time::Duration;

use common::*;
use lardon::HostProfile;
use lardon_daemon::{DaemonHandle, start_in_process};
use lardon_proto::pb;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Long enough for a 100 ms poller to wake several times.
const QUIET: Duration = Duration::from_millis(600);

fn start_with_metrics(dir: &std::path::Path) -> DaemonHandle {
    let mut cfg = config(dir, HostProfile::new(16 * GIB, 16));
    cfg.metrics_addr = Some("127.0.0.1:0".parse().unwrap());
    start_in_process(cfg).unwrap()
}

/// `lardon_loop_wakeups_total{loop="<name>"}` as the daemon reports it.
async fn wakeups(d: &DaemonHandle, name: &str) -> u64 {
    let mut conn = tokio::net::TcpStream::connect(d.metrics_addr().unwrap()).await.unwrap();
    conn.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").await.unwrap();
    let mut text = String::new();
    conn.read_to_string(&mut text).await.unwrap();
    let key = format!("lardon_loop_wakeups_total{{loop=\"{name}\"}} ");
    let line =
        text.lines().find_map(|l| l.strip_prefix(&key)).unwrap_or_else(|| panic!("{key} missing in\n{text}"));
    line.trim().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_daemon_event_pump_does_not_wake() {
    let dir = tempfile::tempdir().unwrap();
    let d = start_with_metrics(dir.path());
    let before = wakeups(&d, "event_pump").await;
    tokio::time::sleep(QUIET).await;
    assert_eq!(wakeups(&d, "event_pump").await, before, "the pump woke with nothing to do");
    // The counter counts: one task's events wake it.
    let mut c = client(&d).await;
    let id = submit(&mut c, cmd(&["true"])).await;
    wait_end(&mut c, &id).await;
    let busy = wakeups(&d, "event_pump").await;
    assert!(busy > before, "the pump handled a task's events without counting them");
    // And once the task's events are handled, it is idle again.
    tokio::time::sleep(QUIET).await;
    let after = wakeups(&d, "event_pump").await;
    tokio::time::sleep(QUIET).await;
    assert_eq!(wakeups(&d, "event_pump").await, after, "the pump woke with nothing to do after a task");
    drop(c);
    d.shutdown().unwrap();
}

/// Reads `stream` until its text so far contains `needle`.
async fn read_until(stream: &mut tonic::Streaming<pb::LogChunk>, text: &mut String, needle: &str) {
    let found = tokio::time::timeout(DEADLINE, async {
        while !text.contains(needle) {
            let chunk = stream
                .message()
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("log ended before {needle:?}: {text:?}"));
            text.push_str(&String::from_utf8_lossy(&chunk.data));
        }
    })
    .await;
    found.unwrap_or_else(|_| panic!("no {needle:?} in the followed log: {text:?}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_follow_sends_new_output_without_polling_and_ends_with_the_task() {
    let dir = tempfile::tempdir().unwrap();
    let d = start_with_metrics(dir.path());
    let mut c = client(&d).await;
    // The task prints, then blocks on a FIFO the test holds: it prints
    // again only when the test says so, and then ends.
    let fifo = dir.path().join("go");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success(), "mkfifo failed");
    let script = format!("echo first; read line < '{}'; echo second", fifo.display());
    let id = submit(&mut c, sh(&script)).await;
    let mut stream = c
        .log(pb::LogRequest {
            id: id.clone(),
            follow: true,
            stream: 0,
            tail_bytes: None,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut text = String::new();
    read_until(&mut stream, &mut text, "first\n").await;
    // The task is silent now: a follower that polls would re-read here.
    let quiet = wakeups(&d, "log_follow").await;
    tokio::time::sleep(QUIET).await;
    assert_eq!(wakeups(&d, "log_follow").await, quiet, "the follower re-read a log that did not change");
    // Opening the FIFO for writing releases the task's `read`.
    let mut go = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    go.write_all(b"go\n").unwrap();
    drop(go);
    read_until(&mut stream, &mut text, "second\n").await;
    // The task ends: the stream ends with it, nothing left unsent.
    let end = tokio::time::timeout(DEADLINE, stream.message()).await.expect("the follow outlived the task");
    match end.unwrap() {
        None => {}
        Some(chunk) => {
            text.push_str(&String::from_utf8_lossy(&chunk.data));
            let rest =
                tokio::time::timeout(DEADLINE, stream.message()).await.expect("the follow outlived the task");
            assert!(rest.unwrap().is_none(), "more output after the task ended: {text:?}");
        }
    }
    assert_eq!(text, "first\nsecond\n");
    assert_eq!(get(&mut c, &id).await.state, pb::TaskState::Completed as i32);
    drop(c);
    d.shutdown().unwrap();
}
