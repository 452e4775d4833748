//! The `lardon` command line as a library: the binary's `main` calls
//! [`main`]; [`fuzzing`] holds the harnesses of the CLI's outside inputs
//! (flags and workload files). Parse the command line, dispatch to one
//! verb, and turn the outcome into an exit code (docs/DESIGN.md §10):
//! 0 success, 1 a task failed, 2 usage or input error, 3 daemon unreachable.
//! A closed stdout (`lardon status | head`) ends quietly with 0.

/// `println!` that ignores a closed stdout (`lardon run … | head`):
/// progress lines are worth nothing once nobody reads them.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}
pub(crate) use say;

mod cli;
mod client;
mod commands;
mod course;
mod each;
mod engine;
mod error;
mod exercise;
mod json;
mod logging;
mod parse;
mod provision;
mod render;
mod report;
mod workload;

pub mod fuzzing;

use std::process::ExitCode;

use clap::Parser;

use crate::error::Failure;

/// Whether `args` (with `lardon` first) is a valid command line, without
/// running it; the error is clap's message. Deployment files (Kubernetes
/// manifests, systemd units) are checked with it against this build.
///
/// # Errors
/// The parser's message for an invalid command line.
pub fn check_args<I, T>(args: I) -> Result<(), String>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::Parser as _;
    cli::Cli::try_parse_from(args).map(drop).map_err(|e| e.to_string())
}

/// Runs the `lardon` command line from the process's arguments; returns
/// its exit code.
#[must_use]
pub fn main() -> ExitCode {
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return error::clap_exit(&err),
    };
    match commands::dispatch(cli) {
        Ok(code) => ExitCode::from(code),
        Err(err) => report(&err),
    }
}

fn report(err: &anyhow::Error) -> ExitCode {
    if error::is_broken_pipe(err) {
        return ExitCode::SUCCESS;
    }
    let code = err.downcast_ref::<Failure>().map_or(1, Failure::code);
    // One line: the context chain joined, as ripgrep and cargo do.
    let text = format!("{err:#}").replace('\n', " ");
    eprintln!("error: {text}");
    ExitCode::from(code)
}
