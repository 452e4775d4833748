//! `lardon exec --report FILE -- COMMAND…`: the wrapper a native-mode
//! Slurm job runs (docs/DESIGN.md §14). The work is the daemon crate's
//! [`lardon_daemon::slurm::exec`]; this verb only maps its result to an
//! exit status: the command's own, so that Slurm's end state agrees.

use anyhow::Result;
use lardon_daemon::slurm::exec::{ExecError, run as exec_run};

use crate::cli::ExecArgs;

pub(crate) fn run(args: &ExecArgs) -> Result<u8> {
    let job = std::env::var("SLURM_JOB_ID").ok();
    let root = lardon_daemon::slurm::exec::host_root();
    match exec_run(&args.command, &args.report, &root, job.as_deref()) {
        Ok(report) => Ok(report.exit_status()),
        // As a shell does: 127 for a command that could not start (the
        // report says so too).
        Err(e @ ExecError::Start { .. }) => {
            eprintln!("lardon exec: {e}");
            Ok(127)
        }
        Err(e) => Err(e.into()),
    }
}
