//! The `slurm` provider (docs/DESIGN.md §14): each allocation is one batch
//! job running `lardon agent` (one per node, through `srun`, for a
//! multi-node shape) that dials back to the broker and exits after its
//! idle time, which ends the job COMPLETED.
//!
//! * **Submit**: `sbatch --parsable` with the script on standard input; the
//!   answer is `JOBID` or `JOBID;CLUSTER`, anything else is an error.
//! * **Dry run**: `sbatch --test-only` with the same script.
//! * **Status**: one `squeue --json --states=all` per refresh for all
//!   allocations. Debian's Slurm 22.05 (checked on the CI machine) prints
//!   every job it still lists whatever `--jobs` says, so the ids are
//!   filtered here; a job it no longer lists (past `MinJobAge`) is over.
//!   `job_state` is a string in 22.05 and a list of strings in later
//!   versions; both are read.
//! * **Cancel**: `scancel JOBID`.

use std::path::PathBuf;
use std::time::Duration;

use thiserror::Error;

use super::{AgentLaunch, AllocState, AllocationId, Provider, ProviderError, Shape};

/// A shape as Slurm grants it: the shape plus the user's own `#SBATCH`
/// options (a partition, an account, a QOS, …).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmShape {
    /// Size, walltime, nodes and capabilities.
    pub shape: Shape,
    /// Extra `sbatch` options, each one `#SBATCH` line (e.g.
    /// `--partition=debug`), written after the generated ones.
    pub extras: Vec<String>,
}

/// How the `slurm` provider submits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmConfig {
    /// The shapes it may ask for.
    pub shapes: Vec<SlurmShape>,
    /// The agent each allocation runs.
    pub launch: AgentLaunch,
    /// `--signal=B:TERM@grace`: the agent is told this long before the
    /// walltime ends, so it can drain.
    pub grace: Duration,
    /// Where jobs write their output (`lardon-agent-JOBID.out`; `None`:
    /// Slurm's default, the broker's working directory).
    pub output_dir: Option<PathBuf>,
    /// Job names are `PREFIX-SHAPE`.
    pub job_prefix: String,
}

/// What went wrong talking to Slurm.
#[derive(Debug, Error)]
pub enum SlurmError {
    /// The engine's tool could not run, or failed.
    #[error(transparent)]
    Command(#[from] super::command::CommandError),
    /// `sbatch --parsable` answered something that is not a job id.
    #[error("sbatch --parsable: expected JOBID or JOBID;CLUSTER, got `{0}`")]
    BadJobId(String),
    /// `squeue --json` answered something unexpected.
    #[error("squeue --json: {0}")]
    BadStatus(String),
    /// A shape or extra option that cannot go into a batch script.
    #[error("shape {shape}: {why}")]
    BadShape {
        /// The shape's name.
        shape: String,
        /// What is wrong.
        why: String,
    },
}

/// The `slurm` [`Provider`].
#[derive(Debug)]
pub struct SlurmProvider {
    config: SlurmConfig,
}

impl SlurmProvider {
    /// A provider over `config`; every shape's script is checked now.
    ///
    /// # Errors
    /// [`SlurmError::BadShape`] for a name or extra option that cannot be
    /// written into a batch script.
    pub fn new(config: SlurmConfig) -> Result<Self, SlurmError> {
        for s in &config.shapes {
            batch_script(s, &config)?;
        }
        Ok(SlurmProvider { config })
    }

    fn shape(&self, name: &str) -> Result<&SlurmShape, ProviderError> {
        self.config
            .shapes
            .iter()
            .find(|s| s.shape.name == name)
            .ok_or_else(|| err(format!("no shape named {name}")))
    }

    fn script(&self, shape: &Shape) -> Result<String, ProviderError> {
        batch_script(self.shape(&shape.name)?, &self.config).map_err(|e| err(e.to_string()))
    }
}

fn err(message: String) -> ProviderError {
    ProviderError { provider: "slurm".into(), message }
}

impl Provider for SlurmProvider {
    fn name(&self) -> &str {
        "slurm"
    }

    fn shapes(&self) -> Vec<Shape> {
        self.config.shapes.iter().map(|s| s.shape.clone()).collect()
    }

    fn dry_run(&mut self, shape: &Shape) -> Result<(), ProviderError> {
        let script = self.script(shape)?;
        super::command::run("sbatch", &["--test-only"], Some(&script))
            .map(drop)
            .map_err(|e| err(e.to_string()))
    }

    /// One `sbatch` per allocation. When a later one fails after earlier
    /// ones were granted, the granted ids are returned (they are alive and
    /// must be tracked) and the failure is logged.
    fn submit(&mut self, shape: &Shape, count: u32) -> Result<Vec<AllocationId>, ProviderError> {
        let script = self.script(shape)?;
        let mut ids = Vec::new();
        for _ in 0..count {
            let granted = super::command::run("sbatch", &["--parsable"], Some(&script))
                .map_err(SlurmError::from)
                .and_then(|out| parse_job_id(&out));
            match granted {
                Ok(id) => ids.push(id),
                Err(e) if ids.is_empty() => return Err(err(e.to_string())),
                Err(e) => {
                    tracing::warn!("slurm: {} of {count} allocations granted; then: {e}", ids.len());
                    break;
                }
            }
        }
        Ok(ids)
    }

    fn status(&mut self, ids: &[AllocationId]) -> Result<Vec<(AllocationId, AllocState)>, ProviderError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let out = super::command::run("squeue", &["--json", "--states=all"], None)
            .map_err(|e| err(e.to_string()))?;
        parse_squeue_json(&out, ids).map_err(|e| err(e.to_string()))
    }

    fn cancel(&mut self, id: &AllocationId) -> Result<(), ProviderError> {
        super::command::run("scancel", &[id.0.as_str()], None).map(drop).map_err(|e| err(e.to_string()))
    }

    fn agent_prefix(&self, id: &AllocationId) -> String {
        format!("slurm-{id}")
    }
}

/// Quotes `word` for a POSIX shell.
fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// `D-HH:MM:SS`, rounded up to the second.
fn slurm_time(d: Duration) -> String {
    let s = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    format!("{}-{:02}:{:02}:{:02}", s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60)
}

/// The batch script for `shape`: the generated `#SBATCH` lines, the
/// user's extras, the allocation's end, then the agent (told that end) —
/// `exec`ed on one node (so the batch
/// step's SIGTERM reaches it), or one per node through `srun`, each with
/// the id `slurm-JOBID` (`slurm-JOBID-RANK` on several nodes) that ties
/// it to its allocation.
///
/// # Errors
/// [`SlurmError::BadShape`] for a name or extra that cannot be written
/// into a script.
pub fn batch_script(shape: &SlurmShape, config: &SlurmConfig) -> Result<String, SlurmError> {
    let s = &shape.shape;
    let bad = |why: String| SlurmError::BadShape { shape: s.name.clone(), why };
    if s.name.is_empty() || !s.name.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)) {
        return Err(bad("name: use letters, digits, `.`, `_` and `-`".into()));
    }
    if s.capabilities.is_empty() {
        return Err(bad("capabilities: a shape offers at least one".into()));
    }
    if s.nodes == 0 || s.memory == 0 || s.cpu_millis == 0 || s.walltime.is_zero() {
        return Err(bad("nodes, memory, cpus and walltime must be more than 0".into()));
    }
    for e in &shape.extras {
        if !e.starts_with('-') || e.contains(['\n', '\r']) {
            return Err(bad(format!("extras: `{e}` is not one sbatch option (e.g. --partition=debug)")));
        }
    }
    let mib = s.memory.div_ceil(1 << 20);
    let cpus = s.cpu_millis.div_ceil(1000);
    let mut text = String::from("#!/bin/sh\n");
    let mut line = |l: String| {
        text.push_str("#SBATCH ");
        text.push_str(&l);
        text.push('\n');
    };
    line(format!("--job-name={}-{}", config.job_prefix, s.name));
    line(format!("--nodes={}", s.nodes));
    line("--ntasks-per-node=1".into());
    line(format!("--cpus-per-task={cpus}"));
    line(format!("--mem={mib}M"));
    line(format!("--time={}", slurm_time(s.walltime)));
    line(format!("--signal=B:TERM@{}", config.grace.as_secs().max(1)));
    if let Some(dir) = &config.output_dir {
        line(format!("--output={}", dir.join("lardon-agent-%j.out").display()));
    }
    for e in &shape.extras {
        line(e.clone());
    }
    let argv: Vec<String> = config.launch.argv(&s.capabilities).iter().map(|w| quote(w)).collect();
    let argv = argv.join(" ");
    // When the allocation ends, for walltime-aware dispatch: Slurm's own
    // figure where it exports one (23.02 on), else the script's start plus
    // the walltime (the script starts when the job does).
    let secs = s.walltime.as_secs() + u64::from(s.walltime.subsec_nanos() > 0);
    text.push_str(&format!("end=\"${{SLURM_JOB_END_TIME:-$(( $(date +%s) + {secs} ))}}\"\n"));
    if s.nodes == 1 {
        text.push_str(&format!("exec {argv} --id \"slurm-${{SLURM_JOB_ID}}\" --ends-at \"$end\"\n"));
    } else {
        // The id needs each task's own rank, so a shell per task expands it.
        text.push_str(&format!(
            "exec srun --overlap --nodes={n} --ntasks={n} --ntasks-per-node=1 \
             sh -c 'exec \"$@\" --id \"slurm-${{SLURM_JOB_ID}}-${{SLURM_PROCID}}\"' lardon-agent {argv} \
             --ends-at \"$end\"\n",
            n = s.nodes
        ));
    }
    Ok(text)
}

/// The job id in `sbatch --parsable`'s answer (`JOBID` or
/// `JOBID;CLUSTER`).
///
/// # Errors
/// [`SlurmError::BadJobId`] for anything else.
pub fn parse_job_id(stdout: &str) -> Result<AllocationId, SlurmError> {
    let text = stdout.trim();
    let id = text.split_once(';').map_or(text, |(id, _)| id);
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) || text.contains('\n') {
        return Err(SlurmError::BadJobId(text.to_owned()));
    }
    Ok(AllocationId(id.to_owned()))
}

/// Where a Slurm job state word puts an allocation; `None` for a word
/// this Slurm does not document.
fn job_state(word: &str) -> Option<AllocState> {
    Some(match word {
        "PENDING" | "CONFIGURING" | "REQUEUED" | "REQUEUE_FED" | "REQUEUE_HOLD" | "RESIZING" => {
            AllocState::Queued
        }
        "RUNNING" | "SUSPENDED" | "STOPPED" | "SIGNALING" | "STAGE_OUT" => AllocState::Running,
        // COMPLETING: the batch step ended; the agent is gone.
        "COMPLETED" | "COMPLETING" | "CANCELLED" | "FAILED" | "TIMEOUT" | "NODE_FAIL" | "PREEMPTED"
        | "BOOT_FAIL" | "DEADLINE" | "OUT_OF_MEMORY" | "SPECIAL_EXIT" | "REVOKED" => AllocState::Ended,
        _ => return None,
    })
}

/// The states of `ids` in `squeue --json`'s answer; an id it does not
/// list is [`AllocState::Ended`].
///
/// # Errors
/// [`SlurmError::BadStatus`] when the answer is not JSON, has no `jobs`
/// list, or a job lacks a numeric `job_id` or a known `job_state`.
pub fn parse_squeue_json(
    text: &str,
    ids: &[AllocationId],
) -> Result<Vec<(AllocationId, AllocState)>, SlurmError> {
    let bad = |m: String| SlurmError::BadStatus(m);
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| bad(format!("not JSON: {e}")))?;
    let jobs = v.get("jobs").and_then(|j| j.as_array()).ok_or_else(|| bad("no `jobs` list".into()))?;
    let mut known = std::collections::HashMap::new();
    for job in jobs {
        let id = job
            .get("job_id")
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| bad("a job without a numeric `job_id`".into()))?;
        // 22.05: "RUNNING"; 23.02 and later: ["RUNNING"] (plus flags).
        let words: Vec<&str> = match job.get("job_state") {
            Some(serde_json::Value::String(s)) => vec![s.as_str()],
            Some(serde_json::Value::Array(a)) => a.iter().filter_map(serde_json::Value::as_str).collect(),
            _ => Vec::new(),
        };
        let state = words
            .iter()
            .find_map(|w| job_state(w))
            .ok_or_else(|| bad(format!("job {id}: unknown `job_state` {:?}", job.get("job_state"))))?;
        known.insert(id.to_string(), state);
    }
    Ok(ids.iter().map(|id| (id.clone(), known.get(&id.0).copied().unwrap_or(AllocState::Ended))).collect())
}
