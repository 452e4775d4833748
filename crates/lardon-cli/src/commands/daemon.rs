//! `lardon daemon`: the daemon in the foreground until Ctrl-C or SIGTERM.

use anyhow::{Context, Result};

use crate::cli::{Cli, DaemonArgs, Enforce};
use crate::engine::{self, DaemonConfig, EnforceMode, ProbeChoice};
use crate::logging;

pub(crate) fn run(cli: &Cli, args: &DaemonArgs) -> Result<u8> {
    let paths = lardon_proto::Paths::resolve(cli.state_dir.as_deref())
        .map_err(|e| crate::error::usage(e.to_string()))?;
    let sink = logging::LogSink::choose(args.log_file.as_deref(), &paths.state_dir);
    logging::init_daemon(args.log_level.as_deref(), &sink)?;
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
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
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
