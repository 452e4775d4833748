//! # lardon-daemon: the `lardon` daemon
//!
//! docs/DESIGN.md §10: the daemon owns a durable queue of shell commands
//! governed by the engine, served over gRPC on a Unix socket.
//!
//! * [`spec`]: what a queued command is, with validation;
//! * [`store`]: the SQLite store (WAL, one writer thread with group commit,
//!   versioned migrations, crash recovery);
//! * [`runner`]: the [`runner::Executor`] interface and the local executor
//!   (process group, cgroup, logs, peaks);
//! * [`offload`]: a daemon with a broker runs shippable tasks at cluster
//!   agents, falling back to this host on any infrastructure failure;
//! * [`slurm`]: native Slurm mode (one `sbatch` job per task) and
//!   `lardon exec`, the wrapper its jobs run;
//! * the engine (store + Governor + Task Queue + event pump), the gRPC
//!   service and the opt-in Prometheus endpoint are private; start them
//!   with [`run`] or [`start_in_process`].
//!
//! Task ids at the API are the store's numbers as decimal strings; see
//! [`ids`] for the lenient parsing that leaves room for host prefixes.
//!
//! ## Behaviour worth knowing
//!
//! * **State dir**: `lardon.db` (SQLite), `lardon.lock` (flock, holds the
//!   pid), `logs/<id>.log` (stdout and stderr of every run of the task,
//!   interleaved as written; none for a task without output that ran in a
//!   cgroup, whose empty file went to `logs/.spare/` for the next run), and
//!   the socket unless one is given. The dir is made 0700, the socket 0600.
//! * **Enforcement** (policy `enforce`, default `hard`): a task that
//!   declares memory runs in its own cgroup limited to the contract's
//!   memory plus `memory_slack` (64 MiB) plus `memory_slack_percent` (10 %);
//!   `soft` sets the soft limit instead; `off` sets none. A task that
//!   declares no memory is not limited. Peaks are measured either way.
//! * **Stopping** ([`DaemonHandle::shutdown`], or `run`'s shutdown future):
//!   running commands get SIGTERM, then SIGKILL after at most 2 s; they stay
//!   RUNNING in the store, so the next start requeues them as interrupted
//!   (attempt + 1) and batched tasks resume from their durable cursor.
//! * **Crash recovery** at start: RUNNING tasks go back to PENDING (or
//!   FAILED when `retry_on_interrupt` is false), their orphaned process
//!   groups are killed (the pid's start time is checked first), task
//!   cgroups of dead daemons are removed, and every unfinished task is
//!   queued again with its id, priority and dependencies.
//! * **Submit** refuses malformed specs and invalid estimates with
//!   `INVALID_ARGUMENT` naming the field; a valid estimate that could never
//!   fit the host is accepted and ends FAILED with the Governor's REJECT.
#![warn(missing_docs)]

mod engine;
pub mod handle;
mod hooks;
pub mod ids;
mod kernel;
mod local;
mod lock;
mod metrics;
pub mod offload;
pub mod runner;
mod scratch;
mod server;
mod service;
pub mod settings;
pub mod shape;
pub mod slurm;
pub mod spec;
pub mod store;
pub mod submit_env;

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use engine::ProbeChoice;
pub use lock::{LOCK_FILE, lock_path};
pub use settings::EnforceMode;

/// Async worker threads the daemon's tokio runtime should have: one. Every
/// request handler runs on a blocking thread and the streams only forward
/// events, so a second worker added no capacity, only wake-ups between the
/// two: on the launch benchmark (`submit --each` of 2 000 × `true`) a run
/// fell, in about a third of the runs, into a mode where the runtime's
/// threads took 670–910 ms instead of about 300 ms (50–60 context switches
/// per task instead of 20); with one worker they took 150–300 ms in 15 of
/// 16 runs (490 ms in one), and the submit latency did not change.
pub const RUNTIME_WORKERS: usize = 1;

/// How to run a daemon.
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    /// Database, logs, lock file (and the socket unless `socket` is set).
    pub state_dir: PathBuf,
    /// The Unix socket; default: [`lardon_proto::paths::Paths::resolve`]
    /// for `state_dir` (i.e. `<state dir>/lardon.sock`, or `$LARDON_SOCKET`).
    pub socket: Option<PathBuf>,
    /// Serve Prometheus text on this address (opt-in).
    pub metrics_addr: Option<SocketAddr>,
    /// Overrides the policy key `enforce` (default: the policy's, `hard`).
    pub enforce: Option<EnforceMode>,
    /// The real host, or a fake one for tests.
    pub probe: ProbeChoice,
    /// SIGTERM → SIGKILL delay of a cancel (default 10 s).
    pub kill_grace: Duration,
    /// Where the daemon looks for `/proc/self/{mountinfo,cgroup}` and the
    /// cgroup trees when it picks its enforcement backend (default: `/`).
    /// Tests point it at a fixture tree to get a known backend.
    pub cgroup_root: lardon_host::HostRoot,
    /// Offload shippable tasks to this broker (`lardon daemon --broker`).
    pub offload: Option<offload::OffloadConfig>,
    /// Policy `key = value` pairs applied (and persisted, as `lardon
    /// policy --set` would) at start, e.g. from `lardon daemon --policy
    /// FILE`; a bad one stops the start naming the key.
    pub policy: Vec<(String, String)>,
}

impl DaemonConfig {
    /// Defaults for `state_dir`: real host, socket per [`lardon_proto::paths`],
    /// no metrics, enforcement per policy.
    pub fn new(state_dir: impl Into<PathBuf>) -> Self {
        DaemonConfig {
            state_dir: state_dir.into(),
            socket: None,
            metrics_addr: None,
            enforce: None,
            probe: ProbeChoice::Host,
            kill_grace: Duration::from_secs(10),
            cgroup_root: lardon_host::HostRoot::default(),
            offload: None,
            policy: Vec::new(),
        }
    }

    /// The socket this config serves on.
    ///
    /// # Errors
    /// [`DaemonError::NoStateDir`] (never for an explicit state dir).
    pub fn socket_path(&self) -> Result<PathBuf, DaemonError> {
        match &self.socket {
            Some(s) => Ok(s.clone()),
            None => Ok(lardon_proto::Paths::resolve(Some(&self.state_dir))?.socket),
        }
    }
}

/// Why the daemon could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// Another daemon holds the state dir.
    #[error("another lardon daemon{} is already using {}", pid.map_or(String::new(), |p| format!(" (pid {p})")), state_dir.display())]
    AlreadyRunning {
        /// The contested state dir.
        state_dir: PathBuf,
        /// The holder's pid, when it could be read.
        pid: Option<u32>,
    },
    /// A file operation failed.
    #[error("cannot {what} {}: {source}", path.display())]
    Io {
        /// What was attempted.
        what: &'static str,
        /// On what.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] store::StoreError),
    /// The host could not be probed.
    #[error("host probe: {0}")]
    Host(#[from] lardon_host::HostError),
    /// The policy is invalid for this host.
    #[error("policy: {0}")]
    Policy(#[from] lardon::PolicyError),
    /// A policy pair given at start was refused; names the key.
    #[error("policy: {0}")]
    PolicyPair(String),
    /// No state dir could be resolved.
    #[error(transparent)]
    NoStateDir(#[from] lardon_proto::NoStateDir),
    /// The gRPC server failed.
    #[error("gRPC server: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// The in-process runtime failed.
    #[error("runtime: {0}")]
    Runtime(String),
}

/// Wall clock in Unix milliseconds.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Serves until `shutdown` resolves, then stops running commands (they
/// are requeued at the next start) and returns. Refuses a second daemon on
/// the same state dir ([`DaemonError::AlreadyRunning`]).
///
/// # Errors
/// [`DaemonError`] when the daemon cannot start or its server fails.
pub async fn run(
    config: DaemonConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), DaemonError> {
    let daemon = server::Daemon::start(config).await?;
    daemon.serve(shutdown).await
}

/// A daemon running on its own tokio runtime and threads.
#[derive(Debug)]
pub struct DaemonHandle {
    socket: PathBuf,
    metrics: Option<SocketAddr>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Result<(), DaemonError>>>,
}

impl DaemonHandle {
    /// The socket it serves on.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Where the metrics endpoint listens, when enabled (the real port
    /// when `metrics_addr` asked for port 0).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics
    }

    /// Stops the daemon and waits for it.
    ///
    /// # Errors
    /// What the daemon stopped with.
    pub fn shutdown(mut self) -> Result<(), DaemonError> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> Result<(), DaemonError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.thread.take() {
            Some(t) => t.join().map_err(|_| DaemonError::Runtime("the daemon thread panicked".into()))?,
            None => Ok(()),
        }
    }
}

impl Drop for DaemonHandle {
    fn drop(&mut self) {
        let _ = self.stop_and_join();
    }
}

/// Starts a daemon on its own runtime and returns once its socket accepts
/// connections.
///
/// # Errors
/// What [`run`] would fail with at start.
pub fn start_in_process(config: DaemonConfig) -> Result<DaemonHandle, DaemonError> {
    type Ready = Result<(PathBuf, Option<SocketAddr>), DaemonError>;
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Ready>();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("lardon-daemon".into())
        .spawn(move || -> Result<(), DaemonError> {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(RUNTIME_WORKERS)
                .enable_all()
                .thread_name("lardon-rt")
                .build()
                .map_err(|e| DaemonError::Runtime(e.to_string()))?;
            rt.block_on(async move {
                let daemon = match server::Daemon::start(config).await {
                    Ok(d) => d,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return Ok(());
                    }
                };
                let _ = ready_tx.send(Ok((daemon.socket().to_path_buf(), daemon.metrics_addr())));
                daemon
                    .serve(async move {
                        let _ = stop_rx.await;
                    })
                    .await
            })
        })
        .map_err(|e| DaemonError::Runtime(e.to_string()))?;
    match ready_rx.recv() {
        Ok(Ok((socket, metrics))) => {
            Ok(DaemonHandle { socket, metrics, stop: Some(stop_tx), thread: Some(thread) })
        }
        Ok(Err(e)) => {
            let _ = thread.join();
            Err(e)
        }
        Err(_) => match thread.join() {
            Ok(Err(e)) => Err(e),
            _ => Err(DaemonError::Runtime("the daemon thread ended before it was ready".into())),
        },
    }
}
