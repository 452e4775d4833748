//! The broker's `Watch` stream (docs/DESIGN.md §14): the owner task
//! publishes its status into one [`tokio::sync::watch`] channel after the
//! changes it makes, and each watcher's stream reads that channel at its
//! own pace.
//!
//! * The owner never waits for a watcher: publishing replaces the one
//!   shared snapshot. A watcher that reads slowly, or not at all, only
//!   misses intermediate states; when it reads it gets the latest one.
//! * The status is computed only while someone watches, only after an
//!   input that may have changed it, no more often than every [`MIN_GAP`]
//!   (the shortest interval a watcher may ask for), at most once per
//!   batch of inputs the owner handles back to back (and at least every
//!   [`MAX_DEFERRED`] inputs), and published only when it differs from the
//!   last snapshot.
//! * Each watcher's stream sends the snapshot at once, then one after each
//!   change but no sooner than its `min_interval_ms` after the previous
//!   one, and a heartbeat after the broker's heartbeat interval of quiet.
//!   It ends (freeing everything) as soon as its client goes away.

use std::sync::Arc;
use std::time::Duration;

use lardon_proto::cluster as pb;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tonic::Status;

/// The interval between events when the request leaves it at 0.
pub(crate) const DEFAULT_MIN_INTERVAL: Duration = Duration::from_millis(100);

/// The `min_interval_ms` a request may ask for.
pub(crate) const MIN_INTERVAL_MS: std::ops::RangeInclusive<u32> = 10..=60_000;

/// Inputs the owner may handle while more wait in its queue before it
/// publishes anyway (a steady load still reaches watchers).
pub(crate) const MAX_DEFERRED: u32 = 64;

/// Least time between two publications: no watcher may ask for events
/// more often, so computing the status more often would be wasted.
pub(crate) const MIN_GAP: Duration = Duration::from_millis(10);

/// One published state: the change counter when it was taken and the
/// status then, shared by every watcher.
#[derive(Debug, Clone, Default)]
pub(crate) struct Snapshot {
    pub(crate) sequence: u64,
    pub(crate) status: Arc<pb::ClusterStatusResponse>,
}

/// When the owner should publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Due {
    /// Now.
    Now,
    /// At this instant, unless an input comes first (then ask again).
    At(std::time::Instant),
    /// Not until the next input: nobody watches, nothing changed, or more
    /// inputs wait.
    No,
}

/// The owner task's side of the channel.
#[derive(Debug)]
pub(crate) struct Feed {
    tx: watch::Sender<Snapshot>,
    /// The change counter the channel's snapshot is current for (`None`:
    /// nobody watched meanwhile, so it may be stale).
    current_for: Option<u64>,
    /// Inputs handled since the counter moved without a publication (the
    /// queue was busy).
    deferred: u32,
    /// When the status was last computed for watchers.
    last: Option<std::time::Instant>,
}

impl Default for Feed {
    fn default() -> Self {
        Feed { tx: watch::channel(Snapshot::default()).0, current_for: None, deferred: 0, last: None }
    }
}

impl Feed {
    /// A new watcher's receiver. The caller publishes right after (see
    /// [`Feed::publish`]) so that its first snapshot is current.
    pub(crate) fn subscribe(&mut self) -> watch::Receiver<Snapshot> {
        self.tx.subscribe()
    }

    /// When the status must be computed and published, the counter being
    /// at `changes` at `now`: never while nobody watches or nothing
    /// changed; no sooner than [`MIN_GAP`] after the last publication;
    /// and while more inputs wait (`busy`) it is put off, up to
    /// [`MAX_DEFERRED`] inputs.
    pub(crate) fn due(&mut self, changes: u64, busy: bool, now: std::time::Instant) -> Due {
        if self.tx.receiver_count() == 0 {
            self.current_for = None;
            self.deferred = 0;
            return Due::No;
        }
        if self.current_for == Some(changes) {
            return Due::No;
        }
        if let Some(next) = self.last.map(|at| at + MIN_GAP).filter(|next| *next > now) {
            return Due::At(next);
        }
        if busy && self.deferred < MAX_DEFERRED {
            self.deferred += 1;
            return Due::No;
        }
        Due::Now
    }

    /// Whether the snapshot is current for `changes` (a new watcher needs
    /// a fresh one otherwise).
    pub(crate) fn is_current(&self, changes: u64) -> bool {
        self.current_for == Some(changes)
    }

    /// Publishes `status`, taken at change `changes` at `now`, unless it
    /// equals the snapshot already there (then watchers are not woken).
    pub(crate) fn publish(
        &mut self,
        changes: u64,
        status: pb::ClusterStatusResponse,
        now: std::time::Instant,
    ) {
        self.current_for = Some(changes);
        self.deferred = 0;
        self.last = Some(now);
        self.tx.send_if_modified(|s| {
            if *s.status == status {
                return false;
            }
            *s = Snapshot { sequence: changes, status: Arc::new(status) };
            true
        });
    }
}

/// The request's interval between events.
///
/// # Errors
/// INVALID_ARGUMENT naming `min_interval_ms` when it is out of range.
pub(crate) fn min_interval(request: &pb::ClusterWatchRequest) -> Result<Duration, Status> {
    match request.min_interval_ms {
        0 => Ok(DEFAULT_MIN_INTERVAL),
        ms if MIN_INTERVAL_MS.contains(&ms) => Ok(Duration::from_millis(u64::from(ms))),
        ms => Err(Status::invalid_argument(format!(
            "min_interval_ms: {ms} is out of range: give {} ..= {} milliseconds, or 0 for {} ms",
            MIN_INTERVAL_MS.start(),
            MIN_INTERVAL_MS.end(),
            DEFAULT_MIN_INTERVAL.as_millis()
        ))),
    }
}

/// Where a watcher's events go: room for one, so that a slow client holds
/// at most one stale event and the next one it reads is the latest state.
pub(crate) type EventTx = mpsc::Sender<Result<pb::ClusterWatchEvent, Status>>;

/// Feeds one watcher from `rx` until its client goes away or the broker
/// stops: the snapshot at once, then after each change (no sooner than
/// `interval` after the previous event), and a heartbeat after
/// `heartbeat` (or `interval`, if longer) of quiet.
pub(crate) async fn serve_watcher(
    mut rx: watch::Receiver<Snapshot>,
    out: EventTx,
    interval: Duration,
    heartbeat: Duration,
) {
    // Never more often than the interval asked for, heartbeats included;
    // the event says how often, so the client knows when to give up.
    let heartbeat = heartbeat.max(interval);
    let heartbeat_ms = u64::try_from(heartbeat.as_millis()).unwrap_or(u64::MAX);
    let mut last: Option<u64> = None;
    loop {
        // Room for the event first, then the snapshot: what goes out is
        // the latest state when the client can take it.
        let Ok(permit) = out.reserve().await else { return };
        let snapshot = rx.borrow_and_update().clone();
        permit.send(Ok(pb::ClusterWatchEvent {
            sequence: snapshot.sequence,
            status: Some((*snapshot.status).clone()),
            // A new state always has a new sequence (see Feed::publish).
            heartbeat: last == Some(snapshot.sequence),
            heartbeat_ms,
        }));
        last = Some(snapshot.sequence);
        let sent = Instant::now();
        tokio::select! {
            changed = rx.changed() => {
                if changed.is_err() {
                    let _ = out.send(Err(Status::unavailable("the broker is stopping"))).await;
                    return;
                }
                tokio::select! {
                    () = tokio::time::sleep_until(sent + interval) => {}
                    () = out.closed() => return,
                }
            }
            () = tokio::time::sleep_until(sent + heartbeat) => {}
            () = out.closed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn status(queued: u64) -> pb::ClusterStatusResponse {
        pb::ClusterStatusResponse { queued, ..Default::default() }
    }

    /// Nothing is computed while nobody watches; publications are
    /// spaced by MIN_GAP; a busy queue puts one off (up to a bound); an
    /// unchanged status wakes no one.
    #[test]
    fn the_feed_publishes_only_for_watchers_only_changes_and_no_faster_than_its_gap() {
        let t0 = std::time::Instant::now();
        let mut feed = Feed::default();
        assert_eq!(feed.due(1, false, t0), Due::No, "no watcher: nothing to compute");
        let mut rx = feed.subscribe();
        assert!(!feed.is_current(1));
        assert_eq!(feed.due(1, false, t0), Due::Now);
        feed.publish(1, status(1), t0);
        assert!(rx.has_changed().unwrap());
        assert_eq!(rx.borrow_and_update().sequence, 1);
        assert_eq!(feed.due(1, false, t0), Due::No, "current already");
        assert_eq!(feed.due(2, false, t0 + MIN_GAP / 2), Due::At(t0 + MIN_GAP), "too soon");
        let t1 = t0 + MIN_GAP;
        for n in 0..MAX_DEFERRED {
            assert_eq!(feed.due(2, true, t1), Due::No, "deferred while busy ({n})");
        }
        assert_eq!(feed.due(2, true, t1), Due::Now, "published after {MAX_DEFERRED} busy inputs");
        feed.publish(2, status(1), t1);
        assert!(!rx.has_changed().unwrap(), "the same status wakes no watcher");
        let t2 = t1 + MIN_GAP;
        assert_eq!(feed.due(3, false, t2), Due::Now);
        feed.publish(3, status(2), t2);
        assert_eq!(rx.borrow_and_update().sequence, 3);
        drop(rx);
        assert_eq!(feed.due(4, false, t2 + MIN_GAP), Due::No);
        assert!(!feed.is_current(3), "stale once nobody watched");
    }

    /// Heartbeats come no faster than the interval asked for, and say so;
    /// a client that goes away ends its watcher; a broker that stops ends
    /// the stream with UNAVAILABLE.
    #[tokio::test]
    async fn a_watcher_beats_at_its_pace_and_ends_with_either_side() {
        let (feed, rx) = watch::channel(Snapshot::default());
        let (out, mut events) = mpsc::channel(1);
        let interval = Duration::from_millis(60);
        let task = tokio::spawn(serve_watcher(rx, out, interval, Duration::from_millis(10)));
        let first = events.recv().await.unwrap().unwrap();
        assert!(!first.heartbeat);
        assert_eq!(first.heartbeat_ms, 60, "the interval, being longer than the heartbeat");
        let since = Instant::now();
        let beat = events.recv().await.unwrap().unwrap();
        assert!(beat.heartbeat && since.elapsed() >= Duration::from_millis(50), "{beat:?}");
        drop(events);
        tokio::time::timeout(Duration::from_secs(5), task).await.unwrap().unwrap();

        let rx = feed.subscribe();
        let (out, mut events) = mpsc::channel(1);
        tokio::spawn(serve_watcher(rx, out, interval, Duration::from_secs(60)));
        assert!(events.recv().await.unwrap().is_ok());
        drop(feed);
        let end = events.recv().await.unwrap().unwrap_err();
        assert_eq!(end.code(), tonic::Code::Unavailable);
        assert!(events.recv().await.is_none());
    }

    #[test]
    fn min_interval_is_validated_naming_the_field() {
        let ask = |ms| min_interval(&pb::ClusterWatchRequest { min_interval_ms: ms });
        assert_eq!(ask(0).unwrap(), DEFAULT_MIN_INTERVAL);
        assert_eq!(ask(10).unwrap(), Duration::from_millis(10));
        assert_eq!(ask(60_000).unwrap(), Duration::from_secs(60));
        for bad in [1, 9, 60_001, u32::MAX] {
            let e = ask(bad).unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument);
            assert!(e.message().starts_with("min_interval_ms: "), "{}", e.message());
        }
    }
}
