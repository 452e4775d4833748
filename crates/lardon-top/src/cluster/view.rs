//! The cluster view: a pure function of the [`ClusterState`] into a
//! ratatui frame. A header with the broker, its link and the totals; the
//! agents (capabilities, tokens, in flight, availability); the routes
//! (queued and in flight per capability); the keys.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout as Split, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, Paragraph, Row, Table};

use super::state::{BrokerLink, ClusterState};
use crate::format;
use crate::theme::{Semantic, Theme};

/// Smallest terminal the view draws in; below it a message says so.
pub const MIN: (u16, u16) = (60, 12);

/// Draws the whole cluster view at `now_ms`.
pub fn draw(frame: &mut Frame<'_>, state: &ClusterState, theme: &Theme, now_ms: i64) {
    let area = frame.area();
    if area.width < MIN.0 || area.height < MIN.1 {
        let text = format!("terminal too small: {}×{} (needs {}×{})", area.width, area.height, MIN.0, MIN.1);
        frame.render_widget(Paragraph::new(Line::styled(text, theme.style(Semantic::Warning))), area);
        return;
    }
    let routes = u16::try_from(state.routes().len().clamp(1, 8)).unwrap_or(8);
    let [head, agents, routes_area, foot] = area.layout(&Split::vertical([
        Constraint::Length(2),
        Constraint::Min(4),
        Constraint::Length(routes + 3),
        Constraint::Length(1),
    ]));
    header(frame, head, state, theme, now_ms);
    agents_table(frame, agents, state, theme);
    routes_table(frame, routes_area, state, theme);
    let keys = Line::from(vec![
        Span::styled("↑↓", theme.title().add_modifier(ratatui::style::Modifier::REVERSED)),
        Span::raw(" select  "),
        Span::styled("q", theme.title().add_modifier(ratatui::style::Modifier::REVERSED)),
        Span::raw(" quit"),
    ]);
    frame.render_widget(Paragraph::new(keys), foot);
}

fn header(frame: &mut Frame<'_>, area: Rect, state: &ClusterState, theme: &Theme, now_ms: i64) {
    let (link, semantic) = match state.link() {
        BrokerLink::Connecting => ("connecting".to_owned(), Semantic::Warning),
        BrokerLink::Live => ("live".to_owned(), Semantic::Healthy),
        BrokerLink::Lost(why) => {
            let age = state.age_ms(now_ms).map(|ms| format!(", figures {} old", format::duration(ms)));
            (format!("not answering{}: {why}", age.unwrap_or_default()), Semantic::Error)
        }
    };
    let first = Line::from(vec![
        Span::styled("lardon top — cluster ", theme.title()),
        Span::raw(state.broker().to_owned()),
        Span::raw("  "),
        Span::styled(link, theme.style(semantic)),
    ]);
    let second = match state.totals() {
        Some(t) => {
            let used: u64 = state.agents().iter().map(|a| u64::from(a.in_flight)).sum();
            Line::from(vec![
                Span::raw(format!("{} agents  ", t.agents)),
                Span::raw(format!("tokens {used}/{}  ", t.tokens)),
                Span::styled(format!("{} queued", t.queued), theme.style(queued_semantic(t.queued))),
                Span::raw(format!(
                    "  {} in flight  {} answered  {} submitters",
                    t.in_flight, t.finished, t.submitters
                )),
            ])
        }
        None => Line::styled("waiting for the broker's first answer", theme.style(Semantic::Dim)),
    };
    frame.render_widget(Paragraph::new(vec![first, second]), area);
}

fn queued_semantic(queued: u64) -> Semantic {
    if queued > 0 { Semantic::Warning } else { Semantic::Normal }
}

fn agents_table(frame: &mut Frame<'_>, area: Rect, state: &ClusterState, theme: &Theme) {
    let agents = state.agents();
    let header = Row::new(["AGENT", "STATE", "TOKENS", "IN FLIGHT", "MEMORY", "CPUS", "CAPABILITIES"])
        .style(theme.title());
    let rows: Vec<Row<'_>> = agents
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let (word, semantic) = a.availability.label();
            let row = Row::new(vec![
                Cell::from(a.id.clone()),
                Cell::from(Span::styled(word, theme.style(semantic))),
                Cell::from(a.tokens.to_string()),
                Cell::from(a.in_flight.to_string()),
                Cell::from(format::bytes(a.memory)),
                Cell::from(format!("{:.1}", f64::from(a.cpu_millis) / 1000.0)),
                Cell::from(a.capabilities.clone()),
            ]);
            if i == state.selected() { row.style(theme.selected()) } else { row }
        })
        .collect();
    let empty = rows.is_empty();
    let widths = [
        Constraint::Length(20),
        Constraint::Length(10),
        Constraint::Length(6),
        Constraint::Length(9),
        Constraint::Length(10),
        Constraint::Length(6),
        Constraint::Min(12),
    ];
    let title = format!(" Agents ({}) ", agents.len());
    let block = Block::bordered().title(Span::styled(title, theme.title()));
    if empty {
        let text = Line::styled("no agent connected", theme.style(Semantic::Dim));
        frame.render_widget(Paragraph::new(text).block(block), area);
    } else {
        frame.render_widget(Table::new(rows, widths).header(header).block(block), area);
    }
}

fn routes_table(frame: &mut Frame<'_>, area: Rect, state: &ClusterState, theme: &Theme) {
    let routes = state.routes();
    let block = Block::bordered().title(Span::styled(" Routes ", theme.title()));
    if routes.is_empty() {
        let text = Line::styled("no task queued or in flight", theme.style(Semantic::Dim));
        frame.render_widget(Paragraph::new(text).block(block), area);
        return;
    }
    let header = Row::new(["CAPABILITY", "QUEUED", "IN FLIGHT"]).style(theme.title());
    let rows: Vec<Row<'_>> = routes
        .iter()
        .map(|(key, queued, in_flight)| {
            Row::new(vec![
                Cell::from(key.clone()),
                Cell::from(Span::styled(queued.to_string(), theme.style(queued_semantic(*queued)))),
                Cell::from(in_flight.to_string()),
            ])
        })
        .collect();
    let widths = [Constraint::Min(20), Constraint::Length(8), Constraint::Length(9)];
    frame.render_widget(Table::new(rows, widths).header(header).block(block), area);
}
