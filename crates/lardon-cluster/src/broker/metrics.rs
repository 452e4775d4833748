//! The broker's Prometheus metrics (docs/DESIGN.md §14): counters kept by
//! the core task (their only writer, so they need no atomics and move in
//! step with the router), gauges read from the router when scraped, and a
//! small HTTP/1.1 responder serving `GET /metrics` in the text exposition
//! format (version 0.0.4).
//!
//! A scrape is one more input to the core: it answers with a
//! [`MetricsSnapshot`] between two transitions, so the figures of one scrape
//! are consistent with each other.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tracing::debug;

use super::core::Input;

/// Events counted since the broker started. Only the core task writes
/// them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counters {
    /// Tasks answered done after a successful run.
    pub(crate) done: u64,
    /// Tasks answered done after a failed run (the task's own failure).
    pub(crate) failed: u64,
    /// Runs lost with their agent and queued again.
    pub(crate) requeued: u64,
    /// Assignments an agent's Governor answered WAIT (back to the head of
    /// their route).
    pub(crate) waited: u64,
    /// Tasks handed back to run locally (attempts spent, last agent gone).
    pub(crate) run_locally: u64,
    /// Tasks answered "no executor" at submission.
    pub(crate) no_executor: u64,
    /// Tasks cancelled before they ran.
    pub(crate) cancelled: u64,
    /// Tasks whose deadline passed in the queue.
    pub(crate) expired: u64,
    /// Cacheable submissions answered from the result cache.
    pub(crate) cache_hits: u64,
    /// Cacheable submissions the result cache could not answer.
    pub(crate) cache_misses: u64,
    /// Reports an agent sent for a task it no longer holds (a late result
    /// after the task was queued elsewhere, or a duplicate): dropped.
    pub(crate) late_reports: u64,
}

/// Tasks queued and in flight for one capability.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Load {
    pub(crate) queued: u64,
    pub(crate) in_flight: u64,
}

/// What one scrape shows: the counters and the gauges at one instant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct MetricsSnapshot {
    pub(crate) counters: Counters,
    /// Agents connected (placeholders of a restart's recovery included).
    pub(crate) agents: u64,
    /// Submitters connected.
    pub(crate) submitters: u64,
    /// Per capability key.
    pub(crate) load: BTreeMap<String, Load>,
    /// Token bounds of the agents taking work.
    pub(crate) tokens: u64,
    /// Those raised by the cache's hit rate.
    pub(crate) advertised_tokens: u64,
}

impl MetricsSnapshot {
    /// The snapshot in the Prometheus text exposition format.
    pub(crate) fn render(&self) -> String {
        let c = &self.counters;
        let mut out = String::new();
        let mut metric = |name: &str, kind: &str, help: &str, value: u64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}");
        };
        metric("lardon_broker_agents", "gauge", "Agents connected.", self.agents);
        metric("lardon_broker_submitters", "gauge", "Submitters connected.", self.submitters);
        metric("lardon_broker_tokens", "gauge", "Token bounds of the agents taking work.", self.tokens);
        metric(
            "lardon_broker_advertised_tokens",
            "gauge",
            "Agent tokens raised by the cache hit rate (a hit holds no token).",
            self.advertised_tokens,
        );
        let queued = self.load.values().map(|l| l.queued).sum();
        let in_flight = self.load.values().map(|l| l.in_flight).sum();
        metric("lardon_broker_tasks_queued", "gauge", "Tasks waiting for an agent.", queued);
        metric("lardon_broker_tasks_in_flight", "gauge", "Tasks assigned to an agent.", in_flight);
        metric("lardon_broker_tasks_done_total", "counter", "Tasks that ran and succeeded.", c.done);
        metric("lardon_broker_tasks_failed_total", "counter", "Tasks that ran and failed.", c.failed);
        metric(
            "lardon_broker_tasks_requeued_total",
            "counter",
            "Runs lost with their agent and queued again.",
            c.requeued,
        );
        metric(
            "lardon_broker_tasks_waited_total",
            "counter",
            "Assignments an agent's Governor answered WAIT (queued again at the head).",
            c.waited,
        );
        metric(
            "lardon_broker_tasks_run_locally_total",
            "counter",
            "Tasks handed back to their submitter to run locally.",
            c.run_locally,
        );
        metric(
            "lardon_broker_no_executor_total",
            "counter",
            "Submissions answered: no agent for this capability.",
            c.no_executor,
        );
        metric(
            "lardon_broker_tasks_cancelled_total",
            "counter",
            "Tasks cancelled before they ran.",
            c.cancelled,
        );
        metric(
            "lardon_broker_tasks_expired_total",
            "counter",
            "Tasks whose deadline passed while queued.",
            c.expired,
        );
        metric(
            "lardon_broker_cache_hits_total",
            "counter",
            "Submissions answered from the result cache.",
            c.cache_hits,
        );
        metric(
            "lardon_broker_cache_misses_total",
            "counter",
            "Cacheable submissions not in the result cache.",
            c.cache_misses,
        );
        metric(
            "lardon_broker_late_reports_total",
            "counter",
            "Reports for tasks the agent no longer held (dropped).",
            c.late_reports,
        );
        for (name, help, pick) in [
            (
                "lardon_broker_capability_tasks_queued",
                "Tasks waiting for an agent, per capability.",
                (|l: &Load| l.queued) as fn(&Load) -> u64,
            ),
            (
                "lardon_broker_capability_tasks_in_flight",
                "Tasks assigned to an agent, per capability.",
                |l: &Load| l.in_flight,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            for (capability, load) in &self.load {
                let _ = writeln!(out, "{name}{{capability=\"{}\"}} {}", label(capability), pick(load));
            }
        }
        out
    }
}

/// A label value escaped as the exposition format asks (backslash, double
/// quote and line feed).
fn label(value: &str) -> String {
    value.replace('\\', r"\\").replace('"', "\\\"").replace('\n', r"\n")
}

/// Where a metrics endpoint asks the broker's core for a snapshot. Give it
/// to [`BrokerConfig::metrics`](super::BrokerConfig::metrics) and serve it
/// with [`serve_metrics`]; cloning shares it.
#[derive(Debug, Clone, Default)]
pub struct MetricsBoard {
    core: Arc<OnceLock<mpsc::Sender<Input>>>,
}

impl MetricsBoard {
    /// A board no broker is attached to yet (scrapes answer 503 until one
    /// starts with it).
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Attaches the core's input channel (the first broker wins).
    pub(crate) fn attach(&self, core: mpsc::Sender<Input>) {
        let _ = self.core.set(core);
    }

    /// The core's snapshot, or `None` when no broker runs.
    pub(crate) async fn snapshot(&self) -> Option<MetricsSnapshot> {
        let core = self.core.get()?;
        let (reply, rx) = oneshot::channel();
        core.send(Input::Metrics { reply }).await.ok()?;
        rx.await.ok()
    }
}

#[cfg(test)]
impl MetricsBoard {
    /// Asks the core to check its invariants (the fault tests).
    pub(crate) async fn check(&self) -> Result<(), String> {
        let core = self.core.get().ok_or("no broker attached")?;
        let (reply, rx) = oneshot::channel();
        core.send(Input::Check { reply }).await.map_err(|_| "the core stopped")?;
        rx.await.map_err(|_| "the core stopped".to_owned())?
    }
}

/// Longest a scraper may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Scrapes served at once.
const MAX_CONNECTIONS: usize = 32;
/// Pause after a failed accept.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);
/// Largest request head read; a longer one is refused.
const MAX_REQUEST: usize = 8 * 1024;

/// Serves `GET /metrics` from `board` on `listener` until `shutdown`
/// resolves: one request per connection (`Connection: close`), at most 32
/// at once, 404 for another path, 405 for another method, 400 for a
/// malformed, oversized or slow (5 s) request, 503 while no broker is
/// attached.
///
/// # Errors
/// None so far: a failed accept or a misbehaving client is logged and
/// skipped (the signature matches the broker's other servers).
pub async fn serve_metrics(
    listener: TcpListener,
    board: MetricsBoard,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), super::BrokerError> {
    let mut shutdown = std::pin::pin!(shutdown);
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        // At most MAX_CONNECTIONS at once: slow clients hold back accepts,
        // not the broker's memory.
        let slot = tokio::select! {
            slot = Arc::clone(&slots).acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => return Ok(()),
            },
            () = &mut shutdown => return Ok(()),
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors, say: pause rather than spin.
                    debug!("metrics: accept failed: {e}");
                    tokio::time::sleep(ACCEPT_PAUSE).await;
                    continue;
                }
            },
            () = &mut shutdown => return Ok(()),
        };
        let board = board.clone();
        tokio::spawn(async move {
            if let Err(e) = respond(stream, &board).await {
                debug!("metrics: {e}");
            }
            drop(slot);
        });
    }
}

/// Reads one request head and answers it.
async fn respond(mut stream: TcpStream, board: &MetricsBoard) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let complete = tokio::time::timeout(REQUEST_TIMEOUT, async {
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            if head.len() > MAX_REQUEST {
                return Ok(false);
            }
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                return Ok(false);
            }
            head.extend_from_slice(&buf[..n]);
        }
        Ok::<_, std::io::Error>(true)
    })
    .await
    .unwrap_or(Ok(false))?;
    let (status, body) =
        if complete { answer(&head, board).await } else { (400, "bad request\n".to_owned()) };
    let reason = match status {
        200 => "OK",
        404 => "Not Found",
        405 => "Method Not Allowed",
        503 => "Service Unavailable",
        _ => "Bad Request",
    };
    let kind =
        if status == 200 { "text/plain; version=0.0.4; charset=utf-8" } else { "text/plain; charset=utf-8" };
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

/// The status and body for a complete request head.
async fn answer(head: &[u8], board: &MetricsBoard) -> (u16, String) {
    let line = head.split(|b| *b == b'\r').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut words = line.split(' ');
    let (Some(method), Some(target), Some(version)) = (words.next(), words.next(), words.next()) else {
        return (400, "bad request\n".to_owned());
    };
    if !version.starts_with("HTTP/1.") {
        return (400, "bad request\n".to_owned());
    }
    let path = target.split('?').next().unwrap_or(target);
    if path != "/metrics" {
        return (404, "only /metrics is served\n".to_owned());
    }
    if method != "GET" {
        return (405, "only GET\n".to_owned());
    }
    match board.snapshot().await {
        Some(snapshot) => (200, snapshot.render()),
        None => (503, "the broker is not running\n".to_owned()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_escaped_and_every_metric_has_help_and_type() {
        let mut load = BTreeMap::new();
        load.insert("we\"ird\\cap\n".to_owned(), Load { queued: 2, in_flight: 1 });
        let text = MetricsSnapshot { agents: 1, load, ..MetricsSnapshot::default() }.render();
        assert!(
            text.contains(r#"lardon_broker_capability_tasks_queued{capability="we\"ird\\cap\n"} 2"#),
            "{text}"
        );
        assert!(text.contains("lardon_broker_tasks_queued 2\n"), "{text}");
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let name = line.split(['{', ' ']).next().unwrap();
            assert!(text.contains(&format!("# TYPE {name} ")), "{name} has no TYPE");
            assert!(text.contains(&format!("# HELP {name} ")), "{name} has no HELP");
        }
    }
}
