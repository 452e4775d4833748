//! `lardon group add|list|remove`: a group's limits, and what its tasks
//! are doing.

use anyhow::Result;
use lardon_proto::pb;
use serde_json::json;

use crate::cli::{Cli, GroupCommand};
use crate::error::from_status;

pub(crate) async fn run(cli: &Cli, sub: &GroupCommand) -> Result<u8> {
    let mut c = crate::client::connect(cli).await?;
    match sub {
        GroupCommand::Add { name, max_running, mem, cpus } => {
            let limits = pb::GroupLimits { max_running: *max_running, memory: *mem, cpu_millis: *cpus };
            let info = c
                .group_set(pb::GroupSetRequest { name: name.clone(), limits: Some(limits) })
                .await
                .map_err(|s| from_status("group add", s))?
                .into_inner();
            super::out(&format!("group {}: {}\n", info.name, limits_text(info.limits.as_ref())))?;
        }
        GroupCommand::List { json: as_json } => {
            let groups = c
                .group_list(pb::GroupListRequest {})
                .await
                .map_err(|s| from_status("group list", s))?
                .into_inner()
                .groups;
            if *as_json {
                crate::json::print(&serde_json::Value::Array(groups.iter().map(group_json).collect()))?;
            } else {
                super::out(&table(&groups))?;
            }
        }
        GroupCommand::Remove { name } => {
            let r = c
                .group_remove(pb::GroupRemoveRequest { name: name.clone() })
                .await
                .map_err(|s| from_status("group remove", s))?
                .into_inner();
            let what = if r.removed { "limits removed" } else { "had no limits" };
            super::out(&format!("group {name}: {what}\n"))?;
        }
    }
    Ok(0)
}

/// `max_running 2, mem 4.0 GiB, cpus 8`, or `no limits`.
fn limits_text(l: Option<&pb::GroupLimits>) -> String {
    let Some(l) = l else { return "no limits".into() };
    let mut parts = Vec::new();
    if let Some(n) = l.max_running {
        parts.push(format!("max_running {n}"));
    }
    if let Some(m) = l.memory {
        parts.push(format!("mem {}", lardon::format_bytes(m)));
    }
    if let Some(c) = l.cpu_millis {
        parts.push(format!("cpus {}", lardon::format_cpus(c)));
    }
    if parts.is_empty() { "no limits".into() } else { parts.join(", ") }
}

fn count(g: &pb::GroupInfo, state: pb::TaskState) -> u64 {
    g.counts.iter().filter(|c| c.state == state as i32).map(|c| c.count).sum()
}

const STATES: [(pb::TaskState, &str); 6] = [
    (pb::TaskState::Pending, "pending"),
    (pb::TaskState::Running, "running"),
    (pb::TaskState::Paused, "paused"),
    (pb::TaskState::Completed, "completed"),
    (pb::TaskState::Failed, "failed"),
    (pb::TaskState::Cancelled, "cancelled"),
];

fn group_json(g: &pb::GroupInfo) -> serde_json::Value {
    let l = g.limits.unwrap_or_default();
    let counts: serde_json::Map<String, serde_json::Value> =
        STATES.iter().map(|(s, w)| ((*w).to_owned(), json!(count(g, *s)))).collect();
    json!({
        "name": g.name,
        "limits": {"max_running": l.max_running, "memory": l.memory, "cpu_millis": l.cpu_millis},
        "has_limits": g.has_limits,
        "held": {"running": g.running, "memory": g.memory, "cpu_millis": g.cpu_millis},
        "counts": counts,
    })
}

fn table(groups: &[pb::GroupInfo]) -> String {
    if groups.is_empty() {
        return "no groups\n".into();
    }
    let mut out = String::from(
        "GROUP                LIMITS                              HELD              PEND RUN PAUSE DONE FAIL CANC\n",
    );
    for g in groups {
        let held = format!("{} run, {}", g.running, lardon::format_bytes(g.memory));
        out.push_str(&format!(
            "{:<20} {:<35} {:<17} {:>4} {:>3} {:>5} {:>4} {:>4} {:>4}\n",
            g.name,
            limits_text(g.limits.as_ref().filter(|_| g.has_limits)),
            held,
            count(g, pb::TaskState::Pending),
            count(g, pb::TaskState::Running),
            count(g, pb::TaskState::Paused),
            count(g, pb::TaskState::Completed),
            count(g, pb::TaskState::Failed),
            count(g, pb::TaskState::Cancelled),
        ));
    }
    out
}
