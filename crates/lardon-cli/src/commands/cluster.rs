//! `lardon cluster status | explain | submit`: a cluster broker's state,
//! its Provisioner's reasons, and one command run through it (docs/DESIGN.md §14).

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Result;
use lardon_cluster::{Capability, Need, SubmitterId, TaskId};
use lardon_submit::Backoff;
use lardon_submit::client::{self, Answer, RemoteTask, StatusError, Submitter, SubmitterConfig};

use crate::cli::{ClusterCommand, ClusterSubmitArgs};
use crate::error::{Failure, usage};

pub(crate) async fn run(command: &ClusterCommand) -> Result<u8> {
    match command {
        ClusterCommand::Status { broker, json, watch: false, security, .. } => {
            status(broker, *json, &security.dial("agent")?).await
        }
        ClusterCommand::Status { broker, json, watch: true, min_interval, security } => {
            super::cluster_watch::watch(broker, *json, *min_interval, &security.dial("agent")?).await
        }
        ClusterCommand::Explain { broker, json, security } => {
            explain(broker, *json, &security.dial("agent")?).await
        }
        ClusterCommand::Submit(args) => submit(args).await,
    }
}

async fn explain(broker: &str, json: bool, dial: &lardon_submit::dial::Dial) -> Result<u8> {
    let e = client::explain(broker, dial).await.map_err(|e| unreachable(e, broker, dial))?;
    if json {
        let allocations: Vec<serde_json::Value> = e
            .allocations
            .iter()
            .map(
                |a| serde_json::json!({"id": a.id, "shape": a.shape, "state": a.state, "started": a.started}),
            )
            .collect();
        let v = serde_json::json!({
            "provider": (!e.provider.is_empty()).then_some(&e.provider),
            "paused": (!e.paused.is_empty()).then_some(&e.paused),
            "holds": e.holds, "allocations": allocations,
        });
        super::out(&format!("{v:#}\n"))?;
        return Ok(0);
    }
    if e.provider.is_empty() {
        super::out("this broker runs no Provisioner (start it with --provision FILE)\n")?;
        return Ok(0);
    }
    let mut text = format!("provider {}: {} allocation(s) alive\n", e.provider, e.allocations.len());
    if !e.allocations.is_empty() {
        text.push_str(&format!("{:<16} {:<12} {:<8} STARTED\n", "ALLOCATION", "SHAPE", "STATE"));
    }
    for a in &e.allocations {
        let started = if a.started { "yes" } else { "no" };
        text.push_str(&format!("{:<16} {:<12} {:<8} {started}\n", a.id, a.shape, a.state));
    }
    for line in &e.holds {
        text.push_str(line);
        text.push('\n');
    }
    super::out(&text)?;
    Ok(0)
}

/// A broker call's failure as the CLI reports it: a bad address or
/// credentials that do not fit the broker (a TLS mismatch, named by the
/// flag that fixes it) are input errors (exit 2); nothing answering is
/// exit 3, with how to start a broker.
pub(crate) fn unreachable(e: StatusError, broker: &str, dial: &lardon_submit::dial::Dial) -> anyhow::Error {
    if let Some(hint) = dial.diagnose(&e) {
        return usage(format!(
            "broker {broker}: {hint} (it failed with: {})",
            lardon_submit::dial::root_cause(&e)
        ));
    }
    match e {
        StatusError::Address(e) => usage(e.to_string()),
        StatusError::Unreachable { .. } => Failure::Unreachable(format!(
            "{} (start one with `lardon broker --listen ADDR`)",
            lardon_submit::dial::error_chain(&e)
        ))
        .into(),
        StatusError::Call(_) => anyhow::Error::new(e),
    }
}

async fn status(broker: &str, json: bool, dial: &lardon_submit::dial::Dial) -> Result<u8> {
    let s = client::status(broker, dial).await.map_err(|e| unreachable(e, broker, dial))?;
    if json {
        super::out(&format!("{:#}\n", status_json(&s)))?;
    } else {
        super::out(&status_text(&s))?;
    }
    Ok(0)
}

/// The status as `--json` prints it.
pub(crate) fn status_json(s: &lardon_proto::cluster::ClusterStatusResponse) -> serde_json::Value {
    let agents: Vec<serde_json::Value> = s
        .agents
        .iter()
        .map(|a| {
            let avail = a.availability.unwrap_or_default();
            let optimizer = (!a.optimizer_verdict.is_empty())
                .then(|| serde_json::json!({"verdict": a.optimizer_verdict, "reason": a.optimizer_reason}));
            serde_json::json!({
                "id": a.agent_id, "capabilities": a.capabilities, "tokens": a.tokens,
                "in_flight": a.in_flight, "memory_available": avail.memory,
                "cpu_available_millis": avail.cpu_millis, "recovering": a.recovering,
                "draining": a.draining,
                "ends_at_unix_ms": (a.ends_at_unix_ms > 0).then_some(a.ends_at_unix_ms),
                "optimizer": optimizer,
            })
        })
        .collect();
    serde_json::json!({
        "agents": agents, "queued": s.queued, "in_flight": s.in_flight,
        "finished": s.finished, "submitters": s.submitters,
        "tokens": s.tokens, "advertised_tokens": s.advertised_tokens, "cache_hit_rate": s.cache_hit_rate,
        "routes": s.routes.iter().map(|r| serde_json::json!({
            "capability": r.capability, "queued": r.queued, "in_flight": r.in_flight,
        })).collect::<Vec<_>>(),
    })
}

/// The status as a table.
pub(crate) fn status_text(s: &lardon_proto::cluster::ClusterStatusResponse) -> String {
    let mut text = format!(
        "{} agent(s), {} submitter(s); {} queued, {} in flight, {} answered\n",
        s.agents.len(),
        s.submitters,
        s.queued,
        s.in_flight,
        s.finished
    );
    if s.cache_hit_rate > 0.0 {
        text.push_str(&format!(
            "capacity: {} agent token(s), advertised {} (cache hit rate {:.0} %: a hit holds no token)\n",
            s.tokens,
            s.advertised_tokens,
            s.cache_hit_rate * 100.0
        ));
    }
    if !s.agents.is_empty() {
        text.push_str(&format!(
            "{:<24} {:>6} {:>9} {:>10} {:>8}  CAPABILITIES\n",
            "AGENT", "TOKENS", "IN FLIGHT", "MEMORY", "CPUS"
        ));
    }
    for a in &s.agents {
        let avail = a.availability.unwrap_or_default();
        let id = match (a.recovering, a.draining) {
            (true, _) => format!("{} (reconnecting)", a.agent_id),
            (_, true) => format!("{} (draining)", a.agent_id),
            _ => a.agent_id.clone(),
        };
        text.push_str(&format!(
            "{id:<24} {:>6} {:>9} {:>10} {:>8}  {}\n",
            a.tokens,
            a.in_flight,
            lardon::format_bytes(avail.memory),
            lardon::format_cpus(avail.cpu_millis),
            a.capabilities.join(" ")
        ));
        if a.ends_at_unix_ms > 0 {
            let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
            let left = u128::try_from(a.ends_at_unix_ms).unwrap_or(0).saturating_sub(now);
            let left = Duration::from_millis(u64::try_from(left).unwrap_or(u64::MAX));
            text.push_str(&format!("    allocation ends in {}\n", short_duration(left)));
        }
        if !a.optimizer_verdict.is_empty() {
            text.push_str(&format!("    optimizer: {} ({})\n", a.optimizer_verdict, a.optimizer_reason));
        }
    }
    text
}

async fn submit(args: &ClusterSubmitArgs) -> Result<u8> {
    let capability = Capability::parse(&args.capability).map_err(|e| usage(format!("--capability: {e}")))?;
    let host = super::broker::host_id();
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let id = args.id.clone().unwrap_or_else(|| format!("{host}-{}-{}", std::process::id(), now.as_millis()));
    let id = TaskId::new(&id).map_err(|e| usage(format!("--id: {e}")))?;
    // One id per process by default: the broker keeps one stream per
    // submitter id and refuses a second live one (this submit then fails
    // saying so), so two submits sharing the host's id could not both run.
    let submitter = args.submitter.clone().unwrap_or_else(|| format!("{host}-{}", std::process::id()));
    let submitter = SubmitterId::new(&submitter).map_err(|e| usage(format!("--submitter: {e}")))?;
    let mut task = RemoteTask::new(id, capability, args.argv.clone());
    task.need = Need { memory: args.mem, cpu_millis: args.cpus };
    task.cacheable = args.cacheable;
    task.class.clone_from(&args.class);
    task.expected_duration = args.expected_duration.map(Duration::from_millis);
    task.deadline_unix_ms = args
        .deadline
        .map(|ms| i64::try_from(now.as_millis().saturating_add(u128::from(ms))).unwrap_or(i64::MAX));
    task.env.clone_from(&args.env);
    // Files relative to where it is submitted from, as `lardon submit`'s.
    let cwd = std::env::current_dir().map_err(|e| usage(format!("the current directory: {e}")))?;
    let (inputs, outputs) = super::submit::file_paths(&args.inputs, &args.outputs, &cwd)?;
    task.inputs = lardon_submit::files::read_inputs(&cwd, &inputs).map_err(usage)?;
    task.outputs.clone_from(&outputs);
    // Fail fast when nothing answers: a never-reached broker is exit 3.
    let dial = args.security.dial("agent")?;
    client::status(&args.broker, &dial).await.map_err(|e| unreachable(e, &args.broker, &dial))?;
    let client = Submitter::start(SubmitterConfig {
        dial,
        broker: args.broker.clone(),
        submitter,
        // Often enough for a broker run with a short --heartbeat.
        heartbeat: Duration::from_secs(1),
        backoff: Backoff::default(),
        unreachable_after: Some(Duration::from_secs(60)),
    })
    .map_err(|e| usage(e.to_string()))?;
    let ticket = client
        .submit_with_files(&task)
        .await
        .map_err(|e| anyhow::anyhow!("--input: uploading to the broker's cache: {e}"))?;
    let answer = ticket.answer().await?;
    match answer {
        Answer::Done(ended) => {
            std::io::stdout().write_all(&ended.stdout)?;
            std::io::stderr().write_all(&ended.stderr)?;
            if ended.success {
                let files = client
                    .download_outputs(&ended)
                    .await
                    .map_err(|e| anyhow::anyhow!("--output: fetching from the broker's cache: {e}"))?;
                let tag = format!("c{}", std::process::id());
                lardon_submit::files::write_outputs(&cwd, &files, &outputs, &tag)
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                return Ok(0);
            }
            eprintln!("error: task {} failed at its agent: {}", task.id, ended.reason);
            Ok(ended.exit_code.and_then(|c| u8::try_from(c).ok()).filter(|c| *c != 0).unwrap_or(1))
        }
        Answer::NoExecutor(why) if !why.is_empty() => {
            Err(anyhow::anyhow!("no executor for {}: {why}: run it locally", task.capability))
        }
        Answer::NoExecutor(_) => Err(anyhow::anyhow!("no agent runs {}: run it locally", task.capability)),
        Answer::RunLocally(why) => Err(anyhow::anyhow!("the cluster gave it back ({why}): run it locally")),
        Answer::Cancelled => Err(anyhow::anyhow!("task {} was cancelled", task.id)),
        Answer::DeadlinePassed => {
            Err(anyhow::anyhow!("task {}: --deadline passed before an agent could start it", task.id))
        }
        Answer::Rejected(why) => Err(usage(why)),
        Answer::Unreachable => {
            Err(Failure::Unreachable(format!("the broker at {} stopped answering", args.broker)).into())
        }
    }
}

/// `2h05m`, `14m30s`, `45s`: a time left, to the second.
fn short_duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        3600.. => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        60.. => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{s}s"),
    }
}
