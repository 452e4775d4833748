//! The repository stands alone (docs/DESIGN.md §13): every `docs/DESIGN.md
//! §N` that a tracked file cites names a section `## N.` of that file, and
//! no tracked file holds an absolute path under somebody's home or work
//! directory (such a path means nothing on another machine); and the crate
//! graph the `Cargo.toml`s declare is the one docs/DESIGN.md §1's table and
//! docs/ARCHITECTURE.md's diagram draw.
//!
//! Break it to watch it fail: cite a section the design lacks (§15) in any
//! comment, write a path under the root user's home in a script, or add
//! `lardon-cluster` to the daemon's dependencies.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The files git tracks, relative to the root. A checkout without git (or
/// without its metadata) cannot say what is tracked: the test fails with
/// that reason rather than passing on nothing.
fn tracked_files(root: &Path) -> Vec<PathBuf> {
    let out = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["ls-files", "-z"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run `git ls-files` to list the tracked files: {e}"));
    assert!(
        out.status.success(),
        "`git ls-files` failed in {}: {}",
        root.display(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    let files: Vec<PathBuf> = out
        .stdout
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| PathBuf::from(String::from_utf8_lossy(s).into_owned()))
        .collect();
    assert!(!files.is_empty(), "`git ls-files` listed no file in {}", root.display());
    files
}

/// The section numbers of `## N. Title` headings.
fn sections(design: &str) -> BTreeSet<u32> {
    design
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .filter_map(|l| l.split_once('.'))
        .filter_map(|(n, _)| n.trim().parse().ok())
        .collect()
}

/// Parses `§N` at the start of `s`: the number and the bytes consumed.
fn section_at(s: &str) -> Option<(u32, usize)> {
    let rest = s.strip_prefix('§')?;
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let n = rest[..digits].parse().ok()?;
    Some((n, '§'.len_utf8() + digits))
}

/// One citation of the design: where it is and what it says.
#[derive(Debug, PartialEq, Eq)]
struct Citation {
    line: usize,
    /// Whether it names the file by its path in the repository.
    qualified: bool,
    sections: Vec<u32>,
}

/// Every `docs/DESIGN.md §N` in `text`, with the sections of a list or range
/// that follows it (`§2–§6`, `§1, §3`). Whitespace (a line break
/// included) may stand between the file name and the first section; a
/// mention without a section number is not a citation.
fn citations(text: &str) -> Vec<Citation> {
    const NAME: &str = "DESIGN.md";
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find(NAME).map(|i| i + from) {
        from = at + NAME.len();
        let qualified = text[..at].ends_with("docs/");
        let after = &text[from..];
        let mut rest = after.trim_start_matches([' ', '\t', '\n', '\r', '/', '!']);
        let Some((first, used)) = section_at(rest) else { continue };
        let mut list = vec![first];
        rest = &rest[used..];
        loop {
            let next = ["–§", "-§", ", §", " and §", "/§"]
                .iter()
                .find_map(|sep| rest.strip_prefix(&sep[..sep.len() - '§'.len_utf8()]))
                .and_then(|r| section_at(r).map(|(n, used)| (n, &r[used..])));
            match next {
                Some((n, r)) => {
                    list.push(n);
                    rest = r;
                }
                None => break,
            }
        }
        let line = text[..at].matches('\n').count() + 1;
        found.push(Citation { line, qualified, sections: list });
    }
    found
}

/// Absolute paths under a home or work directory: a user's home dir, root's
/// home, the work tree of a build machine, a macOS home (the prefixes are
/// listed in the body). A match inside a longer path or a URL
/// (`example.org` followed by the prefix) is not one.
fn machine_paths(text: &str) -> Vec<(usize, String)> {
    // Spelled in pieces so that this file does not trip its own check.
    let prefixes =
        [concat!("/ho", "me/"), concat!("/ro", "ot/"), concat!("/wo", "rk/"), concat!("/Us", "ers/")];
    let mut found = Vec::new();
    for (i, line) in text.lines().enumerate() {
        for prefix in prefixes {
            for (at, _) in line.match_indices(prefix) {
                let before = line[..at].chars().next_back();
                if before.is_some_and(|c| c.is_alphanumeric() || "._-/~$}".contains(c)) {
                    continue;
                }
                let rest = &line[at + prefix.len()..];
                // Under the home prefix: a user name, then a slash.
                if prefix.starts_with("/ho") {
                    let name = rest.split('/').next().unwrap_or("");
                    if name.is_empty() || !rest[name.len()..].starts_with('/') {
                        continue;
                    }
                }
                found.push((i + 1, line.trim().to_owned()));
            }
        }
    }
    found
}

#[test]
fn every_design_citation_names_a_section_that_exists() {
    let root = repo_root();
    let design = std::fs::read_to_string(root.join("docs/DESIGN.md"))
        .unwrap_or_else(|e| panic!("docs/DESIGN.md cannot be read: {e}"));
    let have = sections(&design);
    assert!(have.len() >= 14, "docs/DESIGN.md has only sections {have:?}");
    let mut bad = Vec::new();
    let mut checked = 0;
    for file in tracked_files(&root) {
        if file == Path::new("docs/DESIGN.md") {
            continue;
        }
        // Binary files (and files removed from the work tree) hold no citation.
        let Ok(text) = std::fs::read_to_string(root.join(&file)) else { continue };
        for c in citations(&text) {
            checked += 1;
            if !c.qualified {
                bad.push(format!("{}:{}: cite the design as `docs/DESIGN.md §N`", file.display(), c.line));
            }
            for n in c.sections.iter().filter(|n| !have.contains(n)) {
                bad.push(format!("{}:{}: docs/DESIGN.md has no section {n}", file.display(), c.line));
            }
        }
    }
    assert!(bad.is_empty(), "{} bad design citation(s):\n{}", bad.len(), bad.join("\n"));
    assert!(checked > 0, "no design citation found at all: is the scan reading the repository?");
}

#[test]
fn no_tracked_file_holds_a_machine_path() {
    let root = repo_root();
    let mut bad = Vec::new();
    for file in tracked_files(&root) {
        let Ok(text) = std::fs::read_to_string(root.join(&file)) else { continue };
        for (line, what) in machine_paths(&text) {
            bad.push(format!("{}:{line}: {what}", file.display()));
        }
    }
    assert!(bad.is_empty(), "absolute paths of a machine in tracked files:\n{}", bad.join("\n"));
}

#[test]
fn citations_are_found_in_every_form_the_repository_uses() {
    // Spelled in pieces so that this file does not cite the design itself.
    let d = concat!("DESIGN", ".md");
    let text = format!(
        "a (docs/{d} §4 step 8)\n// see docs/{d}\n//! §13: x\n{d} §2–§6 and docs/{d} §1, §3.\n`docs/{d} §N` is the form"
    );
    let got = citations(&text);
    assert_eq!(
        got,
        vec![
            Citation { line: 1, qualified: true, sections: vec![4] },
            Citation { line: 2, qualified: true, sections: vec![13] },
            Citation { line: 4, qualified: false, sections: vec![2, 6] },
            Citation { line: 4, qualified: true, sections: vec![1, 3] },
        ]
    );
}

#[test]
fn headings_are_read_as_section_numbers() {
    let have = sections("# Title\n## 1. Layout\ntext\n## 12. Performance\n### 12.1 not a section\n##3. no");
    assert_eq!(have, BTreeSet::from([1, 12]));
}

#[test]
fn machine_paths_are_caught_and_urls_are_not() {
    let home = concat!("/ho", "me/");
    let work = concat!("/wo", "rk/");
    let root = concat!("/ro", "ot/");
    let text = format!(
        "CARGO_TARGET_DIR={work}target-bench cargo bench\n\
         cd {home}alice/src\n\
         see https://example.org{work}x and {home}\n\
         $HOME/.cargo and ~{root}x are fine\n\
         `{root}.cargo/bin`"
    );
    let lines: Vec<usize> = machine_paths(&text).into_iter().map(|(l, _)| l).collect();
    assert_eq!(lines, vec![1, 2, 5]);
}

// ---------------------------------------------------------------------------
// The crate graph (docs/DESIGN.md §1, docs/ARCHITECTURE.md "Crates"): what
// the `Cargo.toml`s say against what the two documents say. Break it to
// watch it fail: add `lardon-cluster` to the daemon's dependencies, or a
// crate to the workspace without a row in the table.

/// One row of the docs/DESIGN.md §1 table.
#[derive(Debug)]
struct Row {
    /// The package name (the last part of `crates/NAME`).
    name: String,
    /// "depends on": the internal crates it depends on.
    depends_on: BTreeSet<String>,
    /// "must not depend on": crate names (internal or external).
    must_not: BTreeSet<String>,
}

/// The `backticked` words of a table cell.
fn backticked(cell: &str) -> BTreeSet<String> {
    cell.split('`').skip(1).step_by(2).map(str::to_owned).collect()
}

/// The rows of the layout table of `## 1.`, in order.
fn layout_table(design: &str) -> Vec<Row> {
    let section = design.split("\n## 1.").nth(1).expect("DESIGN.md has a `## 1.` section");
    let section = section.split("\n## ").next().unwrap_or(section);
    section
        .lines()
        .filter(|l| l.starts_with("| `crates/"))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            assert_eq!(cells.len(), 4, "docs/DESIGN.md §1: a row has 4 cells: {l}");
            let name = cells[0].trim_matches('`').trim_start_matches("crates/").to_owned();
            Row { name, depends_on: backticked(cells[2]), must_not: backticked(cells[3]) }
        })
        .collect()
}

/// The arrows of the first code block under `## Crates` in ARCHITECTURE.md:
/// `crate ──► dep, dep` (or a crate alone: no internal dependency).
fn diagram(architecture: &str) -> BTreeMap<String, BTreeSet<String>> {
    let section =
        architecture.split("\n## Crates").nth(1).expect("ARCHITECTURE.md has a `## Crates` section");
    let block = section.split("```").nth(1).expect("ARCHITECTURE.md's `## Crates` has a code block");
    let mut arrows = BTreeMap::new();
    for line in block.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (from, to) = line.split_once("──►").unwrap_or((line, ""));
        let to: BTreeSet<String> =
            to.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect();
        let from = from.trim().to_owned();
        assert!(arrows.insert(from.clone(), to).is_none(), "ARCHITECTURE.md: `{from}` has two lines");
    }
    arrows
}

/// A crate's `Cargo.toml` dependencies.
#[derive(Debug, Default)]
struct Manifest {
    /// `[dependencies]`, `[build-dependencies]` and their `[target.*]`
    /// forms: the package names.
    normal: BTreeSet<String>,
    /// `[dev-dependencies]` (and `[target.*.dev-dependencies]`).
    dev: BTreeSet<String>,
}

/// The package names of a dependency table (a renamed one by `package`).
fn names(table: Option<&toml::Value>) -> BTreeSet<String> {
    let Some(table) = table.and_then(toml::Value::as_table) else { return BTreeSet::new() };
    table
        .iter()
        .map(|(key, v)| v.get("package").and_then(toml::Value::as_str).unwrap_or(key).to_owned())
        .collect()
}

fn manifest(path: &Path) -> (String, Manifest) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let doc: toml::Table = toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let name = doc
        .get("package")
        .and_then(|p| p.get("name"))
        .and_then(toml::Value::as_str)
        .unwrap_or_else(|| panic!("{}: no package.name", path.display()))
        .to_owned();
    let mut m = Manifest::default();
    let mut tables = vec![doc.clone()];
    if let Some(targets) = doc.get("target").and_then(toml::Value::as_table) {
        tables.extend(targets.values().filter_map(|t| t.as_table().cloned()));
    }
    for t in &tables {
        m.normal.extend(names(t.get("dependencies")));
        m.normal.extend(names(t.get("build-dependencies")));
        m.dev.extend(names(t.get("dev-dependencies")));
    }
    (name, m)
}

/// Every workspace member's package name and dependencies.
fn workspace(root: &Path) -> BTreeMap<String, Manifest> {
    let text = std::fs::read_to_string(root.join("Cargo.toml")).expect("the workspace Cargo.toml");
    let doc: toml::Table = toml::from_str(&text).expect("the workspace Cargo.toml parses");
    let members = doc
        .get("workspace")
        .and_then(|w| w.get("members"))
        .and_then(toml::Value::as_array)
        .expect("workspace.members");
    members
        .iter()
        .filter_map(toml::Value::as_str)
        .map(|m| manifest(&root.join(m).join("Cargo.toml")))
        .collect()
}

/// What is wrong with the graph `members` against the two documents, one
/// line per fault (empty: they agree).
fn graph_faults(
    members: &BTreeMap<String, Manifest>,
    rows: &[Row],
    arrows: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<String> {
    let mut faults = Vec::new();
    let internal = |set: &BTreeSet<String>| -> BTreeSet<String> {
        set.iter().filter(|d| members.contains_key(*d)).cloned().collect()
    };
    let listed: BTreeSet<&String> = rows.iter().map(|r| &r.name).collect();
    for name in members.keys() {
        if !listed.contains(name) {
            faults.push(format!("`{name}` is a workspace member without a row in docs/DESIGN.md §1"));
        }
        if !arrows.contains_key(name) {
            faults
                .push(format!("`{name}` is a workspace member without a line in ARCHITECTURE.md's diagram"));
        }
    }
    for from in arrows.keys() {
        if !members.contains_key(from) {
            faults.push(format!("ARCHITECTURE.md draws `{from}`, which is no workspace member"));
        }
    }
    let mut above: BTreeSet<&String> = BTreeSet::new();
    for row in rows {
        let Some(m) = members.get(&row.name) else {
            faults.push(format!("docs/DESIGN.md §1 lists `{}`, which is no workspace member", row.name));
            continue;
        };
        let normal = internal(&m.normal);
        if normal != row.depends_on {
            faults.push(format!(
                "`{}` depends on {normal:?} (Cargo.toml), docs/DESIGN.md §1 says {:?}",
                row.name, row.depends_on
            ));
        }
        if let Some(drawn) = arrows.get(&row.name)
            && *drawn != normal
        {
            faults.push(format!(
                "`{}` depends on {normal:?} (Cargo.toml), ARCHITECTURE.md draws {drawn:?}",
                row.name
            ));
        }
        for bad in m.normal.intersection(&row.must_not) {
            faults
                .push(format!("`{}` depends on `{bad}`, which docs/DESIGN.md §1 says it must not", row.name));
        }
        for dep in normal.iter().chain(internal(&m.dev).iter()) {
            if !above.contains(dep) {
                faults.push(format!(
                    "`{}` depends on `{dep}`, which is not above it in docs/DESIGN.md §1 (an arrow the wrong way)",
                    row.name
                ));
            }
        }
        above.insert(&row.name);
    }
    faults
}

#[test]
fn the_crate_graph_is_the_one_design_and_architecture_draw() {
    let root = repo_root();
    let design = std::fs::read_to_string(root.join("docs/DESIGN.md")).expect("docs/DESIGN.md");
    let architecture =
        std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).expect("docs/ARCHITECTURE.md");
    let members = workspace(&root);
    assert!(members.len() >= 9, "the workspace lists its crates: {:?}", members.keys());
    let faults = graph_faults(&members, &layout_table(&design), &diagram(&architecture));
    assert!(faults.is_empty(), "the crate graph and the docs disagree:\n  {}", faults.join("\n  "));
}

#[test]
fn a_wrong_arrow_or_an_unlisted_crate_is_a_fault() {
    let design = "# D\n\n## 1. Layout\n\n| crate | what | depends on | must not depend on |\n|---|---|---|---|\n\
        | `crates/low` | x | — | `tokio` |\n| `crates/high` | y | `low` | — |\n\n## 2. Next\n";
    let architecture = "# A\n\n## Crates\n\n```\nhigh ──► low\nlow\n```\n";
    let rows = layout_table(design);
    let arrows = diagram(architecture);
    let member = |normal: &[&str]| Manifest {
        normal: normal.iter().map(|s| (*s).to_owned()).collect(),
        dev: BTreeSet::new(),
    };
    let good: BTreeMap<String, Manifest> =
        [("low".to_owned(), member(&[])), ("high".to_owned(), member(&["low"]))].into();
    assert_eq!(graph_faults(&good, &rows, &arrows), Vec::<String>::new());

    let upward: BTreeMap<String, Manifest> =
        [("low".to_owned(), member(&["high"])), ("high".to_owned(), member(&["low"]))].into();
    let faults = graph_faults(&upward, &rows, &arrows);
    assert!(faults.iter().any(|f| f.contains("not above it")), "{faults:?}");
    assert!(faults.iter().any(|f| f.contains("ARCHITECTURE.md draws")), "{faults:?}");

    let forbidden: BTreeMap<String, Manifest> =
        [("low".to_owned(), member(&["tokio"])), ("high".to_owned(), member(&["low"]))].into();
    assert!(graph_faults(&forbidden, &rows, &arrows).iter().any(|f| f.contains("must not")));

    let mut added = good;
    added.insert("new".to_owned(), member(&["low"]));
    let faults = graph_faults(&added, &rows, &arrows);
    assert!(faults.iter().any(|f| f.contains("without a row")), "{faults:?}");
    assert!(faults.iter().any(|f| f.contains("without a line")), "{faults:?}");
}
