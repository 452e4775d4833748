//! Running a workload manager's command-line tool: Slurm's here, and the
//! cluster's other providers' (`kubectl`) through the cluster crate's
//! `provision::command`, so there is one runner: a failure always names
//! the command line and carries the tool's own standard error.

use std::io::Write as _;
use std::process::{Command, Stdio};

/// A tool that could not run, or ran and failed.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// The command could not be run at all.
    #[error("cannot run {program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        #[source]
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_that_fails_is_named_with_its_own_words() {
        let e = run("sh", &["-c", "echo nope >&2; exit 3"], None).unwrap_err();
        assert_eq!(e.to_string(), "sh -c echo nope >&2; exit 3 failed (exit status: 3): nope");
        assert_eq!(run("cat", &[] as &[&str], Some("in")).unwrap(), "in");
        let e = run("/nonexistent/lardon-no-sbatch", &[] as &[&str], None).unwrap_err();
        assert!(matches!(e, CommandError::Spawn { .. }), "{e}");
    }
}
