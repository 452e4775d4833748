//! Strangers never share what was learned (docs/DESIGN.md §6), through the
//! real binary on the real host: a daemon in a cgroup limited to 2 GiB (see
//! `support/realhost.rs`), tasks submitted without `--class`.
//!
//! One honest 1 GiB job completes first; then a burst of honest 100 MiB
//! jobs of the same program is submitted. They learn only from runs of
//! their own command shape, so each is admitted at its own size (never at
//! the big job's peak) and they run side by side; `status --json` and
//! `explain` name the key their learned figures came from.

use std::time::Duration;

use crate::support::realhost::RealHost;
use crate::support::{bin, stderr, stdout};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
const TIMEOUT: Duration = Duration::from_secs(150);
const SMALL: usize = 6;

fn submit(host: &RealHost, args: &[&str]) -> String {
    let o = host.lardon(&[&["submit"], args].concat());
    assert!(o.status.success(), "submit {args:?}: {}", stderr(&o));
    stdout(&o).trim().to_owned()
}

/// An honest job of the workload: declares `declared`, touches `touches`
/// for `secs`, a tenth of a CPU (memory binds, not CPUs), no class.
fn job(host: &RealHost, declared: &str, touches: &str, secs: &str) -> String {
    let ex = bin().to_string_lossy().into_owned();
    submit(
        host,
        &["--mem", declared, "--cpus", "0.1", "--", &ex, "exercise", "--mem", touches, "--secs", secs],
    )
}

/// The most tasks of `views` running at one instant (from their start and
/// finish stamps).
fn most_at_once(views: &[serde_json::Value]) -> usize {
    let mut edges: Vec<(i64, i32)> = Vec::new();
    for t in views {
        let (Some(s), Some(f)) = (t["started_unix_ms"].as_i64(), t["finished_unix_ms"].as_i64()) else {
            continue;
        };
        edges.push((s, 1));
        edges.push((f, -1));
    }
    // A finish at the same millisecond as a start is not an overlap.
    edges.sort_unstable();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, d) in edges {
        now += d;
        most = most.max(now);
    }
    usize::try_from(most).unwrap_or(0)
}

/// The memory of the task's first admission (`explain --history --json`).
fn first_grant(host: &RealHost, id: &str) -> u64 {
    let o = host.lardon(&["explain", id, "--history", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("explain --json parses");
    let history = v["history"].as_array().cloned().unwrap_or_default();
    let first = history.iter().find(|h| h["kind"] == "admitted").expect("an admission");
    first["memory"].as_u64().expect("a granted memory")
}

#[test]
fn jobs_without_a_class_never_inherit_a_bigger_strangers_peak() {
    let tmp = tempfile::tempdir().unwrap();
    let host = RealHost::start(tmp.path(), 2 * GIB, &["--enforce", "hard"])
        .unwrap_or_else(|why| panic!("cannot host this test: {why}"));
    host.relax_host_gates();
    let o = host.lardon(&["policy", "--set", "cpu_reserve=0"]);
    assert!(o.status.success(), "{}", stderr(&o));

    // The big job runs alone and completes: its peak (about 1 GiB) is
    // recorded under its own command shape.
    let big = job(&host, "1GiB", "900MiB", "0.5");
    let b = host.wait_all(std::slice::from_ref(&big), TIMEOUT).remove(0);
    assert_eq!(b["state"], "completed", "{b}");
    let big_key = b["learned"]["key"].as_str().unwrap_or_default().to_owned();

    // The same program, declared 100 MiB: admitted at its own size, all at
    // once (6 × 100 MiB fits the 1.5 GiB budget; 6 × 1 GiB would not).
    let ids: Vec<String> = (0..SMALL).map(|_| job(&host, "100MiB", "60MiB", "2")).collect();
    let done = host.wait_all(&ids, TIMEOUT);
    for (t, id) in done.iter().zip(&ids) {
        assert_eq!(t["state"], "completed", "{t}");
        let grant = first_grant(&host, id);
        assert!(grant < 256 * MIB, "task {id} admitted at {grant} bytes, the big job's peak: {t}");
    }
    let most = most_at_once(&done);
    assert!(most >= 3, "only {most} of {SMALL} small jobs ran at once: {done:?}");

    // What the last one learned came from its own shape, and `explain`
    // says so.
    let last = &done[SMALL - 1];
    assert!(big_key.starts_with("default."), "the big job's learned key: {b}");
    let key = last["learned"]["key"].as_str().unwrap_or_default();
    assert!(key.starts_with("default.lardon.") && key != big_key, "learned key {key:?} vs {big_key:?}");
    let text = stdout(&host.lardon(&["explain", &ids[SMALL - 1]]));
    assert!(text.contains(&format!("learned under key {key}")), "explain: {text}");
}
