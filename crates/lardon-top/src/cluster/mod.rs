//! `lardon top --cluster`: the broker's view (docs/DESIGN.md §14) — its
//! agents with their capabilities, tokens, tasks in flight and
//! availability; its routes with tasks queued and in flight; the totals.
//!
//! The same split as the daemon's dashboard: [`state`] (what the last
//! event of the broker's `Watch` stream said, pure), [`update`] (keys →
//! state changes), [`view`] (a pure function of the state into a frame),
//! an event loop generic over the backend, and a `watcher` thread that
//! follows the broker's `Watch` stream (subscribing again with back-off
//! when it breaks) and talks to the loop through a channel. How the broker
//! is reached (TLS, join token) is the caller's: it hands over a
//! [`Subscribe`], so this crate does not depend on the cluster crate.

pub mod state;
pub mod view;
mod watcher;

use std::future::Future;
use std::pin::Pin;
use std::sync::mpsc::{self as std_mpsc, Receiver, TryRecvError};

use lardon_proto::cluster as pb;
use ratatui::Terminal;
use ratatui::backend::Backend;
use ratatui::crossterm::event::{Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use tokio_stream::Stream;

use crate::app::{INPUT_TICK, Input};
use crate::{RestoreGuard, Theme, TopError, now_unix_ms};
use state::{BrokerLink, ClusterState};

/// One event of the broker's `Watch` stream, or why the stream broke.
pub type Watched = Result<pb::ClusterWatchEvent, String>;

/// The events of one subscription, in order; it ends (or yields an
/// error) when the stream breaks.
pub type Events = Pin<Box<dyn Stream<Item = Watched> + Send>>;

/// Subscribes to the broker's `Watch` stream once (the caller dials it as
/// it must, and picks the interval between events).
pub type Subscribe = Box<dyn FnMut() -> Pin<Box<dyn Future<Output = Result<Events, String>> + Send>> + Send>;

/// What `lardon top --cluster` was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterTopOptions {
    /// The broker's address, as shown in the header.
    pub broker: String,
    /// Draw without colour (`NO_COLOR` in the environment too).
    pub no_color: bool,
}

/// What a key asks of the loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Leave.
    Quit,
    /// Something visible changed.
    Redraw,
    /// Nothing to do.
    None,
}

/// Applies one key press: q, Esc or Ctrl-C quit; ↑/↓ (k/j) move the
/// selection.
pub fn update(state: &mut ClusterState, key: KeyEvent) -> Action {
    if key.kind != KeyEventKind::Press {
        return Action::None;
    }
    match key.code {
        KeyCode::Char('q') | KeyCode::Esc => Action::Quit,
        KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => Action::Quit,
        KeyCode::Up | KeyCode::Char('k') => {
            state.move_selection(-1);
            Action::Redraw
        }
        KeyCode::Down | KeyCode::Char('j') => {
            state.move_selection(1);
            Action::Redraw
        }
        _ => Action::None,
    }
}

/// Runs the cluster view until the user quits. The first subscription
/// and its first snapshot are awaited before the terminal is touched, so
/// an unreachable broker is reported as [`TopError::Broker`] on a clean
/// terminal.
///
/// # Errors
/// [`TopError::Broker`], [`TopError::NotATerminal`], and terminal or
/// thread failures.
pub fn run_cluster_top(options: ClusterTopOptions, subscribe: Subscribe) -> Result<(), TopError> {
    use std::io::IsTerminal as _;
    if !std::io::stdout().is_terminal() {
        return Err(TopError::NotATerminal);
    }
    let theme = Theme::from_env(options.no_color);
    let (tx, rx) = std_mpsc::channel();
    let watcher = watcher::Watcher::start(subscribe, watcher::Backoff::default(), tx)?;
    let mut state = ClusterState::new(options.broker);
    // The first snapshot is already in the channel (start waited for it).
    let guard = RestoreGuard;
    let mut terminal = ratatui::try_init().map_err(TopError::Terminal)?;
    let result = run(&mut terminal, &mut state, theme, crate::app::CrosstermInput, &rx, &mut now_unix_ms);
    drop(terminal);
    drop(guard);
    drop(watcher);
    result
}

/// The event loop: keys (polled every [`INPUT_TICK`]) and the watcher's
/// events; redraws only after a change.
pub(crate) fn run<B, I>(
    terminal: &mut Terminal<B>,
    state: &mut ClusterState,
    theme: Theme,
    mut input: I,
    incoming: &Receiver<Watched>,
    now_ms: &mut dyn FnMut() -> i64,
) -> Result<(), TopError>
where
    B: Backend,
    B::Error: Send + Sync + 'static,
    I: Input,
{
    let mut redraw = true;
    loop {
        loop {
            match incoming.try_recv() {
                Ok(watched) => {
                    state.apply(watched, now_ms());
                    redraw = true;
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    if !matches!(state.link(), BrokerLink::Lost(_)) {
                        state.apply(Err("the watcher stopped".into()), now_ms());
                        redraw = true;
                    }
                    break;
                }
            }
        }
        if redraw {
            let now = now_ms();
            terminal
                .draw(|frame| view::draw(frame, state, &theme, now))
                .map_err(|e| TopError::Terminal(std::io::Error::other(e)))?;
            redraw = false;
        }
        if let Some(Event::Key(key)) = input.next(INPUT_TICK).map_err(TopError::Terminal)? {
            match update(state, key) {
                Action::Quit => return Ok(()),
                Action::Redraw => redraw = true,
                Action::None => {}
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
#[path = "tests.rs"]
mod tests;
