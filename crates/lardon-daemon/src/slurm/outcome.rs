//! What an ended native-mode job means for its task: the run the class
//! learns from, and whether the task ends (in which state, with which
//! reason) or is submitted once more at the learned size. A pure function
//! of Slurm's end state and `lardon exec`'s report.

use std::time::Duration;

use lardon::{RunOutcome, RunRecord, format_bytes};
use lardon_slurm::JobState;

use super::exec::ExecReport;
use crate::spec::TaskState;
use crate::store::Outcome;

/// How Slurm last saw a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seen {
    /// In `squeue`'s answer, in this terminal state.
    Ended(JobState),
    /// Not in the answer any more: it ended and aged out of Slurm's
    /// memory (`MinJobAge`), or was purged.
    Vanished,
}

/// The job as submitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Submitted {
    /// Slurm's job id.
    pub(crate) job: u64,
    /// The `--mem` it ran under, bytes (`None`: the site's default).
    pub(crate) memory: Option<u64>,
    /// The task allows a run again after a memory kill (`oom_retry`).
    pub(crate) oom_retry: bool,
    /// This job already is the task's one resubmission.
    pub(crate) resubmitted: bool,
}

/// What to do with the task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Next {
    /// End it.
    Finish(Outcome),
    /// Submit it again (sized from what was just learned); the note goes
    /// on the task's course.
    Resubmit(String),
}

/// The verdict on one ended job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Verdict {
    /// What the class learns (nothing from a run cut short by time, a
    /// node or a cancel: its peak says nothing about its need).
    pub(crate) record: Option<RunRecord>,
    /// What happens to the task.
    pub(crate) next: Next,
}

fn failed(reason: String, exit_code: Option<i32>) -> Next {
    Next::Finish(Outcome { state: TaskState::Failed, exit_code, reason: Some(reason) })
}

/// See the module docs. A job that ended by itself is learned from with
/// the peak `lardon exec` measured; OUT_OF_MEMORY is learned as a kill at
/// the job's `--mem` (a lower bound, never a peak: docs/DESIGN.md §6).
pub(crate) fn judge(job: Submitted, seen: &Seen, report: Option<&ExecReport>) -> Verdict {
    let id = job.job;
    let wall = Duration::from_millis(report.map_or(0, |r| r.wall_ms));
    let peak = report.and_then(|r| r.peak_bytes);
    let exit_code = report.and_then(|r| r.exit_code);
    let ran = Some(RunRecord::unbatched(wall, RunOutcome::Completed { peak }));
    let by_report = |r: &ExecReport| match (r.exit_code, r.signal) {
        (Some(0), _) => {
            Next::Finish(Outcome { state: TaskState::Completed, exit_code: Some(0), reason: None })
        }
        (Some(c), _) => failed(format!("exited with code {c} (slurm job {id})"), Some(c)),
        (None, Some(s)) => failed(format!("killed by signal {s} (slurm job {id})"), None),
        (None, None) => failed(format!("ended for an unknown reason (slurm job {id})"), None),
    };
    let state = match seen {
        Seen::Ended(state) => state,
        Seen::Vanished => {
            return match report {
                Some(r) => Verdict { record: ran, next: by_report(r) },
                None => Verdict {
                    record: None,
                    next: failed(
                        format!("slurm job {id} is no longer known to Slurm and left no report"),
                        None,
                    ),
                },
            };
        }
    };
    match state {
        JobState::Completed | JobState::Failed => match report {
            Some(r) => Verdict { record: ran, next: by_report(r) },
            None if *state == JobState::Completed => Verdict {
                record: None,
                next: Next::Finish(Outcome { state: TaskState::Completed, exit_code: None, reason: None }),
            },
            None => Verdict {
                record: None,
                next: failed(
                    format!("slurm job {id} FAILED before lardon exec reported (see the task's log)"),
                    None,
                ),
            },
        },
        JobState::OutOfMemory => {
            // Without a --mem of ours, the limit is what the job's cgroup
            // said (0, unknown, teaches nothing and is not recorded).
            let limit = job.memory.or_else(|| report.and_then(|r| r.limit_bytes)).unwrap_or(0);
            let record = Some(RunRecord::unbatched(wall, RunOutcome::KilledAtLimit { limit }));
            let killed = format!(
                "slurm job {id} ended OUT_OF_MEMORY: memory limit of {} exceeded (peak {})",
                format_bytes(limit),
                peak.map_or_else(|| "unknown".to_owned(), format_bytes)
            );
            let next = if !job.oom_retry {
                failed(format!("{killed} (not run again: --no-oom-retry)"), exit_code)
            } else if job.resubmitted {
                failed(format!("{killed} after one resubmission at the learned size"), exit_code)
            } else {
                Next::Resubmit(format!("{killed}; submitted again at the size learned from the kill"))
            };
            Verdict { record, next }
        }
        JobState::Cancelled => Verdict {
            record: None,
            next: Next::Finish(Outcome {
                state: TaskState::Cancelled,
                exit_code,
                reason: Some(format!("slurm job {id} was cancelled in Slurm (scancel)")),
            }),
        },
        JobState::Timeout => Verdict {
            record: None,
            next: failed(format!("timeout: slurm job {id} reached its time limit (TIMEOUT)"), exit_code),
        },
        JobState::NodeFail => Verdict {
            record: None,
            next: failed(format!("slurm job {id} lost its node (NODE_FAIL)"), exit_code),
        },
        JobState::OtherEnd(word) => {
            Verdict { record: None, next: failed(format!("slurm job {id} ended {word}"), exit_code) }
        }
        // Not terminal: the caller only judges ended jobs; say so rather
        // than guess.
        JobState::Pending
        | JobState::Configuring
        | JobState::Running
        | JobState::Resizing
        | JobState::Completing
        | JobState::Other(_) => Verdict {
            record: None,
            next: failed(format!("slurm job {id} was judged while still live ({state:?})"), None),
        },
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const MB: u64 = 1 << 20;

    fn job(resubmitted: bool, oom_retry: bool) -> Submitted {
        Submitted { job: 12, memory: Some(100 * MB), oom_retry, resubmitted }
    }

    fn report(code: Option<i32>, signal: Option<i32>, peak: u64) -> ExecReport {
        ExecReport {
            exit_code: code,
            signal,
            wall_ms: 1500,
            peak_bytes: Some(peak),
            peak_source: None,
            limit_bytes: Some(100 * MB),
        }
    }

    fn finish(v: &Verdict) -> &Outcome {
        match &v.next {
            Next::Finish(o) => o,
            Next::Resubmit(n) => panic!("resubmitted: {n}"),
        }
    }

    #[test]
    fn completed_learns_the_measured_peak() {
        let v =
            judge(job(false, true), &Seen::Ended(JobState::Completed), Some(&report(Some(0), None, 80 * MB)));
        assert_eq!(finish(&v).state, TaskState::Completed);
        assert_eq!(
            v.record,
            Some(RunRecord::unbatched(
                Duration::from_millis(1500),
                RunOutcome::Completed { peak: Some(80 * MB) }
            ))
        );
    }

    #[test]
    fn failed_names_the_exit_code_and_still_learns() {
        let v = judge(job(false, true), &Seen::Ended(JobState::Failed), Some(&report(Some(3), None, MB)));
        let o = finish(&v);
        assert_eq!((o.state, o.exit_code), (TaskState::Failed, Some(3)));
        assert_eq!(o.reason.as_deref(), Some("exited with code 3 (slurm job 12)"));
        assert!(v.record.is_some());
    }

    #[test]
    fn out_of_memory_learns_a_lower_bound_and_resubmits_once() {
        let r = report(None, Some(9), 100 * MB);
        let first = judge(job(false, true), &Seen::Ended(JobState::OutOfMemory), Some(&r));
        assert_eq!(
            first.record,
            Some(RunRecord::unbatched(
                Duration::from_millis(1500),
                RunOutcome::KilledAtLimit { limit: 100 * MB }
            ))
        );
        assert!(matches!(&first.next, Next::Resubmit(n) if n.contains("OUT_OF_MEMORY")), "{first:?}");
        let second = judge(job(true, true), &Seen::Ended(JobState::OutOfMemory), Some(&r));
        let o = finish(&second);
        assert_eq!(o.state, TaskState::Failed);
        assert!(o.reason.as_deref().unwrap().contains("OUT_OF_MEMORY"), "{o:?}");
        assert!(second.record.is_some(), "the second kill is learned too");
        // No --mem of ours: the kill is at the limit the job's cgroup had.
        let site = Submitted { memory: None, ..job(false, true) };
        let v = judge(site, &Seen::Ended(JobState::OutOfMemory), Some(&r));
        assert!(
            matches!(v.record, Some(RunRecord { outcome: RunOutcome::KilledAtLimit { limit }, .. }) if limit == 100 * MB),
            "{v:?}"
        );
        let no_retry = judge(job(false, false), &Seen::Ended(JobState::OutOfMemory), None);
        assert!(finish(&no_retry).reason.as_deref().unwrap().contains("--no-oom-retry"));
    }

    #[test]
    fn cut_short_runs_end_clearly_and_teach_nothing() {
        for (state, task_state, word) in [
            (JobState::Cancelled, TaskState::Cancelled, "cancelled"),
            (JobState::Timeout, TaskState::Failed, "TIMEOUT"),
            (JobState::NodeFail, TaskState::Failed, "NODE_FAIL"),
            (JobState::OtherEnd("PREEMPTED".into()), TaskState::Failed, "PREEMPTED"),
        ] {
            let v = judge(job(false, true), &Seen::Ended(state), Some(&report(None, Some(15), MB)));
            let o = finish(&v);
            assert_eq!(o.state, task_state);
            assert!(o.reason.as_deref().unwrap().contains(word), "{o:?}");
            assert_eq!(v.record, None);
        }
    }

    #[test]
    fn a_vanished_job_is_judged_by_its_report() {
        let v = judge(job(false, true), &Seen::Vanished, Some(&report(Some(0), None, MB)));
        assert_eq!(finish(&v).state, TaskState::Completed);
        let v = judge(job(false, true), &Seen::Vanished, None);
        let o = finish(&v);
        assert_eq!(o.state, TaskState::Failed);
        assert!(o.reason.as_deref().unwrap().contains("no longer known"), "{o:?}");
    }
}
