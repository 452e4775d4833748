//! One module per verb; [`dispatch`] picks it and returns the exit code.

mod agent;
mod broker;
mod cc;
mod cert;
mod cluster;
mod cluster_watch;
mod control;
mod daemon;
mod exec;
mod group;
mod log;
mod policy;
pub(crate) mod progress;
mod report;
mod run;
mod scratch;
pub(crate) mod spec;
mod status;
pub(crate) mod submit;
mod wait;

use std::future::Future;

use anyhow::{Context, Result};
use clap::CommandFactory;

use crate::cli::{Cli, Command};

/// Runs the verb; `Ok(code)` is the exit code (0, or 1 when a task failed).
pub(crate) fn dispatch(cli: Cli) -> Result<u8> {
    match &cli.command {
        Command::Daemon(args) => daemon::run(&cli, args),
        Command::Completions { shell } => {
            let mut cmd = Cli::command();
            let mut script = Vec::new();
            clap_complete::generate(*shell, &mut cmd, "lardon", &mut script);
            out(&String::from_utf8_lossy(&script))?;
            Ok(0)
        }
        Command::Top { no_color, cluster: true, broker, security } => {
            top_cluster(broker, *no_color, security)
        }
        Command::Top { no_color, .. } => top(&cli, *no_color),
        Command::Exercise(args) => crate::exercise::run(args),
        Command::Exec(args) => exec::run(args),
        Command::Run { file, plain, fresh } => run::run(&cli, file, *plain, *fresh),
        Command::Submit(args) => block_on(submit::run(&cli, args)),
        Command::Status { id, group, json, show_env } => {
            block_on(status::status(&cli, id.as_deref(), group.as_deref(), *json, *show_env))
        }
        Command::Explain { id, history, json } => block_on(status::explain(&cli, id, *history, *json)),
        Command::Resources { json } => block_on(status::resources(&cli, *json)),
        Command::Log { id, follow, stderr, stdout, tail, head, tail_bytes } => block_on(log::run(
            &cli,
            id,
            *follow,
            (*stdout, *stderr),
            log::Lines { tail: *tail, head: *head, tail_bytes: *tail_bytes },
        )),
        Command::Pause(a) => block_on(control::pause(&cli, a)),
        Command::Resume(a) => block_on(control::resume(&cli, a)),
        Command::Cancel { ids, group, grace, json } => {
            block_on(control::cancel(&cli, ids, group.as_deref(), *grace, *json))
        }
        Command::Restart(a) => block_on(control::restart(&cli, a)),
        Command::Group(sub) => block_on(group::run(&cli, sub)),
        Command::Remove(a) => block_on(control::remove(&cli, &a.ids, a.json)),
        Command::Clean { successful_only, json } => block_on(control::clean(&cli, *successful_only, *json)),
        Command::Wait { ids, group, json } => block_on(wait::run(&cli, ids, group.as_deref(), *json)),
        Command::Report(args) => report::run(&cli, args),
        Command::Policy { set, reset, json } => block_on(policy::run(&cli, set, reset, *json)),
        Command::Progress { progress, message } => block_on(progress::run(*progress, message.as_deref())),
        Command::Scratch(sub) => block_on(scratch::run(&cli, sub)),
        Command::Broker(args) => broker::run(args),
        Command::Agent(args) => agent::run(args),
        Command::Cluster(sub) => block_on(cluster::run(sub)),
        Command::Cert(sub) => cert::run(sub),
        Command::Cc(args) => cc::run(args),
    }
}

/// `lardon top`: the dashboard of the lardon-top crate.
fn top(cli: &Cli, no_color: bool) -> Result<u8> {
    let socket = crate::client::socket_path(cli.state_dir.as_deref(), cli.socket.as_deref())?;
    // Unreachable is exit 3 even without a terminal, as for every verb.
    block_on(async { crate::client::connect_to(&socket, cli.state_dir.as_deref()).await.map(|_| 0) })?;
    match lardon_top::run_top(lardon_top::TopOptions { socket: socket.clone(), no_color }) {
        Ok(()) => Ok(0),
        // The same message and exit code 3 as every other verb.
        Err(lardon_top::TopError::Connect(_)) => {
            Err(crate::client::unreachable(&socket, cli.state_dir.as_deref()))
        }
        Err(lardon_top::TopError::NotATerminal) => Err(crate::error::usage(
            "`lardon top` needs a terminal; use `lardon status` or `lardon resources` otherwise",
        )),
        Err(e) => Err(anyhow::Error::new(e).context("lardon top")),
    }
}

/// `lardon top --cluster`: the broker's view, following its `Watch`
/// stream.
fn top_cluster(broker: &str, no_color: bool, security: &crate::cli::ClusterSecurity) -> Result<u8> {
    use tokio_stream::StreamExt as _;
    let dial = security.dial("agent")?;
    lardon_submit::broker_uri(broker).map_err(|e| crate::error::usage(e.to_string()))?;
    let addr = broker.to_owned();
    let subscribe: lardon_top::cluster::Subscribe = Box::new(move || {
        let (addr, dial) = (addr.clone(), dial.clone());
        Box::pin(async move {
            let stream = lardon_submit::client::watch(&addr, &dial, TOP_INTERVAL_MS)
                .await
                .map_err(|e| e.to_string())?;
            let events: lardon_top::cluster::Events =
                Box::pin(stream.map(|r| r.map_err(|s| format!("broker: {}", s.message()))));
            Ok(events)
        })
    });
    let options = lardon_top::cluster::ClusterTopOptions { broker: broker.to_owned(), no_color };
    match lardon_top::cluster::run_cluster_top(options, subscribe) {
        Ok(()) => Ok(0),
        Err(lardon_top::TopError::Broker(why)) => Err(crate::error::Failure::Unreachable(format!(
            "{why} (start one with `lardon broker --listen ADDR`)"
        ))
        .into()),
        Err(lardon_top::TopError::NotATerminal) => Err(crate::error::usage(
            "`lardon top --cluster` needs a terminal; use `lardon cluster status` otherwise",
        )),
        Err(e) => Err(anyhow::Error::new(e).context("lardon top --cluster")),
    }
}

/// Least time between two redraws of `lardon top --cluster` from the
/// broker's events (changes closer together are coalesced by the broker).
const TOP_INTERVAL_MS: u32 = 250;

/// Client verbs run on a single-threaded runtime: they are one RPC or one
/// stream, and the host's cores belong to the tasks.
pub(crate) fn block_on<F: Future<Output = Result<u8>>>(fut: F) -> Result<u8> {
    let rt =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("starting the runtime")?;
    rt.block_on(fut)
}

/// Writes `text` to stdout, reporting a closed pipe as an error (handled
/// quietly by `main`).
pub(crate) fn out(text: &str) -> Result<()> {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    o.write_all(text.as_bytes())?;
    o.flush()?;
    Ok(())
}
