//! Dependencies point down: no cycle between the daemon's top-level
//! modules (`src/X.rs` or `src/X/`). Read from the source: every
//! `crate::X` path (and each `X` of `crate::{X, …}`) in a module's files
//! outside comments is an edge from that module to `X`. A path named
//! through `#[path]` (`spec_tests.rs`) belongs to the module that names it.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The top-level modules: `src/X.rs` and `src/X/mod.rs`, but not the root
/// nor a file another module includes by `#[path]`.
fn modules(src: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for entry in std::fs::read_dir(src).unwrap().flatten() {
        let path = entry.path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let dir = path.is_dir() && path.join("mod.rs").exists();
        let file = path.extension().is_some_and(|e| e == "rs") && !["lib", "main"].contains(&name.as_str());
        if dir || file {
            out.insert(name);
        }
    }
    let included: Vec<String> = out.iter().filter(|m| m.ends_with("_tests")).cloned().collect();
    for m in included {
        out.remove(&m);
    }
    out
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let p = entry.path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The module a source file belongs to.
fn owner(src: &Path, file: &Path, modules: &BTreeSet<String>) -> Option<String> {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel.components().next()?.as_os_str().to_string_lossy().into_owned();
    let name = first.strip_suffix(".rs").unwrap_or(&first).to_owned();
    if let Some(base) = name.strip_suffix("_tests") {
        return modules.contains(base).then(|| base.to_owned());
    }
    modules.contains(&name).then_some(name)
}

/// Every top-level module `text` names through `crate::`.
fn uses(text: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let code: String =
        text.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n");
    let ident = |s: &str| s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>();
    let mut out = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level names of the group: after `{` and after each comma at depth 0.
            let mut depth = 0usize;
            let mut start = true;
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => start = true,
                    c if start && !c.is_whitespace() => {
                        out.insert(ident(&group[j..]));
                        start = false;
                    }
                    _ => {}
                }
            }
        } else {
            out.insert(ident(rest));
        }
    }
    out.retain(|m| modules.contains(m));
    out
}

/// The module graph: module → the modules it uses (itself left out).
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = src();
    let modules = modules(&src);
    let mut all = Vec::new();
    files(&src, &mut all);
    let mut g: BTreeMap<String, BTreeSet<String>> =
        modules.iter().map(|m| (m.clone(), BTreeSet::new())).collect();
    for file in all {
        let Some(from) = owner(&src, &file, &modules) else { continue };
        let text = std::fs::read_to_string(&file).unwrap();
        for to in uses(&text, &modules) {
            if to != from {
                g.get_mut(&from).unwrap().insert(to);
            }
        }
    }
    g
}

/// One cycle through `start`, if any (depth-first).
fn cycle_from(g: &BTreeMap<String, BTreeSet<String>>, start: &str) -> Option<Vec<String>> {
    fn walk(
        g: &BTreeMap<String, BTreeSet<String>>,
        start: &str,
        at: &str,
        path: &mut Vec<String>,
        seen: &mut BTreeSet<String>,
    ) -> bool {
        for next in &g[at] {
            if next == start {
                path.push(next.clone());
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if walk(g, start, next, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    let mut path = vec![start.to_owned()];
    let mut seen = BTreeSet::new();
    walk(g, start, start, &mut path, &mut seen).then_some(path)
}

#[test]
fn no_cycle_between_the_daemons_top_level_modules() {
    let g = graph();
    assert!(g.contains_key("store") && g.contains_key("engine"), "modules found: {:?}", g.keys());
    let cycles: Vec<String> = g.keys().filter_map(|m| cycle_from(&g, m)).map(|c| c.join(" → ")).collect();
    assert!(cycles.is_empty(), "module cycles:\n  {}", cycles.join("\n  "));
}

#[test]
fn the_scan_sees_grouped_and_nested_paths() {
    let modules: BTreeSet<String> = ["a", "b", "c", "d"].iter().map(|s| (*s).to_owned()).collect();
    let text =
        "use crate::a::X;\nuse crate::{b::{Y, Z}, c};\n// crate::d is a comment\nfn f() { crate::now_ms(); }";
    let found: Vec<String> = uses(text, &modules).into_iter().collect();
    assert_eq!(found, ["a", "b", "c"]);
}

/// One path for a task's lifecycle: outside the store itself, only
/// `kernel/lifecycle.rs` calls the store methods that write a task's
/// state, stamps, exit code, attempts or run handle (crash recovery runs
/// at start, before the writer exists, and is the one exception).
#[test]
fn only_the_lifecycle_path_writes_a_tasks_lifecycle() {
    const METHODS: [&str; 11] = [
        "start_attempt(",
        "start_attempt_granted(",
        "set_run_handle(",
        "set_exit_code(",
        "return_to_queue(",
        "note_memory_retry(",
        "set_state(",
        "s.finish(",
        "s.restart(",
        "s.pause(",
        "s.resume(",
    ];
    let src = src();
    let mut all = Vec::new();
    files(&src, &mut all);
    let mut found = Vec::new();
    for file in all {
        let rel = file.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
        if rel.starts_with("store/") || rel == "kernel/lifecycle.rs" {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for m in METHODS {
                if code.contains(m) && !code.contains(&format!("fn {m}")) {
                    found.push(format!("{rel}:{}: {}", n + 1, line.trim()));
                }
            }
        }
    }
    assert!(found.is_empty(), "lifecycle writes outside kernel/lifecycle.rs:\n  {}", found.join("\n  "));
}
