//! `lardon broker`: the cluster broker in the foreground until Ctrl-C or
//! SIGTERM (docs/DESIGN.md §14).

use std::time::Duration;

use anyhow::{Context, Result};
use lardon_cluster::broker::{self, BrokerConfig};

use crate::cli::BrokerArgs;
use crate::logging::{self, LogSink};

pub(crate) fn run(args: &BrokerArgs) -> Result<u8> {
    logging::init_daemon(args.log_level.as_deref(), &LogSink::Stderr)?;
    if args.heartbeat == 0 {
        return Err(crate::error::usage("--heartbeat: must be more than 0"));
    }
    let config = BrokerConfig {
        state: args.state.clone(),
        recovery: Duration::from_millis(args.recovery),
        heartbeat: Duration::from_millis(args.heartbeat),
        ..BrokerConfig::default()
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("--listen: cannot listen on {}", args.listen))?;
        let local = listener.local_addr().map_or_else(|_| args.listen.to_string(), |a| a.to_string());
        match &config.state {
            Some(dir) => tracing::info!("broker listening on {local}, state in {}", dir.display()),
            None => {
                tracing::info!("broker listening on {local}, state in memory (lost at exit; see --state)")
            }
        }
        broker::serve(listener, config, shutdown_signal()).await.context("broker")
    })?;
    tracing::info!("the broker stopped");
    Ok(0)
}

/// Ctrl-C or SIGTERM.
pub(crate) async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}

/// This host's name as an id part (characters outside the id set become
/// `-`), `host` when unreadable.
pub(crate) fn host_id() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let clean: String = name
        .trim()
        .chars()
        .take(64)
        .map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '-' })
        .collect();
    if clean.is_empty() { "host".to_owned() } else { clean }
}
