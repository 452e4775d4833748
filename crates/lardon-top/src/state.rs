//! The dashboard's state: what the daemon said (built from a
//! `WatchSnapshot`, updated by each `WatchEvent`) plus what the user is
//! doing (selection, focus, a pending confirmation, the help overlay, the
//! last RPC outcome).
//!
//! Everything here is pure: time comes in as Unix milliseconds through
//! [`State::tick`], so every rule has a deterministic test.

use std::collections::VecDeque;

use lardon_proto::pb::{self, watch_event::Event};

/// How many recent decisions are kept.
pub const DECISIONS_KEPT: usize = 64;

/// Resource figures are redrawn at most this often (docs/DESIGN.md §11).
pub const RESOURCE_COALESCE_MS: i64 = 1_000;

/// The connection to the daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Link {
    /// Dialling, or waiting for the first snapshot.
    Connecting,
    /// Receiving events.
    Live,
    /// Events were dropped; a fresh snapshot was requested.
    Resyncing,
    /// The connection failed; retrying. Holds the reason.
    Lost(String),
}

/// Which list ↑/↓ move in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Focus {
    /// The tasks panel.
    Tasks,
    /// The scratch volumes panel.
    Scratch,
}

/// An action waiting for the user's y/n.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confirm {
    /// Cancel task `id` (named `name`).
    Cancel {
        /// The task id.
        id: String,
        /// Its name, to show in the question.
        name: String,
    },
}

/// What the caller must do after [`State::apply`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Nothing visible changed yet (e.g. resource figures held back to
    /// coalesce them).
    None,
    /// The screen should be redrawn.
    Redraw,
    /// Events were lost: ask the daemon for a fresh snapshot.
    Resync,
}

/// One task as last reported, with the time of that report.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskRow {
    /// The task as the daemon sent it.
    pub task: pb::Task,
    /// When it was reported (Unix ms): elapsed and ETA advance from here.
    pub seen_ms: i64,
}

/// The whole dashboard state.
#[derive(Debug, Clone, PartialEq)]
pub struct State {
    pub(crate) tasks: Vec<TaskRow>,
    pub(crate) availability: Option<pb::Availability>,
    pending_availability: Option<pb::Availability>,
    /// New decisions not drawn yet (coalesced with the resource figures).
    decisions_dirty: bool,
    resources_at_ms: i64,
    pub(crate) decisions: VecDeque<pb::DecisionMade>,
    pub(crate) scratch: Vec<pb::ScratchVolume>,
    pub(crate) focus: Focus,
    selected_task: Option<String>,
    selected_scratch: Option<String>,
    pub(crate) confirm: Option<Confirm>,
    pub(crate) help: bool,
    pub(crate) error: Option<String>,
    pub(crate) notice: Option<String>,
    pub(crate) link: Link,
    pub(crate) now_ms: i64,
}

impl Default for State {
    fn default() -> Self {
        Self::new()
    }
}

impl State {
    /// An empty state, connecting.
    pub fn new() -> Self {
        Self {
            tasks: Vec::new(),
            availability: None,
            pending_availability: None,
            decisions_dirty: false,
            resources_at_ms: i64::MIN,
            decisions: VecDeque::new(),
            scratch: Vec::new(),
            focus: Focus::Tasks,
            selected_task: None,
            selected_scratch: None,
            confirm: None,
            help: false,
            error: None,
            notice: None,
            link: Link::Connecting,
            now_ms: 0,
        }
    }

    /// A state built from a snapshot received at `now_ms`.
    pub fn from_snapshot(snapshot: pb::WatchSnapshot, now_ms: i64) -> Self {
        let mut state = Self::new();
        state.now_ms = now_ms;
        state.load_snapshot(snapshot, now_ms);
        state
    }

    /// Applies one event from the daemon's Watch stream.
    pub fn apply(&mut self, event: pb::WatchEvent) -> Effect {
        let at = if event.at_unix_ms > 0 { event.at_unix_ms } else { self.now_ms };
        let Some(event) = event.event else {
            return Effect::None;
        };
        match event {
            Event::Snapshot(snapshot) => {
                self.load_snapshot(snapshot, at);
                Effect::Redraw
            }
            Event::TaskChanged(task) => {
                self.upsert_task(task, at);
                Effect::Redraw
            }
            Event::TaskRemoved(removed) => {
                self.tasks.retain(|row| row.task.id != removed.id);
                self.fix_selection();
                Effect::Redraw
            }
            Event::Decision(decision) => {
                self.decisions.push_front(decision);
                self.decisions.truncate(DECISIONS_KEPT);
                self.decisions_dirty = true;
                Effect::None
            }
            Event::Availability(availability) => {
                if self.availability.is_none() {
                    self.commit_availability(availability);
                    Effect::Redraw
                } else {
                    self.pending_availability = Some(availability);
                    Effect::None
                }
            }
            Event::ScratchChanged(volume) => {
                match self.scratch.iter_mut().find(|v| v.name == volume.name) {
                    Some(slot) => *slot = volume,
                    None => self.scratch.push(volume),
                }
                self.fix_selection();
                Effect::Redraw
            }
            Event::Lagged(_) => {
                self.link = Link::Resyncing;
                Effect::Resync
            }
        }
    }

    /// Advances the clock to `now_ms`; commits held-back resource figures
    /// (and shows new decisions) when the last commit is at least
    /// [`RESOURCE_COALESCE_MS`] old.
    /// Returns whether the screen should be redrawn: new resource figures,
    /// or a new whole second while a task runs (its elapsed time moves).
    pub fn tick(&mut self, now_ms: i64) -> bool {
        let second_changed = now_ms.div_euclid(1000) != self.now_ms.div_euclid(1000);
        self.now_ms = now_ms;
        let mut redraw =
            second_changed && self.tasks.iter().any(|r| r.task.state() == pb::TaskState::Running);
        if (self.pending_availability.is_some() || self.decisions_dirty)
            && now_ms.saturating_sub(self.resources_at_ms) >= RESOURCE_COALESCE_MS
        {
            if let Some(a) = self.pending_availability.take() {
                self.availability = Some(a);
            }
            self.decisions_dirty = false;
            self.resources_at_ms = now_ms;
            redraw = true;
        }
        redraw
    }

    /// Records the state of the connection.
    pub fn set_link(&mut self, link: Link) {
        self.link = link;
    }

    /// Records the outcome of an RPC the user asked for: `Ok(notice)` or
    /// `Err(message)`.
    pub fn set_rpc_result(&mut self, result: Result<String, String>) {
        match result {
            Ok(notice) => {
                self.notice = Some(notice);
                self.error = None;
            }
            Err(error) => {
                self.error = Some(error);
                self.notice = None;
            }
        }
    }

    /// The tasks in display order (running, paused, waiting, then ended).
    pub fn tasks(&self) -> &[TaskRow] {
        &self.tasks
    }

    /// The scratch volumes, in the order first seen.
    pub fn scratch(&self) -> &[pb::ScratchVolume] {
        &self.scratch
    }

    /// The current resource figures (coalesced), if any yet.
    pub fn availability(&self) -> Option<&pb::Availability> {
        self.availability.as_ref()
    }

    /// The connection state.
    pub fn link(&self) -> &Link {
        &self.link
    }

    /// The last RPC error, if the latest outcome was one.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// Whether the help overlay is open.
    pub fn help_open(&self) -> bool {
        self.help
    }

    /// The confirmation waiting for y/n, if any.
    pub fn confirmation(&self) -> Option<&Confirm> {
        self.confirm.as_ref()
    }

    /// Which panel ↑/↓ move in.
    pub fn focus(&self) -> Focus {
        self.focus
    }

    /// Index of the selected task in [`tasks`](Self::tasks).
    pub fn selected_task_index(&self) -> Option<usize> {
        let id = self.selected_task.as_ref()?;
        self.tasks.iter().position(|r| &r.task.id == id)
    }

    /// The selected task.
    pub fn selected_task(&self) -> Option<&pb::Task> {
        self.selected_task_index().map(|i| &self.tasks[i].task)
    }

    /// Index of the selected scratch volume.
    pub fn selected_scratch_index(&self) -> Option<usize> {
        let name = self.selected_scratch.as_ref()?;
        self.scratch.iter().position(|v| &v.name == name)
    }

    /// The selected scratch volume.
    pub fn selected_scratch(&self) -> Option<&pb::ScratchVolume> {
        self.selected_scratch_index().map(|i| &self.scratch[i])
    }

    /// Moves the selection in the focused list by `delta`, clamped.
    pub fn move_selection(&mut self, delta: isize) {
        match self.focus {
            Focus::Tasks => {
                let ids: Vec<&str> = self.tasks.iter().map(|r| r.task.id.as_str()).collect();
                self.selected_task = step(&ids, self.selected_task_index(), delta);
            }
            Focus::Scratch => {
                let names: Vec<&str> = self.scratch.iter().map(|v| v.name.as_str()).collect();
                self.selected_scratch = step(&names, self.selected_scratch_index(), delta);
            }
        }
    }

    /// Selects task `id` (if present) and focuses the tasks panel.
    pub fn select_task(&mut self, id: &str) {
        if self.tasks.iter().any(|r| r.task.id == id) {
            self.selected_task = Some(id.to_owned());
            self.focus = Focus::Tasks;
        }
    }

    fn load_snapshot(&mut self, snapshot: pb::WatchSnapshot, at: i64) {
        self.tasks = snapshot.tasks.into_iter().map(|task| TaskRow { task, seen_ms: at }).collect();
        sort_tasks(&mut self.tasks);
        self.decisions = snapshot.recent_decisions.into_iter().rev().take(DECISIONS_KEPT).collect();
        let mut scratch = snapshot.scratch;
        if scratch.is_empty()
            && let Some(a) = &snapshot.availability
        {
            scratch.clone_from(&a.scratch);
        }
        self.scratch = scratch;
        self.pending_availability = None;
        if let Some(a) = snapshot.availability {
            self.availability = Some(a);
            self.resources_at_ms = at;
        }
        self.link = Link::Live;
        self.fix_selection();
    }

    fn upsert_task(&mut self, task: pb::Task, at: i64) {
        let row = TaskRow { task, seen_ms: at };
        match self.tasks.iter_mut().find(|r| r.task.id == row.task.id) {
            Some(slot) => *slot = row,
            None => self.tasks.push(row),
        }
        sort_tasks(&mut self.tasks);
        self.fix_selection();
    }

    fn commit_availability(&mut self, availability: pb::Availability) {
        self.availability = Some(availability);
        self.resources_at_ms = self.now_ms;
    }

    /// Keeps each selection on an existing item (the first when none).
    fn fix_selection(&mut self) {
        if self.selected_task_index().is_none() {
            self.selected_task = self.tasks.first().map(|r| r.task.id.clone());
        }
        if self.selected_scratch_index().is_none() {
            self.selected_scratch = self.scratch.first().map(|v| v.name.clone());
        }
        if self.scratch.is_empty() {
            self.focus = Focus::Tasks;
        }
        if let Some(Confirm::Cancel { id, .. }) = &self.confirm
            && !self.tasks.iter().any(|r| &r.task.id == id)
        {
            self.confirm = None;
        }
    }
}

/// Display order: live work first, then ended tasks; oldest first within.
fn sort_tasks(tasks: &mut [TaskRow]) {
    fn rank(state: pb::TaskState) -> u8 {
        match state {
            pb::TaskState::Running => 0,
            pb::TaskState::Paused => 1,
            pb::TaskState::Pending | pb::TaskState::Unspecified => 2,
            pb::TaskState::Failed => 3,
            pb::TaskState::Cancelled => 4,
            pb::TaskState::Completed => 5,
        }
    }
    tasks.sort_by(|a, b| {
        (rank(a.task.state()), a.task.created_unix_ms, &a.task.id).cmp(&(
            rank(b.task.state()),
            b.task.created_unix_ms,
            &b.task.id,
        ))
    });
}

fn step(keys: &[&str], current: Option<usize>, delta: isize) -> Option<String> {
    let last = keys.len().checked_sub(1)?;
    let from = current.unwrap_or(0);
    let to = from.saturating_add_signed(delta).min(last);
    Some(keys[to].to_owned())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
#[path = "state_tests.rs"]
mod tests;
