//! `lardon wait [ID…]`: exit 1 if any awaited task did not succeed. On a
//! terminal a live bar shows done / total, the rate and the ETA above the
//! finished lines; otherwise one plain line per task end.

use std::io::IsTerminal;

use anyhow::Result;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use lardon_proto::pb;
use serde_json::json;

use crate::cli::Cli;
use crate::error::from_status;

pub(crate) async fn run(cli: &Cli, ids: &[String], group: Option<&str>, as_json: bool) -> Result<u8> {
    let mut client = crate::client::connect(cli).await?;
    // Inside a task, never wait for that task itself (it would never end):
    // a parent waiting for its group waits for every other task of it.
    let except =
        if group.is_some() { std::env::var("LARDON_TASK_ID").unwrap_or_default() } else { String::new() };
    let bar = if !as_json && std::io::stdout().is_terminal() {
        Some(progress_bar(&mut client, ids, group.map(|g| (g, except.as_str()))).await?)
    } else {
        None
    };
    let mut events = client
        .wait(pb::WaitRequest { ids: ids.to_vec(), group: group.unwrap_or_default().to_owned(), except })
        .await
        .map_err(|s| from_status("wait", s))?
        .into_inner();
    let mut failed = false;
    let mut summary = None;
    while let Some(ev) = events.message().await.map_err(|s| from_status("wait", s))? {
        match ev.event {
            Some(pb::wait_event::Event::Finished(t)) => {
                if t.state != pb::TaskState::Completed as i32 {
                    failed = true;
                }
                if as_json {
                    super::out(&format!("{}\n", json!({"finished": crate::json::task(&t)})))?;
                } else {
                    let why = crate::render::reason(&t);
                    let why = if why.is_empty() { String::new() } else { format!(" ({why})") };
                    let line = format!(
                        "{} {}: {}{why}",
                        t.id,
                        crate::render::name(&t),
                        crate::json::state_word(t.state)
                    );
                    match &bar {
                        Some(bar) => {
                            bar.println(line);
                            bar.inc(1);
                        }
                        None => super::out(&format!("{line}\n"))?,
                    }
                }
            }
            Some(pb::wait_event::Event::Summary(s)) => summary = Some(s),
            None => {}
        }
    }
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    if let Some(s) = summary {
        failed |= s.failed > 0 || s.cancelled > 0;
        if as_json {
            super::out(&format!(
                "{}\n",
                json!({"summary": {"completed": s.completed, "failed": s.failed, "cancelled": s.cancelled}})
            ))?;
        } else {
            super::out(&format!(
                "{} completed, {} failed, {} cancelled\n",
                s.completed, s.failed, s.cancelled
            ))?;
        }
    }
    Ok(u8::from(failed))
}

/// The bar over the awaited tasks: the ids given, or every task not yet
/// ended (what the daemon's wait covers when no id is given); with a
/// group, its tasks (but `except`) and the ids given.
async fn progress_bar(
    client: &mut crate::client::Client,
    ids: &[String],
    group: Option<(&str, &str)>,
) -> Result<ProgressBar> {
    let total = if let Some((group, except)) = group {
        let tasks = client
            .list(pb::ListRequest { group: group.to_owned(), ..Default::default() })
            .await
            .map_err(|s| from_status("wait", s))?
            .into_inner()
            .tasks;
        let mut all: std::collections::BTreeSet<&str> =
            tasks.iter().map(|t| t.id.as_str()).filter(|id| *id != except).collect();
        all.extend(ids.iter().map(String::as_str));
        all.len()
    } else if ids.is_empty() {
        let tasks = client
            .list(pb::ListRequest::default())
            .await
            .map_err(|s| from_status("wait", s))?
            .into_inner()
            .tasks;
        let ended =
            [pb::TaskState::Completed as i32, pb::TaskState::Failed as i32, pb::TaskState::Cancelled as i32];
        tasks.iter().filter(|t| !ended.contains(&t.state)).count()
    } else {
        ids.len()
    };
    let bar = ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::stdout());
    let style = ProgressStyle::with_template("[{bar:30}] {pos}/{len} done, {per_sec}, eta {eta}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("#>-");
    bar.set_style(style);
    bar.enable_steady_tick(std::time::Duration::from_millis(500));
    Ok(bar)
}
