//! What a peer sends, checked on receipt: every field of the cluster
//! protocol (`lardon.cluster.v1`) is validated here and turned into the
//! router's types, or refused with a [`WireError`] that names the field.
//! Nothing here panics on any input (a property test feeds it arbitrary
//! bytes through the protobuf decoder).

use lardon_proto::cluster as pb;
use thiserror::Error;

use crate::capability::Capability;
use crate::ids::{AgentId, SubmitterId, TaskId};
use crate::messages::{Availability, Hello, Need, Outcome, Report, Request};

/// Most argv words in one task.
pub const MAX_ARGV: usize = 4096;
/// Most environment variables in one task.
pub const MAX_ENV: usize = 4096;
/// Most bytes of argv and environment together.
pub const MAX_COMMAND_BYTES: usize = 1 << 20;
/// Most stdin bytes shipped with a task.
pub const MAX_STDIN: usize = 2 << 20;
/// Most capabilities one agent declares.
pub const MAX_CAPABILITIES: usize = 256;
/// Most task ids in one hello.
pub const MAX_RUNNING: usize = 100_000;
/// Largest token bound an agent may declare.
pub const MAX_TOKENS: u32 = 65_536;
/// Most characters of a task class.
pub const MAX_CLASS: usize = 128;
/// Most characters of an optimizer's reason or a drain's kept.
pub const MAX_NOTE: usize = 512;
/// Most characters of a failure reason kept.
pub const MAX_REASON: usize = 4096;
/// Most input files, and most output paths, in one task.
pub const MAX_FILES: usize = 10_000;
/// Most bytes of one file path.
pub const MAX_PATH: usize = 4096;

/// A field a peer sent was refused. Displays as `FIELD: why`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{field}: {why}")]
pub struct WireError {
    /// The protobuf field, e.g. `request.argv[2]`.
    pub field: String,
    /// What is wrong with it.
    pub why: String,
}

fn bad(field: impl Into<String>, why: impl Into<String>) -> WireError {
    WireError { field: field.into(), why: why.into() }
}

/// A submitted task, checked: the router's [`Request`] and the spec to
/// forward to its agent.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// What the router routes.
    pub request: Request,
    /// What the agent runs (validated; forwarded as is).
    pub spec: pb::TaskSpec,
}

fn id<T>(field: &str, value: &str, new: impl Fn(&str) -> Result<T, crate::IdError>) -> Result<T, WireError> {
    new(value)
        .map_err(|e| bad(field, format!("`{}` must be 1-128 characters of A-Z a-z 0-9 . _ : -", e.value)))
}

/// Checks a task id field.
///
/// # Errors
/// [`WireError`] naming `field`.
pub fn task_id(field: &str, value: &str) -> Result<TaskId, WireError> {
    id(field, value, TaskId::new)
}

/// Checks a capability field (required).
///
/// # Errors
/// [`WireError`] naming `field` (or its part).
pub fn capability(field: &str, value: Option<&pb::Capability>) -> Result<Capability, WireError> {
    let c = value.ok_or_else(|| bad(field, "missing"))?;
    Capability::new(&c.name, &c.version, &c.target).map_err(|e| bad(field, e.to_string()))
}

/// The wire form of a capability (an "any" part is empty).
pub fn capability_to_pb(c: &Capability) -> pb::Capability {
    pb::Capability {
        name: c.name().to_owned(),
        version: c.version().unwrap_or_default().to_owned(),
        target: c.target().unwrap_or_default().to_owned(),
    }
}

fn availability(value: Option<&pb::Availability>) -> Availability {
    value.map_or_else(Availability::default, |a| Availability { memory: a.memory, cpu_millis: a.cpu_millis })
}

/// Checks a submitter's first message.
///
/// # Errors
/// [`WireError`] naming the field.
pub fn submitter_hello(hello: &pb::SubmitterHello) -> Result<SubmitterId, WireError> {
    id("hello.submitter_id", &hello.submitter_id, SubmitterId::new)
}

/// Checks a task spec sent by `submitter`.
///
/// # Errors
/// [`WireError`] naming the first bad field (`request.argv`, …).
pub fn task_spec(spec: pb::TaskSpec, submitter: &SubmitterId) -> Result<Job, WireError> {
    let (id, capability, need) = check_spec("request", &spec)?;
    let duration_ms = (spec.expected_duration_ms > 0).then_some(spec.expected_duration_ms);
    let request = Request { id, submitter: submitter.clone(), capability, need, duration_ms };
    Ok(Job { request, spec })
}

/// An assignment an agent received, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Assignment {
    /// The task.
    pub id: TaskId,
    /// What it runs on.
    pub capability: Capability,
    /// What it needs.
    pub need: Need,
    /// What to run (validated).
    pub spec: pb::TaskSpec,
}

/// Checks an assignment from the broker (the same rules as a request).
///
/// # Errors
/// [`WireError`] naming the first bad field (`assign.argv`, …).
pub fn assignment(spec: pb::TaskSpec) -> Result<Assignment, WireError> {
    let (id, capability, need) = check_spec("assign", &spec)?;
    Ok(Assignment { id, capability, need, spec })
}

fn check_spec(p: &str, spec: &pb::TaskSpec) -> Result<(TaskId, Capability, Need), WireError> {
    let id = task_id(&format!("{p}.task_id"), &spec.task_id)?;
    let capability = capability(&format!("{p}.capability"), spec.capability.as_ref())?;
    let Some(program) = spec.argv.first() else {
        return Err(bad(format!("{p}.argv"), "empty: the program to run is argv[0]"));
    };
    if spec.argv.len() > MAX_ARGV {
        return Err(bad(format!("{p}.argv"), format!("{} words, at most {MAX_ARGV}", spec.argv.len())));
    }
    if program.is_empty() {
        return Err(bad(format!("{p}.argv[0]"), "empty program"));
    }
    for (i, word) in spec.argv.iter().enumerate() {
        if word.contains('\0') {
            return Err(bad(format!("{p}.argv[{i}]"), "contains a NUL byte"));
        }
    }
    if spec.env.len() > MAX_ENV {
        return Err(bad(format!("{p}.env"), format!("{} variables, at most {MAX_ENV}", spec.env.len())));
    }
    for (i, var) in spec.env.iter().enumerate() {
        if var.name.is_empty() || var.name.contains(['=', '\0']) {
            return Err(bad(format!("{p}.env[{i}].name"), "must be non-empty, without `=` or NUL"));
        }
        if var.value.contains('\0') {
            return Err(bad(format!("{p}.env[{i}].value"), "contains a NUL byte"));
        }
    }
    let bytes = spec.argv.iter().map(String::len).sum::<usize>()
        + spec.env.iter().map(|v| v.name.len() + v.value.len()).sum::<usize>();
    if bytes > MAX_COMMAND_BYTES {
        return Err(bad(
            format!("{p}.argv"),
            format!("argv and env are {bytes} bytes, at most {MAX_COMMAND_BYTES}"),
        ));
    }
    if spec.stdin.len() > MAX_STDIN {
        return Err(bad(format!("{p}.stdin"), format!("{} bytes, at most {MAX_STDIN}", spec.stdin.len())));
    }
    if spec.class.chars().count() > MAX_CLASS || spec.class.chars().any(char::is_control) {
        return Err(bad(
            format!("{p}.class"),
            format!("at most {MAX_CLASS} characters, no control characters"),
        ));
    }
    if spec.deadline_unix_ms < 0 {
        return Err(bad(format!("{p}.deadline_unix_ms"), "negative (0 means none)"));
    }
    check_files(p, spec)?;
    let need = spec
        .need
        .as_ref()
        .map_or_else(Need::default, |n| Need { memory: n.memory, cpu_millis: n.cpu_millis });
    Ok((id, capability, need))
}

/// Checks a path a task names for a file in its working directory: non
/// empty, relative, and made only of plain names (no `..`, no `.`, no
/// empty component, no NUL), so it can never name anything outside that
/// directory.
///
/// # Errors
/// [`WireError`] naming `field`.
pub fn relative_path(field: &str, path: &str) -> Result<(), WireError> {
    if path.is_empty() {
        return Err(bad(field, "empty path"));
    }
    if path.len() > MAX_PATH {
        return Err(bad(field, format!("{} bytes, at most {MAX_PATH}", path.len())));
    }
    if path.contains('\0') {
        return Err(bad(field, "contains a NUL byte"));
    }
    if path.starts_with('/') {
        return Err(bad(field, format!("`{path}` is absolute; paths are relative to the task's directory")));
    }
    if path.split('/').any(|c| c.is_empty() || c == "." || c == "..") {
        return Err(bad(
            field,
            format!("`{path}` has an empty, `.` or `..` component; paths stay inside the task's directory"),
        ));
    }
    Ok(())
}

/// Checks a blob digest field: 64 lower-case hex digits and a size ≥ 0.
///
/// # Errors
/// [`WireError`] naming `field`.
pub fn blob_digest(field: &str, d: Option<&pb::BlobDigest>) -> Result<(), WireError> {
    let d = d.ok_or_else(|| bad(field, "missing"))?;
    let hex = d.hash.len() == 64 && d.hash.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if !hex || d.size_bytes < 0 {
        return Err(bad(field, "not a sha256 digest (64 lower-case hex digits and a size ≥ 0)"));
    }
    Ok(())
}

fn check_files(p: &str, spec: &pb::TaskSpec) -> Result<(), WireError> {
    if spec.inputs.len() > MAX_FILES {
        return Err(bad(format!("{p}.inputs"), format!("{} files, at most {MAX_FILES}", spec.inputs.len())));
    }
    if spec.outputs.len() > MAX_FILES {
        return Err(bad(
            format!("{p}.outputs"),
            format!("{} paths, at most {MAX_FILES}", spec.outputs.len()),
        ));
    }
    let mut seen = std::collections::HashSet::new();
    for (i, f) in spec.inputs.iter().enumerate() {
        relative_path(&format!("{p}.inputs[{i}].path"), &f.path)?;
        blob_digest(&format!("{p}.inputs[{i}].digest"), f.digest.as_ref())?;
        if !seen.insert(f.path.as_str()) {
            return Err(bad(format!("{p}.inputs[{i}].path"), format!("`{}` named twice", f.path)));
        }
    }
    // A file and a directory of the same name cannot both be written.
    for (i, f) in spec.inputs.iter().enumerate() {
        let mut prefix = f.path.as_str();
        while let Some((dir, _)) = prefix.rsplit_once('/') {
            if seen.contains(dir) {
                return Err(bad(
                    format!("{p}.inputs[{i}].path"),
                    format!("`{}` is inside `{dir}`, which is an input file", f.path),
                ));
            }
            prefix = dir;
        }
    }
    let mut outs = std::collections::HashSet::new();
    for (i, path) in spec.outputs.iter().enumerate() {
        relative_path(&format!("{p}.outputs[{i}]"), path)?;
        if !outs.insert(path.as_str()) {
            return Err(bad(format!("{p}.outputs[{i}]"), format!("`{path}` named twice")));
        }
    }
    Ok(())
}

/// Checks an agent's first message.
///
/// # Errors
/// [`WireError`] naming the first bad field.
pub fn agent_hello(hello: &pb::AgentHello) -> Result<Hello, WireError> {
    let agent = id("hello.agent_id", &hello.agent_id, AgentId::new)?;
    if hello.capabilities.is_empty() {
        return Err(bad("hello.capabilities", "empty: an agent declares what it runs"));
    }
    if hello.capabilities.len() > MAX_CAPABILITIES {
        return Err(bad(
            "hello.capabilities",
            format!("{}, at most {MAX_CAPABILITIES}", hello.capabilities.len()),
        ));
    }
    let capabilities = hello
        .capabilities
        .iter()
        .enumerate()
        .map(|(i, c)| capability(&format!("hello.capabilities[{i}]"), Some(c)))
        .collect::<Result<Vec<_>, _>>()?;
    if hello.tokens > MAX_TOKENS {
        return Err(bad("hello.tokens", format!("{}, at most {MAX_TOKENS}", hello.tokens)));
    }
    if hello.running.len() > MAX_RUNNING {
        return Err(bad("hello.running", format!("{} ids, at most {MAX_RUNNING}", hello.running.len())));
    }
    let running = hello
        .running
        .iter()
        .enumerate()
        .map(|(i, t)| task_id(&format!("hello.running[{i}]"), t))
        .collect::<Result<Vec<_>, _>>()?;
    if hello.ends_at_unix_ms < 0 {
        return Err(bad("hello.ends_at_unix_ms", "negative (0 means no end known)"));
    }
    Ok(Hello {
        agent,
        capabilities,
        availability: availability(hello.availability.as_ref()),
        tokens: hello.tokens,
        running,
        ends_at_ms: u64::try_from(hello.ends_at_unix_ms).ok().filter(|t| *t > 0),
    })
}

/// Checks an agent's drain notice: the tasks it still runs.
///
/// # Errors
/// [`WireError`] naming the first bad field.
pub fn draining(value: &pb::Draining) -> Result<Vec<TaskId>, WireError> {
    if value.running.len() > MAX_RUNNING {
        return Err(bad("draining.running", format!("{} ids, at most {MAX_RUNNING}", value.running.len())));
    }
    value.running.iter().enumerate().map(|(i, t)| task_id(&format!("draining.running[{i}]"), t)).collect()
}

/// An agent's optimizer verdict, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenBound {
    /// The new bound (at least 1).
    pub tokens: u32,
    /// `grow`, `shrink` or `hold`.
    pub verdict: String,
    /// Why (cut at [`MAX_NOTE`] characters).
    pub reason: String,
}

/// Checks an agent's token-bound update.
///
/// # Errors
/// [`WireError`] naming the first bad field.
pub fn token_bound(value: &pb::TokenBound) -> Result<TokenBound, WireError> {
    if value.tokens == 0 || value.tokens > MAX_TOKENS {
        return Err(bad("tokens.tokens", format!("{}, must be 1 to {MAX_TOKENS}", value.tokens)));
    }
    if !matches!(value.verdict.as_str(), "grow" | "shrink" | "hold") {
        return Err(bad("tokens.verdict", "must be grow, shrink or hold"));
    }
    Ok(TokenBound {
        tokens: value.tokens,
        verdict: value.verdict.clone(),
        reason: value.reason.chars().filter(|c| !c.is_control()).take(MAX_NOTE).collect(),
    })
}

/// Checks an availability update.
pub fn update(value: &pb::Availability) -> Availability {
    availability(Some(value))
}

/// Checks an agent's report: the task, what happened, and (when it ended)
/// the result to forward to its submitter.
///
/// # Errors
/// [`WireError`] naming the first bad field.
pub fn report(value: pb::TaskReport) -> Result<(TaskId, Report, Option<pb::TaskEnded>), WireError> {
    let task = task_id("report.task_id", &value.task_id)?;
    match value.report {
        None => Err(bad("report.report", "missing (wait or ended)")),
        Some(pb::task_report::Report::Wait(_)) => Ok((task, Report::Wait, None)),
        Some(pb::task_report::Report::Ended(mut ended)) => {
            if ended.outputs.len() > MAX_FILES {
                return Err(bad(
                    "report.ended.outputs",
                    format!("{} files, at most {MAX_FILES}", ended.outputs.len()),
                ));
            }
            for (i, o) in ended.outputs.iter().enumerate() {
                relative_path(&format!("report.ended.outputs[{i}].path"), &o.path)?;
                blob_digest(&format!("report.ended.outputs[{i}].digest"), o.digest.as_ref())?;
            }
            if ended.reason.chars().count() > MAX_REASON {
                ended.reason = ended.reason.chars().take(MAX_REASON).collect();
            }
            let outcome = if ended.success {
                Outcome::Succeeded
            } else if ended.reason.is_empty() {
                Outcome::Failed(ended.exit_code.map_or_else(|| "failed".to_owned(), |c| format!("exit {c}")))
            } else {
                Outcome::Failed(ended.reason.clone())
            };
            Ok((task, Report::Finished(outcome), Some(ended)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use prost::Message;

    fn spec() -> pb::TaskSpec {
        pb::TaskSpec {
            task_id: "t1".into(),
            capability: Some(pb::Capability {
                name: "gcc".into(),
                version: "12".into(),
                target: String::new(),
            }),
            need: Some(pb::Need { memory: 1 << 20, cpu_millis: 1000 }),
            argv: vec!["true".into()],
            env: vec![pb::EnvVar { name: "A".into(), value: "b".into() }],
            stdin: Vec::new(),
            deadline_unix_ms: 0,
            cacheable: false,
            class: String::new(),
            expected_duration_ms: 0,
            inputs: Vec::new(),
            outputs: Vec::new(),
        }
    }

    fn err(s: pb::TaskSpec) -> String {
        let sub = SubmitterId::new("s").unwrap_or_else(|e| panic!("{e}"));
        task_spec(s, &sub).err().map(|e| e.to_string()).unwrap_or_default()
    }

    #[test]
    fn a_good_spec_passes_and_each_bad_field_is_named() {
        let sub = SubmitterId::new("s").unwrap_or_else(|e| panic!("{e}"));
        let job = task_spec(spec(), &sub).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(job.request.capability.key(), "gcc@12:*");
        assert_eq!(job.request.need, Need { memory: 1 << 20, cpu_millis: 1000 });

        assert!(err(pb::TaskSpec { task_id: "a b".into(), ..spec() }).starts_with("request.task_id:"));
        assert!(err(pb::TaskSpec { capability: None, ..spec() }).starts_with("request.capability: missing"));
        let path = pb::Capability { name: "/usr/bin/gcc".into(), ..Default::default() };
        assert!(err(pb::TaskSpec { capability: Some(path), ..spec() }).starts_with("request.capability:"));
        assert!(err(pb::TaskSpec { argv: vec![], ..spec() }).starts_with("request.argv: empty"));
        assert!(err(pb::TaskSpec { argv: vec![String::new()], ..spec() }).starts_with("request.argv[0]"));
        assert!(
            err(pb::TaskSpec { argv: vec!["a".into(), "b\0".into()], ..spec() })
                .starts_with("request.argv[1]")
        );
        let env = vec![pb::EnvVar { name: "A=B".into(), value: String::new() }];
        assert!(err(pb::TaskSpec { env, ..spec() }).starts_with("request.env[0].name"));
        assert!(err(pb::TaskSpec { stdin: vec![0; MAX_STDIN + 1], ..spec() }).starts_with("request.stdin"));
        assert!(err(pb::TaskSpec { deadline_unix_ms: -1, ..spec() }).starts_with("request.deadline_unix_ms"));
        assert!(err(pb::TaskSpec { class: "a\nb".into(), ..spec() }).starts_with("request.class"));
        assert!(
            err(pb::TaskSpec { class: "x".repeat(MAX_CLASS + 1), ..spec() }).starts_with("request.class")
        );
        let timed = task_spec(pb::TaskSpec { expected_duration_ms: 90_000, ..spec() }, &sub)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(timed.request.duration_ms, Some(90_000));
    }

    #[test]
    fn file_paths_stay_inside_the_task_directory_and_digests_are_checked() {
        let digest = Some(pb::BlobDigest { hash: "a".repeat(64), size_bytes: 3 });
        let input =
            |path: &str| pb::InputFile { path: path.into(), digest: digest.clone(), executable: false };
        let with = |inputs: Vec<pb::InputFile>, outputs: Vec<&str>| pb::TaskSpec {
            inputs,
            outputs: outputs.into_iter().map(String::from).collect(),
            ..spec()
        };
        let sub = SubmitterId::new("s").unwrap_or_else(|e| panic!("{e}"));
        let good = with(vec![input("x.i"), input("inc/a.h")], vec!["out/x.o"]);
        assert!(task_spec(good, &sub).is_ok());
        for bad_path in ["/etc/passwd", "../x", "a/../../x", "a//b", "./a", "", "a/.", "a/\0"] {
            let e = err(with(vec![input(bad_path)], vec![]));
            assert!(e.starts_with("request.inputs[0].path: "), "{bad_path:?}: {e}");
            let e = err(with(vec![], vec![bad_path]));
            assert!(e.starts_with("request.outputs[0]: "), "{bad_path:?}: {e}");
        }
        assert!(err(with(vec![input("/abs")], vec![])).contains("absolute"));
        let e = err(with(vec![input("a"), input("a")], vec![]));
        assert!(e.starts_with("request.inputs[1].path: `a` named twice"), "{e}");
        let e = err(with(vec![input("a/b"), input("a")], vec![]));
        assert!(e.starts_with("request.inputs[0].path: `a/b` is inside `a`"), "{e}");
        let mut short = input("x");
        short.digest = Some(pb::BlobDigest { hash: "ABC".into(), size_bytes: 1 });
        assert!(err(with(vec![short], vec![])).starts_with("request.inputs[0].digest: "));
        let mut none = input("x");
        none.digest = None;
        assert!(err(with(vec![none], vec![])).starts_with("request.inputs[0].digest: missing"));
    }

    #[test]
    fn hellos_and_reports_name_their_fields() {
        let hello = pb::AgentHello {
            agent_id: "a1".into(),
            capabilities: vec![pb::Capability { name: "gcc".into(), ..Default::default() }],
            availability: None,
            tokens: 2,
            running: vec!["t1".into()],
            ends_at_unix_ms: 0,
        };
        let ok = agent_hello(&hello).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((ok.tokens, ok.running.len()), (2, 1));
        let e = |h: pb::AgentHello| agent_hello(&h).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e(pb::AgentHello { agent_id: String::new(), ..hello.clone() }).starts_with("hello.agent_id"));
        assert!(
            e(pb::AgentHello { capabilities: vec![], ..hello.clone() }).starts_with("hello.capabilities")
        );
        assert!(e(pb::AgentHello { tokens: MAX_TOKENS + 1, ..hello.clone() }).starts_with("hello.tokens"));
        assert!(
            e(pb::AgentHello { running: vec!["x y".into()], ..hello.clone() })
                .starts_with("hello.running[0]")
        );
        assert!(
            e(pb::AgentHello { ends_at_unix_ms: -1, ..hello.clone() }).starts_with("hello.ends_at_unix_ms")
        );
        let ends = agent_hello(&pb::AgentHello { ends_at_unix_ms: 5_000, ..hello.clone() });
        assert_eq!(ends.map(|h| h.ends_at_ms), Ok(Some(5_000)));
        let tb =
            |tokens, verdict: &str| pb::TokenBound { tokens, verdict: verdict.into(), reason: "r".into() };
        assert!(token_bound(&tb(0, "hold")).is_err_and(|e| e.field == "tokens.tokens"));
        assert!(token_bound(&tb(2, "jump")).is_err_and(|e| e.field == "tokens.verdict"));
        assert_eq!(token_bound(&tb(2, "grow")).map(|t| t.tokens), Ok(2));
        let d = pb::Draining { running: vec!["ok".into(), "no way".into()], reason: String::new() };
        assert!(draining(&d).is_err_and(|e| e.field == "draining.running[1]"));
        let r = pb::TaskReport { task_id: "t".into(), report: None };
        assert!(report(r).err().map(|e| e.to_string()).unwrap_or_default().starts_with("report.report"));
        let ended = pb::TaskEnded { success: false, exit_code: Some(3), ..Default::default() };
        let r = pb::TaskReport { task_id: "t".into(), report: Some(pb::task_report::Report::Ended(ended)) };
        let (_, rep, _) = report(r).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(rep, Report::Finished(Outcome::Failed("exit 3".into())));
    }

    /// Decodes arbitrary bytes as every message a peer sends and validates
    /// what decodes: never a panic, and an accepted message keeps its ids.
    fn decode_and_validate(bytes: &[u8]) {
        let sub = SubmitterId::new("fuzz").unwrap_or_else(|e| panic!("{e}"));
        if let Ok(m) = pb::SubmitMessage::decode(bytes) {
            match m.kind {
                Some(pb::submit_message::Kind::Hello(h)) => drop(submitter_hello(&h)),
                Some(pb::submit_message::Kind::Request(s)) => {
                    let id = s.task_id.clone();
                    if let Ok(job) = task_spec(s, &sub) {
                        assert_eq!(job.request.id.as_str(), id);
                    }
                }
                Some(pb::submit_message::Kind::Cancel(c)) => drop(task_id("cancel.task_id", &c.task_id)),
                Some(pb::submit_message::Kind::Heartbeat(_)) | None => {}
            }
        }
        if let Ok(m) = pb::AgentMessage::decode(bytes) {
            match m.kind {
                Some(pb::agent_message::Kind::Hello(h)) => {
                    if let Ok(hello) = agent_hello(&h) {
                        assert_eq!(hello.agent.as_str(), h.agent_id);
                    }
                }
                Some(pb::agent_message::Kind::Update(a)) => drop(update(&a)),
                Some(pb::agent_message::Kind::Report(r)) => drop(report(r)),
                Some(pb::agent_message::Kind::Draining(d)) => drop(draining(&d)),
                Some(pb::agent_message::Kind::Tokens(t)) => drop(token_bound(&t)),
                Some(pb::agent_message::Kind::Heartbeat(_)) | None => {}
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn nothing_a_peer_sends_panics_the_decoder_or_validation(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            decode_and_validate(&bytes);
        }

        #[test]
        fn mutated_real_messages_never_panic(cut in 0usize..200, flip in 0usize..200, with in any::<u8>()) {
            let m = pb::SubmitMessage { kind: Some(pb::submit_message::Kind::Request(spec())) }.encode_to_vec();
            let mut b = m.clone();
            if !b.is_empty() {
                let i = flip % b.len();
                b[i] ^= with;
            }
            b.truncate(cut.min(b.len()));
            decode_and_validate(&b);
            decode_and_validate(&m);
        }
    }
}
