//! Workload files for `lardon run FILE.toml`: `[[task]]` entries with the
//! same fields as `submit`, `after` by name, and an optional `[policy]`
//! table. Every error is one line naming the file, the line, the task and
//! the field.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use anyhow::Result;
use lardon_proto::pb;
use serde::Deserialize;
use toml::Spanned;

use crate::cli::NeedsArgs;
use crate::commands::spec::{SpecParts, Style, task_spec};
use crate::error::usage;

/// A number or a string with a unit (`mem = "2GiB"`, `mem = 1048576`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum Value {
    Int(i64),
    Float(f64),
    Text(String),
}

impl Value {
    fn text(&self) -> String {
        match self {
            Value::Int(i) => i.to_string(),
            Value::Float(f) => f.to_string(),
            Value::Text(s) => s.clone(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTask {
    name: Spanned<String>,
    command: Spanned<Vec<String>>,
    mem: Option<Spanned<Value>>,
    mem_per_item: Option<Spanned<Value>>,
    items: Option<Spanned<Value>>,
    batch: Option<Spanned<Value>>,
    gpu_mem: Option<Spanned<Value>>,
    cpus: Option<Spanned<Value>>,
    io: Option<Spanned<u32>>,
    scratch: Option<Spanned<Value>>,
    class: Option<Spanned<String>>,
    #[serde(default)]
    priority: i32,
    #[serde(default)]
    after: Vec<Spanned<String>>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<String>,
    #[serde(default)]
    no_retry: bool,
}

/// `[host]`: govern a simulated host of this size instead of the real one
/// (fixed budgets, no pressure; commands still really run).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHost {
    memory: Spanned<Value>,
    cpus: Spanned<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorkload {
    #[serde(default)]
    task: Vec<RawTask>,
    host: Option<RawHost>,
    #[serde(default)]
    policy: BTreeMap<String, toml::Value>,
}

/// One task of a workload, ready to submit once `after` names are mapped to ids.
#[derive(Debug, Clone)]
pub(crate) struct WorkloadTask {
    pub(crate) name: String,
    pub(crate) spec: pb::TaskSpec,
    /// Names of the tasks this one waits for.
    pub(crate) after: Vec<String>,
}

#[derive(Debug)]
pub(crate) struct Workload {
    /// In an order where every task comes after its dependencies.
    pub(crate) tasks: Vec<WorkloadTask>,
    pub(crate) policy: Vec<(String, String)>,
    /// `[host]`: memory and CPUs of a simulated host.
    pub(crate) host: Option<(u64, u32)>,
}

/// Where a TOML error sits, for its message: the table (`task #N` counts
/// `[[task]]` headers above it, or `[host]`, `[policy]`) and the field
/// whose `key = value` line holds the error, so that serde's own text
/// ("invalid type: string, expected u32") still names the field.
fn place_of(src: &str, offset: usize) -> String {
    let before = &src[..offset.min(src.len())];
    let mut table = String::new();
    let mut tasks = 0;
    for line in before.lines() {
        let l = line.trim_start();
        if l.starts_with("[[task]]") {
            tasks += 1;
            table = format!(" task #{tasks}:");
        } else if l.starts_with('[') {
            table = format!(" {}:", l.split(']').next().unwrap_or(l).to_owned() + "]");
        }
    }
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line = src[line_start..].lines().next().unwrap_or_default();
    let key = match line.split_once('=') {
        Some((key, _)) if !line.trim_start().starts_with('[') => {
            let key = key.trim().trim_matches('"');
            if key.is_empty() { String::new() } else { format!(" {key}:") }
        }
        _ => String::new(),
    };
    format!("{table}{key}")
}

fn line_of(src: &str, offset: usize) -> usize {
    src[..offset.min(src.len())].bytes().filter(|&b| b == b'\n').count() + 1
}

/// Parses and checks `src` (read from `path`, used in messages).
pub(crate) fn parse(path: &Path, src: &str) -> Result<Workload> {
    let file = path.display();
    let raw: RawWorkload = toml::from_str(src).map_err(|e| {
        let at = e.span().map(|s| format!(":{}", line_of(src, s.start))).unwrap_or_default();
        let place = e.span().map(|s| place_of(src, s.start)).unwrap_or_default();
        let message = e.message().replace('\n', " ");
        // serde's words for our "number or size" fields.
        let message = message.replace(
            "data did not match any variant of untagged enum Value",
            "expected a number or a string with a unit (e.g. \"2GiB\")",
        );
        usage(format!("{file}{at}:{place} {message}"))
    })?;
    if raw.task.is_empty() {
        return Err(usage(format!("{file}: no [[task]] entries (each needs name and command)")));
    }
    let mut tasks = Vec::new();
    let mut index = HashMap::new();
    for t in &raw.task {
        let task = convert(t, src, &file.to_string())?;
        if index.insert(task.name.clone(), tasks.len()).is_some() {
            let line = line_of(src, t.name.span().start);
            return Err(usage(format!(
                "{file}:{line}: task \"{}\": name: used twice (names must be unique)",
                task.name
            )));
        }
        tasks.push((task, t));
    }
    for (task, raw) in &tasks {
        for dep in &raw.after {
            if !index.contains_key(dep.get_ref()) {
                let line = line_of(src, dep.span().start);
                return Err(usage(format!(
                    "{file}:{line}: task \"{}\": after: no task named \"{}\"",
                    task.name,
                    dep.get_ref()
                )));
            }
        }
    }
    // Order by dependencies (Kahn); a cycle is an input error.
    let mut placed = vec![false; tasks.len()];
    let mut ordered = Vec::new();
    while ordered.len() < tasks.len() {
        let before = ordered.len();
        for (i, (task, _)) in tasks.iter().enumerate() {
            if !placed[i] && task.after.iter().all(|d| index.get(d).is_some_and(|&j| placed[j])) {
                placed[i] = true;
                ordered.push(task.clone());
            }
        }
        if ordered.len() == before {
            let stuck: Vec<_> = tasks
                .iter()
                .enumerate()
                .filter(|(i, _)| !placed[*i])
                .map(|(_, t)| t.0.name.clone())
                .collect();
            return Err(usage(format!("{file}: after: a dependency cycle among {}", stuck.join(", "))));
        }
    }
    let policy = raw
        .policy
        .into_iter()
        .map(|(k, v)| {
            let text = match v {
                toml::Value::String(s) => s,
                other => other.to_string(),
            };
            (k, text)
        })
        .collect();
    let host = match &raw.host {
        None => None,
        Some(h) => {
            let line = |s: std::ops::Range<usize>| line_of(src, s.start);
            let memory = crate::parse::parse_size(&h.memory.get_ref().text())
                .map_err(|e| usage(format!("{file}:{}: [host]: memory: {e}", line(h.memory.span()))))?;
            if *h.cpus.get_ref() == 0 || memory == 0 {
                return Err(usage(format!(
                    "{file}:{}: [host]: memory and cpus must be more than 0",
                    line(h.cpus.span())
                )));
            }
            Some((memory, *h.cpus.get_ref()))
        }
    };
    Ok(Workload { tasks: ordered, policy, host })
}

fn convert(t: &RawTask, src: &str, file: &str) -> Result<WorkloadTask> {
    let name = t.name.get_ref().clone();
    let fail = |field: &str, span: std::ops::Range<usize>, msg: String| {
        usage(format!("{file}:{}: task \"{name}\": {field}: {msg}", line_of(src, span.start)))
    };
    if name.trim().is_empty() {
        return Err(fail("name", t.name.span(), "is empty".into()));
    }
    type Parser<T> = fn(&str) -> Result<T, String>;
    fn field<T>(
        v: &Option<Spanned<Value>>,
        p: Parser<T>,
    ) -> Result<Option<T>, (std::ops::Range<usize>, String)> {
        match v {
            None => Ok(None),
            Some(s) => p(&s.get_ref().text()).map(Some).map_err(|e| (s.span(), e)),
        }
    }
    let get = |fname: &str, r: Result<Option<u64>, (std::ops::Range<usize>, String)>| {
        r.map_err(|(span, msg)| fail(fname, span, msg))
    };
    let needs = NeedsArgs {
        mem: get("mem", field(&t.mem, crate::parse::parse_size))?,
        mem_per_item: get("mem_per_item", field(&t.mem_per_item, crate::parse::parse_size))?,
        items: get("items", field(&t.items, crate::parse::parse_count))?,
        batch: field(&t.batch, crate::parse::parse_batch).map_err(|(span, msg)| fail("batch", span, msg))?,
        gpu_mem: get("gpu_mem", field(&t.gpu_mem, crate::parse::parse_size))?,
        cpus: field(&t.cpus, crate::parse::parse_cpu).map_err(|(span, msg)| fail("cpus", span, msg))?,
        io: t.io.as_ref().map(|s| *s.get_ref()),
        scratch: get("scratch", field(&t.scratch, crate::parse::parse_size))?,
        class: t.class.as_ref().map(|c| c.get_ref().clone()),
    };
    let mut argv = t.command.get_ref().clone();
    if argv.first().is_some_and(|c| c == "lardon") {
        // `lardon` in a workload means this very binary.
        if let Ok(exe) = std::env::current_exe() {
            argv[0] = exe.to_string_lossy().into_owned();
        }
    }
    if let Some(c) = &t.cwd {
        let dir = Path::new(file).parent().unwrap_or(Path::new(".")).join(c);
        if !dir.is_dir() {
            return Err(fail(
                "cwd",
                t.name.span(),
                format!("`{}` is not an existing directory", dir.display()),
            ));
        }
    }
    let parts = SpecParts {
        name: name.clone(),
        argv,
        // A relative cwd is relative to the workload file.
        cwd: t.cwd.as_ref().map_or(String::new(), |c| {
            let base = Path::new(file).parent().unwrap_or(Path::new("."));
            std::path::absolute(base.join(c)).unwrap_or_else(|_| base.join(c)).to_string_lossy().into_owned()
        }),
        env: t.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        priority: t.priority,
        after: Vec::new(),
        retry: !t.no_retry,
        no_oom_retry: false,
    };
    let spec = task_spec(&needs, parts, Style::Toml).map_err(|e| {
        let span = match e.to_string().split(':').next().unwrap_or_default() {
            "command" => t.command.span(),
            "class" => t.class.as_ref().map_or(t.name.span(), Spanned::span),
            _ => t.name.span(),
        };
        usage(format!("{file}:{}: task \"{name}\": {e}", line_of(src, span.start)))
    })?;
    Ok(WorkloadTask { name, spec, after: t.after.iter().map(|a| a.get_ref().clone()).collect() })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn err(src: &str) -> String {
        parse(Path::new("w.toml"), src).unwrap_err().to_string()
    }

    #[test]
    fn good_file_orders_by_dependency() {
        let src = r#"
[policy]
memory_reserve = "1GiB"
max_running = 2

[[task]]
name = "b"
command = ["true"]
after = ["a"]

[[task]]
name = "a"
command = ["true"]
mem = "100MiB"
items = 10
batch = "1..4"
"#;
        let w = parse(Path::new("w.toml"), src).unwrap();
        assert_eq!(w.tasks[0].name, "a");
        assert_eq!(w.tasks[1].after, vec!["a".to_string()]);
        assert_eq!(
            w.policy,
            vec![("max_running".into(), "2".into()), ("memory_reserve".into(), "1GiB".into())]
        );
        assert_eq!(w.tasks[0].spec.estimate.as_ref().unwrap().batch_max, Some(4));
    }

    #[test]
    fn errors_are_one_line_with_task_and_field() {
        let e = err("[[task]]\nname = \"x\"\ncommand = [\"true\"]\nmem = \"GB2\"\n");
        assert!(e.starts_with("w.toml:4: task \"x\": mem: "), "{e}");
        let e = err("[[task]]\nname = \"x\"\ncommand = [\"true\"]\nmemm = \"1GiB\"\n");
        assert!(e.contains("w.toml:4: task #1:") && e.contains("memm"), "{e}");
        assert!(!e.contains('\n'));
        let e = err("[[task]]\nname = \"x\"\ncommand = [\"true\"]\nafter = [\"nope\"]\n");
        assert!(e.contains("after: no task named \"nope\""), "{e}");
        let e = err("[[task]]\nname = \"x\"\ncommand = []\n");
        assert!(e.contains("task \"x\": command"), "{e}");
        let e = err("[[task]]\nname = \"x\"\ncommand = [\"t\"]\nbatch = \"1..4\"\n");
        assert!(e.contains("batch: a batch range needs items"), "{e}");
        let e = err(
            "[[task]]\nname = \"a\"\ncommand = [\"t\"]\nafter=[\"b\"]\n[[task]]\nname = \"b\"\ncommand = [\"t\"]\nafter=[\"a\"]\n",
        );
        assert!(e.contains("cycle"), "{e}");
    }

    proptest::proptest! {
        #[test]
        fn any_text_is_a_workload_or_one_line_error(src in "\\PC{0,300}") {
            if let Err(e) = parse(Path::new("w.toml"), &src) {
                proptest::prop_assert!(!e.to_string().contains('\n'));
            }
        }

        #[test]
        fn mutated_fields_never_panic(
            key in "(mem|mem_per_item|items|batch|gpu_mem|cpus|io|scratch|class|priority|cwd|no_retry|x)",
            value in "(\"[ -~]{0,12}\"|-?[0-9]{1,22}|[0-9]\\.[0-9]{1,5}|true|\\[\\]|\\{\\})",
        ) {
            let src = format!("[[task]]\nname = \"t\"\ncommand = [\"x\"]\nitems = 4\n{key} = {value}\n");
            if let Err(e) = parse(Path::new("w.toml"), &src) {
                proptest::prop_assert!(!e.to_string().contains('\n'));
            }
        }
    }
}
