//! `lardon submit` (alias `add`).

use std::path::Path;

use anyhow::Result;
use lardon_proto::pb;

use super::spec::{SpecParts, Style, task_spec};
use crate::cli::{Cli, EngineArg, SubmitArgs};
use crate::each;
use crate::error::{from_status, usage};

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
    let parts = parts(args, &cwd);
    if let Some(source) = &args.each {
        return each(cli, args, &parts, source).await;
    }
    let mut spec = task_spec(&args.needs, parts, Style::Flags)?;
    spec.engine = engine_name(args.engine);
    shippable(args, &mut spec)?;
    files(args, &cwd, &mut spec)?;
    spec.submit_env = Some(submit_env(args));
    timeout(args, &mut spec)?;
    on_end(args, &mut spec)?;
    spec.group = group(args).unwrap_or_default();
    let mut client = crate::client::connect(cli).await?;
    let resp = client
        .submit(pb::SubmitRequest { spec: Some(spec), paused: args.paused, id_only: !args.json })
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

/// The task's group: `--group`, else inside a task (LARDON_TASK_ID set:
/// `lardon submit` from a task's script) the task's own group, so a
/// parent's children share it and `lardon wait --group` in the parent
/// waits for them.
fn group(args: &SubmitArgs) -> Option<String> {
    args.group.clone().or_else(inherited_group)
}

/// The group of the task this process runs in, if any (LARDON_GROUP is
/// only trusted beside LARDON_TASK_ID: it is the daemon that sets both).
fn inherited_group() -> Option<String> {
    std::env::var_os("LARDON_TASK_ID")?;
    std::env::var("LARDON_GROUP").ok().filter(|g| lardon::GroupName::new(g).is_ok())
}

/// The caller's environment as the task's base (`--env-clear`: empty),
/// `NAME=VALUE\0` per variable: one blob, however many variables.
fn submit_env(args: &SubmitArgs) -> Vec<u8> {
    if args.env_clear {
        return Vec::new();
    }
    lardon_daemon::submit_env::SubmitEnv::from_vars(std::env::vars_os()).blob().to_vec()
}

/// `--timeout D [--retry-on-timeout N]`: per run; a shippable task without
/// `--deadline` also gets it as its deadline from now (what an agent
/// enforces).
fn timeout(args: &SubmitArgs, spec: &mut pb::TaskSpec) -> Result<()> {
    let Some(ms) = args.timeout else { return Ok(()) };
    if ms == 0 {
        return Err(usage("--timeout: must be more than 0"));
    }
    spec.timeout_ms = Some(ms);
    spec.retry_on_timeout = args.retry_on_timeout.unwrap_or(0);
    if !spec.capability.is_empty() && spec.deadline_unix_ms == 0 {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        spec.deadline_unix_ms = now.saturating_add(i64::try_from(ms).unwrap_or(i64::MAX));
    }
    Ok(())
}

/// `--on-end CMD`: checked here (the flag named), run by the daemon with
/// `sh -c` after each end.
fn on_end(args: &SubmitArgs, spec: &mut pb::TaskSpec) -> Result<()> {
    let Some(hook) = &args.on_end else { return Ok(()) };
    lardon_daemon::spec::check_hook(hook).map_err(|e| usage(format!("--on-end: {e}")))?;
    spec.on_end.clone_from(hook);
    Ok(())
}

/// The wire name of `--engine` (empty: the default, local).
fn engine_name(engine: EngineArg) -> String {
    match engine {
        EngineArg::Local => String::new(),
        EngineArg::Slurm => "slurm".to_owned(),
    }
}

/// `--capability CAP --shippable [--deadline D]`: the capability, checked
/// here (a typo names the flag), and the deadline as a Unix time.
fn shippable(args: &SubmitArgs, spec: &mut pb::TaskSpec) -> Result<()> {
    let Some(cap) = args.capability.as_deref().filter(|_| args.shippable) else { return Ok(()) };
    // `name@version/target` reads as `name@version:target`.
    let cap = match cap.split_once(':') {
        Some(_) => cap.to_owned(),
        None => {
            cap.rsplit_once('/').map_or_else(|| cap.to_owned(), |(head, target)| format!("{head}:{target}"))
        }
    };
    let parsed = lardon_cluster::Capability::parse(&cap).map_err(|e| usage(format!("--capability: {e}")))?;
    spec.capability = parsed.key();
    if let Some(ms) = args.deadline {
        if ms == 0 {
            return Err(usage("--deadline: must be more than 0"));
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        spec.deadline_unix_ms = now.saturating_add(i64::try_from(ms).unwrap_or(i64::MAX));
    }
    Ok(())
}

/// `--input PATH… --output PATH…`: each made relative to the task's
/// working directory `cwd` and checked here, naming the flag: no `..`, an
/// input must lie inside `cwd` and be an existing regular file, an output
/// must be relative.
fn files(args: &SubmitArgs, cwd: &Path, spec: &mut pb::TaskSpec) -> Result<()> {
    let (inputs, outputs) = file_paths(&args.inputs, &args.outputs, cwd)?;
    spec.inputs.extend(inputs);
    spec.outputs.extend(outputs);
    Ok(())
}

/// The `--input` and `--output` paths as the broker takes them (see
/// [`files`]); `lardon cluster submit` checks its own with it too.
pub(crate) fn file_paths(
    inputs: &[std::path::PathBuf],
    outputs: &[std::path::PathBuf],
    cwd: &Path,
) -> Result<(Vec<String>, Vec<String>)> {
    let (mut ins, mut outs) = (Vec::new(), Vec::new());
    for path in inputs {
        let rel = if path.is_absolute() {
            path.strip_prefix(cwd).map_err(|_| {
                usage(format!(
                    "--input: `{}` is outside the working directory `{}`; name it relative to it",
                    path.display(),
                    cwd.display()
                ))
            })?
        } else {
            path.as_path()
        };
        let text = relative("--input", rel)?;
        let full = cwd.join(rel);
        match std::fs::metadata(&full) {
            Ok(m) if m.is_file() => {}
            Ok(_) => {
                return Err(usage(format!("--input: `{}` is not a regular file", full.display())));
            }
            Err(e) => return Err(usage(format!("--input: `{}`: {e}", full.display()))),
        }
        ins.push(text);
    }
    for path in outputs {
        if path.is_absolute() {
            return Err(usage(format!(
                "--output: `{}` is absolute; name it relative to the working directory",
                path.display()
            )));
        }
        outs.push(relative("--output", path)?);
    }
    Ok((ins, outs))
}

/// `path` as the `/`-separated relative path the daemon and the broker
/// take (plain names only), or a usage error naming `flag`.
fn relative(flag: &str, path: &Path) -> Result<String> {
    let text =
        path.to_str().ok_or_else(|| usage(format!("{flag}: `{}` is not valid UTF-8", path.display())))?;
    // `./x` and `a//b` mean `x` and `a/b`; `..` never passes.
    let clean: Vec<&str> = text.split('/').filter(|c| !c.is_empty() && *c != ".").collect();
    let clean = clean.join("/");
    lardon_cluster_core::wire::relative_path(flag, &clean).map_err(|e| usage(e.to_string()))?;
    Ok(clean)
}

/// Everything of the spec but its needs, from the flags (`cwd` resolved).
pub(crate) fn parts(args: &SubmitArgs, cwd: &Path) -> SpecParts {
    SpecParts {
        name: args.name.clone().unwrap_or_default(),
        argv: args.command.clone(),
        cwd: cwd.to_string_lossy().into_owned(),
        env: args.env.clone(),
        priority: args.priority.unwrap_or(0),
        after: args.after.clone(),
        retry: !args.no_retry,
        no_oom_retry: args.no_oom_retry,
    }
}

/// The spec of one `--each` input: its placeholders filled, then built
/// and checked as a single submit's (with its `--engine`).
pub(crate) fn each_spec(args: &SubmitArgs, parts: &SpecParts, input: &each::Input) -> Result<pb::TaskSpec> {
    let mut p = parts.clone();
    p.argv = each::command(&parts.argv, input);
    p.name = each::fill(&parts.name, input);
    let mut spec = task_spec(&args.needs, p, Style::Flags)?;
    spec.engine = engine_name(args.engine);
    shippable(args, &mut spec)?;
    files(args, Path::new(&parts.cwd), &mut spec)?;
    timeout(args, &mut spec)?;
    on_end(args, &mut spec)?;
    Ok(spec)
}

/// Tasks per `SubmitMany` call: the daemon's limit per call.
const PER_CALL: usize = 10_000;

/// `--each`: every spec is built (and checked) before the first is sent;
/// each call of up to [`PER_CALL`] tasks is one transaction.
async fn each(cli: &Cli, args: &SubmitArgs, parts: &SpecParts, source: &Path) -> Result<u8> {
    let name = source.display().to_string();
    let inputs = if name == "-" {
        each::read_inputs(std::io::stdin().lock(), "-")?
    } else {
        let file = std::fs::File::open(source).map_err(|e| usage(format!("--each {name}: {e}")))?;
        each::read_inputs(std::io::BufReader::new(file), &name)?
    };
    let mut specs = Vec::with_capacity(inputs.len());
    for input in &inputs {
        specs.push(each_spec(args, parts, input)?);
    }
    let env = submit_env(args);
    let mut client = crate::client::connect(cli).await?;
    let mut ids = Vec::with_capacity(specs.len());
    // The call's group: named, inherited, or (without either) one of its
    // own that the daemon names after the first id; every later call of a
    // large input joins it.
    let mut group = group(args);
    let named = group.is_some();
    let mut rest = specs;
    while !rest.is_empty() {
        let tail = rest.split_off(rest.len().min(PER_CALL));
        if let Some(g) = &group {
            for spec in &mut rest {
                spec.group.clone_from(g);
            }
        }
        let resp = client
            .submit_many(pb::SubmitManyRequest {
                specs: rest,
                paused: args.paused,
                submit_env: Some(env.clone()),
                own_group: group.is_none(),
            })
            .await
            .map_err(|s| from_status("submit", s))?
            .into_inner();
        ids.extend(resp.ids);
        if group.is_none() && !resp.group.is_empty() {
            group = Some(resp.group);
        }
        rest = tail;
    }
    if !named
        && !args.json
        && let Some(g) = &group
    {
        // On stderr: scripts read the ids from stdout, one a line.
        eprintln!("lardon: {} task(s) in group {g} (lardon wait --group {g})", ids.len());
    }
    if args.json {
        crate::json::print(&serde_json::json!({ "ids": ids, "group": group }))?;
    } else {
        let mut text = ids.join("\n");
        if !text.is_empty() {
            text.push('\n');
        }
        super::out(&text)?;
    }
    Ok(0)
}
