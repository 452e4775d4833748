//! `lardon submit` (alias `add`).

use anyhow::Result;
use lardon_proto::pb;

use super::spec::{SpecParts, Style, task_spec};
use crate::cli::{Cli, SubmitArgs};
use crate::error::from_status;

pub(crate) async fn run(cli: &Cli, args: &SubmitArgs) -> Result<u8> {
    let cwd = match &args.cwd {
        Some(dir) => std::path::absolute(dir)?,
        None => std::env::current_dir()?,
    };
    // Checked here, before any daemon: a typo is an input error naming the
    // flag, not a task that fails at spawn ("No such file").
    if args.cwd.is_some() && !cwd.is_dir() {
        return Err(crate::error::usage(format!("--cwd: `{}` is not an existing directory", cwd.display())));
    }
    let parts = SpecParts {
        name: args.name.clone().unwrap_or_default(),
        argv: args.command.clone(),
        cwd: cwd.to_string_lossy().into_owned(),
        env: args.env.clone(),
        priority: args.priority.unwrap_or(0),
        after: args.after.clone(),
        retry: !args.no_retry,
    };
    let spec = task_spec(&args.needs, parts, Style::Flags)?;
    let mut client = crate::client::connect(cli).await?;
    let resp = client
        .submit(pb::SubmitRequest { spec: Some(spec), paused: args.paused })
        .await
        .map_err(|s| from_status("submit", s))?
        .into_inner();
    if args.json {
        let task = resp.task.unwrap_or_else(|| pb::Task { id: resp.id.clone(), ..Default::default() });
        crate::json::print(&crate::json::task(&task))?;
    } else {
        super::out(&format!("{}\n", resp.id))?;
    }
    Ok(0)
}
