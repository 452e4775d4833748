//! `lardon broker`: the gRPC service around the [`Router`](crate::Router)
//! (docs/DESIGN.md §14). One task owns the router and the SQLite
//! [`Store`]; each agent's and submitter's stream is read by its own task
//! that validates every message ([`crate::wire`]) and forwards it to the
//! owner over a channel, so routing stays single-threaded and
//! deterministic while streams come and go.
//!
//! After a restart the broker reads its live tasks back: queued ones wait
//! on their routes, in-flight ones are held for their agent, which
//! reconnects and says hello with the ids it still runs. An agent that
//! does not come back within the recovery window loses its tasks to the
//! queue (one more attempt each); a route no agent serves by then is
//! handed back to its submitters to run locally.

mod core;
#[cfg(test)]
mod core_tests;
mod service;

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use lardon_proto::cluster::broker_server::BrokerServer;
use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_stream::wrappers::TcpListenerStream;

use crate::store::{Store, StoreError};

pub use service::BrokerService;

/// How a broker runs.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// Where its SQLite state lives (`None`: in memory, lost at exit).
    pub state: Option<PathBuf>,
    /// How long agents that held tasks before a restart have to say hello
    /// again before their tasks are queued elsewhere.
    pub recovery: Duration,
    /// How often heartbeats go down each stream; a peer silent for three
    /// of these is taken as lost.
    pub heartbeat: Duration,
    /// Seed of the router's random choices.
    pub seed: u64,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            state: None,
            recovery: Duration::from_secs(15),
            heartbeat: Duration::from_secs(5),
            seed: 0x1a2d_0b0c,
        }
    }
}

/// The broker could not start or serve.
#[derive(Debug, Error)]
pub enum BrokerError {
    /// Its state could not be opened or read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The gRPC server failed.
    #[error("broker: serving gRPC: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// Starts the owner task (restoring the state) and returns the service to
/// mount. Must be called inside a Tokio runtime.
///
/// # Errors
/// [`BrokerError::Store`] when the state cannot be opened or read.
pub fn start(config: &BrokerConfig) -> Result<BrokerService, BrokerError> {
    let store = match &config.state {
        Some(dir) => Store::open(dir)?,
        None => Store::in_memory()?,
    };
    let (tx, mut rx) = mpsc::channel(1024);
    let (mut core, restored) = core::Core::restore(store, config.seed, Some(tx.clone()))?;
    if restored {
        let tx = tx.clone();
        let window = config.recovery;
        tokio::spawn(async move {
            tokio::time::sleep(window).await;
            let _ = tx.send(core::Input::RecoveryOver).await;
        });
    }
    tokio::spawn(async move {
        while let Some(input) = rx.recv().await {
            core.handle(input);
        }
    });
    Ok(BrokerService::new(tx, config.heartbeat))
}

/// Serves the broker on `listener` until `shutdown` resolves.
///
/// # Errors
/// [`BrokerError`] when the state cannot be opened or the server fails.
pub async fn serve(
    listener: TcpListener,
    config: BrokerConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), BrokerError> {
    let service = start(&config)?;
    tonic::transport::Server::builder()
        .add_service(BrokerServer::new(service))
        .serve_with_incoming_shutdown(TcpListenerStream::new(listener), shutdown)
        .await?;
    Ok(())
}
