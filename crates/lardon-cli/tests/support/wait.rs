//! Waiting with a deadline instead of sleeping: every helper polls what
//! it waits for and fails (never passes) once the deadline is past,
//! naming what it waited for and, where processes are involved, with
//! their logs.

use std::path::Path;
use std::time::{Duration, Instant};

use lardon_proto::cluster::{ClusterStatusResponse, ProvisionExplainResponse};
use lardon_submit::client;

use super::procs::{Proc, logs};

/// The deadline of the waits on a cluster: long enough for an
/// allocation to be granted, start and run a task on the loaded 2-core
/// machine; only a failure waits this long.
pub(crate) const WAIT: Duration = Duration::from_secs(90);

/// How often a wait looks again.
const POLL: Duration = Duration::from_millis(25);

/// Polls `ok` until it holds, failing after `timeout`.
pub(crate) fn wait_until(what: &str, timeout: Duration, ok: impl FnMut() -> bool) {
    poll(what, timeout, String::new, ok);
}

/// Polls `ok` until it holds, failing after [`WAIT`] with the logs of
/// `procs`.
pub(crate) fn until_logged(what: &str, procs: &[&Proc], ok: impl FnMut() -> bool) {
    poll(what, WAIT, || logs(procs), ok);
}

fn poll(what: &str, timeout: Duration, context: impl Fn() -> String, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < timeout, "timed out after {timeout:?} waiting for {what}\n{}", context());
        std::thread::sleep(POLL);
    }
}

/// Polls the broker's status until `ok` holds; that status.
pub(crate) async fn until_status(
    addr: &str,
    what: &str,
    procs: &[&Proc],
    ok: impl Fn(&ClusterStatusResponse) -> bool,
) -> ClusterStatusResponse {
    let start = Instant::now();
    loop {
        if let Ok(s) = client::status(addr, &Default::default()).await
            && ok(&s)
        {
            return s;
        }
        assert!(start.elapsed() < WAIT, "timed out waiting for {what}\n{}", logs(procs));
        tokio::time::sleep(POLL).await;
    }
}

/// Polls the Provisioner's explanation until `ok` holds; that explanation.
pub(crate) async fn until_explain(
    addr: &str,
    what: &str,
    procs: &[&Proc],
    ok: impl Fn(&ProvisionExplainResponse) -> bool,
) -> ProvisionExplainResponse {
    let start = Instant::now();
    let mut last = None;
    loop {
        if let Ok(e) = client::explain(addr, &Default::default()).await {
            if ok(&e) {
                return e;
            }
            last = Some(e);
        }
        assert!(start.elapsed() < WAIT, "timed out waiting for {what} (last: {last:?})\n{}", logs(procs));
        tokio::time::sleep(POLL).await;
    }
}

/// Polls until the file holds `line`.
pub(crate) async fn until_line(path: &Path, line: &str, procs: &[&Proc]) {
    until_lines(path, line, 1, procs).await;
}

/// Polls until `path` holds `line` `n` times.
pub(crate) async fn until_lines(path: &Path, line: &str, n: usize, procs: &[&Proc]) {
    let start = Instant::now();
    while count(path, line) < n {
        assert!(
            start.elapsed() < WAIT,
            "timed out waiting for {n} × `{line}` in {}\n{}",
            path.display(),
            logs(procs)
        );
        tokio::time::sleep(POLL).await;
    }
}

/// How many lines of `path` are `line` (0 while it does not exist).
pub(crate) fn count(path: &Path, line: &str) -> usize {
    std::fs::read_to_string(path).unwrap_or_default().lines().filter(|l| *l == line).count()
}
