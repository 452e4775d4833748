//! `lardon exec`: the wrapper a native-mode job runs. It runs the task's
//! argv (no shell), then writes an [`ExecReport`] — the job cgroup's
//! measured peak, the wall time and how the command ended — where the
//! submitting daemon reads it when Slurm says the job ended, and exits
//! with the command's status so that Slurm's own end state agrees.
//!
//! The peak is the job's own memory cgroup's high-water mark (v2
//! `memory.peak`, v1 `memory.max_usage_in_bytes`), read only when our
//! cgroup is the job's (its path names `job_<SLURM_JOB_ID>`): outside one
//! (Slurm without `task/cgroup`, or a run by hand) the cgroup is shared
//! with unrelated processes, and the command's `ru_maxrss` is used
//! instead. The command is started and reaped through the host crate's
//! process layer ([`lardon_host::process`]), as the daemon's runner and a
//! cluster agent start theirs; it stays in `lardon exec`'s own process
//! group, so a terminal's Ctrl-C and Slurm's signals reach it. The memory limit reported is the minimum over the cgroup and
//! its ancestors (Slurm limits the job or step level, not the task leaf,
//! which reads "unlimited").

use std::path::{Path, PathBuf};
use std::time::Instant;

use lardon_host::cgroup::{OwnCgroup, parse_counter};
use lardon_host::{CgroupLayout, HostRoot};
use serde::{Deserialize, Serialize};

/// Where a reported peak comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PeakSource {
    /// The job's memory cgroup (every process of the job).
    Cgroup,
    /// The command's own largest resident set (`wait4`'s `ru_maxrss`).
    Rusage,
}

/// What `lardon exec` reports for one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecReport {
    /// The command's exit code, when it exited.
    pub exit_code: Option<i32>,
    /// The signal that killed it, when one did.
    pub signal: Option<i32>,
    /// Wall time of the command, milliseconds.
    pub wall_ms: u64,
    /// Measured peak memory, bytes, when known.
    pub peak_bytes: Option<u64>,
    /// Where `peak_bytes` comes from.
    pub peak_source: Option<PeakSource>,
    /// The tightest memory limit over the job's cgroup and its ancestors.
    pub limit_bytes: Option<u64>,
}

impl ExecReport {
    /// Reads a report; `None` when it is missing or malformed (the job was
    /// killed before `lardon exec` could write it).
    pub fn read(path: &Path) -> Option<ExecReport> {
        serde_json::from_slice(&std::fs::read(path).ok()?).ok()
    }

    /// Writes the report atomically (a temporary file renamed over it), so
    /// a reader never sees half of one.
    ///
    /// # Errors
    /// The I/O error, naming the path.
    pub fn write(&self, path: &Path) -> Result<(), ExecError> {
        let tmp = path.with_extension("tmp");
        let io = |source| ExecError::Report { path: path.to_path_buf(), source };
        let text = serde_json::to_vec(self).map_err(|e| io(std::io::Error::other(e)))?;
        std::fs::write(&tmp, text).map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    }

    /// The status `lardon exec` exits with: the command's code, or 128 +
    /// the signal, as a shell reports it.
    pub fn exit_status(&self) -> u8 {
        match (self.exit_code, self.signal) {
            (Some(c), _) => u8::try_from(c & 0xff).unwrap_or(1),
            (None, Some(s)) => u8::try_from((128 + s) & 0xff).unwrap_or(1),
            (None, None) => 1,
        }
    }
}

/// Why `lardon exec` could not do its job.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The command did not start.
    #[error("cannot start `{program}`: {source}")]
    Start {
        /// argv\[0\].
        program: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// No command was given.
    #[error("COMMAND: nothing to run (give it after `--`)")]
    NoCommand,
    /// The report could not be written.
    #[error("cannot write the report {}: {source}", path.display())]
    Report {
        /// Where.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// Runs `argv`, writes the report to `report` and returns it. The job
/// cgroup is found under `root` (the real host: `HostRoot::default()`),
/// and `job_id` is `SLURM_JOB_ID` when set.
///
/// # Errors
/// [`ExecError`] when the command cannot start (a report saying so is
/// written first, with exit code 127) or the report cannot be written.
pub fn run(
    argv: &[String],
    report: &Path,
    root: &HostRoot,
    job_id: Option<&str>,
) -> Result<ExecReport, ExecError> {
    let program = argv.first().ok_or(ExecError::NoCommand)?;
    let mut cmd = lardon_host::process::command(argv).ok_or(ExecError::NoCommand)?;
    let started = Instant::now();
    let spawned = lardon_host::spawn_in(&mut cmd, None, None).and_then(lardon_host::wait_child);
    let exit = match spawned {
        Ok(exit) => exit,
        Err(e) => {
            let source = match e {
                lardon_host::HostError::Io { source, .. } => source,
                other => std::io::Error::other(other),
            };
            let failed = ExecReport {
                exit_code: Some(127),
                signal: None,
                wall_ms: 0,
                peak_bytes: None,
                peak_source: None,
                limit_bytes: None,
            };
            failed.write(report)?;
            return Err(ExecError::Start { program: program.clone(), source });
        }
    };
    let wall_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    use std::os::unix::process::ExitStatusExt;
    let (peak, limit) = match job_peak(root, job_id) {
        Some((peak, limit)) => (Some((peak, PeakSource::Cgroup)), limit),
        None => (Some(exit.max_rss).filter(|p| *p > 0).map(|p| (p, PeakSource::Rusage)), None),
    };
    let out = ExecReport {
        exit_code: exit.status.code(),
        signal: exit.status.signal(),
        wall_ms,
        peak_bytes: peak.map(|(p, _)| p),
        peak_source: peak.map(|(_, s)| s),
        limit_bytes: limit,
    };
    out.write(report)?;
    Ok(out)
}

/// The real host's `/proc` and `/sys`, for [`run`] (the CLI does not
/// depend on the host crate).
pub fn host_root() -> HostRoot {
    HostRoot::default()
}

/// The job cgroup's peak and the tightest limit over it and its
/// ancestors; `None` unless our memory cgroup is the job's.
pub fn job_peak(root: &HostRoot, job_id: Option<&str>) -> Option<(u64, Option<u64>)> {
    let job = format!("job_{}", job_id?);
    let layout = CgroupLayout::detect(root).ok()?;
    let is_job = |dir: &PathBuf| dir.components().any(|c| c.as_os_str() == job.as_str());
    let read = |p: PathBuf| parse_counter("memory peak", &std::fs::read_to_string(p).ok()?).ok();
    let peak =
        layout.v2.as_ref().filter(|d| is_job(d)).and_then(|d| read(d.join("memory.peak"))).or_else(|| {
            layout
                .v1_memory
                .as_ref()
                .filter(|d| is_job(d))
                .and_then(|d| read(d.join("memory.max_usage_in_bytes")))
        })?;
    Some((peak, OwnCgroup::new(&layout).memory_limit()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    /// The layout a process inside a Slurm batch step sees on a hybrid v1
    /// host (as measured on the CI machine): the limit sits on `step_batch` and `job_43`,
    /// the task leaf is unlimited.
    fn slurm_v1_tree(limit_at_job: &str) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        write(
            r,
            "proc/self/mountinfo",
            "30 25 0:26 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory\n\
             31 25 0:27 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw\n",
        );
        write(r, "proc/self/cgroup", "4:memory:/slurm_n1/uid_0/job_43/step_batch/task_0\n0::/\n");
        let job = "sys/fs/cgroup/memory/slurm_n1/uid_0/job_43";
        write(r, &format!("{job}/memory.limit_in_bytes"), limit_at_job);
        write(r, &format!("{job}/cgroup.procs"), "");
        write(r, &format!("{job}/step_batch/memory.limit_in_bytes"), "157286400\n");
        write(r, &format!("{job}/step_batch/cgroup.procs"), "");
        let leaf = format!("{job}/step_batch/task_0");
        write(r, &format!("{leaf}/memory.limit_in_bytes"), "9223372036854771712\n");
        write(r, &format!("{leaf}/memory.max_usage_in_bytes"), "104857600\n");
        write(r, &format!("{leaf}/cgroup.procs"), "");
        write(r, "sys/fs/cgroup/memory/cgroup.procs", "");
        d
    }

    #[test]
    fn v1_job_peak_with_the_tightest_ancestor_limit() {
        let d = slurm_v1_tree("209715200\n");
        let root = HostRoot::under(d.path());
        assert_eq!(job_peak(&root, Some("43")), Some((104_857_600, Some(157_286_400))));
        // The job level tighter than the step: the minimum wins.
        let d = slurm_v1_tree("100000000\n");
        assert_eq!(job_peak(&HostRoot::under(d.path()), Some("43")), Some((104_857_600, Some(100_000_000))));
    }

    #[test]
    fn outside_the_job_cgroup_no_cgroup_peak_is_claimed() {
        let d = slurm_v1_tree("209715200\n");
        let root = HostRoot::under(d.path());
        assert_eq!(job_peak(&root, Some("44")), None, "another job's cgroup is not ours");
        assert_eq!(job_peak(&root, None), None, "not in a Slurm job");
    }

    #[test]
    fn v2_job_peak() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        write(r, "proc/self/mountinfo", "31 25 0:27 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n");
        write(r, "proc/self/cgroup", "0::/system.slice/slurmstepd.scope/job_9/step_batch/user/task_0\n");
        let job = "sys/fs/cgroup/system.slice/slurmstepd.scope/job_9";
        write(r, &format!("{job}/memory.max"), "314572800\n");
        write(r, &format!("{job}/cgroup.procs"), "");
        let leaf = format!("{job}/step_batch/user/task_0");
        write(r, &format!("{leaf}/memory.max"), "max\n");
        write(r, &format!("{leaf}/memory.peak"), "52428800\n");
        write(r, &format!("{leaf}/cgroup.procs"), "");
        write(r, &format!("{job}/step_batch/cgroup.procs"), "");
        write(r, &format!("{job}/step_batch/user/cgroup.procs"), "");
        assert_eq!(job_peak(&HostRoot::under(r), Some("9")), Some((52_428_800, Some(314_572_800))));
    }

    #[test]
    fn a_run_reports_its_exit_and_a_peak() {
        let d = tempfile::tempdir().unwrap();
        let report = d.path().join("r.json");
        let argv: Vec<String> = ["sh", "-c", "exit 3"].iter().map(|s| (*s).to_owned()).collect();
        let out = run(&argv, &report, &HostRoot::default(), None).unwrap();
        assert_eq!(out.exit_code, Some(3));
        assert_eq!(out.exit_status(), 3);
        assert_eq!(out.peak_source, Some(PeakSource::Rusage));
        assert!(out.peak_bytes.is_some_and(|p| p > 0));
        assert_eq!(ExecReport::read(&report), Some(out));
        let missing: Vec<String> = vec!["/nonexistent/lardon-test-program".into()];
        assert!(matches!(run(&missing, &report, &HostRoot::default(), None), Err(ExecError::Start { .. })));
        assert_eq!(ExecReport::read(&report).and_then(|r| r.exit_code), Some(127));
    }

    #[test]
    fn killed_by_a_signal_exits_like_a_shell() {
        let r = ExecReport {
            exit_code: None,
            signal: Some(9),
            wall_ms: 1,
            peak_bytes: None,
            peak_source: None,
            limit_bytes: None,
        };
        assert_eq!(r.exit_status(), 137);
    }
}
