//! The event loop: one select point over keys (crossterm, polled with a
//! 75 ms timeout so input is handled at least that often and the loop
//! never spins) and the client thread's channel. State changes only in
//! `update` / `State::apply`; the screen is redrawn only when something
//! visible changed, and resource figures at most once a second.

use std::io;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::Duration;

use ratatui::Terminal;
use ratatui::backend::Backend;
use ratatui::crossterm::event::{self, Event};

use crate::TopError;
use crate::client::Incoming;
use crate::state::{Effect, Link, State};
use crate::theme::Theme;
use crate::update::{Action, Request, update};
use crate::view;

/// Longest wait for input before the loop looks at the daemon's events.
pub(crate) const INPUT_TICK: Duration = Duration::from_millis(75);

/// A source of terminal events.
pub(crate) trait Input {
    /// The next event, or `None` after `timeout` without one.
    fn next(&mut self, timeout: Duration) -> io::Result<Option<Event>>;
}

/// The real terminal's events.
#[derive(Debug)]
pub(crate) struct CrosstermInput;

impl Input for CrosstermInput {
    fn next(&mut self, timeout: Duration) -> io::Result<Option<Event>> {
        if event::poll(timeout)? { event::read().map(Some) } else { Ok(None) }
    }
}

/// What the loop needs besides the terminal.
pub(crate) struct Loop<'a, I: Input> {
    pub(crate) state: &'a mut State,
    pub(crate) theme: Theme,
    pub(crate) input: I,
    pub(crate) incoming: &'a Receiver<Incoming>,
    pub(crate) send: &'a mut dyn FnMut(Request),
    pub(crate) now_ms: &'a mut dyn FnMut() -> i64,
}

impl<I: Input> std::fmt::Debug for Loop<'_, I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loop").field("state", &self.state).finish_non_exhaustive()
    }
}

fn terminal_error<E: std::error::Error + Send + Sync + 'static>(e: E) -> TopError {
    TopError::Terminal(io::Error::other(e))
}

/// Runs until the user quits.
pub(crate) fn run<B, I>(terminal: &mut Terminal<B>, mut l: Loop<'_, I>) -> Result<(), TopError>
where
    B: Backend,
    B::Error: Send + Sync + 'static,
    I: Input,
{
    l.state.tick((l.now_ms)());
    let mut redraw = true;
    loop {
        if redraw {
            terminal.draw(|frame| view::draw(frame, l.state, &l.theme)).map_err(terminal_error)?;
            redraw = false;
        }
        match l.input.next(INPUT_TICK).map_err(TopError::Terminal)? {
            Some(Event::Key(key)) => match update(l.state, key) {
                Action::Quit => return Ok(()),
                Action::Request(request) => {
                    (l.send)(request);
                    redraw = true;
                }
                Action::Redraw => redraw = true,
                Action::None => {}
            },
            Some(Event::Resize(..)) => redraw = true,
            _ => {}
        }
        loop {
            match l.incoming.try_recv() {
                Ok(Incoming::Watch(event)) => match l.state.apply(*event) {
                    Effect::Redraw => redraw = true,
                    Effect::Resync => {
                        (l.send)(Request::Resync);
                        redraw = true;
                    }
                    Effect::None => {}
                },
                Ok(Incoming::Link(link)) => {
                    l.state.set_link(link);
                    redraw = true;
                }
                Ok(Incoming::Rpc(result)) => {
                    if !matches!(&result, Ok(n) if n.is_empty()) {
                        l.state.set_rpc_result(result);
                        redraw = true;
                    }
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    if !matches!(l.state.link(), Link::Lost(_)) {
                        l.state.set_link(Link::Lost("client stopped".into()));
                        redraw = true;
                    }
                    break;
                }
            }
        }
        redraw |= l.state.tick((l.now_ms)());
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
#[path = "app_tests.rs"]
mod tests;
