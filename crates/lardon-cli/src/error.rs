//! Errors that decide the exit code, and the one-line rendering of clap's
//! own errors.

use std::fmt;
use std::io;

use clap::error::{ContextKind, ContextValue, ErrorKind};

/// An error with a chosen exit code; anything else exits 1.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Bad flags, units, TOML or estimates (exit 2).
    Usage(String),
    /// The daemon cannot be reached (exit 3); the message says how to start it.
    Unreachable(String),
}

impl Failure {
    pub(crate) fn code(&self) -> u8 {
        match self {
            Failure::Usage(_) => 2,
            Failure::Unreachable(_) => 3,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Usage(m) | Failure::Unreachable(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for Failure {}

/// A usage error (exit 2) as an `anyhow::Error`.
pub(crate) fn usage(message: impl Into<String>) -> anyhow::Error {
    Failure::Usage(message.into()).into()
}

/// True when our closed stdout is in the chain. A broken pipe below a gRPC
/// status or transport error is a connection that failed (a daemon or
/// broker that closed on us, a TLS server refusing a plain client): that
/// is an error to report, never a quiet exit 0.
pub(crate) fn is_broken_pipe(err: &anyhow::Error) -> bool {
    for e in err.chain() {
        if e.is::<tonic::Status>() || e.is::<tonic::transport::Error>() {
            return false;
        }
        let broken = e.downcast_ref::<io::Error>().is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
            // serde_json's writer errors keep the io kind but not the
            // io::Error itself in their source chain.
            || e.downcast_ref::<serde_json::Error>()
                .is_some_and(|j| j.io_error_kind() == Some(io::ErrorKind::BrokenPipe));
        if broken {
            return true;
        }
    }
    false
}

/// Maps a gRPC status to an error with the right exit code.
pub(crate) fn from_status(what: &str, status: tonic::Status) -> anyhow::Error {
    use tonic::Code;
    let msg = status.message().trim().to_owned();
    match status.code() {
        Code::InvalidArgument | Code::NotFound | Code::AlreadyExists | Code::OutOfRange => {
            usage(format!("{what}: {msg}"))
        }
        Code::Unavailable => Failure::Unreachable(format!(
            "{what}: the daemon went away ({msg}); start it with `lardon daemon` (or `lardon daemon &`)"
        ))
        .into(),
        Code::Unimplemented => anyhow::anyhow!("{what}: not supported by this daemon yet ({msg})"),
        _ => anyhow::anyhow!("{what}: {msg}"),
    }
}

/// Prints a clap error: help and version as clap does (exit 0); anything
/// else as ONE line naming the flag, exit 2.
pub(crate) fn clap_exit(err: &clap::Error) -> std::process::ExitCode {
    use std::process::ExitCode;
    match err.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = err.print();
            return ExitCode::SUCCESS;
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = err.print();
            return ExitCode::from(2);
        }
        _ => {}
    }
    eprintln!("error: {}", clap_one_line(err));
    ExitCode::from(2)
}

fn clap_one_line(err: &clap::Error) -> String {
    let ctx = |kind| match err.get(kind) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        Some(ContextValue::Strings(v)) => Some(v.join(", ")),
        _ => None,
    };
    let flag =
        ctx(ContextKind::InvalidArg).map(|a| a.split_whitespace().next().unwrap_or_default().to_owned());
    if err.kind() == ErrorKind::ValueValidation
        && let (Some(flag), Some(source)) = (&flag, std::error::Error::source(err))
    {
        return format!("{flag}: {source}");
    }
    if err.kind() == ErrorKind::MissingRequiredArgument
        && let Some(missing) = ctx(ContextKind::InvalidArg)
    {
        return format!("missing {missing} (see `--help`)");
    }
    // clap's own first line, without its "error: " prefix and tips.
    let rendered = err.render().to_string();
    let first =
        rendered.lines().next().unwrap_or("invalid arguments").trim_start_matches("error: ").to_owned();
    let tip = match err.kind() {
        ErrorKind::UnknownArgument | ErrorKind::InvalidSubcommand => {
            let suggestion = ctx(ContextKind::SuggestedArg).or_else(|| ctx(ContextKind::SuggestedSubcommand));
            match suggestion {
                Some(s) => format!(" (did you mean `{s}`? see `lardon --help`)"),
                None => " (see `lardon --help`)".to_owned(),
            }
        }
        _ => " (see `lardon help`)".to_owned(),
    };
    format!("{first}{tip}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Our closed stdout ends quietly; a connection's broken pipe, under a
    /// gRPC status, is an error (a plain client refused by a TLS broker
    /// once exited 0 with no word).
    #[test]
    fn only_our_closed_stdout_counts_as_a_broken_pipe() {
        let stdout =
            anyhow::Error::new(io::Error::from(io::ErrorKind::BrokenPipe)).context("writing the table");
        assert!(is_broken_pipe(&stdout));
        let network = tonic::Status::from_error(Box::new(io::Error::from(io::ErrorKind::BrokenPipe)));
        assert!(!is_broken_pipe(&anyhow::Error::new(network).context("broker status")));
    }
}
