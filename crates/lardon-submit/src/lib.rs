//! # lardon-submit: the submitter side of cluster mode
//!
//! What anything that offloads work to a broker needs (docs/DESIGN.md §14):
//! `lardon cluster submit`, `lardon cc`, and the daemon's offload route.
//! It sits on the pure core (`lardon-cluster-core`) and below the broker
//! and the agent, which reuse its dialling, blob transfer and back-off, so
//! that a submitter never links the broker.
//!
//! * [`client`]: [`client::Submitter`] keeps a `SubmitStream` open,
//!   reconnecting with [`Backoff`], and matches answers by task id; and the
//!   one-shot `status`, `explain` and `watch` calls.
//! * [`dial`]: plain or mutual TLS plus the join token.
//! * [`blobs`]: the client of the broker's content-addressed store.
//! * [`files`]: a shipped task's input files read and its declared outputs
//!   written back, on the submitter's side.
//! * [`broker_uri`], [`unix_ms`]: the address rule and the wall clock that
//!   both submitters and agents use.
#![warn(missing_docs)]

use std::time::Duration;

use thiserror::Error;

pub mod blobs;
pub mod client;
pub mod dial;
pub mod files;

/// Exponential backoff between connection attempts, capped.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    /// The first wait.
    pub initial: Duration,
    /// The longest wait.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { initial: Duration::from_millis(200), max: Duration::from_secs(5) }
    }
}

/// A broker address that is not a URI (it names what was given).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("--broker: `{0}` is not a valid address (expected HOST:PORT or http://HOST:PORT)")]
pub struct BadAddress(pub String);

/// `HOST:PORT` or a URI, as a URI.
///
/// # Errors
/// [`BadAddress`] when it does not parse as one.
pub fn broker_uri(addr: &str) -> Result<String, BadAddress> {
    let uri = if addr.contains("://") { addr.to_owned() } else { format!("http://{addr}") };
    tonic::transport::Endpoint::from_shared(uri.clone()).map_err(|_| BadAddress(addr.to_owned()))?;
    Ok(uri)
}

/// The system's wall clock, Unix milliseconds (0 before the epoch).
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
