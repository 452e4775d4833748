//! The `lardon` binary against a daemon on a simulated host (and the
//! repository checks): one test binary whose tests run in parallel, each
//! on its own state dir and socket. Where a new test goes:
//! `crates/lardon-cli/tests/README.md`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

#[path = "../support/mod.rs"]
mod support;

mod acks;
mod cert;
mod closed_pipe;
mod crash;
mod daemon_logs;
mod deploy;
mod e2e;
mod errors;
mod groups;
mod held_back;
mod hooks;
mod log_reuse;
mod logcap;
mod one_owner;
mod policy;
mod progress_pty;
mod readme;
mod repo_docs;
mod report;
mod restart;
mod run;
mod scratch_hook;
mod slurm_cli;
mod submit_each;
mod submit_env;
mod subreaper;
mod timeout;
mod top_pty;
