//! Lardon's one Slurm adapter, below both of its users: the daemon's
//! native mode (one `sbatch` job per task, docs/DESIGN.md §14) and the
//! cluster's `slurm` provider (one `sbatch` job per pilot allocation).
//! It knows Slurm's command-line tools and their words, not what either
//! user does with a job.
//!
//! * [`sbatch`], [`sbatch_test_only`], [`squeue`] and [`scancel`] run the
//!   tools; a failure ([`SlurmError`]) names the command line and carries
//!   the tool's own words ([`tool`], the one command runner, which the
//!   cluster's `kubectl` provider uses too).
//! * [`parse_job_id`] reads `sbatch --parsable` strictly (`ID` or
//!   `ID;CLUSTER`, nothing else); [`quote`] writes one POSIX shell word for
//!   a batch script.
//! * [`JobState`] maps Slurm's state words; [`parse_squeue`] reads one
//!   `squeue` answer.
//!
//! **One `squeue` strategy: `--format=%i|%T|%r`, not `--json`.** Every
//! refresh is one `squeue --noheader --states=all --jobs=ID,… --format=%i|%T|%r`
//! (id, long state word, reason), parsed defensively: a line that does not
//! parse is skipped, an unknown state word is kept ([`JobState::Other`]),
//! a job missing from the answer is the caller's to judge (it ended and
//! aged out past `MinJobAge`, or never existed), and "Invalid job id
//! specified" (every listed job aged out) is an empty answer. Why this and
//! not `--json`:
//! * `--format` has been stable since Slurm 2.x; `--json`'s schema moves
//!   with its `data_parser`/OpenAPI version (`job_state` is a string in
//!   22.05, a list of strings from 23.02), so each release needs reading
//!   again;
//! * `--json` needs Slurm built with its JSON and OpenAPI plugins, which a
//!   site may lack; `--format` is in every build;
//! * Debian's 22.05 (checked here: `squeue --json --states=all --jobs=…`)
//!   prints every job the controller holds whatever `--jobs` says — on a
//!   shared cluster, thousands of full records per refresh — where
//!   `--format` prints one short line per job asked about.
//!
//! Nothing of Lardon's is a dependency: the crate is the tools' words and
//! their parsers, pure where it can be (the parsers are tested on answers
//! recorded from the real Slurm 22.05.8 of `scripts/slurm-up.sh`).
#![warn(missing_docs)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod command;
mod squeue;
mod state;
pub mod tool;

pub use command::{SlurmError, parse_job_id, quote, sbatch, sbatch_test_only, scancel};
pub use squeue::{JobStatus, only_unknown_ids, parse_squeue, squeue, squeue_args};
pub use state::JobState;
