//! Slurm's tools (`sbatch`, `scancel`, and `squeue` for
//! [`crate::squeue()`]) run through [`crate::tool`]: a failure names the
//! command line and carries the tool's standard error; and the words a
//! batch script and `sbatch`'s answer are made of ([`quote`],
//! [`parse_job_id`]).

use crate::tool::CommandError;

/// What went wrong talking to Slurm.
#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    /// The tool could not be run at all, or ran and failed.
    #[error(transparent)]
    Command(#[from] CommandError),
    /// `sbatch --parsable` answered something that is not a job id.
    #[error("sbatch --parsable: expected JOBID or JOBID;CLUSTER, got `{0}`")]
    BadJobId(String),
}

/// [`crate::tool::run`] for one of Slurm's tools.
fn run<S: AsRef<str>>(program: &str, args: &[S], stdin: Option<&str>) -> Result<String, SlurmError> {
    Ok(crate::tool::run(program, args, stdin)?)
}

/// Submits `script` (given on `sbatch`'s standard input) with `args`,
/// `--parsable` added first: the job id [`parse_job_id`] reads.
///
/// # Errors
/// [`SlurmError`] when `sbatch` cannot run, refuses the job, or answers
/// something that is not a job id.
pub fn sbatch<S: AsRef<str>>(args: &[S], script: &str) -> Result<u64, SlurmError> {
    let mut all = vec!["--parsable"];
    all.extend(args.iter().map(AsRef::as_ref).filter(|a| *a != "--parsable"));
    parse_job_id(&run("sbatch", &all, Some(script))?)
}

/// Asks `sbatch --test-only` whether `script` would be accepted, without
/// submitting it.
///
/// # Errors
/// [`SlurmError`] when `sbatch` cannot run or refuses the script.
pub fn sbatch_test_only(script: &str) -> Result<(), SlurmError> {
    run("sbatch", &["--test-only"], Some(script)).map(drop)
}

/// `scancel JOB`.
///
/// # Errors
/// [`SlurmError`] when `scancel` cannot run or fails (the job may
/// already be gone: callers usually log it and go on).
pub fn scancel(job: u64) -> Result<(), SlurmError> {
    run("scancel", &[job.to_string()], None).map(drop)
}

/// `s` as one POSIX shell word (single-quoted; a `'` inside becomes
/// `'\''`).
#[must_use]
pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The job id `sbatch --parsable` printed: `JOBID` or `JOBID;CLUSTER` on
/// one line, the id all digits.
///
/// # Errors
/// [`SlurmError::BadJobId`] for anything else (a warning, two lines, an
/// id too large for `u64`).
pub fn parse_job_id(stdout: &str) -> Result<u64, SlurmError> {
    let text = stdout.trim();
    let id = text.split_once(';').map_or(text, |(id, _)| id);
    let bad = || SlurmError::BadJobId(text.to_owned());
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) || text.contains('\n') {
        return Err(bad());
    }
    id.parse().map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sbatch_parsable_answers_are_parsed_strictly() {
        // Recorded: `sbatch --parsable` printed `3\n`.
        assert_eq!(parse_job_id("3\n").unwrap(), 3);
        assert_eq!(parse_job_id("42;cluster\n").unwrap(), 42);
        for bad in ["", "\n", "Submitted batch job 3", "3 4", "x;c", "3\n4\n", "sbatch: error: x"] {
            assert!(matches!(parse_job_id(bad), Err(SlurmError::BadJobId(_))), "{bad:?}");
        }
        assert!(parse_job_id("99999999999999999999999").is_err(), "past u64");
    }

    #[test]
    fn the_quoted_words_run_verbatim() {
        // The shell itself is the judge of the quoting.
        let argv = ["printf", "%s|", "a b", "it's", "$HOME", "`x`", "\\n"];
        let words: Vec<String> = argv.iter().map(|a| quote(a)).collect();
        let out = std::process::Command::new("sh").arg("-c").arg(words.join(" ")).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "a b|it's|$HOME|`x`|\\n|");
    }
}
