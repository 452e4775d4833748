//! Slurm's job state words, as `squeue %T` and `scontrol`'s `JobState=`
//! print them, in one enum: each user decides what a word means for its
//! own jobs (native mode keeps COMPLETING live until the job's end is
//! final; the pilot provider counts it over, its agent being gone).

/// A Slurm job state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobState {
    /// Waiting for resources or priority (`PENDING`, requeued or held).
    Pending,
    /// `CONFIGURING`: resources granted, nodes booting; not started yet.
    Configuring,
    /// Running (`RUNNING`, or `SUSPENDED`, `STOPPED`, `SIGNALING`,
    /// `STAGE_OUT`: started, not ended yet).
    Running,
    /// `RESIZING`: the job's allocation is changing size.
    Resizing,
    /// `COMPLETING`: the batch step ended, Slurm is still cleaning up.
    Completing,
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
    /// A word this parser does not know (upper-cased).
    Other(String),
}

impl JobState {
    /// Parses a state word, in any case; a trailing `+` or ` by …` (as in
    /// `CANCELLED by 0`) is ignored.
    #[must_use]
    pub fn parse(word: &str) -> JobState {
        let w = word.trim().split([' ', '+']).next().unwrap_or("").to_ascii_uppercase();
        match w.as_str() {
            "PENDING" | "REQUEUED" | "REQUEUE_HOLD" | "REQUEUE_FED" | "RESV_DEL_HOLD" => JobState::Pending,
            "CONFIGURING" => JobState::Configuring,
            "RUNNING" | "SUSPENDED" | "STOPPED" | "SIGNALING" | "STAGE_OUT" => JobState::Running,
            "RESIZING" => JobState::Resizing,
            "COMPLETING" => JobState::Completing,
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

    /// Whether Slurm's record of the job is final (it will not run again
    /// and its state will not change): every end state. `COMPLETING` is
    /// not final yet, and an unknown word is taken as live.
    #[must_use]
    pub fn is_terminal(&self) -> bool {
        !matches!(
            self,
            JobState::Pending
                | JobState::Configuring
                | JobState::Running
                | JobState::Resizing
                | JobState::Completing
                | JobState::Other(_)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_map_to_states_and_only_end_states_are_terminal() {
        assert_eq!(JobState::parse("CANCELLED by 0"), JobState::Cancelled);
        assert_eq!(JobState::parse("running+"), JobState::Running);
        assert_eq!(JobState::parse("SUSPENDED"), JobState::Running);
        assert_eq!(JobState::parse("REQUEUE_HOLD"), JobState::Pending);
        assert_eq!(JobState::parse("COMPLETING"), JobState::Completing);
        assert_eq!(JobState::parse("preempted"), JobState::OtherEnd("PREEMPTED".into()));
        assert_eq!(JobState::parse("DANCING"), JobState::Other("DANCING".into()));
        for live in ["PENDING", "CONFIGURING", "RUNNING", "RESIZING", "COMPLETING", "DANCING"] {
            assert!(!JobState::parse(live).is_terminal(), "{live}");
        }
        for end in ["COMPLETED", "FAILED", "OUT_OF_MEMORY", "CANCELLED", "TIMEOUT", "NODE_FAIL", "BOOT_FAIL"]
        {
            assert!(JobState::parse(end).is_terminal(), "{end}");
        }
    }
}
