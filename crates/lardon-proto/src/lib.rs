//! # lardon-proto: the gRPC API of the Lardon daemon
//!
//! [`pb`] holds the code generated from `proto/lardon/v1/daemon.proto`
//! (service `lardon.v1.Lardon`, docs/DESIGN.md §10); [`cluster`] the code of
//! `proto/lardon/v1/cluster.proto` (service `lardon.cluster.v1.Broker`,
//! docs/DESIGN.md §14). This crate also knows
//! where the daemon's socket lives ([`paths`]) and how to dial it
//! ([`connect`]), so the daemon and every client agree on both.
//!
//! Task ids are opaque strings at this boundary (unique across hosts, for
//! the cluster mode of docs/DESIGN.md §14).
#![warn(missing_docs)]

#[doc(hidden)]
pub mod fuzzing;
pub mod paths;

use std::io;
use std::path::{Path, PathBuf};

use hyper_util::rt::TokioIo;
use thiserror::Error;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

pub use paths::{NoStateDir, Paths, SOCKET_FILE};

/// Generated messages, enums, client ([`pb::lardon_client::LardonClient`])
/// and server ([`pb::lardon_server::LardonServer`]).
#[allow(
    missing_docs,
    unreachable_pub,
    missing_debug_implementations,
    clippy::all,
    clippy::pedantic,
    clippy::unwrap_used,
    clippy::expect_used
)]
pub mod pb {
    tonic::include_proto!("lardon.v1");
}

impl pb::HookRun {
    /// How this hook run ended, in words (`exited 0 after 12 ms`, `timed
    /// out …`, `did not start: …`; `pending`/`running` while it has not):
    /// the one phrasing `status` and `explain --history` both show.
    #[must_use]
    pub fn outcome_phrase(&self) -> String {
        match (self.status.as_str(), self.outcome.as_str()) {
            ("done", "exited") => {
                format!("exited {} after {} ms", self.exit_code.unwrap_or(-1), self.duration_ms)
            }
            ("done", "signalled") => {
                format!("killed by signal {} after {} ms", self.exit_code.unwrap_or(0), self.duration_ms)
            }
            ("done", "timed_out") => {
                format!("timed out after {} ms (its process group killed)", self.duration_ms)
            }
            ("done", _) => format!("did not start: {}", self.error),
            (status, _) => status.to_owned(),
        }
    }
}

/// Generated code of `proto/lardon/v1/cluster.proto` (package
/// `lardon.cluster.v1`, docs/DESIGN.md §14): the broker's service
/// ([`cluster::broker_server::BrokerServer`],
/// [`cluster::broker_client::BrokerClient`]) and its messages. Validation of
/// what a peer sends lives in the cluster's core (`lardon-cluster-core`'s
/// `wire`), which owns the rules.
#[allow(
    missing_docs,
    unreachable_pub,
    missing_debug_implementations,
    clippy::all,
    clippy::pedantic,
    clippy::unwrap_used,
    clippy::expect_used
)]
pub mod cluster {
    tonic::include_proto!("lardon.cluster.v1");
}

/// KEDA's external-scaler interface (`proto/externalscaler/`): the
/// broker serves [`keda::external_scaler_server::ExternalScaler`] so that
/// KEDA scales agents from Lardon's queued demand.
#[allow(
    missing_docs,
    unreachable_pub,
    missing_debug_implementations,
    clippy::all,
    clippy::pedantic,
    clippy::unwrap_used,
    clippy::expect_used
)]
pub mod keda {
    tonic::include_proto!("externalscaler");
}

pub use pb::lardon_client::LardonClient;
pub use pb::lardon_server::{Lardon, LardonServer};

/// Why a client could not reach the daemon.
#[derive(Debug, Error)]
pub enum ConnectError {
    /// Nothing answers on the socket (no daemon, or a stale socket file).
    #[error("cannot reach the lardon daemon at {}: {source} (start it with `lardon daemon`)", path.display())]
    Unreachable {
        /// The socket dialled.
        path: PathBuf,
        /// What the transport said.
        #[source]
        source: tonic::transport::Error,
    },
    /// No state dir could be resolved, so there is no default socket.
    #[error(transparent)]
    NoStateDir(#[from] paths::NoStateDir),
}

/// The URI given to tonic; never resolved, since the connector dials the
/// Unix socket instead.
const PLACEHOLDER_URI: &str = "http://lardon.invalid";

/// Dials the daemon's Unix socket at `path` and returns a ready client.
///
/// The connection is made now (so an absent daemon is reported here, not
/// at the first call) and is re-dialled by tonic if it drops.
///
/// # Errors
/// [`ConnectError::Unreachable`] when nothing accepts on `path`.
pub async fn connect(path: impl AsRef<Path>) -> Result<LardonClient<Channel>, ConnectError> {
    let path = path.as_ref().to_path_buf();
    let dial = path.clone();
    let connector = tower::service_fn(move |_: Uri| {
        let dial = dial.clone();
        async move { Ok::<_, io::Error>(TokioIo::new(UnixStream::connect(dial).await?)) }
    });
    let channel = Endpoint::from_static(PLACEHOLDER_URI)
        .connect_with_connector(connector)
        .await
        .map_err(|source| ConnectError::Unreachable { path, source })?;
    Ok(LardonClient::new(channel))
}

/// Dials the daemon of `state_dir` (the `--state-dir` flag, if any), with
/// the socket found as [`Paths::resolve`] says.
///
/// # Errors
/// [`ConnectError::NoStateDir`], [`ConnectError::Unreachable`].
pub async fn connect_default(state_dir: Option<&Path>) -> Result<LardonClient<Channel>, ConnectError> {
    let paths = Paths::resolve(state_dir)?;
    connect(paths.socket).await
}

/// A task state as the lower-case word the CLI prints (`pending`, …).
pub fn task_state_word(state: pb::TaskState) -> &'static str {
    match state {
        pb::TaskState::Unspecified => "unknown",
        pb::TaskState::Pending => "pending",
        pb::TaskState::Running => "running",
        pb::TaskState::Paused => "paused",
        pb::TaskState::Completed => "completed",
        pb::TaskState::Failed => "failed",
        pb::TaskState::Cancelled => "cancelled",
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use pb::TaskState;

    #[test]
    fn state_words() {
        assert_eq!(task_state_word(TaskState::Pending), "pending");
        assert_eq!(task_state_word(TaskState::Cancelled), "cancelled");
        assert_eq!(TaskState::from_str_name("TASK_STATE_PAUSED"), Some(TaskState::Paused));
    }

    #[tokio::test]
    async fn connect_to_nothing_says_how_to_start() {
        let dir = tempfile::tempdir().unwrap();
        let err = connect(dir.path().join("absent.sock")).await.unwrap_err();
        let text = err.to_string();
        assert!(text.contains("absent.sock"), "{text}");
        assert!(text.contains("lardon daemon"), "{text}");
    }
}
