//! Dialling the daemon: socket resolution and the "how to start it" hint.

use std::path::{Path, PathBuf};

use anyhow::Result;
use lardon_proto::{LardonClient, Paths};
use tonic::transport::Channel;

use crate::cli::Cli;
use crate::error::Failure;

pub(crate) type Client = LardonClient<Channel>;

/// The socket `cli` points at: `--socket`, else as [`Paths::resolve`] says.
pub(crate) fn socket_path(cli_state: Option<&Path>, cli_socket: Option<&Path>) -> Result<PathBuf> {
    if let Some(s) = cli_socket {
        return Ok(s.to_path_buf());
    }
    Ok(Paths::resolve(cli_state).map_err(|e| crate::error::usage(e.to_string()))?.socket)
}

/// Connects, or fails with exit code 3 and a hint naming the command to run.
pub(crate) async fn connect(cli: &Cli) -> Result<Client> {
    let socket = socket_path(cli.state_dir.as_deref(), cli.socket.as_deref())?;
    connect_to(&socket, cli.state_dir.as_deref()).await
}

pub(crate) async fn connect_to(socket: &Path, state_dir: Option<&Path>) -> Result<Client> {
    lardon_proto::connect(socket).await.map_err(|_| unreachable(socket, state_dir))
}

/// Exit 3, naming the socket and the command that starts a daemon there.
pub(crate) fn unreachable(socket: &Path, state_dir: Option<&Path>) -> anyhow::Error {
    let flag = state_dir.map(|d| format!(" --state-dir {}", d.display())).unwrap_or_default();
    Failure::Unreachable(format!(
        "cannot reach the lardon daemon at {}: start it with `lardon daemon{flag}` \
         (or `lardon daemon{flag} &` to keep this shell)",
        socket.display()
    ))
    .into()
}
