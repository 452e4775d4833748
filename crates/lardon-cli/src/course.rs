//! Rendering what a task's class learned and the task's course (the
//! decisions that changed it), for `status`, `explain` and `explain
//! --history`, as text and JSON.

use std::fmt::Write as _;

use lardon_proto::pb;
use serde_json::{Value, json};

/// One line: `fixed 1.0 GiB, per item 40.0 MiB, batch target 8 (3
/// samples); fixed: measured peak of run 2 (unbatched, 1.0 GiB)` — the
/// engine's one phrase ([`lardon::LearnedPhrase`], which `lardon top`
/// shows too), then where the figures came from.
pub(crate) fn learned_line(l: &pb::LearnedFigures) -> String {
    let mut line = phrase(l).phrase();
    if !l.source.is_empty() {
        let _ = write!(line, "; {}", l.source);
    }
    if !l.key.is_empty() {
        let _ = write!(line, "; learned under {}", key_words(&l.key));
    }
    line
}

/// Which key learned figures came from: a named class, or the command
/// shape of a task that named none (docs/DESIGN.md §6).
fn key_words(key: &str) -> String {
    if key.starts_with("default.") {
        format!("key {key} (no class named: only runs of the same program with the same declared estimate)")
    } else {
        format!("class {key}")
    }
}

/// The daemon's learned figures as the engine phrases them.
fn phrase(l: &pb::LearnedFigures) -> lardon::LearnedPhrase {
    lardon::LearnedPhrase {
        samples: l.samples,
        fixed: l.fixed,
        per_item: l.per_item,
        lower_bound: l.lower_bound,
        batch_target: l.batch_target,
    }
}

/// The learned figures as JSON (`null` when the class learned nothing).
pub(crate) fn learned_json(l: Option<&pb::LearnedFigures>) -> Value {
    match l {
        None => Value::Null,
        Some(l) => json!({
            "samples": l.samples, "fixed": l.fixed, "per_item": l.per_item,
            "lower_bound": l.lower_bound, "batch_target": l.batch_target, "source": l.source,
            "key": l.key,
        }),
    }
}

/// `HH:MM:SS` (UTC) of a Unix-ms stamp.
fn clock(ms: i64) -> String {
    let s = ms.div_euclid(1000).rem_euclid(86_400);
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// The course, one entry a line, oldest first; a wait period shows its
/// start, end and length (`…` while it lasts).
pub(crate) fn history_text(entries: &[pb::HistoryEntry]) -> String {
    let mut out = String::from("history (UTC):\n");
    if entries.is_empty() {
        out.push_str("  (nothing recorded yet)\n");
    }
    for e in entries {
        let when = match (e.kind.as_str(), e.to_unix_ms) {
            ("waited", Some(to)) => format!(
                "{}–{} ({})",
                clock(e.from_unix_ms),
                clock(to),
                lardon::format_duration_ms(u64::try_from(to - e.from_unix_ms).unwrap_or(0))
            ),
            ("waited", None) => format!("{}–…", clock(e.from_unix_ms)),
            _ => clock(e.from_unix_ms),
        };
        let reason = if e.reason_code.is_empty() { String::new() } else { format!(" [{}]", e.reason_code) };
        let _ = writeln!(out, "  {when:<28} {:<13} {}{reason}", e.kind, e.message);
    }
    out
}

/// The course as JSON.
pub(crate) fn history_json(entries: &[pb::HistoryEntry]) -> Value {
    Value::Array(
        entries
            .iter()
            .map(|e| {
                json!({
                    "kind": e.kind, "from_unix_ms": e.from_unix_ms, "to_unix_ms": e.to_unix_ms,
                    "batch": e.batch, "memory": e.memory, "cpu_millis": e.cpu_millis,
                    "reason_code": e.reason_code, "message": e.message,
                })
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_period_shows_its_span_and_an_open_one_its_start() {
        let entry = |kind: &str, from: i64, to: Option<i64>, message: &str| pb::HistoryEntry {
            kind: kind.into(),
            from_unix_ms: from,
            to_unix_ms: to,
            reason_code: if kind == "waited" { "memory".into() } else { String::new() },
            message: message.into(),
            ..Default::default()
        };
        let text = history_text(&[
            entry("waited", 3_600_000, Some(3_637_000), "needs 1.0 GiB"),
            entry("admitted", 3_637_000, None, "batch 8, 112.0 MiB memory, 1 CPUs"),
            entry("waited", 3_700_000, None, "load"),
        ]);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[1].contains("01:00:00–01:00:37") && lines[1].contains("[memory]"), "{text}");
        assert!(
            lines[2].contains("01:00:37") && lines[2].contains("admitted") && lines[2].contains("batch 8"),
            "{text}"
        );
        assert!(lines[3].contains("01:01:40–…"), "{text}");
        assert!(history_text(&[]).contains("nothing recorded"));
    }
}
