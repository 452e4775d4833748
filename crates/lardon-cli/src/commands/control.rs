//! `lardon pause|resume|cancel|restart|remove ID…` and `lardon clean`.

use anyhow::Result;
use lardon_proto::pb;
use serde_json::json;

use crate::cli::Cli;
use crate::error::{from_status, usage};

fn report((verb, done): (&str, &str), resp: pb::TaskActionResponse, as_json: bool) -> Result<u8> {
    if as_json {
        let rows: Vec<_> = resp
            .results
            .iter()
            .map(|r| json!({"id": r.id, "ok": r.ok, "error": r.error, "state": crate::json::state_word(r.state)}))
            .collect();
        crate::json::print(&serde_json::Value::Array(rows))?;
    }
    let mut errors = Vec::new();
    for r in &resp.results {
        if r.ok {
            if !as_json {
                super::out(&format!("{done} {}: {}\n", r.id, crate::json::state_word(r.state)))?;
            }
        } else {
            errors.push(format!("{}: {}", r.id, r.error));
        }
    }
    if errors.is_empty() { Ok(0) } else { Err(usage(format!("{verb}: {}", errors.join("; ")))) }
}

pub(crate) async fn pause(cli: &Cli, ids: &[String], as_json: bool) -> Result<u8> {
    let mut c = crate::client::connect(cli).await?;
    let r = c.pause(pb::PauseRequest { ids: ids.to_vec() }).await.map_err(|s| from_status("pause", s))?;
    report(("pause", "paused"), r.into_inner(), as_json)
}

pub(crate) async fn resume(cli: &Cli, ids: &[String], as_json: bool) -> Result<u8> {
    let mut c = crate::client::connect(cli).await?;
    let r = c.resume(pb::ResumeRequest { ids: ids.to_vec() }).await.map_err(|s| from_status("resume", s))?;
    report(("resume", "resumed"), r.into_inner(), as_json)
}

pub(crate) async fn cancel(cli: &Cli, ids: &[String], grace: Option<u64>, as_json: bool) -> Result<u8> {
    let mut c = crate::client::connect(cli).await?;
    let r = c
        .cancel(pb::CancelRequest { ids: ids.to_vec(), grace_ms: grace })
        .await
        .map_err(|s| from_status("cancel", s))?;
    report(("cancel", "cancelled"), r.into_inner(), as_json)
}

pub(crate) async fn restart(cli: &Cli, ids: &[String], as_json: bool) -> Result<u8> {
    let mut c = crate::client::connect(cli).await?;
    let r =
        c.restart(pb::RestartRequest { ids: ids.to_vec() }).await.map_err(|s| from_status("restart", s))?;
    report(("restart", "restarted"), r.into_inner(), as_json)
}

pub(crate) async fn remove(cli: &Cli, ids: &[String], as_json: bool) -> Result<u8> {
    let mut c = crate::client::connect(cli).await?;
    let r = c.remove(pb::RemoveRequest { ids: ids.to_vec() }).await.map_err(|s| from_status("remove", s))?;
    report(("remove", "removed"), r.into_inner(), as_json)
}

pub(crate) async fn clean(cli: &Cli, successful_only: bool, as_json: bool) -> Result<u8> {
    let mut c = crate::client::connect(cli).await?;
    let r = c
        .clean(pb::CleanRequest { states: Vec::new(), successful_only })
        .await
        .map_err(|s| from_status("clean", s))?
        .into_inner();
    if as_json {
        crate::json::print(&json!({"removed": r.removed}))?;
    } else if r.removed.is_empty() {
        super::out("nothing to clean\n")?;
    } else {
        super::out(&format!("removed {} finished task(s): {}\n", r.removed.len(), r.removed.join(" ")))?;
    }
    Ok(0)
}
