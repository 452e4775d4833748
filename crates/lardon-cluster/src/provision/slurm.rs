//! The `slurm` provider (docs/DESIGN.md §14): each allocation is one batch
//! job running `lardon agent` (one per node, through `srun`, for a
//! multi-node shape) that dials back to the broker and exits after its
//! idle time, which ends the job COMPLETED.
//!
//! Slurm itself is spoken to through the `lardon-slurm` crate, the one
//! adapter the daemon's native mode uses too; this module is the
//! provider's logic over it:
//! * **Submit**: `sbatch --parsable` with the script on standard input; the
//!   answer is `JOBID` or `JOBID;CLUSTER`, anything else is an error
//!   ([`lardon_slurm::parse_job_id`]).
//! * **Dry run**: `sbatch --test-only` with the same script.
//! * **Status**: one `squeue` per refresh for all allocations, in the
//!   `--format=%i|%T|%r` the adapter chooses (its docs say why, not
//!   `--json`); a job it no longer lists (past `MinJobAge`) is over, and so
//!   is COMPLETING (the batch step, so the agent, is gone). A state word
//!   the adapter does not know is an error naming it.
//! * **Cancel**: `scancel JOBID`.

use std::path::PathBuf;
use std::time::Duration;

use lardon_slurm::{JobState, JobStatus, quote};
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
    /// Slurm's tool could not run, failed, or answered no job id.
    #[error(transparent)]
    Slurm(#[from] lardon_slurm::SlurmError),
    /// `squeue` answered a state this provider cannot place.
    #[error("squeue: {0}")]
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
        lardon_slurm::sbatch_test_only(&script).map_err(|e| err(e.to_string()))
    }

    /// One `sbatch` per allocation. When a later one fails after earlier
    /// ones were granted, the granted ids are returned (they are alive and
    /// must be tracked) and the failure is logged.
    fn submit(&mut self, shape: &Shape, count: u32) -> Result<Vec<AllocationId>, ProviderError> {
        let script = self.script(shape)?;
        let mut ids = Vec::new();
        for _ in 0..count {
            let granted = lardon_slurm::sbatch(&[] as &[&str], &script);
            match granted {
                Ok(id) => ids.push(AllocationId(id.to_string())),
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
        // An id that is no number is no job of Slurm's: over.
        let jobs: Vec<u64> = ids.iter().filter_map(|id| id.0.parse().ok()).collect();
        let answer = lardon_slurm::squeue(&jobs).map_err(|e| err(e.to_string()))?;
        states(&answer, ids).map_err(|e| err(e.to_string()))
    }

    fn cancel(&mut self, id: &AllocationId) -> Result<(), ProviderError> {
        let job = id.0.parse().map_err(|_| err(format!("allocation {id} is not a Slurm job id")))?;
        lardon_slurm::scancel(job).map_err(|e| err(e.to_string()))
    }

    fn agent_prefix(&self, id: &AllocationId) -> String {
        format!("slurm-{id}")
    }
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

/// Where a Slurm job state puts an allocation; `None` for a word the
/// adapter does not know.
fn alloc_state(state: &JobState) -> Option<AllocState> {
    Some(match state {
        JobState::Pending | JobState::Configuring | JobState::Resizing => AllocState::Queued,
        JobState::Running => AllocState::Running,
        // COMPLETING: the batch step ended; the agent is gone.
        JobState::Completing
        | JobState::Completed
        | JobState::Failed
        | JobState::OutOfMemory
        | JobState::Cancelled
        | JobState::Timeout
        | JobState::NodeFail
        | JobState::OtherEnd(_) => AllocState::Ended,
        JobState::Other(_) => return None,
    })
}

/// The states of `ids` in `squeue`'s `answer`; an id it does not list is
/// [`AllocState::Ended`].
///
/// # Errors
/// [`SlurmError::BadStatus`] when a job of `ids` is in a state word the
/// adapter does not know.
pub fn states(
    answer: &[JobStatus],
    ids: &[AllocationId],
) -> Result<Vec<(AllocationId, AllocState)>, SlurmError> {
    ids.iter()
        .map(|id| {
            let listed = answer.iter().find(|j| j.id.to_string() == id.0);
            let state = match listed {
                None => AllocState::Ended,
                Some(j) => alloc_state(&j.state)
                    .ok_or_else(|| SlurmError::BadStatus(format!("job {id}: unknown state {:?}", j.state)))?,
            };
            Ok((id.clone(), state))
        })
        .collect()
}
