//! `lardon top --cluster`: the broker's view (docs/DESIGN.md §14) — its
//! agents with their capabilities, tokens, tasks in flight and
//! availability; its routes with tasks queued and in flight; the totals.
//!
//! The same split as the daemon's dashboard: [`state`] (what the last
//! `ClusterStatus` answer said, pure), [`update`] (keys → state changes),
//! [`view`] (a pure function of the state into a frame), an event loop
//! generic over the backend, and a poller thread that asks the broker once
//! a second and talks to the loop through a channel (the broker has no
//! Watch stream yet). How the broker is reached (TLS, join token) is the
//! caller's: it hands over a [`Fetch`], so this crate does not depend on
//! the cluster crate.

pub mod state;
pub mod view;

use std::future::Future;
use std::pin::Pin;
use std::sync::mpsc::{self as std_mpsc, Receiver, TryRecvError};
use std::thread::JoinHandle;
use std::time::Duration;

use lardon_proto::cluster as pb;
use ratatui::Terminal;
use ratatui::backend::Backend;
use ratatui::crossterm::event::{Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use crate::app::{INPUT_TICK, Input};
use crate::{RestoreGuard, Theme, TopError, now_unix_ms};
use state::{BrokerLink, ClusterState};

/// One poll of the broker: its status, or why it did not answer.
pub type Polled = Result<pb::ClusterStatusResponse, String>;

/// Asks the broker for its status once (the caller dials it as it must).
pub type Fetch = Box<dyn FnMut() -> Pin<Box<dyn Future<Output = Polled> + Send>> + Send>;

/// What `lardon top --cluster` was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterTopOptions {
    /// The broker's address, as shown in the header.
    pub broker: String,
    /// Draw without colour (`NO_COLOR` in the environment too).
    pub no_color: bool,
    /// How often the broker is asked.
    pub every: Duration,
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

/// Runs the cluster view until the user quits. The first poll is made
/// before the terminal is touched, so an unreachable broker is reported
/// as [`TopError::Broker`] on a clean terminal.
///
/// # Errors
/// [`TopError::Broker`], [`TopError::NotATerminal`], and terminal or
/// thread failures.
pub fn run_cluster_top(options: ClusterTopOptions, fetch: Fetch) -> Result<(), TopError> {
    use std::io::IsTerminal as _;
    if !std::io::stdout().is_terminal() {
        return Err(TopError::NotATerminal);
    }
    let theme = Theme::from_env(options.no_color);
    let (tx, rx) = std_mpsc::channel();
    let poller = Poller::start(fetch, options.every, tx)?;
    let mut state = ClusterState::new(options.broker);
    // The first answer is already in the channel (start waited for it).
    let guard = RestoreGuard;
    let mut terminal = ratatui::try_init().map_err(TopError::Terminal)?;
    let result = run(&mut terminal, &mut state, theme, crate::app::CrosstermInput, &rx, &mut now_unix_ms);
    drop(terminal);
    drop(guard);
    drop(poller);
    result
}

/// The event loop: keys (polled every [`INPUT_TICK`]) and the poller's
/// answers; redraws only after a change.
pub(crate) fn run<B, I>(
    terminal: &mut Terminal<B>,
    state: &mut ClusterState,
    theme: Theme,
    mut input: I,
    incoming: &Receiver<Polled>,
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
                Ok(polled) => {
                    state.apply(polled, now_ms());
                    redraw = true;
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    if !matches!(state.link(), BrokerLink::Lost(_)) {
                        state.apply(Err("the poller stopped".into()), now_ms());
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

/// The thread that polls the broker; dropping it stops and joins it.
struct Poller {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Poller {
    /// Starts polling every `every` and waits for the first answer: a
    /// failed first poll is [`TopError::Broker`].
    fn start(mut fetch: Fetch, every: Duration, out: std_mpsc::Sender<Polled>) -> Result<Self, TopError> {
        let rt =
            tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(TopError::Runtime)?;
        let first = rt.block_on(bounded(fetch()));
        let first = first.map_err(TopError::Broker)?;
        let _ = out.send(Ok(first));
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("lardon-top-cluster".into())
            .spawn(move || {
                rt.block_on(async move {
                    loop {
                        tokio::select! {
                            () = tokio::time::sleep(every) => {}
                            _ = &mut stopped => return,
                        }
                        let polled = tokio::select! {
                            polled = bounded(fetch()) => polled,
                            _ = &mut stopped => return,
                        };
                        if out.send(polled).is_err() {
                            return;
                        }
                    }
                });
            })
            .map_err(TopError::Runtime)?;
        Ok(Self { stop: Some(stop), thread: Some(thread) })
    }
}

/// Longest one poll may take: a broker behind a black hole (no answer,
/// not even a refusal) shows as unreachable instead of freezing the view.
const POLL_TIMEOUT: Duration = Duration::from_secs(5);

async fn bounded(poll: impl Future<Output = Polled>) -> Polled {
    tokio::time::timeout(POLL_TIMEOUT, poll)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {} s", POLL_TIMEOUT.as_secs())))
}

impl Drop for Poller {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
#[path = "tests.rs"]
mod tests;
