//! `lardon report`: decodes the flags, opens the store read-only, calls
//! [`crate::report::build`] and encodes the result as a table, JSON or a
//! page (docs/DESIGN.md §10, "Report").

use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use lardon_daemon::store::{SCHEMA_VERSION, Store};

use super::out;
use crate::cli::{Cli, ReportArgs};
use crate::error::usage;
use crate::report::{self, Query, html, table};

/// Runs `lardon report`; exit 0 (2 for a state dir with no store).
pub(crate) fn run(cli: &Cli, args: &ReportArgs) -> Result<u8> {
    let paths = lardon_proto::Paths::resolve(cli.state_dir.as_deref()).map_err(|e| usage(e.to_string()))?;
    let db = paths.database();
    if !db.exists() {
        return Err(usage(format!(
            "no store at {}: nothing ran on this state dir (pass --state-dir DIR, or start `lardon daemon`)",
            db.display()
        )));
    }
    // A reader: SQLite refuses any write through it, and with WAL it reads
    // the last commit without waiting for a running daemon.
    let store = Store::open_reader(&db).with_context(|| format!("opening {}", db.display()))?;
    let version = store.schema_version()?;
    if version != SCHEMA_VERSION {
        let what = if version < SCHEMA_VERSION {
            "start this build's `lardon daemon` once to migrate it"
        } else {
            "it was written by a newer lardon; use that one"
        };
        return Err(usage(format!(
            "the store at {} is schema version {version}, this lardon reads {SCHEMA_VERSION}: {what}",
            db.display()
        )));
    }
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let query = Query {
        since_ms: args.since.map(|s| s.resolve(now_ms)),
        class: args.class.clone(),
        group: args.group.clone(),
    };
    let r = report::build(&store, &query, now_ms).context("reading the store")?;
    if let Some(file) = &args.html {
        let page = html::page(&r)?;
        std::fs::write(file, page).with_context(|| format!("writing {}", file.display()))?;
        out(&format!("wrote {} ({} tasks)\n", file.display(), r.totals.tasks))?;
    } else if args.json {
        out(&format!("{}\n", serde_json::to_string_pretty(&r)?))?;
    } else {
        out(&table::render(&r))?;
    }
    Ok(0)
}
