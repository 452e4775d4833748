//! The crate's error type for detection and enforcement.

use std::io;
use std::path::PathBuf;

use thiserror::Error;

use crate::parse::ParseError;

/// Why host detection or enforcement failed.
#[derive(Debug, Error)]
pub enum HostError {
    /// A file could not be read, written or created.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done (`read`, `write`, `mkdir` …).
        op: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A file was read but its content was malformed.
    #[error("malformed {path}: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        #[source]
        source: ParseError,
    },
    /// A system call failed.
    #[error("{call}: {source}")]
    Sys {
        /// The call (`sched_setaffinity` …).
        call: &'static str,
        /// The errno.
        #[source]
        source: nix::Error,
    },
    /// The cgroup hierarchy lacks a controller the operation needs.
    #[error("controller {controller} is not available in {path}")]
    MissingController {
        /// `memory`, `cpu` …
        controller: &'static str,
        /// The cgroup directory.
        path: PathBuf,
    },
    /// A task name unfit for a cgroup directory.
    #[error("invalid task name {0:?}: use 1-64 characters of [A-Za-z0-9._-], not starting with '.'")]
    InvalidName(String),
    /// The operation is not offered by this backend.
    #[error("{0}")]
    Unsupported(String),
}

impl HostError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        HostError::Io { op, path: path.into(), source }
    }

    pub(crate) fn sys(call: &'static str, source: nix::Error) -> Self {
        HostError::Sys { call, source }
    }
}
