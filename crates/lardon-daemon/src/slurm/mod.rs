//! Native Slurm mode (docs/DESIGN.md §14): `lardon submit --engine slurm`
//! sends each task to Slurm as its own `sbatch` job, sized from what its
//! class learned, and learns from what the job measured.
//!
//! * [`sbatch`]: the `--mem` rule and the job's arguments and script;
//! * talking to Slurm (`sbatch`, one `squeue` per refresh, `scancel`, the
//!   state words) is the `lardon-slurm` crate, the one adapter the
//!   cluster's pilot provider uses too;
//! * [`exec`]: `lardon exec`, the wrapper a job runs, which reports the job
//!   cgroup's peak, the wall time and the exit back to the daemon;
//! * the daemon-side engine (submission under `slurm_max_jobs`, tracking,
//!   learning, the one resubmission after OUT_OF_MEMORY, `scancel`) is
//!   private.

pub mod exec;
mod outcome;
pub mod sbatch;
mod tracker;

pub(crate) use tracker::{SlurmEngine, scancel};

use crate::spec::TaskSpec;

/// What native mode cannot do yet, refused at submit naming the field:
/// batched tasks, dependencies, GPUs and scratch space are local-only.
///
/// # Errors
/// One line naming the first offending field.
pub fn check(spec: &TaskSpec) -> Result<(), String> {
    let e = &spec.estimate;
    let refused = if spec.items.is_some() {
        Some("items: batched tasks run locally only")
    } else if !spec.after.is_empty() || !spec.after_any.is_empty() {
        Some("after: dependencies are not supported")
    } else if e.gpu_slots > 0 || e.gpu_memory_fixed > 0 {
        Some("gpu_mem: GPUs are not requested from Slurm yet")
    } else if e.scratch_bytes > 0 {
        Some("scratch: scratch volumes are local")
    } else {
        None
    };
    refused.map_or(Ok(()), |m| Err(format!("engine slurm: {m}")))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::spec::TaskId;

    #[test]
    fn local_only_features_are_refused_naming_the_field() {
        let ok = TaskSpec::command(["true"]);
        assert_eq!(check(&ok), Ok(()));
        let mut batched = ok.clone();
        batched.items = Some(4);
        assert!(check(&batched).unwrap_err().starts_with("engine slurm: items:"));
        let mut dep = ok.clone();
        dep.after = vec![TaskId(1)];
        assert!(check(&dep).unwrap_err().starts_with("engine slurm: after:"));
        let mut scratch = ok;
        scratch.estimate.scratch_bytes = 1;
        assert!(check(&scratch).unwrap_err().starts_with("engine slurm: scratch:"));
    }
}
