//! Reading job states from Slurm: one `squeue` call per refresh for every
//! outstanding job, in a `--format` that has been stable since Slurm 2.x
//! (`%i|%T|%r`: id, long state, reason), parsed defensively — a line that
//! does not parse is skipped, an unknown state word is kept as
//! [`JobState::Other`] and treated as still live, and a job missing from
//! the answer is the caller's to judge (it ended and aged out, or never
//! existed). `squeue --json` changes schema between Slurm versions
//! (its `data_parser` version); this format does not.

/// The `squeue` arguments for `jobs`: every state, no header, our format.
pub fn squeue_args(jobs: &[u64]) -> Vec<String> {
    let list: Vec<String> = jobs.iter().map(u64::to_string).collect();
    vec![
        "--noheader".to_owned(),
        "--states=all".to_owned(),
        format!("--jobs={}", list.join(",")),
        "--format=%i|%T|%r".to_owned(),
    ]
}

/// A Slurm job state, as `squeue %T` or `scontrol`'s `JobState=` words it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobState {
    /// Waiting for resources or priority.
    Pending,
    /// Running (or completing, configuring, suspended…: not ended yet).
    Running,
    /// Ended with exit code 0.
    Completed,
    /// Ended with a non-zero exit code or signal.
    Failed,
    /// Killed by its memory limit (`task/cgroup` enforcement).
    OutOfMemory,
    /// Cancelled (`scancel`, by us or someone else).
    Cancelled,
    /// Hit its time limit.
    Timeout,
    /// Its node failed.
    NodeFail,
    /// Any other terminal state (`PREEMPTED`, `BOOT_FAIL`, `DEADLINE`,
    /// `SPECIAL_EXIT`, `REVOKED`), by its word.
    OtherEnd(String),
    /// A word this parser does not know; treated as live.
    Other(String),
}

impl JobState {
    /// Parses a state word; a trailing `+` or ` by …` (as in
    /// `CANCELLED by 0`) is ignored.
    pub fn parse(word: &str) -> JobState {
        let w = word.trim().split([' ', '+']).next().unwrap_or("").to_ascii_uppercase();
        match w.as_str() {
            "PENDING" | "REQUEUED" | "REQUEUE_HOLD" | "REQUEUE_FED" | "RESV_DEL_HOLD" => JobState::Pending,
            "RUNNING" | "COMPLETING" | "CONFIGURING" | "SUSPENDED" | "STOPPED" | "SIGNALING"
            | "STAGE_OUT" | "RESIZING" => JobState::Running,
            "COMPLETED" => JobState::Completed,
            "FAILED" => JobState::Failed,
            "OUT_OF_MEMORY" => JobState::OutOfMemory,
            "CANCELLED" => JobState::Cancelled,
            "TIMEOUT" => JobState::Timeout,
            "NODE_FAIL" => JobState::NodeFail,
            "PREEMPTED" | "BOOT_FAIL" | "DEADLINE" | "SPECIAL_EXIT" | "REVOKED" => JobState::OtherEnd(w),
            _ => JobState::Other(w),
        }
    }

    /// Whether the job has ended (it will not run again).
    pub fn is_terminal(&self) -> bool {
        !matches!(self, JobState::Pending | JobState::Running | JobState::Other(_))
    }
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
pub fn only_unknown_ids(stderr: &str) -> bool {
    stderr.contains("Invalid job id")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
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
        assert!(JobState::parse("COMPLETING").eq(&JobState::Running));
    }

    #[test]
    fn one_call_lists_every_job() {
        assert_eq!(squeue_args(&[3, 41]), ["--noheader", "--states=all", "--jobs=3,41", "--format=%i|%T|%r"]);
        assert!(only_unknown_ids("slurm_load_jobs error: Invalid job id specified\n"));
        assert!(!only_unknown_ids("squeue: error: Unable to contact slurm controller"));
    }
}
