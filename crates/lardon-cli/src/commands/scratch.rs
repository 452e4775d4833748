//! `lardon scratch add|drain|cancel-drain|remove|status`.

use anyhow::Result;
use lardon_proto::pb;
use lardon_proto::pb::watch_event::Event;

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
        ScratchCommand::Drain { name, no_wait: false } => return drain_and_wait(&mut c, name).await,
        ScratchCommand::Drain { name, no_wait: true } => c
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
            let vols = volumes(&mut c, "scratch status").await?;
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

/// How a drain that was waited for ended.
enum DrainEnd {
    /// `safe_to_unplug`: exit 0.
    SafeToUnplug(pb::ScratchVolume),
    /// The drain failed (`error`) or was cancelled (back in service): exit 1.
    NotDrained(pb::ScratchVolume),
}

/// Where a volume's state leaves a drain that is being waited for.
fn drain_end(v: &pb::ScratchVolume) -> Option<DrainEnd> {
    match pb::ScratchState::try_from(v.state) {
        Ok(pb::ScratchState::SafeToUnplug) => Some(DrainEnd::SafeToUnplug(v.clone())),
        Ok(pb::ScratchState::Draining) => None,
        _ => Some(DrainEnd::NotDrained(v.clone())),
    }
}

/// `lardon scratch drain NAME`: starts the drain and follows the daemon's
/// event stream until the volume is `safe_to_unplug` (0) or the drain
/// ended otherwise (1). The stream is opened before the drain is asked
/// for, so a drain that completes at once is never missed; a stream that
/// lagged re-reads the volume.
async fn drain_and_wait(c: &mut crate::client::Client, name: &str) -> Result<u8> {
    let mut stream = c
        .watch(pb::WatchRequest { skip_snapshot: true })
        .await
        .map_err(|s| from_status("scratch drain", s))?
        .into_inner();
    let started = match c.scratch_drain(pb::ScratchDrainRequest { name: name.to_owned() }).await {
        Ok(reply) => reply.into_inner(),
        // Somebody (a `--no-wait`, the dashboard) drains it already: wait
        // for that drain rather than refuse.
        Err(refused) => match volume(c, name).await? {
            Some(v)
                if matches!(
                    pb::ScratchState::try_from(v.state),
                    Ok(pb::ScratchState::Draining | pb::ScratchState::SafeToUnplug)
                ) =>
            {
                v
            }
            _ => return Err(from_status("scratch drain", refused)),
        },
    };
    super::out(&crate::render::scratch_line(&started))?;
    let mut latest = drain_end(&started);
    let end = loop {
        if let Some(end) = latest.take() {
            break end;
        }
        let Some(ev) = stream.message().await.map_err(|s| from_status("scratch drain", s))? else {
            anyhow::bail!("scratch drain: the daemon ended the event stream before {name} was drained");
        };
        latest = match ev.event {
            Some(Event::ScratchChanged(v)) if v.name == name => drain_end(&v),
            Some(Event::Lagged(_)) => match volume(c, name).await? {
                Some(v) => drain_end(&v),
                None => anyhow::bail!("scratch drain: {name} was removed while draining"),
            },
            _ => None,
        };
    };
    match end {
        DrainEnd::SafeToUnplug(v) => {
            super::out(&crate::render::scratch_line(&v))?;
            Ok(0)
        }
        DrainEnd::NotDrained(v) => {
            super::out(&crate::render::scratch_line(&v))?;
            eprintln!("lardon: scratch drain: {name} was not drained (state {})", scratch_state_word(&v));
            Ok(1)
        }
    }
}

/// Every volume the daemon has, for `verb`'s errors.
async fn volumes(c: &mut crate::client::Client, verb: &str) -> Result<Vec<pb::ScratchVolume>> {
    Ok(c.scratch_status(pb::ScratchStatusRequest {})
        .await
        .map_err(|s| from_status(verb, s))?
        .into_inner()
        .volumes)
}

/// The daemon's view of volume `name`, if it has one.
async fn volume(c: &mut crate::client::Client, name: &str) -> Result<Option<pb::ScratchVolume>> {
    Ok(volumes(c, "scratch drain").await?.into_iter().find(|v| v.name == name))
}

/// The volume's state, with why a drain did not finish.
fn scratch_state_word(v: &pb::ScratchVolume) -> &'static str {
    match pb::ScratchState::try_from(v.state) {
        Ok(pb::ScratchState::Error) => "error",
        Ok(pb::ScratchState::Available) => "available: the drain was cancelled",
        Ok(pb::ScratchState::InUse) => "in_use: the drain was cancelled",
        Ok(pb::ScratchState::Absent) => "absent",
        _ => "unknown",
    }
}
