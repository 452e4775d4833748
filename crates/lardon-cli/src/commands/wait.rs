//! `lardon wait [ID…]`: exit 1 if any awaited task did not succeed.

use anyhow::Result;
use lardon_proto::pb;
use serde_json::json;

use crate::cli::Cli;
use crate::error::from_status;

pub(crate) async fn run(cli: &Cli, ids: &[String], as_json: bool) -> Result<u8> {
    let mut client = crate::client::connect(cli).await?;
    let mut events = client
        .wait(pb::WaitRequest { ids: ids.to_vec() })
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
                    super::out(&format!(
                        "{} {}: {}{why}\n",
                        t.id,
                        crate::render::name(&t),
                        crate::json::state_word(t.state)
                    ))?;
                }
            }
            Some(pb::wait_event::Event::Summary(s)) => summary = Some(s),
            None => {}
        }
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
