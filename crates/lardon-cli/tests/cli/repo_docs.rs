//! The repository stands alone (docs/DESIGN.md §13): every `docs/DESIGN.md
//! §N` that a tracked file cites names a section `## N.` of that file, and
//! no tracked file holds an absolute path under somebody's home or work
//! directory (such a path means nothing on another machine).
//!
//! Break it to watch it fail: cite a section the design lacks (§15) in any
//! comment, or write a path under the root user's home in a script.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
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
