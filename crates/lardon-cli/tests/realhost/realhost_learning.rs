//! Learning from real processes, through the real binary, on the real host:
//! a daemon in a cgroup limited to 2 GiB (see `support/realhost.rs`), under
//! each of `enforce = hard`, `soft` and `off` (docs/DESIGN.md §6, §10).
//!
//! * a class of 10 liars (declares 200 MiB, touches 1 GiB) all complete,
//!   with at most 2 runs killed for memory in all;
//! * a batched task whose items cost 4× their estimate completes every item
//!   exactly once (the logs partition the items, the cursor is at the end)
//!   with at most 2 batches killed;
//! * after a daemon restart the learned figures are still used: the next
//!   liar is admitted at its learned size at once, the next batched task at
//!   its learned batch.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::support::realhost::RealHost;
use crate::support::{bin, stderr, stdout};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
const TIMEOUT: Duration = Duration::from_secs(150);

fn submit(host: &RealHost, args: &[&str]) -> String {
    let o = host.lardon(&[&["submit"], args].concat());
    assert!(o.status.success(), "submit {args:?}: {}", stderr(&o));
    stdout(&o).trim().to_owned()
}

fn exercise() -> String {
    bin().to_string_lossy().into_owned()
}

fn liar(host: &RealHost) -> String {
    let ex = exercise();
    submit(
        host,
        &["--mem", "200MiB", "--class", "liar", "--", &ex, "exercise", "--mem", "1GiB", "--secs", "1"],
    )
}

fn batched(host: &RealHost) -> String {
    let ex = exercise();
    submit(
        host,
        &[
            "--mem",
            "32MiB",
            "--mem-per-item",
            "10MiB",
            "--items",
            "64",
            "--batch",
            "1..32",
            "--class",
            "b4",
            "--",
            &ex,
            "exercise",
            "--mem",
            "16MiB",
            "--mem-per-item",
            "40MiB",
            "--items",
            "64",
            "--secs",
            "0.2",
        ],
    )
}

fn retries(t: &serde_json::Value) -> u64 {
    t["memory_retries"].as_u64().unwrap_or(0)
}

/// The `[from, to)` item ranges the task's completed runs report.
fn ranges(host: &RealHost, id: &str) -> Vec<(u64, u64)> {
    let log = stdout(&host.lardon(&["log", id]));
    let mut out: Vec<(u64, u64)> = log
        .lines()
        .filter_map(|l| l.strip_prefix("exercise: items "))
        .filter_map(|rest| {
            let (range, _) = rest.split_once(' ')?;
            let (a, b) = range.split_once("..")?;
            Some((a.parse().ok()?, b.parse().ok()?))
        })
        .collect();
    out.sort_unstable();
    out
}

/// The course of a task (`explain --history --json`).
fn history(host: &RealHost, id: &str) -> Vec<serde_json::Value> {
    let o = host.lardon(&["explain", id, "--history", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("explain --json parses");
    v["history"].as_array().cloned().unwrap_or_default()
}

fn scenario(mode: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let mut host = RealHost::start(tmp.path(), 2 * GIB, &["--enforce", mode])
        .unwrap_or_else(|why| panic!("cannot host this test: {why}"));
    host.relax_host_gates();
    let o = host.lardon(&["policy", "--set", "cpu_reserve=0"]);
    assert!(o.status.success(), "{}", stderr(&o));

    // Ten liars: all complete, at most two runs killed in all.
    let ids: Vec<String> = (0..10).map(|_| liar(&host)).collect();
    let done = host.wait_all(&ids, TIMEOUT);
    for t in &done {
        assert_eq!(t["state"], "completed", "{mode}: {t}");
    }
    let kills: u64 = done.iter().map(retries).sum();
    assert!(kills <= 2, "{mode}: {kills} liar runs killed for memory");
    if mode == "soft" {
        // Soft enforcement let the overrun through, and said so.
        assert!(
            done.iter().any(|t| !t["overrun_note"].as_str().unwrap_or_default().is_empty()),
            "{mode}: no overrun noted"
        );
    }
    let learned = &done[9]["learned"];
    assert!(learned["fixed"].as_u64().is_some_and(|f| f >= GIB), "{mode}: learned {learned}");

    // A batched task whose items cost 4× their estimate.
    let b = batched(&host);
    let t = host.wait_all(std::slice::from_ref(&b), TIMEOUT).remove(0);
    assert_eq!(t["state"], "completed", "{mode}: {t}");
    assert!(retries(&t) <= 2, "{mode}: {} batches killed", retries(&t));
    assert_eq!(t["cursor"], 64, "{mode}: {t}");
    let r = ranges(&host, &b);
    let mut next = 0;
    for (from, to) in &r {
        assert_eq!(*from, next, "{mode}: items run twice or skipped: {r:?}");
        next = *to;
    }
    assert_eq!(next, 64, "{mode}: {r:?}");

    // After a restart the learned figures are still used at once.
    host.restart().unwrap_or_else(|why| panic!("restart: {why}"));
    let again = liar(&host);
    let t = host.wait_all(std::slice::from_ref(&again), TIMEOUT).remove(0);
    assert_eq!((t["state"].as_str(), retries(&t)), (Some("completed"), 0), "{mode}: {t}");
    let first = history(&host, &again).into_iter().find(|h| h["kind"] == "admitted").expect("an admission");
    assert!(first["memory"].as_u64().is_some_and(|m| m >= GIB), "{mode}: first grant {first}");
    let b2 = batched(&host);
    let t = host.wait_all(std::slice::from_ref(&b2), TIMEOUT).remove(0);
    assert_eq!((t["state"].as_str(), retries(&t)), (Some("completed"), 0), "{mode}: {t}");
    let first = history(&host, &b2).into_iter().find(|h| h["kind"] == "admitted").expect("an admission");
    assert!(first["batch"].as_u64().is_some_and(|b| b < 32), "{mode}: first batch {first}");
    // Its grant is fixed + batch × learned per item: above what was declared.
    let (batch, memory) = (first["batch"].as_u64().unwrap(), first["memory"].as_u64().unwrap());
    assert!(memory > 32 * MIB + batch * 10 * MIB, "{mode}: grant {memory} for batch {batch}");
}

#[test]
fn liars_and_costly_batches_learn_under_hard_enforcement() {
    scenario("hard");
}

#[test]
fn liars_and_costly_batches_learn_under_soft_enforcement() {
    scenario("soft");
}

#[test]
fn liars_and_costly_batches_learn_without_enforcement() {
    scenario("off");
}
