//! Human output: tables, bars, durations, the explain side-by-side view.

use std::fmt::Write as _;

use lardon::{format_bytes, format_duration_ms};
use lardon_proto::pb;

use crate::json::{decision_kind, eta_word, pressure_word, scratch_word, state_word};

/// Running time: the daemon's figure, else from the start and end stamps.
pub(crate) fn elapsed(t: &pb::Task) -> Option<u64> {
    let p = t.progress.as_ref().map_or(0, |p| p.elapsed_ms);
    if p > 0 {
        return Some(p);
    }
    match (t.started_unix_ms, t.finished_unix_ms) {
        (Some(s), Some(f)) if f >= s => Some((f - s) as u64),
        _ => None,
    }
}

/// `[######----]  60%` (10 cells) or the done count when the total is unknown.
pub(crate) fn bar(p: &pb::TaskProgress, state: i32) -> String {
    if p.integrity_error {
        return format!("{}/{} INCOMPLETE", p.done, p.total);
    }
    if p.total == 0 {
        if state == pb::TaskState::Completed as i32 {
            return "[##########] 100%".into();
        }
        return if p.done > 0 { format!("{} done", p.done) } else { "-".into() };
    }
    let frac = (p.done as f64 / p.total as f64).clamp(0.0, 1.0);
    let cells = (frac * 10.0).floor() as usize;
    format!("[{}{}] {:>3}%", "#".repeat(cells), "-".repeat(10 - cells), (frac * 100.0).floor() as u32)
}

pub(crate) fn eta(p: &pb::TaskProgress) -> String {
    match (pb::EtaState::try_from(p.eta_state).unwrap_or(pb::EtaState::Unspecified), p.eta_ms) {
        (pb::EtaState::Known, Some(ms)) => format_duration_ms(ms),
        (pb::EtaState::Complete, _) => "done".into(),
        (pb::EtaState::Indeterminate | pb::EtaState::Unspecified, _) => "-".into(),
        (s, _) => eta_word(s as i32).into(),
    }
}

/// Why a task is where it is: the wait/reject reason, or the failure.
pub(crate) fn reason(t: &pb::Task) -> String {
    if !t.failure_reason.is_empty() {
        return t.failure_reason.clone();
    }
    if t.state == pb::TaskState::Pending as i32 && !t.waiting_for.is_empty() {
        return t.waiting_for.clone();
    }
    if t.state == pb::TaskState::Pending as i32
        && let Some(d) = &t.last_decision
        && d.kind == pb::DecisionKind::Wait as i32
    {
        return format!("waiting: {}", d.message);
    }
    if t.state == pb::TaskState::Running as i32
        && let Some(d) = &t.last_decision
        && d.kind == pb::DecisionKind::ReduceBatch as i32
    {
        return format!("batch {}: {}", d.batch, d.message);
    }
    String::new()
}

pub(crate) fn name(t: &pb::Task) -> String {
    let spec = t.spec.as_ref();
    match spec {
        Some(s) if !s.name.is_empty() => s.name.clone(),
        Some(s) => {
            // An unnamed task is shown by its command, program without its path.
            let mut words = s.argv.iter();
            let program =
                words.next().map(|p| p.rsplit('/').next().unwrap_or(p).to_owned()).unwrap_or_default();
            std::iter::once(program).chain(words.cloned()).collect::<Vec<_>>().join(" ")
        }
        None => String::new(),
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_owned()
    } else {
        let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
        out.push('…');
        out
    }
}

/// The `lardon status` table. A GROUP column appears when any listed task
/// is in a group (so a queue without groups keeps its narrow table).
pub(crate) fn table(tasks: &[pb::Task]) -> String {
    if tasks.is_empty() {
        return "no tasks (queue one with `lardon submit --mem 1GiB -- COMMAND`)\n".into();
    }
    let grouped = tasks.iter().any(|t| t.spec.as_ref().is_some_and(|s| !s.group.is_empty()));
    let mut head = vec!["ID", "NAME"];
    if grouped {
        head.push("GROUP");
    }
    head.extend(["STATE", "PROGRESS", "ELAPSED", "ETA", "REASON"]);
    let rows: Vec<Vec<String>> = tasks
        .iter()
        .map(|t| {
            let p = t.progress.clone().unwrap_or_default();
            let mut row = vec![t.id.clone(), truncate(&name(t), 24)];
            if grouped {
                let group = t.spec.as_ref().map_or("", |s| s.group.as_str());
                row.push(if group.is_empty() { "-".to_owned() } else { truncate(group, 20) });
            }
            row.extend([
                state_word(t.state).to_owned(),
                bar(&p, t.state),
                elapsed(t).map_or("-".into(), format_duration_ms),
                eta(&p),
                reason(t),
            ]);
            row
        })
        .collect();
    let mut widths: Vec<usize> = head.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r.iter()) {
            *w = (*w).max(c.chars().count());
        }
    }
    let last = head.len() - 1;
    let mut out = String::new();
    let line = |out: &mut String, cells: &[&str]| {
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i == last {
                l.push_str(c);
            } else {
                let pad = widths[i].saturating_sub(c.chars().count());
                let _ = write!(l, "{c}{}  ", " ".repeat(pad));
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(&mut out, &head);
    for r in &rows {
        let cells: Vec<&str> = r.iter().map(String::as_str).collect();
        line(&mut out, &cells);
    }
    out
}

fn kv(out: &mut String, key: &str, value: impl std::fmt::Display) {
    let _ = writeln!(out, "{key:>14}: {value}");
}

/// `lardon status ID`: one task in full.
pub(crate) fn detail(t: &pb::Task) -> String {
    let mut out = String::new();
    let spec = t.spec.clone().unwrap_or_default();
    let p = t.progress.clone().unwrap_or_default();
    kv(&mut out, "id", &t.id);
    kv(&mut out, "name", name(t));
    kv(&mut out, "state", state_word(t.state));
    kv(&mut out, "command", spec.argv.join(" "));
    if !spec.group.is_empty() {
        kv(&mut out, "group", &spec.group);
    }
    kv(&mut out, "progress", format!("{} {}", bar(&p, t.state), p.message));
    kv(&mut out, "elapsed", elapsed(t).map_or("-".into(), format_duration_ms));
    kv(&mut out, "eta", eta(&p));
    if let Some(rate) = p.items_per_sec {
        kv(&mut out, "throughput", format!("{rate:.2} items/s"));
    }
    kv(&mut out, "attempts", t.attempts);
    if let Some(items) = spec.items {
        kv(&mut out, "items done", format!("{} of {items}", t.cursor));
    }
    if let Some(code) = t.exit_code {
        kv(&mut out, "exit code", code);
    }
    if let Some(d) = &t.last_decision {
        kv(&mut out, "last decision", format!("{} ({}) {}", decision_kind(d.kind), d.reason_code, d.message));
    }
    let why = reason(t);
    if !why.is_empty() {
        kv(&mut out, "reason", why);
    }
    if let Some(c) = &t.contract
        && t.state == pb::TaskState::Running as i32
    {
        kv(
            &mut out,
            "granted",
            format!(
                "batch {}, {}, {} CPUs",
                c.batch,
                format_bytes(c.memory),
                lardon::format_cpus(c.cpu_millis)
            ),
        );
    }
    if t.memory_retries > 0 {
        kv(&mut out, "memory retries", t.memory_retries);
    }
    if !t.overrun_note.is_empty() {
        kv(&mut out, "overrun", &t.overrun_note);
    }
    if let Some(l) = &t.learned {
        kv(&mut out, "learned", crate::course::learned_line(l));
    }
    if !spec.on_end.is_empty() {
        kv(&mut out, "on end", &spec.on_end);
    }
    if let Some(h) = &t.hook {
        hook_lines(&mut out, h);
    }
    out
}

/// Lines of output of a hook shown in `status ID` (the rest: `--json`).
const HOOK_LINES_SHOWN: usize = 10;

/// The hook of the task's latest end: its outcome, then the last lines of
/// its output.
fn hook_lines(out: &mut String, h: &pb::HookRun) {
    let attempt = if h.attempt > 1 { format!(", attempt {}", h.attempt) } else { String::new() };
    let line = h.outcome_phrase();
    kv(out, "hook", format!("{line} (after {}{attempt}): {}", h.task_state, h.command));
    let text = String::from_utf8_lossy(&h.output);
    let lines: Vec<&str> = text.lines().collect();
    let skip = lines.len().saturating_sub(HOOK_LINES_SHOWN);
    if skip > 0 {
        let _ = writeln!(out, "{:>14}  … {skip} earlier lines (status ID --json has them)", "");
    }
    for l in &lines[skip..] {
        let _ = writeln!(out, "{:>14}  | {l}", "");
    }
    if h.output_dropped > 0 {
        let _ = writeln!(out, "{:>14}  … {} bytes past the first 64 KiB not kept", "", h.output_dropped);
    }
}

/// `lardon explain`: the decision, then needs and availability side by side.
pub(crate) fn explain(r: &pb::ExplainResponse) -> String {
    let mut out = String::new();
    let task = r.task.clone().unwrap_or_default();
    let _ = writeln!(out, "task {} ({}) is {}", task.id, name(&task), state_word(task.state));
    match &r.last_decision {
        Some(d) => {
            let _ = writeln!(
                out,
                "last decision: {} — reason `{}`: {}",
                decision_kind(d.kind).to_uppercase(),
                d.reason_code,
                d.message
            );
            if d.batch > 0 {
                let _ = writeln!(out, "granted batch: {}", d.batch);
            }
        }
        None => out.push_str("last decision: none yet (the task has not been considered)\n"),
    }
    if !task.waiting_for.is_empty() {
        let _ = writeln!(out, "held back: {}", task.waiting_for);
    }
    if task.memory_retries > 0 {
        let _ = writeln!(out, "memory retries: {}", task.memory_retries);
    }
    if !task.overrun_note.is_empty() {
        let _ = writeln!(out, "overrun: {}", task.overrun_note);
    }
    if let Some(l) = &task.learned {
        let _ = writeln!(out, "learned: {}", crate::course::learned_line(l));
    }
    let needs = r.needs.clone().unwrap_or_default();
    if !needs.estimate_error.is_empty() {
        let _ = writeln!(out, "estimate is invalid: {}", needs.estimate_error);
    }
    let e = r.estimate.clone().unwrap_or_default();
    let a = r.availability.clone().unwrap_or_default();
    let m = a.memory.unwrap_or_default();
    let c = a.cpus.unwrap_or_default();
    let io = a.io.unwrap_or_default();
    let mem_need = if needs.memory_at_batch_min == needs.memory_at_batch_max {
        format_bytes(needs.memory_at_batch_min)
    } else {
        format!("{} .. {}", format_bytes(needs.memory_at_batch_min), format_bytes(needs.memory_at_batch_max))
    };
    let mut rows: Vec<(String, String, String)> = vec![
        (
            "memory".into(),
            mem_need,
            format!(
                "{} available ({} total, {} reserve, {} reserved)",
                format_bytes(m.available),
                format_bytes(m.total),
                format_bytes(m.reserve),
                format_bytes(m.reserved)
            ),
        ),
        (
            "batch".into(),
            format!(
                "{}..{}{}",
                e.batch_min.unwrap_or(1),
                e.batch_max.or(e.batch_min).unwrap_or(1),
                needs.adaptive_batch_max.map(|b| format!(" (learned max {b})")).unwrap_or_default()
            ),
            String::new(),
        ),
        (
            "cpus".into(),
            lardon::format_cpus(e.cpu_millis.unwrap_or(1000)),
            format!(
                "{} available of {} logical (load {:.2})",
                lardon::format_cpus(c.available_millis),
                c.logical,
                c.load1
            ),
        ),
    ];
    if e.gpu_slots > 0 || needs.gpu_memory_at_batch_max > 0 {
        let free: Vec<String> = a
            .gpus
            .iter()
            .map(|g| format!("gpu{}: {}", g.index, g.memory_available.map_or("unknown".into(), format_bytes)))
            .collect();
        rows.push((
            "gpu memory".into(),
            format_bytes(needs.gpu_memory_at_batch_max),
            if free.is_empty() { "no GPU".into() } else { free.join(", ") },
        ));
    }
    if e.io_slots > 0 {
        rows.push((
            "io slots".into(),
            e.io_slots.to_string(),
            format!("{} free of {}", io.total.saturating_sub(io.used), io.total),
        ));
    }
    if e.scratch_bytes > 0 {
        rows.push((
            "scratch".into(),
            format_bytes(e.scratch_bytes),
            format!("{} volume(s)", a.scratch.len()),
        ));
    }
    let p = a.pressure.unwrap_or_default();
    rows.push(("pressure".into(), String::new(), format!("{} {}", pressure_word(p.state), p.reason)));
    let w0 = rows.iter().map(|r| r.0.len()).max().unwrap_or(0).max(8);
    let w1 = rows.iter().map(|r| r.1.chars().count()).max().unwrap_or(0).max(6);
    let _ = writeln!(out, "\n{:<w0$}  {:<w1$}  AVAILABLE NOW", "", "NEEDS");
    for (k, need, avail) in rows {
        let _ = writeln!(out, "{k:<w0$}  {need:<w1$}  {avail}");
    }
    out
}

/// `lardon resources`.
pub(crate) fn resources(a: &pb::Availability) -> String {
    let mut out = String::new();
    let m = a.memory.unwrap_or_default();
    let c = a.cpus.clone().unwrap_or_default();
    let io = a.io.unwrap_or_default();
    let p = a.pressure.clone().unwrap_or_default();
    let _ = writeln!(
        out,
        "host {} (generation {}): {} running, {} pending{}",
        a.host,
        a.generation,
        a.running,
        a.pending,
        a.max_running.map(|m| format!(", max {m} running")).unwrap_or_default()
    );
    let _ = writeln!(
        out,
        "memory    total {}  reserve {}  reserved {}  available {}  (MemAvailable {})",
        format_bytes(m.total),
        format_bytes(m.reserve),
        format_bytes(m.reserved),
        format_bytes(m.available),
        format_bytes(m.mem_available)
    );
    let _ = writeln!(
        out,
        "cpus      {} logical  reserve {}  reserved {}  available {}  load {:.2} (Lardon's own {:.2}, foreign {:.2}; {})",
        c.logical,
        c.reserve,
        lardon::format_cpus(c.reserved_millis),
        lardon::format_cpus(c.available_millis),
        c.load1,
        c.own_load,
        (c.load1 - c.own_load).max(0.0),
        // 0 is how the daemon says the load gate is off.
        if c.max_load_ratio > 0.0 {
            format!("max ratio {:.2} of foreign load", c.max_load_ratio)
        } else {
            "no load gate".to_owned()
        }
    );
    for g in &a.gpus {
        let _ = writeln!(
            out,
            "gpu{}      {}  total {}  reserve {}  reserved {}  available {}{}",
            g.index,
            g.name,
            format_bytes(g.memory_total),
            format_bytes(g.memory_reserve),
            format_bytes(g.memory_reserved),
            g.memory_available.map_or("unknown".into(), format_bytes),
            if g.unified { " (unified)" } else { "" }
        );
    }
    let _ = writeln!(out, "io slots  {} used of {}", io.used, io.total);
    let _ = writeln!(out, "pressure  {} {}", pressure_word(p.state).to_uppercase(), p.reason);
    if let Some(t) = a.slow_start_target {
        let _ = writeln!(out, "slow start: batch target {t}");
    }
    if let Some(e) = &a.enforcement {
        let _ = writeln!(out, "{}", enforcement_line(e));
    }
    for v in &a.scratch {
        out.push_str(&scratch_line(v));
    }
    out
}

/// `enforcement none: <why>` where no cgroup takes a limit (the mode, if
/// not off, in brackets: the watchdog), else `enforcement cgroup_v1 (hard)
/// <why>` — the mode is the daemon's effective one, never hard without a
/// cgroup.
pub(crate) fn enforcement_line(e: &pb::EnforcementView) -> String {
    let mode = e.mode().as_str_name().trim_start_matches("ENFORCE_MODE_").to_lowercase();
    match e.backend() {
        pb::EnforcementBackend::None | pb::EnforcementBackend::Unspecified => {
            format!("enforcement none: {} [{mode}]", e.why)
        }
        b => format!(
            "enforcement {} ({mode}) {}",
            b.as_str_name().trim_start_matches("ENFORCEMENT_BACKEND_").to_lowercase(),
            e.why
        ),
    }
}

pub(crate) fn scratch_line(v: &pb::ScratchVolume) -> String {
    format!(
        "scratch {} {} {}  leased {} in {} lease(s){}{}\n",
        v.name,
        v.path,
        scratch_word(v.state),
        format_bytes(v.leased),
        v.leases,
        v.free.map(|f| format!(", {} free", format_bytes(f))).unwrap_or_default(),
        if v.message.is_empty() { String::new() } else { format!(" — {}", v.message) }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(id: &str, group: &str) -> pb::Task {
        let spec = pb::TaskSpec { argv: vec!["true".into()], group: group.into(), ..Default::default() };
        pb::Task {
            id: id.into(),
            spec: Some(spec),
            state: pb::TaskState::Pending as i32,
            ..Default::default()
        }
    }

    #[test]
    fn the_status_table_has_a_group_column_only_when_a_task_is_in_a_group() {
        let plain = table(&[task("1", ""), task("2", "")]);
        assert!(!plain.contains("GROUP"), "{plain}");
        let mixed = table(&[task("1", "render"), task("2", "")]);
        let lines: Vec<&str> = mixed.lines().collect();
        assert!(lines[0].starts_with("ID  NAME  GROUP   STATE"), "{mixed}");
        assert!(lines[1].contains(" render  pending"), "{mixed}");
        assert!(lines[2].contains(" -       pending"), "{mixed}");
    }

    #[test]
    fn enforcement_none_names_why_and_never_hard() {
        let view = |backend: pb::EnforcementBackend, mode: pb::EnforceMode| pb::EnforcementView {
            backend: backend as i32,
            why: "cannot enable the memory controller in /x/cgroup.subtree_control: busy".into(),
            mode: mode as i32,
        };
        let none = enforcement_line(&view(pb::EnforcementBackend::None, pb::EnforceMode::Watchdog));
        assert_eq!(
            none,
            "enforcement none: cannot enable the memory controller in /x/cgroup.subtree_control: busy [watchdog]"
        );
        let v1 = enforcement_line(&view(pb::EnforcementBackend::CgroupV1, pb::EnforceMode::Hard));
        assert!(v1.starts_with("enforcement cgroup_v1 (hard) cannot"), "{v1}");
    }

    #[test]
    fn durations() {
        assert_eq!(format_duration_ms(400), "0.4s");
        assert_eq!(format_duration_ms(12_000), "12s");
        assert_eq!(format_duration_ms(185_000), "3m05s");
        assert_eq!(format_duration_ms(3_720_000), "1h02m");
    }

    #[test]
    fn bars() {
        let p = pb::TaskProgress { done: 6, total: 10, ..Default::default() };
        assert_eq!(bar(&p, pb::TaskState::Running as i32), "[######----]  60%");
        let bad = pb::TaskProgress { done: 6, total: 10, integrity_error: true, ..Default::default() };
        assert!(bar(&bad, pb::TaskState::Completed as i32).contains("INCOMPLETE"));
    }
}
