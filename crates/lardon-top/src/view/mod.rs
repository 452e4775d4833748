//! Rendering: a pure function of the [`State`] and the [`Theme`] into a
//! ratatui frame. Nothing here mutates the state.
//!
//! Three layouts (docs/DESIGN.md §11): [`Layout::Full`] from 100×30,
//! [`Layout::Compact`] from 60×15, and below that only a clear "terminal
//! too small" message.

mod footer;
mod governor;
mod help;
mod resources;
mod scratch;
mod tasks;

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout as Split, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Paragraph, Wrap};

use crate::format;
use crate::state::{Confirm, Link, State};
use crate::theme::{Semantic, Theme};

/// Smallest size of the full layout.
pub const FULL: (u16, u16) = (100, 30);
/// Smallest size of the compact layout.
pub const COMPACT: (u16, u16) = (60, 15);

/// Which layout a terminal size gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Every panel with secondary lines.
    Full,
    /// Tasks plus one-line summaries.
    Compact,
    /// Only the "terminal too small" message.
    TooSmall,
}

impl Layout {
    /// The layout for a `width`×`height` terminal.
    pub fn for_size(width: u16, height: u16) -> Self {
        if width >= FULL.0 && height >= FULL.1 {
            Self::Full
        } else if width >= COMPACT.0 && height >= COMPACT.1 {
            Self::Compact
        } else {
            Self::TooSmall
        }
    }
}

/// Draws the whole dashboard.
pub fn draw(frame: &mut Frame<'_>, state: &State, theme: &Theme) {
    let area = frame.area();
    match Layout::for_size(area.width, area.height) {
        Layout::Full => full(frame, area, state, theme),
        Layout::Compact => compact(frame, area, state, theme),
        Layout::TooSmall => too_small(frame, area, theme),
    }
    if Layout::for_size(area.width, area.height) != Layout::TooSmall {
        if state.help_open() {
            help::draw(frame, area, theme);
        }
        if let Some(confirm) = state.confirmation() {
            confirm_popup(frame, area, confirm, theme);
        }
    }
}

fn full(frame: &mut Frame<'_>, area: Rect, state: &State, theme: &Theme) {
    let scratch_rows = u16::try_from(state.scratch().len().clamp(1, 4)).unwrap_or(4);
    let [head, tasks_area, middle, scratch_area, foot] = area.layout(&Split::vertical([
        Constraint::Length(1),
        Constraint::Min(8),
        Constraint::Length(12),
        Constraint::Length(scratch_rows + 3),
        Constraint::Length(2),
    ]));
    header(frame, head, state, theme, false);
    tasks::full(frame, tasks_area, state, theme);
    let [res, gov] = middle.layout(&Split::horizontal([Constraint::Length(58), Constraint::Min(30)]));
    resources::full(frame, res, state, theme);
    governor::full(frame, gov, state, theme);
    scratch::full(frame, scratch_area, state, theme);
    footer::draw(frame, foot, state, theme, false);
}

fn compact(frame: &mut Frame<'_>, area: Rect, state: &State, theme: &Theme) {
    let [head, tasks_area, res, gov, scr, foot] = area.layout(&Split::vertical([
        Constraint::Length(1),
        Constraint::Min(5),
        Constraint::Length(2),
        Constraint::Length(1),
        Constraint::Length(1),
        Constraint::Length(2),
    ]));
    header(frame, head, state, theme, true);
    tasks::compact(frame, tasks_area, state, theme);
    resources::compact(frame, res, state, theme);
    governor::compact(frame, gov, state, theme);
    scratch::compact(frame, scr, state, theme);
    footer::draw(frame, foot, state, theme, true);
}

/// The top line: connection, host, pressure, counts.
fn header(frame: &mut Frame<'_>, area: Rect, state: &State, theme: &Theme, compact: bool) {
    let (link, link_sem) = match state.link() {
        Link::Connecting => ("connecting…".to_owned(), Semantic::Warning),
        Link::Live => ("live".to_owned(), Semantic::Healthy),
        Link::Resyncing => ("resyncing…".to_owned(), Semantic::Warning),
        Link::Lost(why) => (format!("disconnected ({why}), retrying"), Semantic::Error),
    };
    let mut spans = vec![
        Span::styled("lardon top", theme.title()),
        Span::raw(" · "),
        Span::styled(link, theme.style(link_sem)),
    ];
    if let Some(a) = state.availability() {
        if !compact && !a.host.is_empty() {
            spans.extend([Span::raw(" · "), Span::raw(a.host.clone())]);
        }
        let pressure = a.pressure.as_ref().map(lardon_proto::pb::PressureView::state).unwrap_or_default();
        let (word, sem) = format::pressure(pressure);
        spans.extend([
            Span::raw(if compact { " · " } else { " · pressure " }),
            Span::styled(word, theme.style(sem)),
        ]);
        let max = a.max_running.filter(|_| !compact).map(|m| format!(" (max {m})")).unwrap_or_default();
        spans.push(Span::raw(format!(" · {} running{max}, {} pending", a.running, a.pending)));
    }
    frame.render_widget(Line::from(spans), area);
}

fn too_small(frame: &mut Frame<'_>, area: Rect, theme: &Theme) {
    let text = vec![
        Line::styled(
            format!("terminal too small (need {}×{})", COMPACT.0, COMPACT.1),
            theme.style(Semantic::Warning),
        ),
        Line::raw(format!("now {}×{}", area.width, area.height)),
        Line::raw("q quit"),
    ];
    let rows = u16::try_from(text.len()).unwrap_or(3);
    let top = area.height.saturating_sub(rows) / 2;
    let inner = Rect { y: area.y + top, height: area.height.saturating_sub(top), ..area };
    frame.render_widget(Paragraph::new(text).centered().wrap(Wrap { trim: true }), inner);
}

fn confirm_popup(frame: &mut Frame<'_>, area: Rect, confirm: &Confirm, theme: &Theme) {
    let Confirm::Cancel { id, name } = confirm;
    let title = if name.is_empty() { format!("#{id}") } else { format!("#{id} ({name})") };
    let text = vec![
        Line::styled(format!("Cancel task {}?", format::clip(&title, 38)), theme.style(Semantic::Warning)),
        Line::raw("A running command gets SIGTERM, then SIGKILL."),
        Line::raw("y: cancel it    n or Esc: keep it"),
    ];
    let popup = area.centered(Constraint::Length(50.min(area.width)), Constraint::Length(5));
    frame.render_widget(Clear, popup);
    frame.render_widget(
        Paragraph::new(text).block(Block::bordered().title(Span::styled(" Confirm ", theme.title()))),
        popup,
    );
}
