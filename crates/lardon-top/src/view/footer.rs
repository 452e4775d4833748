//! The footer: the last outcome (error or notice) and the keys valid now.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use crate::state::State;
use crate::theme::{Semantic, Theme};
use crate::update::keys_now;

/// Two lines: status, then keys. `compact` packs the keys tighter (one
/// space apart, ↑↓ without its word) so that every valid key fits in 60
/// columns.
pub(super) fn draw(frame: &mut Frame<'_>, area: Rect, state: &State, theme: &Theme, compact: bool) {
    let status = if let Some(error) = state.error() {
        Line::from(vec![Span::styled("error: ", theme.style(Semantic::Error)), Span::raw(error.to_owned())])
    } else if let Some(notice) = &state.notice {
        Line::styled(notice.clone(), theme.style(Semantic::Healthy))
    } else {
        Line::raw("")
    };
    let mut keys = Vec::new();
    for key in keys_now(state) {
        let (k, what) = key.label(state);
        if !keys.is_empty() {
            keys.push(Span::raw(if compact { " " } else { "  " }));
        }
        keys.push(Span::styled(k, theme.title().add_modifier(ratatui::style::Modifier::REVERSED)));
        if !(compact && key == crate::update::Key::Select) {
            keys.push(Span::raw(format!(" {what}")));
        }
    }
    frame.render_widget(Paragraph::new(vec![status, Line::from(keys)]), area);
}
