//! The tasks panel: state, progress bar, elapsed, ETA, throughput and the
//! reason when waiting (or failed).

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, Row, Table, TableState};

use crate::format;
use crate::state::{Focus, State, TaskRow};
use crate::theme::{Semantic, Theme};

/// Full layout: one row per task plus a detail line for the selected one.
pub(super) fn full(frame: &mut Frame<'_>, area: Rect, state: &State, theme: &Theme) {
    let block = panel(state, theme);
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let [table_area, detail_area] =
        inner.layout(&Layout::vertical([Constraint::Min(1), Constraint::Length(1)]));
    let header =
        header_row(&["", "ID", "NAME", "STATE", "PROGRESS", "ELAPSED", "ETA", "RATE", "NOTE"], theme);
    // Fixed columns and their spacing; the note gets the rest.
    let note_width = usize::from(table_area.width).saturating_sub(72 + 8);
    let rows = state.tasks().iter().enumerate().map(|(i, row)| {
        let (word, sem) = format::task_state(&row.task);
        let (eta, eta_sem) = format::eta(row, state.now_ms);
        Row::new(vec![
            marker(state, i),
            Cell::from(format::clip(&row.task.id, 5)),
            Cell::from(format::clip(&name(row), 12)),
            Cell::from(Span::styled(word, theme.style(sem))),
            progress_cell(row, 12, '█', '░', theme),
            Cell::from(format::elapsed(row, state.now_ms)),
            Cell::from(Span::styled(eta, theme.style(eta_sem))),
            Cell::from(format::throughput(&row.task)),
            Cell::from(format::clip(&format::task_note(&row.task), note_width)),
        ])
        .style(row_style(state, i, sem, theme))
    });
    let widths = [
        Constraint::Length(1),
        Constraint::Length(5),
        Constraint::Length(12),
        Constraint::Length(9),
        Constraint::Length(17),
        Constraint::Length(7),
        Constraint::Length(11),
        Constraint::Length(10),
        Constraint::Min(10),
    ];
    render_table(frame, table_area, state, Table::new(rows, widths).header(header));
    frame.render_widget(detail(state, theme), detail_area);
}

/// Compact layout: state, name, an 8-cell bar and the ETA.
pub(super) fn compact(frame: &mut Frame<'_>, area: Rect, state: &State, theme: &Theme) {
    let block = panel(state, theme);
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let header = header_row(&["", "ID", "NAME", "STATE", "PROGRESS", "ETA / NOTE"], theme);
    let last_width = usize::from(inner.width).saturating_sub(39 + 5);
    let rows = state.tasks().iter().enumerate().map(|(i, row)| {
        let (word, sem) = format::task_state(&row.task);
        let (eta, eta_sem) = format::eta(row, state.now_ms);
        let last = if eta == "—" {
            Span::styled(format::clip(&format::task_note(&row.task), last_width), theme.style(Semantic::Dim))
        } else {
            Span::styled(eta, theme.style(eta_sem))
        };
        Row::new(vec![
            marker(state, i),
            Cell::from(format::clip(&row.task.id, 4)),
            Cell::from(format::clip(&name(row), 10)),
            Cell::from(Span::styled(word, theme.style(sem))),
            progress_cell(row, 8, '#', '.', theme),
            Cell::from(last),
        ])
        .style(row_style(state, i, sem, theme))
    });
    let widths = [
        Constraint::Length(1),
        Constraint::Length(4),
        Constraint::Length(10),
        Constraint::Length(9),
        Constraint::Length(15),
        Constraint::Min(6),
    ];
    render_table(frame, inner, state, Table::new(rows, widths).header(header));
}

fn panel<'a>(state: &State, theme: &Theme) -> Block<'a> {
    let focused = if state.focus() == Focus::Tasks && !state.scratch().is_empty() { " [focus]" } else { "" };
    Block::bordered()
        .title(Span::styled(format!(" Tasks ({}){focused} ", state.tasks().len()), theme.title()))
}

fn render_table(frame: &mut Frame<'_>, area: Rect, state: &State, table: Table<'_>) {
    if state.tasks().is_empty() {
        frame.render_widget(Line::raw(" no tasks — submit one with `lardon submit -- CMD`"), area);
        return;
    }
    let mut table_state = TableState::default().with_selected(state.selected_task_index());
    frame.render_stateful_widget(table, area, &mut table_state);
}

pub(super) fn header_row<'a>(titles: &[&'a str], theme: &Theme) -> Row<'a> {
    Row::new(titles.iter().map(|t| Cell::from(*t))).style(theme.title())
}

fn marker(state: &State, i: usize) -> Cell<'static> {
    Cell::from(if state.selected_task_index() == Some(i) { "›" } else { " " })
}

fn row_style(state: &State, i: usize, sem: Semantic, theme: &Theme) -> ratatui::style::Style {
    if state.selected_task_index() == Some(i) && state.focus() == Focus::Tasks {
        theme.selected()
    } else if sem == Semantic::Dim {
        theme.style(Semantic::Dim)
    } else {
        ratatui::style::Style::new()
    }
}

fn name(row: &TaskRow) -> String {
    row.task
        .spec
        .as_ref()
        .map(|s| s.name.clone())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| row.task.spec.as_ref().and_then(|s| s.argv.first().cloned()).unwrap_or_default())
}

/// `████░░░░  45%`, or `[####....] 45%` compact; `!!` for an integrity
/// error (never shown as 100 %).
fn progress_cell(row: &TaskRow, width: usize, fill: char, empty: char, theme: &Theme) -> Cell<'static> {
    let (open, close) = if fill == '#' { ("[", "]") } else { ("", "") };
    if row.task.progress.as_ref().is_some_and(|p| p.integrity_error) {
        let text = format!("{open}{}{close} !!", format::bar(0.0, width, '!', '!'));
        return Cell::from(Span::styled(text, theme.style(Semantic::Error)));
    }
    match (format::fraction(&row.task), format::percent(&row.task)) {
        (Some(f), Some(p)) => {
            Cell::from(format!("{open}{}{close} {p:>3}%", format::bar(f, width, fill, empty)))
        }
        _ => match row.task.progress.as_ref().map(|p| p.done) {
            Some(done) if done > 0 => Cell::from(format!("{done} items")),
            _ => Cell::from(Span::styled("—", theme.style(Semantic::Dim))),
        },
    }
}

/// The selected task in one line: items, contract, full note.
fn detail<'a>(state: &State, theme: &Theme) -> Line<'a> {
    let Some(task) = state.selected_task() else {
        return Line::raw("");
    };
    let mut parts = vec![format!("#{}", task.id)];
    if let Some(p) = &task.progress
        && p.total > 0
    {
        parts.push(format!("{}/{} items", p.done, p.total));
    }
    if let Some(c) = &task.contract
        && c.batch > 0
    {
        parts.push(format!(
            "batch {} · {} · {} CPU",
            c.batch,
            format::bytes(c.memory),
            lardon::format_cpus(c.cpu_millis)
        ));
    }
    if task.attempts > 1 {
        parts.push(format!("attempt {}", task.attempts));
    }
    if task.memory_retries > 0 {
        parts.push(format!(
            "{} memory retr{}",
            task.memory_retries,
            if task.memory_retries == 1 { "y" } else { "ies" }
        ));
    }
    let learned = format::learned(task);
    if !learned.is_empty() {
        parts.push(learned);
    }
    let note = format::task_note(task);
    if !note.is_empty() {
        parts.push(note);
    }
    Line::from(vec![Span::styled("› ", theme.title()), Span::raw(parts.join(" · "))])
}
