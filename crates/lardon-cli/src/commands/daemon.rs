//! `lardon daemon`: the daemon in the foreground until Ctrl-C or SIGTERM.

use anyhow::{Context, Result};

use crate::cli::{Cli, DaemonArgs, Enforce};
use crate::engine::{self, DaemonConfig, EnforceMode, ProbeChoice};
use crate::logging;

pub(crate) fn run(cli: &Cli, args: &DaemonArgs) -> Result<u8> {
    let paths = lardon_proto::Paths::resolve(cli.state_dir.as_deref())
        .map_err(|e| crate::error::usage(e.to_string()))?;
    let sink = logging::LogSink::choose(args.log_file.as_deref(), &paths.state_dir);
    let rotation = logging::Rotation { max_bytes: args.log_max_size, keep: args.log_keep };
    logging::init_daemon(args.log_level.as_deref(), &sink, rotation)?;
    let mut config = DaemonConfig::new(paths.state_dir);
    config.socket = Some(cli.socket.clone().unwrap_or(paths.socket));
    config.metrics_addr = args.metrics_addr;
    config.enforce = args.enforce.map(|e| match e {
        Enforce::Off => EnforceMode::Off,
        Enforce::Soft => EnforceMode::Soft,
        Enforce::Hard => EnforceMode::Hard,
    });
    if let Some((memory, cpus)) = args.simulate_host {
        config.probe = ProbeChoice::Fake(lardon::HostProfile::new(memory, cpus));
    }
    if let Some(path) = &args.policy {
        let text = std::fs::read_to_string(path)
            .map_err(|e| crate::error::usage(format!("--policy {}: {e}", path.display())))?;
        config.policy = policy_pairs(&text)
            .map_err(|e| crate::error::usage(format!("--policy {}: {e}", path.display())))?;
    }
    if let Some(broker) = &args.broker {
        if args.broker_heartbeat == 0 {
            return Err(crate::error::usage("--broker-heartbeat: must be more than 0"));
        }
        let mut offload = lardon_daemon::offload::OffloadConfig::new(broker.clone());
        offload.dial = args.security.dial("agent")?;
        offload.heartbeat = std::time::Duration::from_millis(args.broker_heartbeat);
        offload.unreachable_after = std::time::Duration::from_millis(args.broker_timeout);
        config.offload = Some(offload);
    } else if args.security.tls_dir.is_some() || args.security.join_token_file.is_some() {
        return Err(crate::error::usage("--tls-dir/--join-token-file: only with --broker"));
    }
    // One async worker: every handler runs on a blocking thread and the
    // streams only forward events, so a second worker added no capacity,
    // only wake-ups between the two (see lardon_daemon::RUNTIME_WORKERS).
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(lardon_daemon::RUNTIME_WORKERS)
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(async move {
        let shutdown = super::broker::shutdown_signal();
        engine::run(config, shutdown).await.context("daemon")
    })
    .inspect_err(|e| tracing::error!("the daemon stopped: {e:#}"))?;
    tracing::info!("the daemon stopped");
    Ok(0)
}

/// A policy file's `key = value` pairs (in key order; the daemon applies
/// them in its own, as for `lardon policy --set`): every
/// top-level scalar is a policy key (checked when the daemon applies it,
/// naming the key), and the `offload` table's `prefer`, `max_retries` and
/// `wait_ms` become `offload_prefer`, `offload_max_retries` and
/// `offload_wait_ms` (checked here, naming `offload.FIELD`).
///
/// # Errors
/// One line naming the offending field.
pub(crate) fn policy_pairs(text: &str) -> std::result::Result<Vec<(String, String)>, String> {
    use lardon_daemon::settings::{OffloadPrefer, parse_max_retries, parse_wait_ms};
    let table: toml::Table = toml::from_str(text).map_err(|e| e.message().to_owned())?;
    let mut pairs = Vec::new();
    for (key, value) in table {
        if key == "offload" {
            let toml::Value::Table(offload) = value else {
                return Err(
                    "offload: must be a table, e.g. offload = { prefer = \"remote\", max_retries = 1 }"
                        .into(),
                );
            };
            for (field, value) in offload {
                match (field.as_str(), value) {
                    ("prefer", toml::Value::String(p)) => {
                        let prefer: OffloadPrefer = p.parse().map_err(|e| format!("offload.prefer: {e}"))?;
                        pairs.push(("offload_prefer".to_owned(), prefer.to_string()));
                    }
                    ("prefer", _) => {
                        return Err("offload.prefer: must be a string: local, remote or balance".into());
                    }
                    ("max_retries", toml::Value::Integer(n)) => {
                        let n = parse_max_retries(&n.to_string())
                            .map_err(|e| format!("offload.max_retries: {e}"))?;
                        pairs.push(("offload_max_retries".to_owned(), n.to_string()));
                    }
                    ("max_retries", _) => return Err("offload.max_retries: must be a whole number".into()),
                    ("wait_ms", toml::Value::Integer(n)) => {
                        let n = parse_wait_ms(&n.to_string()).map_err(|e| format!("offload.wait_ms: {e}"))?;
                        pairs.push(("offload_wait_ms".to_owned(), n.to_string()));
                    }
                    ("wait_ms", _) => {
                        return Err("offload.wait_ms: must be a whole number of milliseconds".into());
                    }
                    (other, _) => {
                        return Err(format!(
                            "offload.{other}: unknown field (known: prefer, max_retries, wait_ms)"
                        ));
                    }
                }
            }
            continue;
        }
        let text = match value {
            toml::Value::String(s) => s,
            toml::Value::Integer(n) => n.to_string(),
            toml::Value::Float(f) => f.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            _ => return Err(format!("{key}: must be a string or a number")),
        };
        pairs.push((key, text));
    }
    Ok(pairs)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::policy_pairs;

    #[test]
    fn a_policy_file_gives_offload_and_plain_keys_and_names_bad_fields() {
        let pairs = policy_pairs(
            "max_running = 1\noffload = { prefer = \"Remote\", max_retries = 2, wait_ms = 0 }\n",
        )
        .unwrap();
        let want = [
            ("max_running", "1"),
            ("offload_max_retries", "2"),
            ("offload_prefer", "remote"),
            ("offload_wait_ms", "0"),
        ];
        assert_eq!(pairs, want.map(|(k, v)| (k.to_owned(), v.to_owned())));
        for (text, field) in [
            ("offload = { prefer = \"elsewhere\" }", "offload.prefer:"),
            ("offload = { prefer = 3 }", "offload.prefer:"),
            ("offload = { max_retries = -1 }", "offload.max_retries:"),
            ("offload = { max_retries = \"x\" }", "offload.max_retries:"),
            ("offload = { retries = 1 }", "offload.retries:"),
            ("offload = { wait_ms = -1 }", "offload.wait_ms:"),
            ("offload = { wait_ms = \"2s\" }", "offload.wait_ms:"),
            ("offload = 1", "offload:"),
            ("memory_reserve = [1]", "memory_reserve:"),
        ] {
            let e = policy_pairs(text).unwrap_err();
            assert!(e.starts_with(field), "{text}: {e}");
        }
    }
}
