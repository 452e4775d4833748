//! The resources panel: RAM, CPU, each GPU, IO slots and scratch, each as
//! total, reserve, reserved by tasks and available, with a bar.

use lardon_proto::pb;
use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, Paragraph, Row, Table};

use super::tasks::header_row;
use crate::format;
use crate::state::State;
use crate::theme::{Semantic, Theme};

/// One line of figures, in a common unit.
struct Figures {
    name: String,
    sem: Semantic,
    total: Option<u64>,
    reserve: Option<u64>,
    reserved: u64,
    available: Option<u64>,
    show: fn(u64) -> String,
    /// Counted in slots: printed without a bar in the compact layout.
    slots: bool,
}

fn cpus(millis: u64) -> String {
    lardon::format_cpus(u32::try_from(millis).unwrap_or(u32::MAX))
}

fn count(n: u64) -> String {
    n.to_string()
}

fn figures(state: &State) -> Vec<Figures> {
    let mut out = Vec::new();
    let Some(a) = state.availability() else {
        return out;
    };
    if let Some(m) = &a.memory {
        out.push(Figures {
            name: "RAM".into(),
            sem: Semantic::Normal,
            total: Some(m.total),
            reserve: Some(m.reserve),
            reserved: m.reserved,
            available: Some(m.available),
            show: format::bytes,
            slots: false,
        });
    }
    if let Some(c) = &a.cpus {
        out.push(Figures {
            name: "CPU".into(),
            sem: Semantic::Cpu,
            total: Some(u64::from(c.logical) * 1000),
            reserve: Some(u64::from(c.reserve) * 1000),
            reserved: u64::from(c.reserved_millis),
            available: Some(u64::from(c.available_millis)),
            show: cpus,
            slots: false,
        });
    }
    for g in &a.gpus {
        out.push(Figures {
            name: format!("GPU{}", g.index),
            sem: Semantic::Gpu,
            total: Some(g.memory_total),
            reserve: Some(g.memory_reserve),
            reserved: g.memory_reserved,
            available: g.memory_available,
            show: format::bytes,
            slots: false,
        });
    }
    if let Some(io) = &a.io {
        out.push(Figures {
            name: "IO".into(),
            sem: Semantic::Normal,
            total: Some(u64::from(io.total)),
            reserve: None,
            reserved: u64::from(io.used),
            available: Some(u64::from(io.total.saturating_sub(io.used))),
            show: count,
            slots: true,
        });
    }
    if !state.scratch().is_empty() {
        let vols = state.scratch();
        let known: Vec<u64> =
            vols.iter().filter_map(|v| v.capacity.or(v.free.map(|f| f + v.leased))).collect();
        let free: Vec<u64> = vols.iter().filter_map(|v| v.free).collect();
        out.push(Figures {
            name: "Scratch".into(),
            sem: Semantic::Ssd,
            total: (known.len() == vols.len()).then(|| known.iter().sum()),
            reserve: None,
            reserved: vols.iter().map(|v| v.leased).sum(),
            available: (!free.is_empty()).then(|| free.iter().sum()),
            show: format::bytes,
            slots: false,
        });
    }
    out
}

/// `▒` for the reserve, `█` for what tasks hold, `░` for the rest.
fn bar(f: &Figures, width: usize, theme: &Theme) -> Vec<Span<'static>> {
    let Some(total) = f.total.filter(|t| *t > 0) else {
        return vec![Span::styled("?".repeat(width), theme.style(Semantic::Dim))];
    };
    let cells = |v: u64| ((v.min(total) as f64 / total as f64) * width as f64).round() as usize;
    let reserve = cells(f.reserve.unwrap_or(0));
    let mut held = cells(f.reserved);
    if f.reserved > 0 {
        held = held.max(1);
    }
    let held = held.min(width - reserve.min(width));
    let free = width - reserve.min(width) - held;
    vec![
        Span::styled("▒".repeat(reserve.min(width)), theme.style(Semantic::Dim)),
        Span::styled("█".repeat(held), theme.style(f.sem)),
        Span::styled("░".repeat(free), theme.style(Semantic::Dim)),
    ]
}

fn opt(v: Option<u64>, show: fn(u64) -> String) -> String {
    v.map_or_else(|| "—".to_owned(), show)
}

/// Full layout: a table of figures, then host lines and the bar legend.
pub(super) fn full(frame: &mut Frame<'_>, area: Rect, state: &State, theme: &Theme) {
    let block = Block::bordered().title(Span::styled(" Resources ", theme.title()));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let Some(a) = state.availability() else {
        frame.render_widget(Line::raw(" waiting for the daemon…"), inner);
        return;
    };
    let figs = figures(state);
    let rows = figs.iter().map(|f| {
        Row::new(vec![
            Cell::from(Span::styled(f.name.clone(), theme.style(f.sem))),
            Cell::from(Line::from(bar(f, 10, theme))),
            Cell::from((f.show)(f.reserved)),
            Cell::from(opt(f.total, f.show)),
            Cell::from(opt(f.reserve, f.show)),
            Cell::from(opt(f.available, f.show)),
        ])
    });
    let widths = [7, 10, 8, 7, 7, 7].map(Constraint::Length);
    let table_rows = u16::try_from(figs.len() + 1).unwrap_or(u16::MAX).min(inner.height);
    let header = header_row(&["", "", "RESERVED", "TOTAL", "RESERVE", "AVAIL"], theme);
    frame.render_widget(Table::new(rows, widths).header(header), Rect { height: table_rows, ..inner });
    let mut lines = Vec::new();
    if let Some(m) = &a.memory {
        lines.push(Line::raw(format!(
            "MemAvailable {} · emergency floor {}",
            format::bytes(m.mem_available),
            format::bytes(m.emergency_floor)
        )));
    }
    if let Some(c) = &a.cpus {
        // The gate compares foreign load with the ratio × the compute pool
        // (docs/DESIGN.md §4 step 7); a ratio of 0 means the gate is off.
        let pool = if c.pool.is_empty() { c.logical.saturating_sub(c.reserve) } else { c.pool.len() as u32 };
        let limit = if c.max_load_ratio > 0.0 {
            format!("limit {:.1}", c.max_load_ratio * f64::from(pool))
        } else {
            "no load gate".to_owned()
        };
        // Lardon's own share is what the gate leaves out (its tasks and itself).
        lines.push(Line::raw(format!(
            "load {:.2} (own {:.2}, {limit}) · pool {} CPUs",
            c.load1,
            c.own_load,
            c.pool.len()
        )));
    }
    if let Some(e) = &a.enforcement {
        let backend = match e.backend() {
            pb::EnforcementBackend::CgroupV1 => "cgroup v1",
            pb::EnforcementBackend::CgroupV2 => "cgroup v2",
            pb::EnforcementBackend::None | pb::EnforcementBackend::Unspecified => "none",
        };
        let mode = e.mode().as_str_name().trim_start_matches("ENFORCE_MODE_").to_lowercase();
        lines.push(Line::raw(format!("limits: {backend}, {mode}")));
    }
    lines.push(Line::styled("█ held by tasks  ▒ reserve  ░ free", theme.style(Semantic::Dim)));
    let rest = Rect { y: inner.y + table_rows, height: inner.height.saturating_sub(table_rows), ..inner };
    frame.render_widget(Paragraph::new(lines), rest);
}

/// Compact layout: two lines of `NAME [bar] held/total`.
pub(super) fn compact(frame: &mut Frame<'_>, area: Rect, state: &State, theme: &Theme) {
    let figs = figures(state);
    if figs.is_empty() {
        frame.render_widget(Line::raw("resources: waiting for the daemon…"), area);
        return;
    }
    let part = |f: &Figures| {
        if f.slots {
            let text = format!("{} {}/{} ", f.name, (f.show)(f.reserved), opt(f.total, f.show));
            return vec![Span::styled(text, theme.style(f.sem))];
        }
        let name = if f.name == "Scratch" { "Scr" } else { f.name.as_str() };
        let mut spans = vec![Span::styled(format!("{name} ["), theme.style(f.sem))];
        spans.extend(bar(f, 8, theme));
        spans.push(Span::raw(format!("] {}/{} ", (f.show)(f.reserved), opt(f.total, f.show))));
        spans
    };
    let (first, second) = figs.split_at(figs.len().min(2));
    let lines: Vec<Line<'_>> = [first, second]
        .iter()
        .map(|group| Line::from(group.iter().flat_map(part).collect::<Vec<_>>()))
        .collect();
    frame.render_widget(Paragraph::new(lines), area);
}
