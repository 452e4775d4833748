//! Reading job states: one `squeue` call per refresh for every job asked
//! about, in the `--format=%i|%T|%r` this crate's docs choose, parsed
//! defensively.

use crate::command::SlurmError;
use crate::state::JobState;
use crate::tool::{CommandError, run};

/// The `squeue` arguments for `jobs`: every state, no header, our format.
#[must_use]
pub fn squeue_args(jobs: &[u64]) -> Vec<String> {
    let list: Vec<String> = jobs.iter().map(u64::to_string).collect();
    vec![
        "--noheader".to_owned(),
        "--states=all".to_owned(),
        format!("--jobs={}", list.join(",")),
        "--format=%i|%T|%r".to_owned(),
    ]
}

/// One job's line of the answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobStatus {
    /// The job id.
    pub id: u64,
    /// Its state.
    pub state: JobState,
    /// Slurm's reason (`Resources`, `OutOfMemory`, `None`, …).
    pub reason: String,
}

/// Parses `squeue --format=%i|%T|%r` output; lines that do not parse
/// (a warning, an array or heterogeneous job id) are skipped.
#[must_use]
pub fn parse_squeue(text: &str) -> Vec<JobStatus> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.trim().splitn(3, '|');
            let id = parts.next()?.trim().parse::<u64>().ok()?;
            let state = JobState::parse(parts.next()?);
            let reason = parts.next().unwrap_or("").trim().to_owned();
            Some(JobStatus { id, state, reason })
        })
        .collect()
}

/// Whether a failed `squeue` said only that none of the ids is known any
/// more (it exits 1 with "Invalid job id specified" when every listed job
/// aged out): an empty answer, not an error.
#[must_use]
pub fn only_unknown_ids(stderr: &str) -> bool {
    stderr.contains("Invalid job id")
}

/// Asks Slurm once for every job of `jobs` ([`squeue_args`]): the lines
/// it answered, in its order. A job it does not list is the caller's to
/// judge; no jobs asks nothing.
///
/// # Errors
/// [`SlurmError`] when `squeue` cannot run or fails for another reason
/// than [`only_unknown_ids`].
pub fn squeue(jobs: &[u64]) -> Result<Vec<JobStatus>, SlurmError> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    match run("squeue", &squeue_args(jobs), None) {
        Ok(out) => Ok(parse_squeue(&out)),
        Err(CommandError::Failed { stderr, .. }) if only_unknown_ids(&stderr) => Ok(Vec::new()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Recorded on the two-node cluster of scripts/slurm-up.sh (Slurm
    /// 22.05.8; lines of three `squeue_args` calls, each also listing a
    /// job 999999 that never existed): a job past its 1-minute limit, one
    /// cancelled while it waited, one `true`, one `exit 3`, one over its
    /// `--mem` under `task/cgroup`, one running and one waiting for a CPU.
    const RECORDED: &str = include_str!("testdata/squeue_states.txt");

    #[test]
    fn recorded_states_parse() {
        let jobs = parse_squeue(RECORDED);
        let states: Vec<(JobState, &str)> =
            jobs.iter().map(|j| (j.state.clone(), j.reason.as_str())).collect();
        assert_eq!(
            states,
            [
                (JobState::Timeout, "TimeLimit"),
                (JobState::Cancelled, "Resources"),
                (JobState::Completed, "None"),
                (JobState::Failed, "NonZeroExitCode"),
                (JobState::OutOfMemory, "OutOfMemory"),
                (JobState::Running, "None"),
                (JobState::Pending, "Resources"),
            ]
        );
        assert!(jobs.iter().all(|j| j.id > 0 && j.id != 999_999));
    }

    #[test]
    fn odd_lines_are_skipped_and_unknown_words_stay_live() {
        let jobs = parse_squeue("garbage\n12_3|RUNNING|None\n\n7|WEIRD_NEW|x|y\n8|CANCELLED by 0|None\n9|\n");
        assert_eq!(
            jobs,
            [
                JobStatus { id: 7, state: JobState::Other("WEIRD_NEW".into()), reason: "x|y".into() },
                JobStatus { id: 8, state: JobState::Cancelled, reason: "None".into() },
                JobStatus { id: 9, state: JobState::Other(String::new()), reason: String::new() },
            ]
        );
        assert!(!jobs[0].state.is_terminal());
        assert!(JobState::parse("preempted").is_terminal());
    }

    #[test]
    fn one_call_lists_every_job() {
        assert_eq!(squeue_args(&[3, 41]), ["--noheader", "--states=all", "--jobs=3,41", "--format=%i|%T|%r"]);
        assert!(only_unknown_ids("slurm_load_jobs error: Invalid job id specified\n"));
        assert!(!only_unknown_ids("squeue: error: Unable to contact slurm controller"));
        assert_eq!(squeue(&[]).unwrap(), [], "no jobs: no call");
    }
}
