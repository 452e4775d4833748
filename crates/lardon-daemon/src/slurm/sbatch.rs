//! What one native-mode job asks Slurm for, as a pure function of the
//! task, what its class learned and the policy: the `--mem` sizing rule
//! and the `sbatch` arguments and batch script (docs/DESIGN.md §14).

use std::path::Path;

use lardon_slurm::quote;

use crate::spec::TaskSpec;

/// Slurm's `--mem` unit: a request is a whole number of MiB.
const MIB: u64 = 1 << 20;

/// The memory a job asks for, bytes (a whole number of MiB, at least one):
/// once the class has learned a size, `learned × (1 + slack_percent / 100)`
/// — *replacing* the declaration, so an over-estimate shrinks as well as an
/// under-estimate grows (each job is its own Slurm allocation: asking for
/// more than the class uses only keeps other jobs off the node); before
/// that, the declared size. Capped at `cap` when one is set; `None` when
/// nothing was declared nor learned (no `--mem`: the site's default
/// applies, never a made-up size). `learned` is the class's learned fixed
/// size ([`lardon::Learned::learned_fixed`]): the worst of its recent
/// measured peaks, or after a run killed at its limit the lower bound that
/// kill taught. A task of the class that outgrows the learned size ends
/// OUT_OF_MEMORY and is resubmitted once at the size that kill teaches. A
/// cap below the need wins: the job may then end OUT_OF_MEMORY, which is
/// the policy's choice to make, not the daemon's.
pub fn memory_request(
    declared: u64,
    learned: Option<u64>,
    slack_percent: u32,
    cap: Option<u64>,
) -> Option<u64> {
    if declared == 0 && learned.is_none_or(|l| l == 0) {
        return None;
    }
    let want = match learned {
        Some(l) if l > 0 => {
            let slack = u128::from(l) * u128::from(slack_percent) / 100;
            u64::try_from(u128::from(l) + slack).unwrap_or(u64::MAX)
        }
        _ => declared,
    };
    let capped = cap.map_or(want, |c| want.min(c));
    Some(capped.div_ceil(MIB).max(1).saturating_mul(MIB))
}

/// Whole CPUs a job asks for: the declared thousandths rounded up, at least
/// one (Slurm allocates whole CPUs).
pub fn cpus_request(cpu_millis: u32) -> u32 {
    cpu_millis.div_ceil(lardon::MILLIS_PER_CPU).max(1)
}

/// One job to submit: everything `sbatch` is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRequest {
    /// Slurm's job name: the task's name, else `lardon-<task id>`.
    pub name: String,
    /// `--mem`, bytes (a multiple of 1 MiB); `None`: not given.
    pub memory: Option<u64>,
    /// `--cpus-per-task`.
    pub cpus: u32,
    /// Where the job's stdout and stderr are appended (the task's log).
    pub log: String,
    /// `--chdir`, when the task names a working directory.
    pub cwd: Option<String>,
    /// The batch script, given to `sbatch` on its standard input.
    pub script: String,
    /// `--time` in whole minutes (the task's `--timeout`, rounded up).
    pub time_minutes: Option<u64>,
}

impl JobRequest {
    /// The job for `spec`, running `lardon exec --report REPORT -- argv…`
    /// with `lardon` at `exe`, with `env` exported first (the task's own
    /// variables, then the ones the daemon adds).
    pub fn new(
        task: &str,
        spec: &TaskSpec,
        memory: Option<u64>,
        exe: &Path,
        report: &Path,
        log: &Path,
        env: &[(String, String)],
    ) -> JobRequest {
        let mut script = String::from("#!/bin/sh\n# Written by the lardon daemon (native Slurm mode).\n");
        for (key, value) in env {
            // Keys are portable names (checked at submit); only values need quoting.
            script.push_str(&format!("export {key}={}\n", quote(value)));
        }
        let mut line = vec![
            quote(&exe.to_string_lossy()),
            "exec".to_owned(),
            "--report".to_owned(),
            quote(&report.to_string_lossy()),
            "--".to_owned(),
        ];
        line.extend(spec.argv.iter().map(|a| quote(a)));
        script.push_str("exec ");
        script.push_str(&line.join(" "));
        script.push('\n');
        JobRequest {
            name: if spec.name.is_empty() { format!("lardon-{task}") } else { spec.name.clone() },
            memory,
            cpus: cpus_request(spec.estimate.cpu_millis),
            log: log.to_string_lossy().into_owned(),
            cwd: spec.cwd.clone(),
            script,
            time_minutes: spec.timeout_ms.map(|ms| ms.div_ceil(60_000).max(1)),
        }
    }

    /// The `sbatch` arguments (the script goes on standard input). Only
    /// flags stable since Slurm 20.x: `--parsable` prints `ID[;cluster]`.
    pub fn args(&self) -> Vec<String> {
        let mut args = vec![
            "--parsable".to_owned(),
            format!("--job-name={}", self.name),
            format!("--cpus-per-task={}", self.cpus),
            "--ntasks=1".to_owned(),
            "--nodes=1".to_owned(),
            format!("--output={}", self.log),
            "--open-mode=append".to_owned(),
            // A node failure must not silently run the task a second time.
            "--no-requeue".to_owned(),
        ];
        if let Some(mem) = self.memory {
            args.push(format!("--mem={}M", mem / MIB));
        }
        if let Some(dir) = &self.cwd {
            args.push(format!("--chdir={dir}"));
        }
        if let Some(minutes) = self.time_minutes {
            args.push(format!("--time={minutes}"));
        }
        args
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const MB: u64 = 1 << 20;

    #[test]
    fn memory_is_the_learned_size_with_slack_else_the_declared_one() {
        // Nothing learned: the declared size, rounded up to whole MiB.
        assert_eq!(memory_request(100 * MB, None, 10, None), Some(100 * MB));
        assert_eq!(memory_request(100 * MB + 1, None, 10, None), Some(101 * MB));
        // Learned above declared: learned × 1.1.
        assert_eq!(memory_request(50 * MB, Some(200 * MB), 10, None), Some(220 * MB));
        assert_eq!(memory_request(0, Some(200 * MB), 10, None), Some(220 * MB));
        // Learned below declared: the over-estimate shrinks to learned × 1.1.
        assert_eq!(memory_request(500 * MB, Some(200 * MB), 10, None), Some(220 * MB));
        // A learned zero teaches nothing: the declaration stands.
        assert_eq!(memory_request(500 * MB, Some(0), 10, None), Some(500 * MB));
        // The policy's cap wins, even below the need.
        assert_eq!(memory_request(50 * MB, Some(200 * MB), 10, Some(128 * MB)), Some(128 * MB));
        // A tiny declaration is still a whole MiB.
        assert_eq!(memory_request(1, None, 10, None), Some(MB));
        // Nothing declared nor learned: no --mem at all (the site's default).
        assert_eq!(memory_request(0, None, 10, None), None);
        assert_eq!(memory_request(u64::MAX, Some(u64::MAX), 50, None), Some(u64::MAX), "saturates");
    }

    #[test]
    fn cpus_round_up_to_whole_cpus() {
        assert_eq!(cpus_request(1000), 1);
        assert_eq!(cpus_request(1500), 2);
        assert_eq!(cpus_request(0), 1);
        assert_eq!(cpus_request(4000), 4);
    }

    #[test]
    fn the_job_runs_lardon_exec_with_the_argv_quoted() {
        let mut spec = TaskSpec::command(["sh", "-c", "echo 'hi' $HOME"]);
        spec.estimate.cpu_millis = 2000;
        spec.cwd = Some("/data/run 1".into());
        let job = JobRequest::new(
            "7",
            &spec,
            Some(220 * MB),
            Path::new("/opt/lardon"),
            Path::new("/state/slurm/t7-s1.json"),
            Path::new("/state/logs/7.log"),
            &[("LARDON_TASK_ID".into(), "7".into()), ("GREETING".into(), "it's".into())],
        );
        assert_eq!(
            job.args(),
            [
                "--parsable",
                "--job-name=lardon-7",
                "--cpus-per-task=2",
                "--ntasks=1",
                "--nodes=1",
                "--output=/state/logs/7.log",
                "--open-mode=append",
                "--no-requeue",
                "--mem=220M",
                "--chdir=/data/run 1",
            ]
        );
        let bare = JobRequest { memory: None, cwd: None, ..job.clone() };
        assert!(!bare.args().iter().any(|a| a.starts_with("--mem") || a.starts_with("--chdir")));
        assert!(!bare.args().iter().any(|a| a.starts_with("--time")), "no --timeout, no --time");
        // --timeout is --time in whole minutes, rounded up.
        spec.timeout_ms = Some(90_000);
        let timed = JobRequest::new("7", &spec, None, Path::new("l"), Path::new("r"), Path::new("g"), &[]);
        assert_eq!(timed.args().last().map(String::as_str), Some("--time=2"));
        spec.name = "render shot 3".into();
        let named = JobRequest::new("7", &spec, None, Path::new("l"), Path::new("r"), Path::new("g"), &[]);
        assert_eq!(named.name, "render shot 3", "the task's name names the job");
        assert_eq!(
            job.script,
            "#!/bin/sh\n# Written by the lardon daemon (native Slurm mode).\n\
             export LARDON_TASK_ID='7'\nexport GREETING='it'\\''s'\n\
             exec '/opt/lardon' exec --report '/state/slurm/t7-s1.json' -- 'sh' '-c' 'echo '\\''hi'\\'' $HOME'\n"
        );
    }
}
