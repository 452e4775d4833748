//! Security of a Lardon cluster (docs/DESIGN.md §14): a private
//! certificate authority, the certificates it issues to the broker and to
//! its clients (agents, offloading daemons), mutual-TLS configurations for
//! tonic, and join tokens.
//!
//! The rules, each enforced here and tested over real loopback TLS:
//! * a broker accepts only clients presenting a certificate issued by the
//!   cluster's CA ([`Identity::server_config`] requires one);
//! * a client trusts only a broker certificate from that CA
//!   ([`Identity::client_config`]);
//! * on top of that, a broker may demand a join token in each request's
//!   metadata ([`TokenCheck`]); a missing or wrong one is refused with
//!   `UNAUTHENTICATED`, compared in constant time;
//! * private keys and tokens are written readable by their owner only
//!   (mode 0600) and never overwritten.

mod ca;
mod token;

pub use ca::{CA_CERT, Identity, Role, init_ca, issue};
pub use token::{JoinToken, TOKEN_HEADER, TokenAttach, TokenCheck};

use std::path::PathBuf;

/// Why a certificate or token operation failed. Each names the file or
/// the field at fault, and what to do.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A file that would be overwritten already exists.
    #[error("{0} already exists; move it away first (certificates and keys are never overwritten)")]
    Exists(PathBuf),
    /// A required file is missing.
    #[error("{path} is missing; {hint}")]
    Missing {
        /// The file.
        path: PathBuf,
        /// What creates it.
        hint: &'static str,
    },
    /// An argument is not acceptable.
    #[error("{field}: {message}")]
    Invalid {
        /// The argument's name.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
    /// Certificate generation or parsing failed.
    #[error("{what}: {message}")]
    Certificate {
        /// What was being done.
        what: &'static str,
        /// rcgen's or rustls' message.
        message: String,
    },
    /// The system's random source failed.
    #[error("no randomness for a {0}: {1}")]
    Random(&'static str, String),
}
