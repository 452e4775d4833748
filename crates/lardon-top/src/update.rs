//! Keys → state changes and requests: a pure function of the state and
//! one key, plus the contract of which keys are valid now (the footer
//! prints exactly that list, so it can never advertise a dead key).

use lardon_proto::pb::{ScratchState, TaskState};
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use crate::state::{Confirm, Focus, State};

/// A call to make on the daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Pause a task.
    Pause(String),
    /// Resume a task.
    Resume(String),
    /// Cancel a task (already confirmed).
    Cancel(String),
    /// Drain a scratch volume.
    Drain(String),
    /// Return a draining volume to service.
    CancelDrain(String),
    /// Re-open the Watch stream for a fresh snapshot.
    Resync,
}

/// What the event loop must do after a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Nothing (an unbound or disabled key).
    None,
    /// The state changed: redraw.
    Redraw,
    /// Send this request to the daemon (and redraw).
    Request(Request),
    /// Leave the dashboard.
    Quit,
}

/// A key the footer can advertise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    /// ↑/↓.
    Select,
    /// `p`.
    Pause,
    /// `r`.
    Resume,
    /// `c`.
    Cancel,
    /// `d` on a volume that may be drained.
    Drain,
    /// `d` on a draining (or drained) volume.
    CancelDrain,
    /// Tab: switch between tasks and volumes.
    Focus,
    /// `?`.
    Help,
    /// `q` / Esc.
    Quit,
    /// `y` in a confirmation.
    Yes,
    /// `n` / Esc in a confirmation.
    No,
    /// Esc / `?` closing the help.
    Close,
}

impl Key {
    /// The key as the footer prints it, and what it does.
    pub fn label(self, state: &State) -> (&'static str, &'static str) {
        match self {
            Self::Select => ("↑↓", "select"),
            Self::Pause => ("p", "pause"),
            Self::Resume => ("r", "resume"),
            Self::Cancel => ("c", "cancel"),
            Self::Drain => ("d", "drain"),
            Self::CancelDrain => ("d", "cancel drain"),
            Self::Focus if state.focus() == Focus::Tasks => ("Tab", "volumes"),
            Self::Focus => ("Tab", "tasks"),
            Self::Help => ("?", "help"),
            Self::Quit => ("q", "quit"),
            Self::Yes => ("y", "yes, cancel it"),
            Self::No => ("n", "no, keep it"),
            Self::Close => ("Esc", "close help"),
        }
    }
}

/// What may be done with a task in `state`.
pub fn task_actions(state: TaskState) -> (bool, bool, bool) {
    let pause = matches!(state, TaskState::Pending | TaskState::Running);
    let resume = state == TaskState::Paused;
    let cancel = matches!(state, TaskState::Pending | TaskState::Running | TaskState::Paused);
    (pause, resume, cancel)
}

/// The one action a scratch volume in `state` allows, if any: drain an
/// AVAILABLE or IN USE volume, cancel the drain of a DRAINING or SAFE TO
/// UNPLUG one. ABSENT and ERROR volumes allow nothing here.
pub fn scratch_action(state: ScratchState) -> Option<Key> {
    match state {
        ScratchState::Available | ScratchState::InUse => Some(Key::Drain),
        ScratchState::Draining | ScratchState::SafeToUnplug => Some(Key::CancelDrain),
        _ => None,
    }
}

/// The keys valid now, in footer order.
pub fn keys_now(state: &State) -> Vec<Key> {
    if state.confirmation().is_some() {
        return vec![Key::Yes, Key::No];
    }
    if state.help_open() {
        return vec![Key::Close, Key::Quit];
    }
    let mut keys = Vec::new();
    let focused_len = match state.focus() {
        Focus::Tasks => state.tasks().len(),
        Focus::Scratch => state.scratch().len(),
    };
    if focused_len > 1 {
        keys.push(Key::Select);
    }
    if let Some(task) = state.selected_task() {
        let (pause, resume, cancel) = task_actions(task.state());
        keys.extend(
            [(pause, Key::Pause), (resume, Key::Resume), (cancel, Key::Cancel)]
                .into_iter()
                .filter_map(|(ok, key)| ok.then_some(key)),
        );
    }
    if let Some(volume) = state.selected_scratch()
        && let Some(key) = scratch_action(volume.state())
    {
        keys.push(key);
    }
    if !state.scratch().is_empty() {
        keys.push(Key::Focus);
    }
    keys.extend([Key::Help, Key::Quit]);
    keys
}

/// Handles one key: changes the UI part of `state` and says what to do.
/// Only key presses count (not releases or repeats on terminals that
/// report them).
pub fn update(state: &mut State, key: KeyEvent) -> Action {
    if key.kind != KeyEventKind::Press {
        return Action::None;
    }
    if key.modifiers.contains(KeyModifiers::CONTROL) && matches!(key.code, KeyCode::Char('c' | 'C')) {
        return Action::Quit;
    }
    if let Some(Confirm::Cancel { id, .. }) = state.confirm.clone() {
        return match key.code {
            KeyCode::Char('y' | 'Y') => {
                state.confirm = None;
                Action::Request(Request::Cancel(id))
            }
            KeyCode::Char('n' | 'N') | KeyCode::Esc => {
                state.confirm = None;
                Action::Redraw
            }
            _ => Action::None,
        };
    }
    if state.help {
        return match key.code {
            KeyCode::Esc | KeyCode::Char('?') => {
                state.help = false;
                Action::Redraw
            }
            KeyCode::Char('q' | 'Q') => Action::Quit,
            _ => Action::None,
        };
    }
    let valid = keys_now(state);
    let key_now = match key.code {
        KeyCode::Char('q' | 'Q') | KeyCode::Esc => return Action::Quit,
        KeyCode::Up | KeyCode::Char('k') => {
            state.move_selection(-1);
            return Action::Redraw;
        }
        KeyCode::Down | KeyCode::Char('j') => {
            state.move_selection(1);
            return Action::Redraw;
        }
        KeyCode::Char('?') => Key::Help,
        KeyCode::Tab | KeyCode::BackTab => Key::Focus,
        KeyCode::Char('p') => Key::Pause,
        KeyCode::Char('r') => Key::Resume,
        KeyCode::Char('c') => Key::Cancel,
        KeyCode::Char('d') => match valid.iter().find(|k| matches!(k, Key::Drain | Key::CancelDrain)) {
            Some(k) => *k,
            None => return refuse(state, "the selected volume allows no drain action now"),
        },
        _ => return Action::None,
    };
    if !valid.contains(&key_now) {
        return refuse(state, "not possible for the selected task now");
    }
    state.error = None;
    state.notice = None;
    let task_id = || state.selected_task().map(|t| t.id.clone()).unwrap_or_default();
    let volume = || state.selected_scratch().map(|v| v.name.clone()).unwrap_or_default();
    match key_now {
        Key::Help => {
            state.help = true;
            Action::Redraw
        }
        Key::Focus => {
            state.focus = match state.focus {
                Focus::Tasks => Focus::Scratch,
                Focus::Scratch => Focus::Tasks,
            };
            Action::Redraw
        }
        Key::Pause => Action::Request(Request::Pause(task_id())),
        Key::Resume => Action::Request(Request::Resume(task_id())),
        Key::Cancel => {
            let (id, name) = state
                .selected_task()
                .map(|t| (t.id.clone(), t.spec.as_ref().map(|s| s.name.clone()).unwrap_or_default()))
                .unwrap_or_default();
            state.confirm = Some(Confirm::Cancel { id, name });
            Action::Redraw
        }
        Key::Drain => Action::Request(Request::Drain(volume())),
        Key::CancelDrain => Action::Request(Request::CancelDrain(volume())),
        _ => Action::None,
    }
}

fn refuse(state: &mut State, why: &str) -> Action {
    state.error = Some(why.to_owned());
    state.notice = None;
    Action::Redraw
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
#[path = "update_tests.rs"]
mod tests;
