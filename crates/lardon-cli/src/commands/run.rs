//! `lardon run FILE.toml`: a workload through an embedded engine (no
//! separate daemon), resumable from its state dir, with live progress.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use lardon_proto::pb;

use crate::cli::Cli;
use crate::client::Client;
use crate::engine::{self, DaemonConfig};
use crate::error::{from_status, usage};
use crate::render;
use crate::workload::{self, Workload};

mod view;

pub(crate) fn run(cli: &Cli, file: &Path, plain: bool, fresh: bool) -> Result<u8> {
    let src =
        std::fs::read_to_string(file).map_err(|e| usage(format!("{}: cannot read: {e}", file.display())))?;
    let workload = workload::parse(file, &src)?;
    let (state_dir, source) = match &cli.state_dir {
        Some(dir) if state_dir_flag_given() => (dir.clone(), "--state-dir"),
        // Most likely meant for the daemon: used, and said so.
        Some(dir) => (dir.clone(), "LARDON_STATE_DIR"),
        None => (file.parent().unwrap_or(Path::new(".")).join(".lardon"), "beside the file"),
    };
    let state_dir = std::path::absolute(&state_dir)?;
    crate::say!("state: {} ({source})", state_dir.display());
    std::fs::create_dir_all(&state_dir).with_context(|| format!("creating {}", state_dir.display()))?;
    let mut config = DaemonConfig::new(&state_dir);
    config.socket = Some(state_dir.join(lardon_proto::SOCKET_FILE));
    if let Some((memory, cpus)) = workload.host {
        config.probe = engine::ProbeChoice::Fake(lardon::HostProfile::new(memory, cpus));
    }
    let handle = engine::start_in_process(config).context("starting the embedded engine")?;
    let socket = handle.socket().to_path_buf();
    let bars = !plain && std::io::stdout().is_terminal();
    let outcome = super::block_on(drive(&socket, file, &state_dir, &workload, (bars, fresh)));
    let stopped = handle.shutdown();
    let code = outcome?;
    stopped.context("stopping the embedded engine")?;
    Ok(code)
}

/// Whether `--state-dir` was on the command line (not only in the
/// environment, where clap also finds it).
fn state_dir_flag_given() -> bool {
    std::env::args_os().any(|a| a == "--state-dir" || a.to_string_lossy().starts_with("--state-dir="))
}

async fn drive(
    socket: &Path,
    file: &Path,
    state_dir: &Path,
    w: &Workload,
    (bars, fresh): (bool, bool),
) -> Result<u8> {
    let mut client = crate::client::connect_to(socket, Some(state_dir)).await?;
    if fresh {
        forget_earlier_runs(&mut client).await?;
    }
    if !w.policy.is_empty() {
        let set = w.policy.iter().map(|(k, v)| pb::PolicyEntry {
            key: k.clone(),
            value: v.clone(),
            ..Default::default()
        });
        client
            .set_policy(pb::SetPolicyRequest { set: set.collect(), reset: Vec::new() })
            .await
            .map_err(|s| from_status(&format!("{}: [policy]", file.display()), s))?;
    }
    let (ids, submitted) = submit_all(&mut client, socket, w).await?;
    let mut view = view::View::new(bars, &ids);
    let watched = tokio::select! {
        r = watch(&mut client, &mut view) => r,
        _ = tokio::signal::ctrl_c() => {
            view.finish();
            return Err(anyhow::anyhow!(
                "interrupted: progress is kept in {}; run `lardon run {}` again to resume",
                state_dir.display(), file.display()
            ));
        }
    };
    watched?;
    view.finish();
    let code = view.summary();
    if submitted == 0 && code == 0 {
        crate::say!(
            "every task completed in an earlier run (state in {}); `lardon run {} --fresh` starts over",
            state_dir.display(),
            file.display()
        );
    }
    Ok(code)
}

/// `--fresh`: cancels what is unfinished, waits for it to end, then
/// forgets every task, so that the whole file runs again.
async fn forget_earlier_runs(client: &mut Client) -> Result<()> {
    let tasks =
        client.list(pb::ListRequest::default()).await.map_err(|s| from_status("list", s))?.into_inner().tasks;
    let ended =
        [pb::TaskState::Completed as i32, pb::TaskState::Failed as i32, pb::TaskState::Cancelled as i32];
    let live: Vec<String> =
        tasks.iter().filter(|t| !ended.contains(&t.state)).map(|t| t.id.clone()).collect();
    if !live.is_empty() {
        client
            .cancel(pb::CancelRequest { ids: live.clone(), grace_ms: Some(0), ..Default::default() })
            .await
            .map_err(|s| from_status("--fresh: cancel", s))?;
        // The wait stream ends once every one of them has ended.
        let mut events = client
            .wait(pb::WaitRequest { ids: live, ..Default::default() })
            .await
            .map_err(|s| from_status("--fresh: wait", s))?
            .into_inner();
        while events.message().await.map_err(|s| from_status("--fresh: wait", s))?.is_some() {}
    }
    client
        .clean(pb::CleanRequest { states: Vec::new(), successful_only: false })
        .await
        .map_err(|s| from_status("--fresh: clean", s))?;
    Ok(())
}

/// Submits every task not already present (by name) from an earlier,
/// interrupted run; failed or cancelled ones are submitted again. Returns
/// (name, id) of every task and how many were submitted now.
async fn submit_all(
    client: &mut Client,
    socket: &Path,
    w: &Workload,
) -> Result<(Vec<(String, String)>, usize)> {
    let existing =
        client.list(pb::ListRequest::default()).await.map_err(|s| from_status("list", s))?.into_inner().tasks;
    let mut by_name: HashMap<String, pb::Task> = HashMap::new();
    for t in existing {
        by_name.insert(render::name(&t), t);
    }
    let mut ids: HashMap<String, String> = HashMap::new();
    let mut order = Vec::new();
    let mut submitted = 0;
    for task in &w.tasks {
        if let Some(old) = by_name.get(&task.name) {
            let done = [pb::TaskState::Failed as i32, pb::TaskState::Cancelled as i32].contains(&old.state);
            if !done {
                crate::say!(
                    "{}: kept from the earlier run ({})",
                    task.name,
                    crate::json::state_word(old.state)
                );
                ids.insert(task.name.clone(), old.id.clone());
                order.push((task.name.clone(), old.id.clone()));
                continue;
            }
            let _ = client.remove(pb::RemoveRequest { ids: vec![old.id.clone()] }).await;
        }
        let mut spec = task.spec.clone();
        spec.after = task.after.iter().filter_map(|n| ids.get(n).cloned()).collect();
        if !spec.env.iter().any(|e| e.key == "LARDON_SOCKET") {
            spec.env.push(pb::EnvVar {
                key: "LARDON_SOCKET".into(),
                value: socket.to_string_lossy().into_owned(),
            });
        }
        let resp = client
            .submit(pb::SubmitRequest { spec: Some(spec), paused: false, id_only: true })
            .await
            .map_err(|s| from_status(&format!("task \"{}\"", task.name), s))?
            .into_inner();
        ids.insert(task.name.clone(), resp.id.clone());
        order.push((task.name.clone(), resp.id));
        submitted += 1;
    }
    Ok((order, submitted))
}

/// Follows the daemon's event stream until every task of ours has ended;
/// falls back to listing when the daemon has no stream.
async fn watch(client: &mut Client, view: &mut view::View) -> Result<()> {
    match client.watch(pb::WatchRequest { skip_snapshot: false }).await {
        Ok(stream) => {
            let mut stream = stream.into_inner();
            // A periodic refresh keeps bars and ETAs moving between events.
            let mut tick = tokio::time::interval(Duration::from_millis(500));
            loop {
                if view.all_done() {
                    return Ok(());
                }
                tokio::select! {
                    msg = stream.message() => match msg.map_err(|s| from_status("watch", s))? {
                        Some(ev) => view.event(ev),
                        None => return poll(client, view).await,
                    },
                    _ = tick.tick() => {
                        let tasks = list(client, view).await?;
                        view.tasks(tasks);
                    }
                }
            }
        }
        Err(s) if s.code() == tonic::Code::Unimplemented => poll(client, view).await,
        Err(s) => Err(from_status("watch", s)),
    }
}

async fn list(client: &mut Client, view: &view::View) -> Result<Vec<pb::Task>> {
    let req = pb::ListRequest { ids: view.ids(), ..Default::default() };
    Ok(client.list(req).await.map_err(|s| from_status("status", s))?.into_inner().tasks)
}

async fn poll(client: &mut Client, view: &mut view::View) -> Result<()> {
    let started = Instant::now();
    while !view.all_done() {
        let tasks = list(client, view).await?;
        view.tasks(tasks);
        let pause = if started.elapsed() < Duration::from_secs(2) { 100 } else { 250 };
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
    Ok(())
}
