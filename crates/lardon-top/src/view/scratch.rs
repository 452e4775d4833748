//! The scratch volumes panel: state, leases, and the action allowed now.

use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, Row, Table, TableState};

use super::tasks::header_row;
use crate::format;
use crate::state::{Focus, State};
use crate::theme::{Semantic, Theme};
use crate::update::scratch_action;

fn action(state: &State, volume: &lardon_proto::pb::ScratchVolume) -> String {
    match scratch_action(volume.state()) {
        Some(key) => {
            let (k, what) = key.label(state);
            format!("{k}: {what}")
        }
        None => "none".to_owned(),
    }
}

/// Full layout.
pub(super) fn full(frame: &mut Frame<'_>, area: Rect, state: &State, theme: &Theme) {
    let focused = if state.focus() == Focus::Scratch { " [focus]" } else { "" };
    let block = Block::bordered().title(Span::styled(format!(" Scratch volumes{focused} "), theme.title()));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    if state.scratch().is_empty() {
        frame.render_widget(
            Line::styled(
                " no scratch volume (add one with `lardon scratch add PATH`)",
                theme.style(Semantic::Dim),
            ),
            inner,
        );
        return;
    }
    let selected = state.selected_scratch_index();
    let rows = state.scratch().iter().enumerate().map(|(i, v)| {
        let (word, sem) = format::scratch_state(v.state());
        let style = if selected == Some(i) && state.focus() == Focus::Scratch {
            theme.selected()
        } else {
            ratatui::style::Style::new()
        };
        Row::new(vec![
            Cell::from(if selected == Some(i) { "›" } else { " " }),
            Cell::from(Span::styled(format::clip(&v.name, 12), theme.style(Semantic::Ssd))),
            Cell::from(Span::styled(word, theme.style(sem))),
            Cell::from(v.leases.to_string()),
            Cell::from(format::bytes(v.leased)),
            Cell::from(v.free.map_or_else(|| "?".to_owned(), format::bytes)),
            Cell::from(v.capacity.map_or_else(|| "fs".to_owned(), format::bytes)),
            Cell::from(action(state, v)),
            Cell::from(Span::styled(v.message.clone(), theme.style(Semantic::Dim))),
        ])
        .style(style)
    });
    let widths = [
        Constraint::Length(1),
        Constraint::Length(12),
        Constraint::Length(14),
        Constraint::Length(6),
        Constraint::Length(7),
        Constraint::Length(7),
        Constraint::Length(8),
        Constraint::Length(16),
        Constraint::Min(8),
    ];
    let header =
        header_row(&["", "NAME", "STATE", "LEASES", "LEASED", "FREE", "CAP", "ACTION", "NOTE"], theme);
    let mut table_state = TableState::default().with_selected(selected);
    frame.render_stateful_widget(Table::new(rows, widths).header(header), inner, &mut table_state);
}

/// Compact layout: the selected volume in one line.
pub(super) fn compact(frame: &mut Frame<'_>, area: Rect, state: &State, theme: &Theme) {
    let Some(v) = state.selected_scratch() else {
        frame.render_widget(Line::styled("scratch: none", theme.style(Semantic::Dim)), area);
        return;
    };
    let (word, sem) = format::scratch_state(v.state());
    let count = match (state.scratch().len(), state.selected_scratch_index()) {
        (n, Some(i)) if n > 1 => format!(" {}/{n}", i + 1),
        _ => String::new(),
    };
    let line = Line::from(vec![
        Span::styled(format!("Scratch {}{count} ", v.name), theme.style(Semantic::Ssd)),
        Span::styled(word, theme.style(sem)),
        Span::raw(format!(
            " · {} lease{} · {}",
            v.leases,
            if v.leases == 1 { "" } else { "s" },
            action(state, v)
        )),
    ]);
    frame.render_widget(line, area);
}
