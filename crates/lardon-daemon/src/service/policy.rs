//! `GetPolicy` and `SetPolicy`: the policy in effect, key by key, with
//! what is overridden and each key's default.

use lardon_proto::pb;
use tonic::Status;

use super::{status, store_status};
use crate::engine::Engine;
use crate::settings;

/// The policy in effect.
pub(super) fn get(engine: &Engine) -> Result<pb::PolicyResponse, Status> {
    let overrides = engine.policy_overrides().map_err(store_status)?;
    let policy = engine.shared.governor.policy();
    let current = engine.shared.settings();
    let defaults = engine.default_policy();
    let default_settings = settings::DaemonSettings::default();
    let rules = lardon::HostPolicy::explain_defaults(&engine.shared.governor.profile());
    let entries = settings::KEYS
        .iter()
        .map(|(key, help)| pb::PolicyEntry {
            key: (*key).to_owned(),
            value: settings::get(&policy, &current, key).unwrap_or_default(),
            overridden: overrides.iter().any(|(k, _)| k == key),
            default_value: settings::get(&defaults, &default_settings, key).unwrap_or_default(),
            help: (*help).to_owned(),
            default_rule: rules.iter().find(|(k, _)| k == key).map(|(_, r)| r.clone()).unwrap_or_default(),
        })
        .collect();
    Ok(pb::PolicyResponse { entries, generation: engine.shared.governor.generation() })
}

/// Applies the changes (all or none, durable before the reply), then
/// answers with the policy in effect.
pub(super) fn set(engine: &Engine, req: pb::SetPolicyRequest) -> Result<pb::PolicyResponse, Status> {
    let set: Vec<(String, String)> = req.set.into_iter().map(|e| (e.key, e.value)).collect();
    engine.set_policy(&set, &req.reset).map_err(status)?;
    get(engine)
}
