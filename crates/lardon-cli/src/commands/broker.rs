//! `lardon broker`: the cluster broker in the foreground until Ctrl-C or
//! SIGTERM (docs/DESIGN.md §14).

use std::time::Duration;

use anyhow::{Context, Result};
use lardon_cluster::broker::{self, BrokerConfig};

use crate::cli::{BrokerArgs, ClusterSecurity};
use crate::error::usage;
use crate::logging::{self, LogSink};

pub(crate) fn run(args: &BrokerArgs) -> Result<u8> {
    logging::init_daemon(args.log_level.as_deref(), &LogSink::Stderr, logging::Rotation::default())?;
    if args.heartbeat == 0 {
        return Err(usage("--heartbeat: must be more than 0"));
    }
    let security = &args.security;
    let tls = match &security.tls_dir {
        Some(dir) => Some(
            lardon_tls::Identity::load(dir, security.tls_name.as_deref().unwrap_or("broker"))
                .map_err(|e| usage(format!("--tls-dir: {e}")))?,
        ),
        None => None,
    };
    exposure(args.listen, tls.is_some(), args.insecure)?;
    let demand = args.keda_listen.map(|_| lardon_cluster::keda::DemandBoard::new());
    let metrics = args.metrics_listen.map(|_| broker::MetricsBoard::new());
    let provision = args
        .provision
        .as_deref()
        .map(|f| crate::provision::load(f).map_err(|e| usage(format!("--provision: {e}"))))
        .transpose()?;
    let scaled = args
        .scaled_capability
        .iter()
        .map(|c| lardon_cluster::Capability::parse(c).map_err(|e| usage(format!("--scaled-capability: {e}"))))
        .collect::<Result<Vec<_>>>()?;
    if !scaled.is_empty() && args.keda_listen.is_none() {
        return Err(usage(
            "--scaled-capability: nothing would scale its agents; also give --keda-listen ADDR for KEDA's scaler",
        ));
    }
    let config = BrokerConfig {
        state: args.state.clone(),
        recovery: Duration::from_millis(args.recovery),
        heartbeat: Duration::from_millis(args.heartbeat),
        tls,
        token: security.token()?,
        cache: (args.cache_size > 0).then_some(lardon_cluster::cache::store::CacheLimits {
            blob_bytes: args.cache_size,
            max_blob: args.cache_max_blob.min(args.cache_size),
            result_bytes: args.cache_results_size,
        }),
        demand: demand.clone(),
        metrics: metrics.clone(),
        provision: provision.map(|p| p.config),
        scaled,
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
        if let (Some(addr), Some(board)) = (args.keda_listen, demand) {
            let keda = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("--keda-listen: cannot listen on {addr}"))?;
            tracing::info!("KEDA external scaler on {addr}");
            tokio::spawn(async move {
                if let Err(e) = broker::serve_keda(keda, board, shutdown_signal()).await {
                    tracing::error!("the KEDA scaler stopped: {e}");
                }
            });
        }
        if let (Some(addr), Some(board)) = (args.metrics_listen, metrics) {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("--metrics-listen: cannot listen on {addr}"))?;
            tracing::info!("Prometheus metrics on http://{addr}/metrics");
            tokio::spawn(async move {
                if let Err(e) = broker::serve_metrics(listener, board, shutdown_signal()).await {
                    tracing::error!("the metrics endpoint stopped: {e}");
                }
            });
        }
        if let Some(p) = &config.provision {
            let p = p.provisioner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let caps: Vec<String> = p.capabilities().iter().map(lardon_cluster::Capability::key).collect();
            tracing::info!("provisioning with {} for: {}", p.provider(), caps.join(" "));
        }
        if !config.scaled.is_empty() {
            let caps: Vec<String> = config.scaled.iter().map(lardon_cluster::Capability::key).collect();
            tracing::info!("scaled from zero by KEDA (tasks wait for an agent): {}", caps.join(" "));
        }
        if config.tls.is_some() {
            tracing::info!("mutual TLS: clients need a certificate from the cluster CA");
        }
        broker::serve(listener, config, shutdown_signal()).await.context("broker")
    })?;
    tracing::info!("the broker stopped");
    Ok(0)
}

/// Secure by default: a broker reachable from other machines (any
/// `--listen` address but loopback) speaks mutual TLS unless `--insecure`
/// says the network is trusted, which is logged at warn; whoever reaches a
/// plain broker can run any command on every agent.
fn exposure(listen: std::net::SocketAddr, tls: bool, insecure: bool) -> Result<()> {
    if tls || listen.ip().is_loopback() {
        return Ok(());
    }
    if !insecure {
        return Err(usage(format!(
            "--listen {listen}: a broker on an address other than loopback needs --tls-dir DIR (mutual TLS: \
             `lardon cert init` and `lardon cert issue`), or --insecure on a trusted network"
        )));
    }
    tracing::warn!(
        "--insecure: serving plain gRPC on {listen}: anyone who reaches it can submit tasks to every agent \
         and read their results"
    );
    Ok(())
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

impl ClusterSecurity {
    /// The join token, read from --join-token-file; refused without
    /// --tls-dir, where it would travel in clear for anyone to copy.
    pub(crate) fn token(&self) -> Result<Option<lardon_tls::JoinToken>> {
        if self.join_token_file.is_some() && self.tls_dir.is_none() {
            return Err(usage(
                "--join-token-file: a join token without --tls-dir would travel in clear; give --tls-dir DIR too",
            ));
        }
        self.join_token_file
            .as_deref()
            .map(|f| lardon_tls::JoinToken::load(f).map_err(|e| usage(format!("--join-token-file: {e}"))))
            .transpose()
    }

    /// How a peer dials the broker: `default_name` is the certificate's
    /// name in --tls-dir unless --tls-name says otherwise.
    pub(crate) fn dial(&self, default_name: &str) -> Result<lardon_submit::dial::Dial> {
        let tls = match &self.tls_dir {
            Some(dir) => Some(
                lardon_tls::Identity::load(dir, self.tls_name.as_deref().unwrap_or(default_name))
                    .map_err(|e| usage(format!("--tls-dir: {e}")))?,
            ),
            None => None,
        };
        Ok(lardon_submit::dial::Dial { tls, token: self.token()? })
    }
}
