//! The group verbs' arguments (`lardon group`, `--group` on pause and
//! resume, `restart --failed`), beside the rest of the command line in
//! `cli.rs`.

use clap::{Args, Subcommand};

use crate::parse::*;

#[derive(Debug, Args)]
pub(crate) struct GroupIdsArgs {
    /// Task ids
    #[arg(required_unless_present = "group", value_name = "ID")]
    pub(crate) ids: Vec<String>,
    /// Every task of this group it applies to (with the ids, those too)
    #[arg(long, value_name = "NAME", value_parser = parse_group)]
    pub(crate) group: Option<String>,
    /// Print the results as JSON
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct RestartArgs {
    /// Task ids
    #[arg(required_unless_present_any = ["failed", "cancelled"], value_name = "ID")]
    pub(crate) ids: Vec<String>,
    /// Also every failed task
    #[arg(long)]
    pub(crate) failed: bool,
    /// Also every cancelled task
    #[arg(long)]
    pub(crate) cancelled: bool,
    /// Only the failed (cancelled) tasks of this group; needs --failed or --cancelled
    #[arg(long, value_name = "NAME", value_parser = parse_group)]
    pub(crate) group: Option<String>,
    /// Print the results as JSON
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub(crate) enum GroupCommand {
    /// Set a group's limits (replacing its earlier ones; a limit not given is lifted).
    ///
    /// Example: `lardon group add render --max-running 2 --mem 4GiB --cpus 8`
    Add {
        /// Group name (1-64 of A-Z a-z 0-9 . _ -)
        #[arg(value_parser = parse_group)]
        name: String,
        /// Tasks of the group running at once
        #[arg(long, value_name = "N", value_parser = parse_u32, allow_hyphen_values = true)]
        max_running: Option<u32>,
        /// Memory the group's tasks may hold at once (e.g. 4GiB)
        #[arg(long, value_name = "SIZE", value_parser = parse_size, allow_hyphen_values = true)]
        mem: Option<u64>,
        /// CPUs the group's tasks may hold at once (e.g. 8, 0.5)
        #[arg(long, value_name = "CPUS", value_parser = parse_cpu, allow_hyphen_values = true)]
        cpus: Option<u32>,
    },
    /// Every group (with limits, or named by a task): limits, what it holds, tasks per state.
    ///
    /// Example: `lardon group list` or `lardon group list --json`
    List {
        /// Print JSON
        #[arg(long)]
        json: bool,
    },
    /// Drop a group's limits; its tasks keep their group.
    ///
    /// Example: `lardon group remove render`
    Remove {
        /// Group name
        #[arg(value_parser = parse_group)]
        name: String,
    },
}
