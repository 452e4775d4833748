//! `lardon policy [--set k=v]… [--reset k]…`.

use anyhow::Result;
use lardon_proto::pb;
use serde_json::json;

use crate::cli::Cli;
use crate::error::from_status;

pub(crate) async fn run(cli: &Cli, set: &[(String, String)], reset: &[String], as_json: bool) -> Result<u8> {
    let mut client = crate::client::connect(cli).await?;
    let resp = if set.is_empty() && reset.is_empty() {
        client.get_policy(pb::GetPolicyRequest {}).await.map_err(|s| from_status("policy", s))?.into_inner()
    } else {
        let req = pb::SetPolicyRequest {
            set: set
                .iter()
                .map(|(k, v)| pb::PolicyEntry { key: k.clone(), value: v.clone(), ..Default::default() })
                .collect(),
            reset: reset.to_vec(),
        };
        client.set_policy(req).await.map_err(|s| from_status("--set", s))?.into_inner()
    };
    if as_json {
        let entries: Vec<_> = resp
            .entries
            .iter()
            .map(|e| json!({"key": e.key, "value": e.value, "overridden": e.overridden, "default": e.default_value, "default_rule": e.default_rule, "help": e.help}))
            .collect();
        crate::json::print(&json!({"generation": resp.generation, "entries": entries}))?;
        return Ok(0);
    }
    let kw = resp.entries.iter().map(|e| e.key.len()).max().unwrap_or(3);
    let vw = resp.entries.iter().map(|e| e.value.len()).max().unwrap_or(5);
    let mut text = String::new();
    for e in &resp.entries {
        // Derived defaults say how they follow from this host's figures.
        let rule = if e.default_rule.is_empty() { String::new() } else { format!(": {}", e.default_rule) };
        let mark = if e.overridden {
            format!("(set; default {}{rule})", e.default_value)
        } else {
            format!("(default{rule})")
        };
        text.push_str(&format!("{:<kw$}  {:<vw$}  {mark}  {}\n", e.key, e.value, e.help));
    }
    super::out(&text)?;
    Ok(0)
}
