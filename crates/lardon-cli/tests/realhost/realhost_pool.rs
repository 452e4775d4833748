//! The compute pool on the real host, through the real binary: a daemon in
//! a memory-limited cgroup (see `support/realhost.rs`), no simulated host.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::support::realhost::RealHost;
use crate::support::{stderr, stdout};

const GIB: u64 = 1 << 30;

/// The CPUs this process may run on, as the kernel lists them.
fn allowed_list(status: &str) -> Option<String> {
    status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).map(|v| v.trim().to_owned())
}

#[test]
fn cpu_reserve_zero_frees_every_cpu_and_one_cpu_tasks_run_on_different_cpus() {
    let own = std::fs::read_to_string("/proc/self/status").unwrap();
    let allowed: Vec<u32> =
        lardon_host::parse_cpu_list(&allowed_list(&own).unwrap()).unwrap().into_iter().collect();
    assert!(allowed.len() >= 2, "this test needs at least 2 CPUs in our affinity mask, found {allowed:?}");
    let tmp = tempfile::tempdir().unwrap();
    let host = RealHost::start(tmp.path(), 2 * GIB, &[])
        .unwrap_or_else(|why| panic!("cannot host this test: {why}"));
    host.relax_host_gates();
    let o = host.lardon(&["policy", "--set", "cpu_reserve=0"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = host.lardon(&["resources", "--json"]);
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).expect("resources --json parses");
    let pool: Vec<u64> = r["cpus"]["pool"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    assert_eq!(pool, allowed.iter().map(|&c| u64::from(c)).collect::<Vec<_>>(), "the pool is every CPU: {r}");

    // Each task prints its CPUs, then waits (bounded) until both are up,
    // so the two runs overlap and hold their CPUs at the same time.
    let meet = tmp.path().join("meet");
    std::fs::create_dir(&meet).unwrap();
    let script = format!(
        "grep Cpus_allowed_list /proc/self/status; touch {m}/$LARDON_TASK_ID; n=0; \
         while [ $(ls {m} | wc -l) -lt 2 ] && [ $n -lt 600 ]; do sleep 0.05; n=$((n+1)); done",
        m = meet.display()
    );
    let ids: Vec<String> = (0..2)
        .map(|_| {
            let o = host.lardon(&["submit", "--cpus", "1", "--", "sh", "-c", &script]);
            assert!(o.status.success(), "{}", stderr(&o));
            stdout(&o).trim().to_owned()
        })
        .collect();
    for t in host.wait_all(&ids, Duration::from_secs(60)) {
        assert_eq!(t["state"], "completed", "{t}");
    }
    assert_eq!(std::fs::read_dir(&meet).unwrap().count(), 2);
    let cpus: Vec<String> = ids
        .iter()
        .map(|id| {
            let log = stdout(&host.lardon(&["log", id]));
            allowed_list(&log).unwrap_or_else(|| panic!("task {id} printed no Cpus_allowed_list: {log}"))
        })
        .collect();
    assert_ne!(cpus[0], cpus[1], "two --cpus 1 tasks were pinned to the same CPUs");
    for c in &cpus {
        let set = lardon_host::parse_cpu_list(c).unwrap();
        assert_eq!(set.len(), 1, "a --cpus 1 task is pinned to one CPU, not {c}");
    }
}
