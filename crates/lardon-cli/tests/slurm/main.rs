//! The real-Slurm tests (the `slurm-tests` feature; the binary is built
//! only with it: `required-features` in Cargo.toml). Without a running
//! Slurm they fail naming `scripts/slurm-up.sh`, never skip. Native-mode
//! and pilot-mode tests never use the test cluster at once
//! (`support::slurm::Mode`).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

#[path = "../support/mod.rs"]
mod support;

mod slurm_native;
mod slurm_pilot;
