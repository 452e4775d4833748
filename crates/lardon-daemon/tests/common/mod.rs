//! Shared helpers: an in-process daemon on a temp state dir with a fake
//! 16 GiB / 16 CPU host, a client over its real socket, and waits on the
//! daemon's streams (`Watch`, `Wait`) with a deadline.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code, unreachable_pub)]

use std::path::Path;
use std::time::{Duration, Instant};

use lardon::HostProfile;
use lardon_daemon::{DaemonConfig, DaemonHandle, ProbeChoice, start_in_process};
use lardon_proto::LardonClient;
use lardon_proto::pb::{self, TaskState};
use tonic::transport::Channel;

pub const GIB: u64 = 1 << 30;
pub const MIB: u64 = 1 << 20;
pub const DEADLINE: Duration = Duration::from_secs(30);

pub type Client = LardonClient<Channel>;

pub fn config(dir: &Path, profile: HostProfile) -> DaemonConfig {
    let mut c = DaemonConfig::new(dir);
    c.probe = ProbeChoice::Fake(profile);
    c.kill_grace = Duration::from_secs(2);
    c
}

pub fn start(dir: &Path) -> DaemonHandle {
    start_in_process(config(dir, HostProfile::new(16 * GIB, 16))).unwrap()
}

pub async fn client(d: &DaemonHandle) -> Client {
    lardon_proto::connect(d.socket()).await.unwrap()
}

pub fn cmd(argv: &[&str]) -> pb::TaskSpec {
    pb::TaskSpec { argv: argv.iter().map(|s| (*s).to_owned()).collect(), ..Default::default() }
}

pub fn sh(script: &str) -> pb::TaskSpec {
    cmd(&["sh", "-c", script])
}

pub async fn submit(c: &mut Client, spec: pb::TaskSpec) -> String {
    c.submit(pb::SubmitRequest { spec: Some(spec), paused: false, id_only: false })
        .await
        .unwrap()
        .into_inner()
        .id
}

pub async fn get(c: &mut Client, id: &str) -> pb::Task {
    c.get(pb::GetRequest { id: id.to_owned(), ..Default::default() })
        .await
        .unwrap()
        .into_inner()
        .task
        .unwrap()
}

/// Waits on the daemon's `Watch` stream until task `id`'s view satisfies
/// `pred` (or panics at the deadline): subscribed first, then the task is
/// read once, so no change between the two is missed; after that it is
/// read again only when the stream says something about it changed (its
/// row, a decision about it) or that events were dropped.
pub async fn until(c: &mut Client, id: &str, what: &str, pred: impl Fn(&pb::Task) -> bool) -> pb::Task {
    use pb::watch_event::Event;
    let mut events = c.watch(pb::WatchRequest { skip_snapshot: true }).await.unwrap().into_inner();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let mut t = get(c, id).await;
    while !pred(&t) {
        let ev = match tokio::time::timeout_at(deadline, events.message()).await {
            Ok(ev) => {
                ev.unwrap().unwrap_or_else(|| panic!("the watch stream ended waiting for task {id}: {what}"))
            }
            Err(_) => panic!("timed out waiting for task {id}: {what}; last: {t:?}"),
        };
        let about_it = match ev.event {
            Some(Event::TaskChanged(changed)) => changed.id == id,
            Some(Event::Decision(d)) => d.task_id == id,
            Some(Event::Lagged(_) | Event::Snapshot(_)) => true,
            Some(Event::TaskRemoved(_) | Event::Availability(_) | Event::ScratchChanged(_)) | None => false,
        };
        if about_it {
            t = get(c, id).await;
        }
    }
    t
}

pub fn state(t: &pb::Task) -> TaskState {
    TaskState::try_from(t.state).unwrap()
}

/// Waits (with the Wait stream) until `id` ends; returns its final view.
pub async fn wait_end(c: &mut Client, id: &str) -> pb::Task {
    let mut s = c
        .wait(pb::WaitRequest { ids: vec![id.to_owned()], ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    let got = tokio::time::timeout(DEADLINE, async {
        while let Some(ev) = s.message().await.unwrap() {
            if let Some(pb::wait_event::Event::Finished(t)) = ev.event {
                return t;
            }
        }
        panic!("wait stream ended without task {id}");
    })
    .await;
    got.unwrap_or_else(|_| panic!("timed out waiting for task {id} to end"))
}

pub async fn log_text(c: &mut Client, id: &str) -> String {
    let mut s = c
        .log(pb::LogRequest {
            id: id.to_owned(),
            follow: false,
            stream: 0,
            tail_bytes: None,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut out = Vec::new();
    while let Some(chunk) = s.message().await.unwrap() {
        out.extend(chunk.data);
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Polls `cond` until true (deadline).
pub async fn eventually(what: &str, cond: impl Fn() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < DEADLINE, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
