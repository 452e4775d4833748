//! `lardon pause|resume|cancel|restart|remove ID…` and `lardon clean`.

use anyhow::Result;
use lardon_proto::pb;
use serde_json::json;

use crate::cli::{Cli, GroupIdsArgs, RestartArgs};
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

pub(crate) async fn pause(cli: &Cli, a: &GroupIdsArgs) -> Result<u8> {
    let mut c = crate::client::connect(cli).await?;
    let req = pb::PauseRequest { ids: a.ids.clone(), group: a.group.clone().unwrap_or_default() };
    let r = c.pause(req).await.map_err(|s| from_status("pause", s))?;
    report(("pause", "paused"), r.into_inner(), a.json)
}

pub(crate) async fn resume(cli: &Cli, a: &GroupIdsArgs) -> Result<u8> {
    let mut c = crate::client::connect(cli).await?;
    let req = pb::ResumeRequest { ids: a.ids.clone(), group: a.group.clone().unwrap_or_default() };
    let r = c.resume(req).await.map_err(|s| from_status("resume", s))?;
    report(("resume", "resumed"), r.into_inner(), a.json)
}

pub(crate) async fn cancel(
    cli: &Cli,
    ids: &[String],
    group: Option<&str>,
    grace: Option<u64>,
    as_json: bool,
) -> Result<u8> {
    let mut c = crate::client::connect(cli).await?;
    let r = c
        .cancel(pb::CancelRequest {
            ids: ids.to_vec(),
            grace_ms: grace,
            group: group.unwrap_or_default().to_owned(),
        })
        .await
        .map_err(|s| from_status("cancel", s))?;
    report(("cancel", "cancelled"), r.into_inner(), as_json)
}

pub(crate) async fn restart(cli: &Cli, a: &RestartArgs) -> Result<u8> {
    if a.group.is_some() && !a.failed && !a.cancelled {
        return Err(usage("--group: restart takes a group's tasks only with --failed or --cancelled"));
    }
    let mut c = crate::client::connect(cli).await?;
    let req = pb::RestartRequest {
        ids: a.ids.clone(),
        failed: a.failed,
        cancelled: a.cancelled,
        group: a.group.clone().unwrap_or_default(),
    };
    let r = c.restart(req).await.map_err(|s| from_status("restart", s))?.into_inner();
    if r.results.is_empty() && !a.json {
        super::out("nothing to restart\n")?;
    }
    report(("restart", "restarted"), r, a.json)
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
