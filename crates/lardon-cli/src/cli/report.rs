//! `lardon report`'s arguments, beside the rest of the command line in
//! `cli.rs`.

use std::path::PathBuf;

use clap::Args;

use crate::parse::*;

// No doc comment here: clap would make it the verb's help text (see the
// `deferred_arguments_keep_each_subcommands_own_help_text` test).
#[derive(Debug, Args)]
pub(crate) struct ReportArgs {
    /// Only tasks not ended before then: a duration before now (30m, 2h, 7d) or a UTC date
    /// (2026-03-01, 2026-03-01T14:00)
    #[arg(long, value_name = "DURATION|DATE", value_parser = parse_since)]
    pub(crate) since: Option<Since>,
    /// Only this class or learning key (`default`: every task that named no class)
    #[arg(long, value_name = "CLASS")]
    pub(crate) class: Option<String>,
    /// Only the tasks of this group
    #[arg(long, value_name = "NAME", value_parser = parse_group)]
    pub(crate) group: Option<String>,
    /// Print JSON instead of a table
    #[arg(long, conflicts_with = "html")]
    pub(crate) json: bool,
    /// Write one self-contained HTML page with charts to FILE instead
    #[arg(long, value_name = "FILE")]
    pub(crate) html: Option<PathBuf>,
}
