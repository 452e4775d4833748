//! Running an engine's command-line tool (`kubectl`, …): the one runner of
//! the `lardon-slurm` adapter ([`lardon_slurm::tool`]), which Slurm's tools
//! go through too, so a failure always names the command line and carries
//! the tool's own words.

pub use lardon_slurm::tool::{CommandError, run};
