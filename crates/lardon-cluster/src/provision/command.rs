//! Running an engine's command-line tool (`kubectl`, …): the one way
//! providers other than Slurm talk to their engine (Slurm's tools are the
//! `lardon-slurm` adapter's, which fails the same way), so a failure always
//! names the command line and carries the tool's own words.

use std::io::Write as _;
use std::process::{Command, Stdio};

use thiserror::Error;

/// A tool that could not run, or ran and failed.
#[derive(Debug, Error)]
pub enum CommandError {
    /// The command could not be run at all.
    #[error("cannot run {program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        source: std::io::Error,
    },
    /// The command ran and failed.
    #[error("{command} failed ({status}): {stderr}")]
    Failed {
        /// The command line.
        command: String,
        /// Its exit status.
        status: String,
        /// Its standard error, trimmed.
        stderr: String,
    },
}

/// Runs `program args…` with `stdin` written to it, returning its standard
/// output; a failure carries its standard error.
///
/// # Errors
/// [`CommandError`] when it cannot start or exits unsuccessfully.
pub fn run<S: AsRef<str>>(program: &str, args: &[S], stdin: Option<&str>) -> Result<String, CommandError> {
    let spawn = |source| CommandError::Spawn { program: program.to_owned(), source };
    let mut child = Command::new(program)
        .args(args.iter().map(AsRef::as_ref))
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(spawn)?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes()).map_err(spawn)?;
    }
    let out = child.wait_with_output().map_err(spawn)?;
    if !out.status.success() {
        let line: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
        return Err(CommandError::Failed {
            command: format!("{program} {}", line.join(" ")),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
