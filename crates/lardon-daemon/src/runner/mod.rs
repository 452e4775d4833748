//! Running commands: the [`Executor`] interface (start, signal, wait,
//! usage, peak) and its local implementation, so that the cluster mode can
//! add a remote executor without touching the queue or the store
//! (docs/DESIGN.md §14).

mod env;
mod local;
pub mod logcap;
mod logfile;
pub mod orphans;
mod probe;

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use lardon_host::CpuMask;

pub use env::task_env;
pub use local::LocalExecutor;
pub use logfile::{LogFiles, LogReader, SPARE_DIR as SPARE_LOG_DIR};
pub(crate) use probe::ClassProbes;

/// Everything needed to start one run of a command (one batch, for a
/// batched task).
#[derive(Debug, Clone)]
pub struct RunRequest {
    /// A unique, cgroup-safe name (`[A-Za-z0-9._-]`, ≤ 64 chars).
    pub name: String,
    /// The command, run without a shell.
    pub argv: Vec<String>,
    /// Working directory, if given.
    pub cwd: Option<PathBuf>,
    /// Variables added to the base environment, in order (they win).
    pub env: Vec<(String, String)>,
    /// The base environment: the submitter's (`lardon submit`), or `None`
    /// for the daemon's own.
    pub base_env: Option<crate::submit_env::SubmitEnv>,
    /// Where stdout and stderr go (appended; both streams interleave).
    pub log: PathBuf,
    /// Hard memory limit, bytes.
    pub memory_max: Option<u64>,
    /// Soft memory limit, bytes.
    pub memory_high: Option<u64>,
    /// CPUs to pin the process to.
    pub cpus: Option<CpuMask>,
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunExit {
    /// Exit code, when it exited.
    pub code: Option<i32>,
    /// Signal number, when killed by one.
    pub signal: Option<i32>,
    /// Wall time of the run.
    pub wall: Duration,
}

impl RunExit {
    /// Exited with code 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// One human phrase: `exited with code 3`, `killed by signal 9`.
    pub fn describe(&self) -> String {
        match (self.code, self.signal) {
            (Some(c), _) => format!("exited with code {c}"),
            (None, Some(s)) => format!("killed by signal {s}"),
            (None, None) => "ended for an unknown reason".to_owned(),
        }
    }
}

/// Signals an executor can deliver to a whole run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunSignal {
    /// SIGSTOP.
    Stop,
    /// SIGCONT.
    Continue,
    /// SIGTERM.
    Terminate,
    /// SIGKILL.
    Kill,
}

/// Why an executor failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The command could not be started.
    #[error("cannot start `{program}`: {detail}")]
    Start {
        /// argv\[0\].
        program: String,
        /// Why.
        detail: String,
    },
    /// Signalling or waiting failed.
    #[error("{0}")]
    Control(String),
}

/// Starts runs.
pub trait Executor: Send + Sync + fmt::Debug {
    /// Starts `request` and returns its handle.
    ///
    /// # Errors
    /// [`RunError::Start`] when nothing was started.
    fn start(&self, request: &RunRequest) -> Result<Box<dyn Run>, RunError>;
}

/// One live run.
pub trait Run: Send + Sync + fmt::Debug {
    /// Where the run is, durably (for orphan clean-up after a crash).
    fn handle(&self) -> crate::handle::RunHandle;
    /// Delivers `signal` to every process of the run.
    ///
    /// # Errors
    /// [`RunError::Control`] when the signal could not be sent.
    fn signal(&self, signal: RunSignal) -> Result<(), RunError>;
    /// Blocks until the run ends (call once).
    ///
    /// # Errors
    /// [`RunError::Control`] when waiting failed.
    fn wait(&self) -> Result<RunExit, RunError>;
    /// Blocks on the calling thread until the run ends (`Some(true)`:
    /// [`Run::wait`] then returns at once) or `timeout` passes
    /// (`Some(false)`). `None` when this run cannot be waited for with a
    /// timeout: the caller then blocks in [`Run::wait`] and does its
    /// periodic work on another thread.
    fn ended_within(&self, timeout: Duration) -> Option<bool> {
        let _ = timeout;
        None
    }
    /// Current memory use, bytes, when known.
    fn usage(&self) -> Option<u64>;
    /// Peak memory use, bytes, when known (valid after `wait`).
    fn peak(&self) -> Option<u64>;
    /// Whether the run was killed by its memory limit.
    fn oom_killed(&self) -> bool;
    /// Kills whatever is left of the run and releases its resources.
    fn cleanup(&self);
    /// The length of the run's log as [`Run::cleanup`] saw it (`None`:
    /// not known, or no log), so its cap is checked without another look.
    fn log_len(&self) -> Option<u64> {
        None
    }
}
