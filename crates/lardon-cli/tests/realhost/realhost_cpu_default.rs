//! The default CPU reserve on the real host, through the real binary
//! (docs/DESIGN.md §3): a daemon in a memory-limited cgroup (see
//! `support/realhost.rs`) under the **default** policy — no
//! `cpu_reserve` set. The reserve scales with the machine (logical CPUs /
//! 8, at most 4), so on a machine below 8 CPUs the compute pool is every
//! CPU and a CPU-light task is not pinned into a one-CPU cage.

use std::time::Duration;

use crate::support::realhost::RealHost;
use crate::support::{stderr, stdout};

const GIB: u64 = 1 << 30;

/// The CPUs this process may run on, as the kernel lists them.
fn allowed_list(status: &str) -> Option<String> {
    status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).map(|v| v.trim().to_owned())
}

#[test]
fn the_default_cpu_reserve_scales_with_the_machine_and_does_not_cage_light_tasks() {
    let own = std::fs::read_to_string("/proc/self/status").unwrap();
    let allowed = lardon_host::parse_cpu_list(&allowed_list(&own).unwrap()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let host = RealHost::start(tmp.path(), 2 * GIB, &[])
        .unwrap_or_else(|why| panic!("cannot host this test: {why}"));
    host.relax_host_gates();
    let o = host.lardon(&["resources", "--json"]);
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).expect("resources --json parses");
    let logical = r["cpus"]["logical"].as_u64().unwrap_or_else(|| panic!("no cpus.logical: {r}"));
    let reserve = r["cpus"]["reserve"].as_u64().unwrap_or_else(|| panic!("no cpus.reserve: {r}"));
    let pool = r["cpus"]["pool"].as_array().unwrap().len();
    // The rule, on whatever machine this runs: CPUs / 8, at most 4 (taken
    // as whole cores, so SMT siblings may round it up).
    if logical < 8 {
        assert_eq!(reserve, 0, "{r}");
        assert_eq!(pool, allowed.len(), "below 8 CPUs the pool is every CPU we may use: {r}");
    } else {
        assert!(reserve >= (logical / 8).min(4), "{r}");
    }

    // Two quarter-CPU tasks at once run on different CPUs of the pool
    // (the old default's one-CPU pool pinned both to CPU 0). Each prints
    // its CPUs, then waits (bounded) until both are up, so they overlap.
    let meet = tmp.path().join("meet");
    std::fs::create_dir(&meet).unwrap();
    let script = format!(
        "grep Cpus_allowed_list /proc/self/status; touch {m}/$LARDON_TASK_ID; n=0; \
         while [ $(ls {m} | wc -l) -lt 2 ] && [ $n -lt 600 ]; do sleep 0.05; n=$((n+1)); done",
        m = meet.display()
    );
    let ids: Vec<String> = (0..2)
        .map(|_| {
            let o = host.lardon(&["submit", "--cpus", "0.25", "--", "sh", "-c", &script]);
            assert!(o.status.success(), "{}", stderr(&o));
            stdout(&o).trim().to_owned()
        })
        .collect();
    for t in host.wait_all(&ids, Duration::from_secs(60)) {
        assert_eq!(t["state"], "completed", "{t}");
    }
    let cpus: Vec<String> = ids
        .iter()
        .map(|id| {
            let log = stdout(&host.lardon(&["log", id]));
            allowed_list(&log).unwrap_or_else(|| panic!("task {id} printed no Cpus_allowed_list: {log}"))
        })
        .collect();
    if pool >= 2 {
        assert_ne!(cpus[0], cpus[1], "two quarter-CPU tasks were caged on the same CPU: {r}");
    }
}
