//! # lardon-top: the observatory behind `lardon top`
//!
//! A live dashboard of the daemon (docs/DESIGN.md §11): tasks with progress,
//! ETA and throughput; resources as bars with numbers; the Governor's
//! pressure, slow start and recent decisions; scratch volumes and the
//! action each allows. Keys pause, resume and cancel tasks and drain
//! volumes.
//!
//! The split follows gitui: [`state`] (what is known, updated by each
//! Watch event), [`update`] (keys → state changes and requests), [`view`]
//! (a pure function of the state into a ratatui frame), `app` (the event
//! loop, generic over the backend) and `client` (a thread holding the
//! Watch stream, talking to the loop through channels).
//!
//! The entry points are [`run_top`] and, for a cluster broker,
//! [`cluster::run_cluster_top`].
#![warn(missing_docs)]

mod app;
mod client;
pub mod cluster;
mod format;
pub mod state;
pub mod theme;
pub mod update;
pub mod view;

use std::io::{self, IsTerminal};
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use thiserror::Error;

pub use state::State;
pub use theme::Theme;

/// What `lardon top` was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopOptions {
    /// The daemon's socket.
    pub socket: PathBuf,
    /// Draw without colour (attributes and words only). `NO_COLOR` in
    /// the environment has the same effect.
    pub no_color: bool,
}

/// Why the dashboard could not run.
#[derive(Debug, Error)]
pub enum TopError {
    /// The daemon could not be reached at start (exit code 3 in the CLI).
    #[error(transparent)]
    Connect(#[from] lardon_proto::ConnectError),
    /// Stdout is not a terminal.
    #[error("`lardon top` needs a terminal; use `lardon status` or `lardon resources` otherwise")]
    NotATerminal,
    /// Setting up, drawing to or reading the terminal failed.
    #[error("terminal error")]
    Terminal(#[source] io::Error),
    /// The broker did not answer the first subscription of `lardon top --cluster`
    /// (exit code 3 in the CLI). Holds the reason.
    #[error("{0}")]
    Broker(String),
    /// The client thread or its runtime could not start.
    #[error("cannot start the dashboard's client thread")]
    Runtime(#[source] io::Error),
}

/// Restores the terminal when dropped: on return, on error, and while
/// unwinding from a panic (ratatui's panic hook also restores it before
/// the message is printed).
struct RestoreGuard;

impl Drop for RestoreGuard {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

fn now_unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Runs the dashboard against the daemon at `options.socket` until the
/// user quits (`q`, Esc or Ctrl-C). The terminal is restored on every
/// exit path, panics included.
///
/// Safe to call from inside a tokio runtime: the dashboard's own runtime
/// lives on a thread of its own, and this call simply blocks.
///
/// # Errors
/// [`TopError::Connect`] when no daemon answers (checked before the
/// terminal is touched), [`TopError::NotATerminal`], and terminal or
/// thread failures.
pub fn run_top(options: TopOptions) -> Result<(), TopError> {
    if !io::stdout().is_terminal() {
        return Err(TopError::NotATerminal);
    }
    let theme = Theme::from_env(options.no_color);
    let (tx, rx) = std::sync::mpsc::channel();
    let client = client::Client::start(options.socket, tx)?;
    let guard = RestoreGuard;
    let mut terminal = ratatui::try_init().map_err(TopError::Terminal)?;
    let mut state = State::new();
    let result = app::run(
        &mut terminal,
        app::Loop {
            state: &mut state,
            theme,
            input: app::CrosstermInput,
            incoming: &rx,
            send: &mut |request| client.send(request),
            now_ms: &mut now_unix_ms,
        },
    );
    drop(terminal);
    drop(guard);
    drop(client);
    result
}
