//! The thread that follows the broker's `Watch` stream for the cluster
//! view: it forwards each event to the event loop, and when the stream
//! breaks — an error, its end, or silence past three of the broker's
//! heartbeats — it says why (the view shows "not answering" with the last
//! figures' age) and subscribes again with exponential back-off.

use std::sync::mpsc as std_mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio_stream::StreamExt as _;

use super::{Events, Subscribe, Watched};
use crate::TopError;

/// Longest a subscription, or the first event on it, may take: a broker
/// behind a black hole (no answer, not even a refusal) shows as not
/// answering instead of freezing the view.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Silence allowed when an event does not say the broker's heartbeat.
const DEFAULT_SILENCE: Duration = Duration::from_secs(15);

/// Waits between subscriptions after the stream broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Backoff {
    /// The first wait.
    pub(crate) initial: Duration,
    /// The wait doubles up to this.
    pub(crate) max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { initial: Duration::from_millis(500), max: Duration::from_secs(10) }
    }
}

/// The thread; dropping it stops and joins it.
pub(crate) struct Watcher {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Watcher {
    /// Subscribes and waits for the first snapshot (sent to `out` before
    /// this returns), then follows the stream on its own thread.
    ///
    /// # Errors
    /// [`TopError::Broker`] when the first subscription or its first event
    /// fails; [`TopError::Runtime`] when the thread cannot start.
    pub(crate) fn start(
        mut subscribe: Subscribe,
        backoff: Backoff,
        out: std_mpsc::Sender<Watched>,
    ) -> Result<Self, TopError> {
        let rt =
            tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(TopError::Runtime)?;
        let (events, first) = rt.block_on(first_event(&mut subscribe)).map_err(TopError::Broker)?;
        let silence = silence_after(&first);
        let _ = out.send(Ok(first));
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("lardon-top-cluster".into())
            .spawn(move || {
                rt.block_on(async move {
                    tokio::select! {
                        () = follow(subscribe, events, silence, backoff, out) => {}
                        _ = stopped => {}
                    }
                });
            })
            .map_err(TopError::Runtime)?;
        Ok(Self { stop: Some(stop), thread: Some(thread) })
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A subscription and its first event, within [`CONNECT_TIMEOUT`].
async fn first_event(
    subscribe: &mut Subscribe,
) -> Result<(Events, lardon_proto::cluster::ClusterWatchEvent), String> {
    let attempt = async {
        let mut events = subscribe().await?;
        match events.next().await {
            Some(Ok(first)) => Ok((events, first)),
            Some(Err(why)) => Err(why),
            None => Err("the broker ended the stream before its first event".to_owned()),
        }
    };
    tokio::time::timeout(CONNECT_TIMEOUT, attempt)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {} s", CONNECT_TIMEOUT.as_secs())))
}

/// How long to wait for the next event after `event`: three of the
/// broker's heartbeats (it sends one at least that often), plus a second
/// of slack.
fn silence_after(event: &lardon_proto::cluster::ClusterWatchEvent) -> Duration {
    match event.heartbeat_ms {
        0 => DEFAULT_SILENCE,
        ms => Duration::from_millis(ms.saturating_mul(3)).saturating_add(Duration::from_secs(1)),
    }
}

/// Forwards events until `out` is dropped; re-subscribes when the stream
/// breaks, telling `out` why and when it tries again.
pub(crate) async fn follow(
    mut subscribe: Subscribe,
    events: Events,
    mut silence: Duration,
    backoff: Backoff,
    out: std_mpsc::Sender<Watched>,
) {
    let mut events = Some(events);
    let mut wait = backoff.initial;
    loop {
        let why = match events.as_mut() {
            Some(stream) => match tokio::time::timeout(silence, stream.next()).await {
                Ok(Some(Ok(event))) => {
                    silence = silence_after(&event);
                    wait = backoff.initial;
                    if out.send(Ok(event)).is_err() {
                        return;
                    }
                    continue;
                }
                Ok(Some(Err(why))) => why,
                Ok(None) => "the broker ended the stream".to_owned(),
                Err(_) => format!("no event for {:.1} s", silence.as_secs_f64()),
            },
            None => match tokio::time::timeout(CONNECT_TIMEOUT, subscribe()).await {
                Ok(Ok(stream)) => {
                    // Live again once its first event (the snapshot) comes.
                    events = Some(stream);
                    silence = CONNECT_TIMEOUT;
                    continue;
                }
                Ok(Err(why)) => why,
                Err(_) => format!("no answer within {} s", CONNECT_TIMEOUT.as_secs()),
            },
        };
        events = None;
        let again = format!("{why}; subscribing again in {:.1} s", wait.as_secs_f64());
        if out.send(Err(again)).is_err() {
            return;
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(backoff.max);
    }
}
