//! `lardon status`, `lardon explain`, `lardon resources`.

use anyhow::Result;
use lardon_proto::pb;
use serde_json::json;

use crate::cli::Cli;
use crate::error::from_status;
use crate::{json, render};

pub(crate) async fn status(cli: &Cli, id: Option<&str>, as_json: bool) -> Result<u8> {
    let mut client = crate::client::connect(cli).await?;
    if let Some(id) = id {
        let task = client
            .get(pb::GetRequest { id: id.to_owned() })
            .await
            .map_err(|s| from_status(&format!("task {id}"), s))?
            .into_inner()
            .task
            .unwrap_or_default();
        if as_json {
            json::print(&json::task(&task))?;
        } else {
            super::out(&render::detail(&task))?;
        }
        return Ok(0);
    }
    let tasks = client
        .list(pb::ListRequest::default())
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
