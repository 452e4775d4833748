//! The help overlay: every key, and how to read the screen without colour.

use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Paragraph};

use crate::theme::Theme;

const KEYS: [(&str, &str); 9] = [
    ("↑/↓ j/k", "select a task (or a volume, after Tab)"),
    ("Tab", "switch between tasks and scratch volumes"),
    ("p", "pause the selected task"),
    ("r", "resume it"),
    ("c", "cancel it (asks y/n first)"),
    ("d", "drain / cancel the drain of the volume"),
    ("?", "this help (Esc closes)"),
    ("q Esc", "quit (also Ctrl-C)"),
    ("", "The footer lists the keys valid now."),
];

/// Draws the overlay centred on `area`.
pub(super) fn draw(frame: &mut Frame<'_>, area: Rect, theme: &Theme) {
    let mut lines: Vec<Line<'_>> = KEYS
        .iter()
        .map(|(k, what)| Line::from(vec![Span::styled(format!("{k:>8}  "), theme.title()), Span::raw(*what)]))
        .collect();
    lines.push(Line::raw("Bars: █ held by tasks, ▒ reserve, ░ free."));
    lines.push(Line::raw("Pressure: GREEN ●  YELLOW ▲  RED ■"));
    let height = u16::try_from(lines.len() + 2).unwrap_or(u16::MAX).min(area.height);
    let popup = area.centered(Constraint::Length(56.min(area.width)), Constraint::Length(height));
    frame.render_widget(Clear, popup);
    frame.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(Span::styled(" Help ", theme.title()))),
        popup,
    );
}
