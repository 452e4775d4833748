//! The start-up summary: the lines a person reads first in the daemon's log
//! to know what it governs — budgets, enforcement and why, where the policy
//! came from, and the socket.

use lardon::format_bytes;
use lardon_host::BackendKind;

use crate::settings::EnforceMode;

use super::Engine;

/// What the daemon governs, one fact per line, at `info`.
pub(crate) fn start_lines(engine: &Engine, overrides: &[(String, String)]) -> Vec<String> {
    let shared = &engine.shared;
    let profile = shared.governor.profile();
    let policy = shared.governor.policy();
    let settings = shared.settings();
    let info = &shared.info;
    let budget = profile.total_memory.saturating_sub(policy.memory_reserve);
    let pool = match &shared.compute.current() {
        Some(mask) => {
            let cpus: Vec<String> = mask.0.iter().map(u32::to_string).collect();
            format!("{} CPUs [{}]", mask.count(), cpus.join(","))
        }
        None => format!(
            "{} CPUs (simulated host)",
            profile.logical_cpus.saturating_sub(policy.cpu_reserve).max(1)
        ),
    };
    let source = if overrides.is_empty() {
        "the host's defaults".to_owned()
    } else {
        let keys: Vec<String> = overrides.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("the host's defaults with {} persisted override(s): {}", overrides.len(), keys.join(", "))
    };
    vec![
        format!(
            "lardon daemon {} (pid {}) on {}, state dir {}",
            env!("CARGO_PKG_VERSION"),
            std::process::id(),
            info.host,
            info.state_dir.display()
        ),
        format!(
            "budgets: memory {} of {} (reserve {}), compute pool {} of {} logical CPUs",
            format_bytes(budget),
            format_bytes(profile.total_memory),
            format_bytes(policy.memory_reserve),
            pool,
            profile.logical_cpus
        ),
        match info.backend {
            BackendKind::None => {
                format!("enforcement: {} requested, none applies: {}", settings.enforce, info.backend_why)
            }
            backend => format!("enforcement: {} via {backend} ({})", settings.enforce, info.backend_why),
        },
        format!("policy: {source}"),
        format!("listening on {}", info.socket.display()),
    ]
}

/// Logs [`start_lines`] at `info`.
pub(crate) fn log_start(engine: &Engine) {
    let overrides = match engine.shared.reader().policy_overrides() {
        Ok(o) => o,
        Err(e) => {
            tracing::warn!("cannot read the persisted policy overrides: {e}");
            Vec::new()
        }
    };
    let info = &engine.shared.info;
    let unenforced =
        info.backend == BackendKind::None && engine.shared.settings().enforce != EnforceMode::Off;
    for line in start_lines(engine, &overrides) {
        if unenforced && line.starts_with("enforcement:") {
            // A limit was asked for and none can apply: say so where a
            // person looks first.
            tracing::warn!("{line}");
        } else {
            tracing::info!("{line}");
        }
    }
}
