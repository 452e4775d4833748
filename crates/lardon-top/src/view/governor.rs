//! The Governor panel: pressure and its reason, slow start, generation,
//! and the last decisions with their reasons.

use lardon_proto::pb;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph};

use crate::format;
use crate::state::State;
use crate::theme::{Semantic, Theme};

fn pressure_spans<'a>(a: &pb::Availability, theme: &Theme) -> (Vec<Span<'a>>, String) {
    let view = a.pressure.clone().unwrap_or_default();
    let (word, sem) = format::pressure(view.state());
    let reason = if view.reason.is_empty() { "no pressure signal".to_owned() } else { view.reason.clone() };
    (vec![Span::raw("Pressure "), Span::styled(word, theme.style(sem))], reason)
}

fn psi(v: Option<f64>) -> String {
    v.map_or_else(|| "?".to_owned(), |p| if p < 10.0 { format!("{p:.1}%") } else { format!("{p:.0}%") })
}

fn decision_line<'a>(state: &State, d: &pb::DecisionMade, width: usize, theme: &Theme) -> Line<'a> {
    let decision = d.decision.clone().unwrap_or_default();
    let (kind, sem) = format::decision_kind(decision.kind());
    let age_s = state.now_ms.saturating_sub(decision.at_unix_ms).max(0) / 1000;
    let age = format::duration(u64::try_from(age_s).unwrap_or(0) * 1000);
    let why = match (decision.reason_code.is_empty(), decision.message.is_empty()) {
        (_, false) => decision.message.clone(),
        (false, true) => decision.reason_code.clone(),
        (true, true) if decision.batch > 0 => format!("batch {}", decision.batch),
        _ => String::new(),
    };
    let head = format!("{age:>5} #{:<4} ", format::clip(&d.task_id, 4));
    let used = head.chars().count() + kind.len() + 1;
    Line::from(vec![
        Span::styled(head, theme.style(Semantic::Dim)),
        Span::styled(kind, theme.style(sem)),
        Span::raw(" "),
        Span::raw(format::clip(&why, width.saturating_sub(used))),
    ])
}

/// Full layout.
pub(super) fn full(frame: &mut Frame<'_>, area: Rect, state: &State, theme: &Theme) {
    let block = Block::bordered().title(Span::styled(" Governor ", theme.title()));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let Some(a) = state.availability() else {
        frame.render_widget(Line::raw(" waiting for the daemon…"), inner);
        return;
    };
    let width = usize::from(inner.width);
    let (first, reason) = pressure_spans(a, theme);
    let p = a.pressure.clone().unwrap_or_default();
    let psi_line =
        format!("  PSI cpu {} · memory {} · io {}", psi(p.psi_cpu), psi(p.psi_memory), psi(p.psi_io));
    let slow = a.slow_start_target.map_or_else(|| "off".to_owned(), |t| format!("batch ≤ {t}"));
    let mut lines = vec![
        Line::from(first),
        Line::raw(format!("  {}", format::clip(&reason, width.saturating_sub(2)))),
        Line::styled(psi_line, theme.style(Semantic::Dim)),
        Line::raw(format!("Slow start {slow} · generation {}", a.generation)),
        Line::styled("Recent decisions", theme.title()),
    ];
    let room = usize::from(inner.height).saturating_sub(lines.len());
    if state.decisions.is_empty() {
        lines.push(Line::styled("  none yet", theme.style(Semantic::Dim)));
    }
    lines.extend(state.decisions.iter().take(room).map(|d| decision_line(state, d, width, theme)));
    frame.render_widget(Paragraph::new(lines), inner);
}

/// Compact layout: one line (the pressure word is in the header).
pub(super) fn compact(frame: &mut Frame<'_>, area: Rect, state: &State, theme: &Theme) {
    let Some(a) = state.availability() else {
        return;
    };
    let (_, reason) = pressure_spans(a, theme);
    let slow = a.slow_start_target.map(|t| format!(" · slow start ≤{t}")).unwrap_or_default();
    let head = format!("gen {}{slow} · ", a.generation);
    let room = usize::from(area.width).saturating_sub(head.chars().count());
    frame.render_widget(Line::from(vec![Span::raw(head), Span::raw(format::clip(&reason, room))]), area);
}
