//! Run handles: what the store keeps about a task's live run, so that a
//! restarted daemon knows where the run is (docs/DESIGN.md §10 crash
//! recovery). One enum, one text form, one [`RunHandle::encode`] and one
//! [`RunHandle::parse`]: every route writes its handle through it and
//! recovery reads it back through it, never by prefix elsewhere.
//!
//! A leaf: it depends on nothing else in the daemon.

/// A local run: its process group and the start time of the group leader
/// (`/proc/PID/stat` field 22), so that a recycled pid is never mistaken
/// for our run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessGroup {
    /// Process group id (= the leader's pid).
    pub pgid: u32,
    /// Leader start time in clock ticks since boot, when readable.
    pub start: Option<u64>,
}

impl ProcessGroup {
    /// [`RunHandle::encode`] of this run.
    pub fn encode(&self) -> String {
        RunHandle::Local(*self).encode()
    }
}

/// A job in native Slurm mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmJob {
    /// Slurm's job id.
    pub job: u64,
    /// The file `lardon exec` reports to, in the daemon's reports dir: a
    /// plain file name, never a path. `None` when the stored name was not
    /// one (the job can then only be cancelled, not judged).
    pub report: Option<String>,
}

/// Where a task's live run is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunHandle {
    /// A process group on this host.
    Local(ProcessGroup),
    /// A native-mode Slurm job.
    Slurm(SlurmJob),
    /// A task out at the broker, under its remote id (never empty).
    Offload(String),
}

impl RunHandle {
    /// The stored form: `pgid:<n>[:start:<t>]`, `slurm:<job>:<report>`
    /// or `offload:<remote id>`; [`RunHandle::parse`] reads each back.
    pub fn encode(&self) -> String {
        match self {
            RunHandle::Local(ProcessGroup { pgid, start: Some(t) }) => format!("pgid:{pgid}:start:{t}"),
            RunHandle::Local(ProcessGroup { pgid, start: None }) => format!("pgid:{pgid}"),
            RunHandle::Slurm(SlurmJob { job, report: Some(r) }) => format!("slurm:{job}:{r}"),
            RunHandle::Slurm(SlurmJob { job, report: None }) => format!("slurm:{job}"),
            RunHandle::Offload(remote) => format!("offload:{remote}"),
        }
    }

    /// Reads [`RunHandle::encode`]'s form; `None` for text no version of
    /// the daemon wrote.
    pub fn parse(text: &str) -> Option<RunHandle> {
        let (kind, rest) = text.split_once(':')?;
        match kind {
            "pgid" => {
                let mut parts = rest.split(':');
                let pgid = parts.next()?.parse().ok()?;
                let start = match (parts.next(), parts.next()) {
                    (Some("start"), Some(t)) => Some(t.parse().ok()?),
                    _ => None,
                };
                Some(RunHandle::Local(ProcessGroup { pgid, start }))
            }
            "slurm" => {
                let (job, report) = match rest.split_once(':') {
                    Some((job, name)) => (job, Some(name)),
                    None => (rest, None),
                };
                let plain = |n: &&str| !n.is_empty() && !n.contains('/') && *n != "." && *n != "..";
                let report = report.filter(plain).map(str::to_owned);
                Some(RunHandle::Slurm(SlurmJob { job: job.parse().ok()?, report }))
            }
            "offload" if !rest.is_empty() => Some(RunHandle::Offload(rest.to_owned())),
            _ => None,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn every_handle_round_trips_through_its_one_text_form() {
        let all = [
            RunHandle::Local(ProcessGroup { pgid: 42, start: Some(7) }),
            RunHandle::Local(ProcessGroup { pgid: 9, start: None }),
            RunHandle::Slurm(SlurmJob { job: 42, report: Some("t7-d12-1-s3.json".into()) }),
            RunHandle::Slurm(SlurmJob { job: 5, report: None }),
            RunHandle::Offload("host-1a2b:t3:a2:r1".into()),
        ];
        for h in all {
            assert_eq!(RunHandle::parse(&h.encode()), Some(h.clone()), "{}", h.encode());
        }
        assert_eq!(RunHandle::parse("slurm:42:t7.json").unwrap().encode(), "slurm:42:t7.json");
        assert_eq!(ProcessGroup { pgid: 3, start: Some(1) }.encode(), "pgid:3:start:1");
    }

    #[test]
    fn what_no_daemon_wrote_is_not_a_handle_and_a_path_is_not_a_report() {
        for bad in ["junk", "", "pgid:x", "slurm:x", "slurm:", "offload:", "offload", "nfs:1"] {
            assert_eq!(RunHandle::parse(bad), None, "{bad}");
        }
        for bad in ["slurm:42:", "slurm:42:../x", "slurm:42:a/b", "slurm:42:.."] {
            assert_eq!(
                RunHandle::parse(bad),
                Some(RunHandle::Slurm(SlurmJob { job: 42, report: None })),
                "{bad}"
            );
        }
    }
}
