//! The report as text: one table row per learning key and a totals row,
//! then the waits by reason and the learned figures of each key.

use std::fmt::Write as _;

use lardon::{format_bytes, format_duration_ms};

use super::{Figures, Report};

/// The columns, in order.
const HEADER: [&str; 14] = [
    "KEY",
    "TASKS",
    "RUNS",
    "DONE",
    "FAILED",
    "CANCELLED",
    "OPEN",
    "KILLED",
    "RETRIED",
    "DECLARED p50/max",
    "PEAK p50/max",
    "WASTE GiB·h",
    "WAITED",
    "RUN p50/p95",
];

/// The whole text (ends with a newline).
pub(crate) fn render(r: &Report) -> String {
    if r.totals.tasks == 0 {
        return "no tasks to report (nothing ran in the window, or the filters match none)\n".to_owned();
    }
    let mut rows: Vec<Vec<String>> = vec![HEADER.iter().map(|h| (*h).to_owned()).collect()];
    rows.extend(r.classes.iter().map(|c| row(&c.key, &c.figures)));
    rows.push(row("total", &r.totals));
    let mut out = columns(&rows);
    if r.classes.iter().any(|c| !c.figures.waits_ms.is_empty()) {
        out.push_str("\nWaits by reason:\n");
        let lines: Vec<Vec<String>> = r
            .classes
            .iter()
            .filter(|c| !c.figures.waits_ms.is_empty())
            .map(|c| vec![format!("  {}", c.key), waits(&c.figures)])
            .collect();
        out.push_str(&columns(&lines));
    }
    if r.classes.iter().any(|c| c.learned.is_some()) {
        out.push_str("\nLearned now:\n");
        let lines: Vec<Vec<String>> = r
            .classes
            .iter()
            .filter_map(|c| Some(vec![format!("  {}", c.key), c.learned.as_ref()?.phrase.clone()]))
            .collect();
        out.push_str(&columns(&lines));
    }
    out
}

/// `memory 1.2s, cpu_load 0.4s`, the longest first.
pub(crate) fn waits(f: &Figures) -> String {
    let mut w: Vec<(&String, &u64)> = f.waits_ms.iter().collect();
    w.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    w.iter()
        .map(|(reason, ms)| format!("{reason} {}", format_duration_ms(**ms)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn row(key: &str, f: &Figures) -> Vec<String> {
    let spread = |s: Option<super::Spread>| {
        s.map_or_else(|| "-".to_owned(), |s| format!("{}/{}", format_bytes(s.p50), format_bytes(s.max)))
    };
    let waited: u64 = f.waits_ms.values().sum();
    vec![
        key.to_owned(),
        f.tasks.to_string(),
        f.runs.to_string(),
        f.completed.to_string(),
        f.failed.to_string(),
        f.cancelled.to_string(),
        f.unfinished.to_string(),
        f.memory_kills.to_string(),
        f.memory_retries.to_string(),
        spread(f.declared),
        spread(f.peak),
        format!("{:.3}", f.waste_gib_h),
        format_duration_ms(waited),
        f.run_ms.map_or_else(
            || "-".to_owned(),
            |t| format!("{}/{}", format_duration_ms(t.p50), format_duration_ms(t.p95)),
        ),
    ]
}

/// Left-aligned columns two spaces apart (widths in characters, so `·`
/// and `→` count one).
fn columns(rows: &[Vec<String>]) -> String {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..n)
        .map(|i| rows.iter().filter_map(|r| r.get(i)).map(|c| c.chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (i, cell) in r.iter().enumerate() {
            if i + 1 == r.len() {
                line.push_str(cell);
            } else {
                let _ =
                    write!(line, "{cell}{:pad$}  ", "", pad = widths[i].saturating_sub(cell.chars().count()));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
