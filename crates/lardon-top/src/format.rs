//! Words and numbers as the dashboard prints them.

use lardon_proto::pb::{self, DecisionKind, EtaState, PressureState, ScratchState, TaskState};

pub(crate) use lardon::format_duration_ms as duration;

use crate::state::TaskRow;
use crate::theme::Semantic;

/// A byte count in at most six characters: `512B`, `24.0G`, `1.5T`.
pub(crate) fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["K", "M", "G", "T", "P"];
    if n < 1024 {
        return format!("{n}B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1023.95 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if v >= 100.0 { format!("{v:.0}{}", UNITS[unit]) } else { format!("{v:.1}{}", UNITS[unit]) }
}

/// A throughput: `12.3 it/s`, `0.05 it/s`, `1234 it/s`.
pub(crate) fn rate(per_sec: f64) -> String {
    if per_sec >= 100.0 {
        format!("{per_sec:.0} it/s")
    } else if per_sec >= 0.1 {
        format!("{per_sec:.1} it/s")
    } else {
        format!("{per_sec:.2} it/s")
    }
}

/// `text` cut to `width` characters, with `…` when cut.
pub(crate) fn clip(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_owned();
    }
    if width == 0 {
        return String::new();
    }
    let mut out: String = text.chars().take(width - 1).collect();
    out.push('…');
    out
}

/// A bar of `width` cells, `fill` for the done fraction and `empty` for
/// the rest; never full unless `fraction >= 1`.
pub(crate) fn bar(fraction: f64, width: usize, fill: char, empty: char) -> String {
    let f = fraction.clamp(0.0, 1.0);
    let mut cells = (f * width as f64).floor() as usize;
    if f < 1.0 {
        cells = cells.min(width.saturating_sub(1));
    }
    let mut out = String::with_capacity(width * 3);
    out.extend(std::iter::repeat_n(fill, cells));
    out.extend(std::iter::repeat_n(empty, width - cells));
    out
}

/// The state word of a task and its meaning. A pending task whose last
/// decision was WAIT is `WAITING`; a completed one with `done < total`
/// is an `INTEGRITY` error, never `DONE`.
pub(crate) fn task_state(task: &pb::Task) -> (&'static str, Semantic) {
    let progress = task.progress.as_ref();
    match task.state() {
        TaskState::Running => ("RUNNING", Semantic::Healthy),
        TaskState::Paused => ("PAUSED", Semantic::Warning),
        TaskState::Pending if last_kind(task) == Some(DecisionKind::Wait) => ("WAITING", Semantic::Warning),
        TaskState::Pending => ("PENDING", Semantic::Normal),
        TaskState::Completed if progress.is_some_and(|p| p.integrity_error) => ("INTEGRITY", Semantic::Error),
        TaskState::Completed => ("DONE", Semantic::Dim),
        TaskState::Failed => ("FAILED", Semantic::Error),
        TaskState::Cancelled => ("CANCELLED", Semantic::Dim),
        TaskState::Unspecified => ("UNKNOWN", Semantic::Dim),
    }
}

fn last_kind(task: &pb::Task) -> Option<DecisionKind> {
    task.last_decision.as_ref().map(pb::Decision::kind)
}

/// The percentage done (floored: 100 only when done == total), if known.
pub(crate) fn percent(task: &pb::Task) -> Option<u64> {
    let p = task.progress.as_ref()?;
    (p.total > 0).then(|| (p.done.min(p.total) * 100) / p.total)
}

/// Fraction done, if known.
pub(crate) fn fraction(task: &pb::Task) -> Option<f64> {
    let p = task.progress.as_ref()?;
    (p.total > 0).then(|| p.done.min(p.total) as f64 / p.total as f64)
}

/// Milliseconds since `seen_ms` that count for a running task.
fn drift(row: &TaskRow, now_ms: i64) -> u64 {
    if row.task.state() == TaskState::Running {
        u64::try_from(now_ms.saturating_sub(row.seen_ms)).unwrap_or(0)
    } else {
        0
    }
}

/// Elapsed time, advanced from the report while the task runs.
pub(crate) fn elapsed(row: &TaskRow, now_ms: i64) -> String {
    match &row.task.progress {
        Some(p) if p.elapsed_ms > 0 || row.task.started_unix_ms.is_some() => {
            duration(p.elapsed_ms.saturating_add(drift(row, now_ms)))
        }
        _ => "—".to_owned(),
    }
}

/// The ETA state and, when known, its value (counted down from the report).
pub(crate) fn eta(row: &TaskRow, now_ms: i64) -> (String, Semantic) {
    let Some(p) = &row.task.progress else {
        return ("—".to_owned(), Semantic::Dim);
    };
    match p.eta_state() {
        EtaState::Known => {
            let left = p.eta_ms.unwrap_or(0).saturating_sub(drift(row, now_ms));
            (format!("eta {}", duration(left.div_ceil(1000) * 1000)), Semantic::Normal)
        }
        EtaState::Calculating => ("calculating".to_owned(), Semantic::Dim),
        EtaState::Stalled => ("stalled".to_owned(), Semantic::Warning),
        EtaState::Throttled => ("throttled".to_owned(), Semantic::Warning),
        EtaState::Complete => ("complete".to_owned(), Semantic::Dim),
        EtaState::Indeterminate | EtaState::Unspecified => ("—".to_owned(), Semantic::Dim),
    }
}

/// The smoothed throughput, if known.
pub(crate) fn throughput(task: &pb::Task) -> String {
    task.progress.as_ref().and_then(|p| p.items_per_sec).map_or_else(|| "—".to_owned(), rate)
}

/// The note shown beside a task: why it waits, why it failed, or its
/// progress message.
pub(crate) fn task_note(task: &pb::Task) -> String {
    let decision = task.last_decision.as_ref();
    let progress_msg = task.progress.as_ref().map_or("", |p| p.message.as_str());
    match task.state() {
        TaskState::Pending => match decision {
            Some(d) if d.kind() == DecisionKind::Wait || d.kind() == DecisionKind::Reject => {
                let why = if d.message.is_empty() { &d.reason_code } else { &d.message };
                format!("wait: {why}")
            }
            _ => "queued".to_owned(),
        },
        TaskState::Failed => task.failure_reason.clone(),
        TaskState::Paused if task.paused_while_running => "paused, holds its reservation".to_owned(),
        TaskState::Paused => "paused before it started".to_owned(),
        TaskState::Completed if task.progress.as_ref().is_some_and(|p| p.integrity_error) => {
            "integrity error: completed with done < total".to_owned()
        }
        _ => progress_msg.to_owned(),
    }
}

/// A decision kind as a word and its meaning.
pub(crate) fn decision_kind(kind: DecisionKind) -> (&'static str, Semantic) {
    match kind {
        DecisionKind::Admit => ("ADMIT", Semantic::Healthy),
        DecisionKind::ReduceBatch => ("REDUCE", Semantic::Warning),
        DecisionKind::Wait => ("WAIT", Semantic::Warning),
        DecisionKind::Reject => ("REJECT", Semantic::Error),
        DecisionKind::Unspecified => ("?", Semantic::Dim),
    }
}

/// A pressure state as a word with a shape (so it reads without colour).
pub(crate) fn pressure(state: PressureState) -> (&'static str, Semantic) {
    match state {
        PressureState::Green => ("GREEN ●", Semantic::Healthy),
        PressureState::Yellow => ("YELLOW ▲", Semantic::Warning),
        PressureState::Red => ("RED ■", Semantic::Error),
        PressureState::Unspecified => ("UNKNOWN ?", Semantic::Dim),
    }
}

/// A scratch volume state as words.
pub(crate) fn scratch_state(state: ScratchState) -> (&'static str, Semantic) {
    match state {
        ScratchState::Absent => ("ABSENT", Semantic::Dim),
        ScratchState::Available => ("AVAILABLE", Semantic::Healthy),
        ScratchState::InUse => ("IN USE", Semantic::Ssd),
        ScratchState::Draining => ("DRAINING", Semantic::Warning),
        ScratchState::SafeToUnplug => ("SAFE TO UNPLUG", Semantic::Healthy),
        ScratchState::Error => ("ERROR", Semantic::Error),
        ScratchState::Unspecified => ("UNKNOWN", Semantic::Dim),
    }
}

/// What the task's class learned, in the engine's one phrase (the one
/// `lardon status` and `explain` print): `learned fixed 1.0 GiB, per item
/// 40.0 MiB, batch target 8 (3 samples)`; empty when nothing was learned.
pub(crate) fn learned(task: &pb::Task) -> String {
    let Some(l) = &task.learned else { return String::new() };
    let phrase = lardon::LearnedPhrase {
        samples: l.samples,
        fixed: l.fixed,
        per_item: l.per_item,
        lower_bound: l.lower_bound,
        batch_target: l.batch_target,
    };
    if phrase.is_empty() { String::new() } else { format!("learned {}", phrase.phrase()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_bytes_rates() {
        assert_eq!(duration(42_999), "42s");
        assert_eq!(duration(245_000), "4m05s");
        assert_eq!(duration(3_900_000), "1h05m", "the CLI's format");
        assert_eq!(bytes(512), "512B");
        assert_eq!(bytes(24 << 30), "24.0G");
        assert_eq!(bytes(1023 << 20), "1023M");
        assert_eq!(bytes((1 << 30) - 1), "1.0G");
        assert_eq!(rate(12.34), "12.3 it/s");
        assert_eq!(rate(0.05), "0.05 it/s");
        assert_eq!(rate(1234.0), "1234 it/s");
    }

    #[test]
    fn bars_are_never_full_before_the_end() {
        assert_eq!(bar(0.999, 8, '#', '.'), "#######.");
        assert_eq!(bar(1.0, 8, '#', '.'), "########");
        assert_eq!(bar(0.5, 8, '#', '.'), "####....");
        assert_eq!(bar(-1.0, 4, '#', '.'), "....");
        assert_eq!(clip("abcdef", 4), "abc…");
        assert_eq!(clip("abc", 4), "abc");
    }

    #[test]
    fn learned_figures_in_one_phrase() {
        let mut t = pb::Task::default();
        assert_eq!(learned(&t), "", "nothing learned: nothing shown");
        t.learned = Some(pb::LearnedFigures {
            samples: 3,
            fixed: Some(1 << 30),
            per_item: Some(40 << 20),
            batch_target: Some(8),
            ..Default::default()
        });
        let s = learned(&t);
        assert!(
            s.starts_with("learned ")
                && s.contains("per item 40.0 MiB")
                && s.contains("batch target 8")
                && s.ends_with("(3 samples)"),
            "{s}"
        );
    }
}
