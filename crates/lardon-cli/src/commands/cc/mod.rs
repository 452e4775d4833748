//! `lardon cc gcc -c x.c -o x.o`: a compiler wrapper that sends
//! single-source compiles through the cluster broker (docs/DESIGN.md §14),
//! so that `make CC="lardon cc gcc"` distributes a build.
//!
//! A compile the [`parse`] plan accepts is preprocessed here (`-E` with
//! the same flags, so headers are read on this machine only), and the
//! preprocessed text is shipped as the task's one input, compiled at an
//! agent with `-x cpp-output -c` under the capability
//! `NAME@VERSION:TARGET` (from `-dumpversion` and `-dumpmachine`),
//! cacheable; the object comes back through the CAS. Everything else runs
//! here unchanged, and so does a compile the cluster cannot take: no
//! broker configured or reachable, no agent for the capability, a CAS
//! transfer that failed, a task that never ran. A compile error at the
//! agent is the compile's own answer: its diagnostics and exit code.

mod parse;

use std::io::Write as _;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use lardon_cluster::{Capability, Need, SubmitterId, TaskId};
use lardon_submit::Backoff;
use lardon_submit::client::{self, Answer, InputData, RemoteTask, Submitter, SubmitterConfig};

use crate::cli::CcArgs;
use parse::{Compile, Plan};

/// The object's name at the agent.
const OBJECT: &str = "out.o";
/// How long the broker has to answer its status before the compile runs
/// here instead.
const REACH: Duration = Duration::from_secs(3);

/// How a remote attempt ended.
enum Remote {
    /// The compile ran at the cluster (or came from its cache): exit so.
    Exit(u8),
    /// The cluster could not take it: compile here, for this reason.
    Fallback(String),
}

pub(crate) fn run(args: &CcArgs) -> Result<u8> {
    let say = |what: &str| {
        if args.verbose {
            eprintln!("lardon cc: {what}");
        }
    };
    let compile = match parse::plan(&args.command) {
        Plan::Local(why) => {
            say(&format!("running locally: {why}"));
            return local(&args.command);
        }
        Plan::Remote(c) => c,
    };
    let Some(broker) = args.broker.as_deref().filter(|b| !b.is_empty()) else {
        say("running locally: no broker (--broker or LARDON_BROKER)");
        return local(&args.command);
    };
    let dial = args.security.dial("agent")?;
    let rt =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("starting the runtime")?;
    match rt.block_on(remote(&compile, broker, dial)) {
        Ok(Remote::Exit(0)) => {
            say(&format!("{} compiled through the broker at {broker}", compile.source));
            Ok(0)
        }
        Ok(Remote::Exit(code)) => {
            say(&format!(
                "{} failed to compile through the broker at {broker} (exit {code})",
                compile.source
            ));
            Ok(code)
        }
        Ok(Remote::Fallback(why)) => {
            say(&format!("running locally: {why}"));
            local(&args.command)
        }
        Err(e) => Err(e),
    }
}

/// Runs `argv` here with this process's stdio; its exit code (128 +
/// signal when killed).
fn local(argv: &[String]) -> Result<u8> {
    use std::os::unix::process::ExitStatusExt as _;
    let (program, rest) = argv.split_first().context("no compiler given")?;
    let status = std::process::Command::new(program)
        .args(rest)
        .status()
        .with_context(|| format!("cannot run `{program}`"))?;
    Ok(match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(1),
        (None, Some(sig)) => u8::try_from(128 + sig).unwrap_or(255),
        (None, None) => 1,
    })
}

/// The first line `compiler FLAG` prints, trimmed.
fn ask(compiler: &str, flag: &str) -> Result<String, String> {
    let out = std::process::Command::new(compiler)
        .arg(flag)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run `{compiler} {flag}`: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    match text.lines().next().map(str::trim) {
        Some(line) if out.status.success() && !line.is_empty() => Ok(line.to_owned()),
        _ => Err(format!("`{compiler} {flag}` said nothing")),
    }
}

/// The compiler's canonical identity: its file name, version and target.
fn capability(compiler: &str) -> Result<Capability, String> {
    let name = compiler.rsplit('/').next().unwrap_or(compiler);
    let version = ask(compiler, "-dumpversion")?;
    let target = ask(compiler, "-dumpmachine")?;
    Capability::new(name, &version, &target).map_err(|e| format!("capability of `{compiler}`: {e}"))
}

/// The preprocessed source, its diagnostics echoed; `Err` when the
/// preprocessor failed (the local run then reports it as usual).
fn preprocess(c: &Compile) -> Result<Vec<u8>, String> {
    if c.preprocessed {
        return std::fs::read(&c.source).map_err(|e| format!("reading {}: {e}", c.source));
    }
    let out = std::process::Command::new(&c.compiler)
        .args(&c.preprocess)
        .arg("-E")
        .arg(&c.source)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run `{}`: {e}", c.compiler))?;
    if !out.status.success() {
        return Err("the preprocessor failed".to_owned());
    }
    // Its warnings (`#warning`) are the compile's.
    let _ = std::io::stderr().write_all(&out.stderr);
    Ok(out.stdout)
}

/// Writes `data` to `path` through a temporary file beside it, so a
/// reader (or an interrupted build) never sees half an object.
fn write_atomically(path: &str, data: &[u8]) -> std::io::Result<()> {
    let target = Path::new(path);
    let name = target.file_name().and_then(|n| n.to_str()).unwrap_or("out.o");
    let tmp = target.with_file_name(format!(".{name}.lardon-{}", std::process::id()));
    std::fs::write(&tmp, data)?;
    std::fs::rename(&tmp, target).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// `text` cut to a valid id: 1-128 of A-Z a-z 0-9 . _ : -.
fn id_of(text: &str) -> String {
    text.chars().filter(|c| c.is_ascii_alphanumeric() || "._:-".contains(*c)).take(128).collect()
}

fn task_id(host: &str) -> String {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    id_of(&format!("cc-{host}-{}-{nanos}", std::process::id()))
}

/// One submitter per process: the broker keeps one stream per submitter
/// id, so two compiles of one `make -j` sharing an id would take each
/// other's stream (and answers).
fn submitter_id(host: &str) -> String {
    id_of(&format!("{host}-cc-{}", std::process::id()))
}

async fn remote(c: &Compile, broker: &str, dial: lardon_submit::dial::Dial) -> Result<Remote> {
    let fallback = |why: String| Ok(Remote::Fallback(why));
    let capability = match capability(&c.compiler) {
        Ok(cap) => cap,
        Err(why) => return fallback(why),
    };
    let source = match preprocess(c) {
        Ok(s) => s,
        Err(why) => return fallback(why),
    };
    match tokio::time::timeout(REACH, client::status(broker, &dial)).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => return fallback(e.to_string()),
        Err(_) => return fallback(format!("the broker at {broker} did not answer within {REACH:?}")),
    }
    let host = super::broker::host_id();
    let Ok(id) = TaskId::new(&task_id(&host)) else { return fallback("no valid task id".into()) };
    let Ok(submitter) = SubmitterId::new(&submitter_id(&host)) else {
        return fallback(format!("`{host}` makes no submitter id"));
    };
    let client = match Submitter::start(SubmitterConfig {
        dial,
        broker: broker.to_owned(),
        submitter,
        heartbeat: Duration::from_secs(1),
        backoff: Backoff::default(),
        unreachable_after: Some(Duration::from_secs(10)),
    }) {
        Ok(s) => s,
        Err(e) => return fallback(e.to_string()),
    };
    let name = capability.name().to_owned();
    let mut argv = vec![name];
    argv.extend(c.compile.iter().cloned());
    argv.extend(["-x", c.lang.preprocessed(), "-c", c.lang.input_name(), "-o", OBJECT].map(String::from));
    let mut task = RemoteTask::new(id, capability, argv);
    task.need = Need { memory: 0, cpu_millis: 1000 };
    task.inputs = vec![InputData::new(c.lang.input_name(), source)];
    task.outputs = vec![OBJECT.to_owned()];
    task.cacheable = true;
    let ticket = match client.submit_with_files(&task).await {
        Ok(t) => t,
        Err(e) => return fallback(format!("uploading the source: {e}")),
    };
    let ended = match ticket.answer().await? {
        Answer::Done(ended) => ended,
        Answer::NoExecutor(why) if !why.is_empty() => return fallback(format!("no executor: {why}")),
        Answer::NoExecutor(_) => return fallback(format!("no agent runs {}", task.capability)),
        Answer::RunLocally(why) => return fallback(format!("the cluster gave it back: {why}")),
        Answer::Unreachable => return fallback(format!("the broker at {broker} stopped answering")),
        Answer::Cancelled => return fallback("cancelled".into()),
        Answer::DeadlinePassed => return fallback("its deadline passed".into()),
        Answer::Rejected(why) => return fallback(format!("refused: {why}")),
    };
    if !ended.success {
        // Ran and failed: the compiler's own verdict (diagnostics, code).
        // Failed without a compiler exit code: the infrastructure.
        if let Some(code) = ended.exit_code.filter(|c| *c != 0) {
            std::io::stdout().write_all(&ended.stdout)?;
            std::io::stderr().write_all(&ended.stderr)?;
            return Ok(Remote::Exit(u8::try_from(code).unwrap_or(1)));
        }
        return fallback(format!("the agent could not run it: {}", ended.reason));
    }
    let outputs = match client.download_outputs(&ended).await {
        Ok(o) => o,
        Err(e) => return fallback(format!("fetching the object: {e}")),
    };
    let Some((_, object)) = outputs.into_iter().find(|(p, _)| p == OBJECT) else {
        return fallback("the answer carries no object".into());
    };
    write_atomically(&c.output, &object).with_context(|| format!("writing {}", c.output))?;
    std::io::stdout().write_all(&ended.stdout)?;
    std::io::stderr().write_all(&ended.stderr)?;
    Ok(Remote::Exit(0))
}
