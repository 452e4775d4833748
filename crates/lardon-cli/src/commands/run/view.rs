//! What `lardon run` shows: indicatif bars on a terminal, else one plain
//! line per event (state change, decision, reduced batch).

use std::collections::HashMap;
use std::time::Instant;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use lardon_proto::pb;

use crate::json::{decision_kind, state_word};
use crate::render;

struct Row {
    name: String,
    state: i32,
    last_line: String,
    /// (batch, first item) of the last sequence shown.
    sequence: (u64, u64),
    bar: Option<ProgressBar>,
    task: Option<pb::Task>,
}

pub(super) struct View {
    multi: Option<MultiProgress>,
    /// On a terminal: every task of the file, done / total, rate and ETA.
    overall: Option<ProgressBar>,
    rows: Vec<(String, Row)>,
    index: HashMap<String, usize>,
    started: Instant,
}

fn terminal(state: i32) -> bool {
    [pb::TaskState::Completed as i32, pb::TaskState::Failed as i32, pb::TaskState::Cancelled as i32]
        .contains(&state)
}

impl View {
    pub(super) fn new(bars: bool, ids: &[(String, String)]) -> View {
        let multi = bars.then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stdout()));
        let style = ProgressStyle::with_template("{prefix:>18} [{bar:28}] {pos:>4}/{len:<4} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("#>-");
        let overall = multi.as_ref().map(|m| {
            let b = m.add(ProgressBar::new(ids.len() as u64));
            let style = ProgressStyle::with_template(
                "{prefix:>18} [{bar:28}] {pos:>4}/{len:<4} tasks done, {per_sec}, eta {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("#>-");
            b.set_style(style);
            b.set_prefix("all");
            b
        });
        let mut rows = Vec::new();
        let mut index = HashMap::new();
        for (name, id) in ids {
            let bar = multi.as_ref().map(|m| {
                let b = m.add(ProgressBar::new(100));
                b.set_style(style.clone());
                b.set_prefix(name.clone());
                b.set_message("pending");
                b
            });
            index.insert(id.clone(), rows.len());
            rows.push((
                id.clone(),
                Row {
                    name: name.clone(),
                    state: 0,
                    last_line: String::new(),
                    sequence: (0, 0),
                    bar,
                    task: None,
                },
            ));
        }
        View { multi, overall, rows, index, started: Instant::now() }
    }

    pub(super) fn ids(&self) -> Vec<String> {
        self.rows.iter().map(|(id, _)| id.clone()).collect()
    }

    pub(super) fn all_done(&self) -> bool {
        self.rows.iter().all(|(_, r)| terminal(r.state))
    }

    fn line(&self, text: &str) {
        let stamp = format!("[{:>6.1}s] ", self.started.elapsed().as_secs_f64());
        match &self.multi {
            Some(m) => {
                let _ = m.println(format!("{stamp}{text}"));
            }
            None => crate::say!("{stamp}{text}"),
        }
    }

    pub(super) fn event(&mut self, ev: pb::WatchEvent) {
        match ev.event {
            Some(pb::watch_event::Event::Snapshot(s)) => self.tasks(s.tasks),
            Some(pb::watch_event::Event::TaskChanged(t)) => self.tasks(vec![t]),
            Some(pb::watch_event::Event::Decision(d)) => {
                let Some(&i) = self.index.get(&d.task_id) else { return };
                let Some(dec) = d.decision else { return };
                let name = self.rows[i].1.name.clone();
                let text = match pb::DecisionKind::try_from(dec.kind).unwrap_or(pb::DecisionKind::Unspecified)
                {
                    pb::DecisionKind::Admit if dec.message.is_empty() => format!("{name}: admitted"),
                    pb::DecisionKind::Admit => format!("{name}: admitted — {}", dec.message),
                    pb::DecisionKind::ReduceBatch => {
                        format!("{name}: batch reduced to {} — {}", dec.batch, dec.message)
                    }
                    k => {
                        format!("{name}: {} ({}) — {}", decision_kind(k as i32), dec.reason_code, dec.message)
                    }
                };
                if self.rows[i].1.last_line != text {
                    self.line(&text);
                    self.rows[i].1.last_line = text;
                }
            }
            _ => {}
        }
    }

    pub(super) fn tasks(&mut self, tasks: Vec<pb::Task>) {
        for t in tasks {
            let Some(&i) = self.index.get(&t.id) else { continue };
            let p = t.progress.clone().unwrap_or_default();
            let old_state = self.rows[i].1.state;
            let name = self.rows[i].1.name.clone();
            if old_state != t.state {
                let why = render::reason(&t);
                let mut text = format!("{name}: {}", state_word(t.state));
                if !why.is_empty() {
                    text.push_str(&format!(" — {why}"));
                }
                if terminal(t.state)
                    && let Some(ms) = render::elapsed(&t)
                {
                    text.push_str(&format!(" after {}", lardon::format_duration_ms(ms)));
                }
                self.line(&text);
                self.rows[i].1.last_line = text;
                if terminal(t.state)
                    && !terminal(old_state)
                    && let Some(all) = &self.overall
                {
                    all.inc(1);
                }
            }
            let items = t.spec.as_ref().and_then(|s| s.items).unwrap_or(0);
            if let Some(c) = &t.contract
                && items > 0
                && c.batch > 0
                && c.item_offset < items
                && t.state == pb::TaskState::Running as i32
                && (c.batch, c.item_offset) != self.rows[i].1.sequence
            {
                self.rows[i].1.sequence = (c.batch, c.item_offset);
                let end = (c.item_offset + c.batch).min(items);
                self.line(&format!(
                    "{name}: items {}..{end} of {items} in a batch of {} ({} granted)",
                    c.item_offset,
                    c.batch,
                    lardon::format_bytes(c.memory)
                ));
            }
            if let Some(bar) = &self.rows[i].1.bar {
                let (pos, len) = if p.total > 0 {
                    (p.done, p.total)
                } else if terminal(t.state) {
                    (1, 1)
                } else {
                    (0, 1)
                };
                bar.set_length(len);
                bar.set_position(pos.min(len));
                let mut msg = state_word(t.state).to_owned();
                if let Some(ms) = render::elapsed(&t) {
                    msg.push_str(&format!(" {}", lardon::format_duration_ms(ms)));
                }
                let eta = render::eta(&p);
                if eta != "-" && eta != "done" {
                    msg.push_str(&format!(" eta {eta}"));
                }
                if let Some(rate) = p.items_per_sec {
                    msg.push_str(&format!(" {rate:.1}/s"));
                }
                let why = render::reason(&t);
                if !why.is_empty() {
                    msg.push_str(&format!(" {why}"));
                }
                bar.set_message(msg);
                if terminal(t.state) {
                    bar.finish();
                }
            }
            self.rows[i].1.state = t.state;
            self.rows[i].1.task = Some(t);
        }
    }

    pub(super) fn finish(&self) {
        if let Some(all) = &self.overall {
            all.abandon();
        }
        for (_, r) in &self.rows {
            if let Some(b) = &r.bar {
                b.abandon();
            }
        }
    }

    /// Prints the outcome; 0 if every task completed, else 1.
    pub(super) fn summary(&self) -> u8 {
        let ok = self.rows.iter().filter(|(_, r)| r.state == pb::TaskState::Completed as i32).count();
        let failed: Vec<String> = self
            .rows
            .iter()
            .filter(|(_, r)| r.state != pb::TaskState::Completed as i32)
            .map(|(_, r)| {
                let why = r.task.as_ref().map(render::reason).unwrap_or_default();
                format!(
                    "{} ({}{})",
                    r.name,
                    state_word(r.state),
                    if why.is_empty() { String::new() } else { format!(": {why}") }
                )
            })
            .collect();
        crate::say!(
            "{ok} of {} tasks completed in {:.1}s",
            self.rows.len(),
            self.started.elapsed().as_secs_f64()
        );
        if failed.is_empty() {
            0
        } else {
            crate::say!("not completed: {}", failed.join(", "));
            1
        }
    }
}
