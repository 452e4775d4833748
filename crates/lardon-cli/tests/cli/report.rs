//! `lardon report` on a store made by a real daemon run (docs/DESIGN.md
//! §10, "Report"): an honest task, a batched task, a task that fails (no
//! memory kill without a cgroup here: the realhost tests cover kills), a
//! task of unnamed work (its command-shape key), and a task that waited on
//! memory behind another whose declared memory does not fit beside it.
//! The figures are checked against what that workload must give; the
//! table and the JSON are snapshots with what varies (peaks, times)
//! redacted; the page is self-contained with its four charts. The report
//! reads the store while the daemon runs and after it stopped.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::support::{Daemon, lardon, state, stderr, stdout, submit, task_json, wait_until};

const MIB: u64 = 1 << 20;
const DEADLINE: Duration = Duration::from_secs(60);

fn exercise() -> String {
    crate::support::bin().to_string_lossy().into_owned()
}

/// The workload; the daemon is stopped when it returns.
fn run_workload(dir: &Path) {
    let ex = exercise();
    let daemon = Daemon::start(dir, "1GiB,4");
    let honest = submit(
        dir,
        &[
            "--mem", "64MiB", "--class", "honest", "--group", "g1", "--", &ex, "exercise", "--mem", "16MiB",
            "--secs", "0.3",
        ],
    );
    let batched = submit(
        dir,
        &[
            "--mem",
            "8MiB",
            "--mem-per-item",
            "2MiB",
            "--items",
            "8",
            "--batch",
            "1..4",
            "--class",
            "batched",
            "--",
            &ex,
            "exercise",
            "--mem",
            "8MiB",
            "--mem-per-item",
            "1MiB",
            "--items",
            "8",
            "--secs",
            "0.1",
        ],
    );
    let failing = submit(dir, &["--mem", "32MiB", "--class", "failing", "--", "sh", "-c", "exit 3"]);
    let unnamed = submit(dir, &["--mem", "24MiB", "--", "true"]);
    // 600 MiB twice does not fit the 768 MiB budget: the second waits.
    // Another class: a second task of a class whose first run has not
    // ended yet is held without a recorded decision.
    let hog = submit(
        dir,
        &["--mem", "600MiB", "--class", "hog", "--", &ex, "exercise", "--mem", "8MiB", "--secs", "3"],
    );
    wait_until("the hog to run", DEADLINE, || state(dir, &hog) == "running");
    let waiter = submit(
        dir,
        &["--mem", "600MiB", "--class", "waiter", "--", &ex, "exercise", "--mem", "8MiB", "--secs", "0.2"],
    );
    wait_until("the second to wait on memory", DEADLINE, || {
        task_json(dir, &waiter)["last_decision"]["reason_code"] == "memory"
    });
    // While the daemon runs: a reader beside its writer.
    let live = lardon(dir, &["report", "--json"]);
    assert!(live.status.success(), "report while the daemon runs: {}", stderr(&live));
    let live: Value = serde_json::from_slice(&live.stdout).unwrap();
    assert_eq!(live["totals"]["tasks"], 6, "{live}");
    assert!(live["totals"]["unfinished"].as_u64().unwrap() >= 1, "{live}");
    let all = [&honest, &batched, &failing, &unnamed, &hog, &waiter];
    wait_until("every task to end", DEADLINE, || {
        all.iter().all(|id| matches!(state(dir, id).as_str(), "completed" | "failed"))
    });
    assert!(daemon.stop().success());
}

fn json(dir: &Path, args: &[&str]) -> Value {
    let o = lardon(dir, &[&["report", "--json"], args].concat());
    assert!(o.status.success(), "report --json {args:?}: {}", stderr(&o));
    serde_json::from_slice(&o.stdout).expect("report --json parses")
}

fn class<'a>(r: &'a Value, key: &str) -> &'a Value {
    r["classes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["key"] == key)
        .unwrap_or_else(|| panic!("no {key}: {r}"))
}

/// Replaces what a run cannot fix (peaks, times, waste) in the JSON.
fn redact_json(v: &mut Value) {
    const VARYING: [&str; 5] = ["peak", "reserved_gib_h", "waste_gib_h", "run_ms", "generated_ms"];
    match v {
        Value::Object(map) => {
            for (k, x) in map.iter_mut() {
                if VARYING.contains(&k.as_str()) && !x.is_null() {
                    *x = Value::String("[varies]".into());
                } else if k == "waits_ms" {
                    for ms in x.as_object_mut().into_iter().flat_map(|m| m.values_mut()) {
                        *ms = Value::String("[ms]".into());
                    }
                } else if k == "learned" && x.is_object() {
                    for f in ["fixed", "per_item", "phrase"] {
                        if !x[f].is_null() {
                            x[f] = Value::String("[varies]".into());
                        }
                    }
                } else {
                    redact_json(x);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact_json),
        _ => {}
    }
}

/// The table with its varying columns (peak, waste, waited, run time) and
/// every figure of the sections below it redacted.
fn redact_table(text: &str) -> String {
    let mut out = Vec::new();
    let mut in_table = true;
    for (i, line) in text.lines().enumerate() {
        if line.is_empty() {
            in_table = false;
        }
        if in_table {
            let mut cells: Vec<String> =
                line.split("  ").map(str::trim).filter(|c| !c.is_empty()).map(str::to_owned).collect();
            if i > 0 {
                for c in cells.iter_mut().skip(10) {
                    *c = "[..]".into();
                }
            }
            out.push(cells.join(" | "));
        } else {
            // The key first, then every figure (a word with a digit) redacted.
            let words: Vec<&str> = line
                .split_whitespace()
                .enumerate()
                .map(|(i, w)| if i > 0 && w.chars().any(|c| c.is_ascii_digit()) { "[n]" } else { w })
                .collect();
            out.push(format!("{}{}", if line.starts_with(' ') { "  " } else { "" }, words.join(" ")));
        }
    }
    out.join("\n")
}

#[test]
fn the_report_of_a_real_run_gives_the_workloads_figures() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    run_workload(dir);

    // With the daemon stopped.
    let r = json(dir, &[]);
    assert_eq!(r["memory_budget"], 768 * MIB, "1 GiB less the 256 MiB reserve: {r}");
    let t = &r["totals"];
    assert_eq!(
        (t["tasks"].as_u64(), t["completed"].as_u64(), t["failed"].as_u64()),
        (Some(6), Some(5), Some(1))
    );
    let honest = class(&r, "honest");
    assert_eq!(honest["declared"]["max"], 64 * MIB);
    let peak = honest["peak"]["max"].as_u64().unwrap();
    assert!((16 * MIB..64 * MIB).contains(&peak), "the honest task touches 16 MiB of its 64: peak {peak}");
    let (reserved, waste) =
        (honest["reserved_gib_h"].as_f64().unwrap(), honest["waste_gib_h"].as_f64().unwrap());
    assert!(waste > 0.0 && waste < reserved, "an honest task wastes part of its grant: {honest}");
    assert!(honest["learned"]["fixed"].as_u64().is_some_and(|f| f >= 16 * MIB), "{honest}");
    let batched = class(&r, "batched");
    assert_eq!(batched["declared"]["max"], 16 * MIB, "8 MiB + 4 × 2 MiB");
    assert!(batched["runs"].as_u64().unwrap() >= 2, "8 items at most 4 a batch: {batched}");
    assert!(batched["learned"]["per_item"].as_u64().is_some(), "{batched}");
    assert_eq!(class(&r, "failing")["failed"], 1);
    let waiter = class(&r, "waiter");
    assert!(
        waiter["waits_ms"]["memory"].as_u64().is_some_and(|ms| ms > 0),
        "the waiter's memory wait: {waiter}"
    );
    assert!(r["totals"]["waits_ms"]["memory"].as_u64().is_some_and(|ms| ms > 0), "{r}");
    let shape = r["classes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["key"].as_str().unwrap().starts_with("default.true."));
    assert!(shape.is_some_and(|c| c["completed"] == 1), "unnamed work under its command shape: {r}");

    // The filters.
    assert_eq!(json(dir, &["--class", "waiter"])["totals"]["tasks"], 1);
    assert_eq!(json(dir, &["--class", "default"])["totals"]["tasks"], 1, "every task that named no class");
    assert_eq!(json(dir, &["--group", "g1"])["totals"]["tasks"], 1);
    assert_eq!(json(dir, &["--since", "1h"])["totals"]["tasks"], 6);
    assert_eq!(json(dir, &["--since", "2999-01-01"])["totals"]["tasks"], 0, "nothing ended after then");

    let mut redacted = r.clone();
    redact_json(&mut redacted);
    insta::assert_snapshot!("report_json", serde_json::to_string_pretty(&redacted).unwrap());
    let table = lardon(dir, &["report"]);
    assert!(table.status.success(), "{}", stderr(&table));
    insta::assert_snapshot!("report_table", redact_table(&stdout(&table)));

    // The page: self-contained, with its four charts.
    let page = dir.join("report.html");
    let o = lardon(dir, &["report", "--html", page.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let html = std::fs::read_to_string(&page).unwrap();
    assert_eq!(html.matches("<svg").count(), 4, "declared vs peak, timeline, memory held, waits");
    for outside in ["<script", "<link", "src=", "@import", "url("] {
        assert!(!html.contains(outside), "the page loads nothing ({outside})");
    }
    for shown in ["honest", "batched", "memory budget", "memory", "task 1"] {
        assert!(html.contains(shown), "the page shows {shown}");
    }
}

#[test]
fn a_bad_since_names_the_flag_and_exits_2() {
    let tmp = tempfile::tempdir().unwrap();
    let o = lardon(tmp.path(), &["report", "--since", "yesterday"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--since") && stderr(&o).contains("yesterday"), "{}", stderr(&o));
    // No store there: said, exit 2, nothing created.
    let o = lardon(tmp.path(), &["report"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("no store at"), "{}", stderr(&o));
    assert!(!tmp.path().join("lardon.db").exists());
}
