//! `lardon scratch add|drain|cancel-drain|remove|status`.

use anyhow::Result;
use lardon_proto::pb;

use crate::cli::{Cli, ScratchCommand};
use crate::error::{from_status, usage};

/// The drain hook's argv: `--hook CMD` is one command line for `sh -c`
/// (what a person types, quotes and all); after `--` it is an argv run
/// as is. clap already refuses both at once.
fn hook_command(line: Option<&str>, argv: &[String]) -> Result<Vec<String>> {
    match line {
        Some(line) if line.trim().is_empty() => Err(usage("--hook: the command is empty")),
        Some(line) => Ok(vec!["sh".into(), "-c".into(), line.to_owned()]),
        None => Ok(argv.to_vec()),
    }
}

pub(crate) async fn run(cli: &Cli, cmd: &ScratchCommand) -> Result<u8> {
    // Input errors first: they do not need a daemon.
    if let ScratchCommand::Add { hook, hook_argv, .. } = cmd {
        hook_command(hook.as_deref(), hook_argv)?;
    }
    let mut c = crate::client::connect(cli).await?;
    let volume = match cmd {
        ScratchCommand::Add { path, name, capacity, hook, hook_argv } => {
            let path = std::path::absolute(path)?;
            let req = pb::ScratchAddRequest {
                path: path.to_string_lossy().into_owned(),
                name: name.clone().unwrap_or_default(),
                capacity: *capacity,
                hook: hook_command(hook.as_deref(), hook_argv)?,
            };
            c.scratch_add(req).await.map_err(|s| from_status("scratch add", s))?.into_inner()
        }
        ScratchCommand::Drain { name } => c
            .scratch_drain(pb::ScratchDrainRequest { name: name.clone() })
            .await
            .map_err(|s| from_status("scratch drain", s))?
            .into_inner(),
        ScratchCommand::CancelDrain { name } => c
            .scratch_cancel_drain(pb::ScratchCancelDrainRequest { name: name.clone() })
            .await
            .map_err(|s| from_status("scratch cancel-drain", s))?
            .into_inner(),
        ScratchCommand::Remove { name } => {
            c.scratch_remove(pb::ScratchRemoveRequest { name: name.clone() })
                .await
                .map_err(|s| from_status("scratch remove", s))?;
            super::out(&format!("removed scratch volume {name}\n"))?;
            return Ok(0);
        }
        ScratchCommand::Status { json } => {
            let vols = c
                .scratch_status(pb::ScratchStatusRequest {})
                .await
                .map_err(|s| from_status("scratch status", s))?
                .into_inner()
                .volumes;
            if *json {
                crate::json::print(&serde_json::Value::Array(
                    vols.iter().map(crate::json::scratch).collect(),
                ))?;
            } else if vols.is_empty() {
                super::out("no scratch volumes (add one with `lardon scratch add DIR`)\n")?;
            } else {
                super::out(&vols.iter().map(crate::render::scratch_line).collect::<String>())?;
            }
            return Ok(0);
        }
    };
    super::out(&crate::render::scratch_line(&volume))?;
    Ok(0)
}
