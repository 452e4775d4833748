//! `lardon status`, `lardon explain`, `lardon resources`.

use anyhow::Result;
use lardon_proto::pb;
use serde_json::json;

use crate::cli::Cli;
use crate::error::from_status;
use crate::{json, render};

pub(crate) async fn status(
    cli: &Cli,
    id: Option<&str>,
    group: Option<&str>,
    as_json: bool,
    show_env: bool,
) -> Result<u8> {
    let mut client = crate::client::connect(cli).await?;
    if let Some(id) = id {
        let resp = client
            .get(pb::GetRequest { id: id.to_owned(), env_values: show_env })
            .await
            .map_err(|s| from_status(&format!("task {id}"), s))?
            .into_inner();
        let task = resp.task.clone().unwrap_or_default();
        if as_json {
            let mut j = json::task(&task);
            if let Some(map) = j.as_object_mut() {
                map.insert("environment".into(), env_json(&resp));
            }
            json::print(&j)?;
        } else {
            let mut text = render::detail(&task);
            text.push_str(&env_text(&resp));
            super::out(&text)?;
        }
        return Ok(0);
    }
    let tasks = client
        .list(pb::ListRequest { group: group.unwrap_or_default().to_owned(), ..Default::default() })
        .await
        .map_err(|s| from_status("status", s))?
        .into_inner()
        .tasks;
    if as_json {
        json::print(&serde_json::Value::Array(tasks.iter().map(json::task).collect()))?;
    } else {
        super::out(&render::table(&tasks))?;
    }
    Ok(0)
}

/// `environment` of `status ID --json`: whose it is, and the names that
/// differ from the daemon's (`{NAME: VALUE | null}` only when the values
/// were asked for: a value never travels otherwise).
fn env_json(resp: &pb::GetResponse) -> serde_json::Value {
    let names: Vec<&str> = resp.env_differs.iter().map(|d| d.name.as_str()).collect();
    let values = resp.env_differs.iter().any(|d| d.value.is_some());
    let mut out = json!({
        "source": if resp.submit_env { "submitter" } else { "daemon" },
        "differs_from_daemon": names,
    });
    if values && let Some(map) = out.as_object_mut() {
        let v: serde_json::Map<String, serde_json::Value> =
            resp.env_differs.iter().map(|d| (d.name.clone(), json!(d.value))).collect();
        map.insert("values".into(), serde_json::Value::Object(v));
    }
    out
}

/// The detail view's environment lines: names (with values when asked
/// for), `(unset)` for a variable only the daemon sets.
fn env_text(resp: &pb::GetResponse) -> String {
    if !resp.submit_env {
        return "Environment: the daemon's\n".to_owned();
    }
    if resp.env_differs.is_empty() {
        return "Environment: the submitter's (the same as the daemon's)\n".to_owned();
    }
    let n = resp.env_differs.len();
    let mut text = format!(
        "Environment: the submitter's; {n} variable{} differ{} from the daemon's:\n",
        if n == 1 { "" } else { "s" },
        if n == 1 { "s" } else { "" }
    );
    for d in &resp.env_differs {
        match (&d.value, d.unset) {
            (_, true) => text.push_str(&format!("  {} (unset)\n", d.name)),
            (Some(v), false) => text.push_str(&format!("  {}={v}\n", d.name)),
            (None, false) => text.push_str(&format!("  {}\n", d.name)),
        }
    }
    text
}

pub(crate) async fn explain(cli: &Cli, id: &str, history: bool, as_json: bool) -> Result<u8> {
    let mut client = crate::client::connect(cli).await?;
    let r = client
        .explain(pb::ExplainRequest { id: id.to_owned(), history })
        .await
        .map_err(|s| from_status(&format!("task {id}"), s))?
        .into_inner();
    if as_json {
        let n = r.needs.clone().unwrap_or_default();
        json::print(&json!({
            "task": r.task.as_ref().map(json::task),
            "last_decision": json::decision(r.last_decision.as_ref()),
            "estimate": json::estimate(r.estimate.as_ref()),
            "needs": {
                "memory_at_batch_min": n.memory_at_batch_min, "memory_at_batch_max": n.memory_at_batch_max,
                "gpu_memory_at_batch_min": n.gpu_memory_at_batch_min, "gpu_memory_at_batch_max": n.gpu_memory_at_batch_max,
                "adaptive_batch_max": n.adaptive_batch_max, "estimate_error": n.estimate_error,
            },
            "availability": json::availability(r.availability.as_ref()),
            "learned": crate::course::learned_json(r.task.as_ref().and_then(|t| t.learned.as_ref())),
            "history": if history { crate::course::history_json(&r.history) } else { serde_json::Value::Null },
        }))?;
    } else {
        let mut text = render::explain(&r);
        if history {
            text.push('\n');
            text.push_str(&crate::course::history_text(&r.history));
        }
        super::out(&text)?;
    }
    Ok(0)
}

pub(crate) async fn resources(cli: &Cli, as_json: bool) -> Result<u8> {
    let mut client = crate::client::connect(cli).await?;
    let a = client
        .resources(pb::ResourcesRequest {})
        .await
        .map_err(|s| from_status("resources", s))?
        .into_inner()
        .availability
        .unwrap_or_default();
    if as_json {
        json::print(&json::availability(Some(&a)))?;
    } else {
        super::out(&render::resources(&a))?;
    }
    Ok(0)
}
