//! Memory admission on the real host, through the real binary: the daemon
//! runs inside a cgroup limited to 2 GiB (see `support/realhost.rs`), so
//! the real probe sees a small, known budget whatever the machine has. No
//! simulated host; the load and PSI gates are lifted because this test is
//! about memory (the load gate has its own real-host test).
//!
//! Eight honest tasks that each touch 600 MiB all complete, never more run
//! at once than the budget holds, and the daemon's cgroup never reaches its
//! limit. Break the code to see it fail: make `capacity` in
//! `governor/admission.rs` answer `u64::MAX` where the fixed part does not
//! fit, and admission no longer holds to the budget (seen: the test fails).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;
use std::time::{Duration, Instant};

use crate::support::realhost::RealHost;
use crate::support::{stderr, stdout};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// The daemon cgroup's current memory use (v1 or v2 file).
fn usage(cgroup: &std::path::Path) -> u64 {
    ["memory.usage_in_bytes", "memory.current"]
        .iter()
        .find_map(|f| std::fs::read_to_string(cgroup.join(f)).ok())
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0)
}

/// The daemon cgroup's peak memory use since it was made, where the kernel
/// keeps one (v1 `memory.max_usage_in_bytes`, v2 `memory.peak`).
fn peak(cgroup: &std::path::Path) -> Option<u64> {
    ["memory.max_usage_in_bytes", "memory.peak"]
        .iter()
        .find_map(|f| std::fs::read_to_string(cgroup.join(f)).ok())
        .and_then(|t| t.trim().parse().ok())
}

#[test]
fn honest_tasks_all_complete_within_the_cgroups_budget() {
    let tmp = tempfile::tempdir().unwrap();
    let host = RealHost::start(tmp.path(), 2 * GIB, &[])
        .unwrap_or_else(|why| panic!("cannot host this test: {why}"));
    host.relax_host_gates();
    // Both CPUs in the pool: with the default reserve of one CPU on a
    // 2-CPU machine, CPUs (not memory) would run the tasks one by one.
    let o = host.lardon(&["policy", "--set", "cpu_reserve=0"]);
    assert!(o.status.success(), "{}", stderr(&o));
    // Both CPUs in the pool: with the default reserve of one CPU on a
    // 2-CPU machine, CPUs (not memory) would run the tasks one by one.
    let o = host.lardon(&["policy", "--set", "cpu_reserve=0"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = host.lardon(&["resources", "--json"]);
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).expect("resources --json parses");
    let total = r["memory"]["total"].as_u64().unwrap();
    let reserve = r["memory"]["reserve"].as_u64().unwrap();
    assert_eq!(total, 2 * GIB, "the daemon governs its cgroup's 2 GiB, not the machine: {r}");
    let fits = (total - reserve) / (600 * MIB);
    assert!(fits >= 2, "the default reserve for 2 GiB leaves room for two 600 MiB tasks: {r}");

    let ids: Vec<String> = (0..8)
        .map(|_| {
            let o = host.lardon(&[
                "submit",
                "--mem",
                "600MiB",
                "--class",
                "honest",
                "--",
                support::bin().to_str().unwrap(),
                "exercise",
                "--mem",
                "600MiB",
                "--secs",
                "1",
            ]);
            assert!(o.status.success(), "{}", stderr(&o));
            stdout(&o).trim().to_owned()
        })
        .collect();

    let limit = host.cgroup.limit;
    let mut most_running = 0;
    let mut most_used = 0;
    let start = Instant::now();
    loop {
        let views: Vec<serde_json::Value> = ids.iter().map(|id| host.task(id)).collect();
        let running = views.iter().filter(|t| t["state"] == "running").count() as u64;
        most_running = most_running.max(running);
        most_used = most_used.max(usage(host.cgroup.path()));
        if views.iter().all(|t| matches!(t["state"].as_str(), Some("completed" | "failed" | "cancelled"))) {
            for t in &views {
                assert_eq!(t["state"], "completed", "{t}");
            }
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(120), "not done after 120 s: {views:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Polled states lag the queue by one event: a task whose run ended can
    // still read `running` while its successor already does, so one extra
    // is tolerated here; the kernel's own figures below are the exact check.
    assert!(most_running <= fits + 1, "{most_running} ran at once; the budget holds {fits}");
    assert!(most_running >= 2, "admission ran them one by one although {fits} fit");
    assert!(most_used < limit, "the daemon's cgroup used {most_used} of its {limit} limit");
    if let Some(peak) = peak(host.cgroup.path()) {
        assert!(peak < limit, "the daemon's cgroup peaked at {peak}, its limit is {limit}");
    }
}
