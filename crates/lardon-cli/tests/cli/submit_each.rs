//! `lardon submit --each` through the real binary: one task per input
//! line, placeholders filled, one request for all of them, and a bad line
//! or a bad field refuses the whole submission (nothing queued).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::support::*;

fn submit_each(dir: &std::path::Path, args: &[&str], input: &[u8]) -> std::process::Output {
    crate::support::lardon_stdin(dir, &[&["submit", "--each"], args].concat(), input)
}

fn count_tasks(dir: &std::path::Path) -> usize {
    let o = lardon(dir, &["status", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v.as_array().map_or_else(|| v["tasks"].as_array().map_or(0, Vec::len), Vec::len)
}

#[test]
fn one_task_per_line_with_placeholders_filled() {
    let dir = tempfile::tempdir().unwrap();
    let _d = Daemon::start(dir.path(), "8GiB,2");
    let o = submit_each(
        dir.path(),
        &["--name", "job-{#}", "--", "echo", "in={}", "n={#}"],
        b"alpha\n\nbeta gamma\n",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let ids: Vec<String> = stdout(&o).lines().map(str::to_owned).collect();
    assert_eq!(ids.len(), 2, "blank line skipped: {ids:?}");
    let o = lardon(dir.path(), &["wait"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let log = |id: &str| stdout(&lardon(dir.path(), &["log", id]));
    assert!(log(&ids[0]).contains("in=alpha n=1"), "{}", log(&ids[0]));
    assert!(log(&ids[1]).contains("in=beta gamma n=2"), "{}", log(&ids[1]));
    assert_eq!(task_json(dir.path(), &ids[1])["name"], "job-2");
}

#[test]
fn the_file_form_and_json_output() {
    let dir = tempfile::tempdir().unwrap();
    let _d = Daemon::start(dir.path(), "8GiB,2");
    let list = dir.path().join("inputs.txt");
    std::fs::write(&list, "a\nb\nc\n").unwrap();
    let o = lardon(dir.path(), &["submit", "--each", list.to_str().unwrap(), "--json", "--", "true"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["ids"].as_array().map(Vec::len), Some(3), "{v}");
    // Without `{}` the line is the last argument.
    let id = v["ids"][2].as_str().unwrap().to_owned();
    let argv = task_json(dir.path(), &id)["argv"].clone();
    assert_eq!(argv, serde_json::json!(["true", "c"]), "{}", task_json(dir.path(), &id));
}

#[test]
fn a_bad_input_refuses_everything() {
    let dir = tempfile::tempdir().unwrap();
    let _d = Daemon::start(dir.path(), "8GiB,2");
    let o = submit_each(dir.path(), &["--", "true", "{}"], b"fine\n\xff\n");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--each -: line 2"), "{}", stderr(&o));
    let o = lardon(dir.path(), &["submit", "--each", "/nonexistent/list", "--", "true"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--each /nonexistent/list"), "{}", stderr(&o));
    // The daemon refuses a bad spec at any position; nothing is queued.
    let o = submit_each(dir.path(), &["--after", "999", "--", "true"], b"a\nb\n");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("specs[0].after"), "{}", stderr(&o));
    assert_eq!(count_tasks(dir.path()), 0);
}
