//! Lardon's own share of the load on the real host, through the real
//! binary (a daemon in a memory-limited cgroup, `support/realhost.rs`): the
//! CPU time of the tasks the daemon reaped, and its own, count as Lardon's
//! (docs/DESIGN.md §3), so a stream of short tasks that hold almost no CPU
//! grant is not read as foreign load; `lardon resources` shows the share.
//!
//! The tasks ask for 1/1000 of a CPU each, so their grants add at most a
//! few thousandths to the share: what the assertion sees is the measured
//! CPU time. Break the code to see it fail: make `own_cpu()` in
//! `lardon-host/src/probe.rs` return `None`, and the share stays near 0.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::realhost::RealHost;
use crate::support::stderr;

const GIB: u64 = 1 << 30;
const TASKS: usize = 300;

fn own_load(host: &RealHost) -> f64 {
    let o = host.lardon(&["resources", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).expect("resources --json parses");
    r["cpus"]["own_load"].as_f64().unwrap_or_else(|| panic!("no cpus.own_load in {r}"))
}

#[test]
fn a_stream_of_short_tasks_is_lardons_own_load() {
    let tmp = tempfile::tempdir().unwrap();
    let host = RealHost::start(tmp.path(), 2 * GIB, &[])
        .unwrap_or_else(|why| panic!("cannot host this test: {why}"));
    // The gates are not under test here, the figure they would use is.
    host.relax_host_gates();
    let before = own_load(&host);
    // Each task burns a few milliseconds of CPU in a shell loop.
    let burn = "i=0; while [ $i -lt 3000 ]; do i=$((i+1)); done";
    let inputs = tmp.path().join("inputs");
    std::fs::write(&inputs, (0..TASKS).map(|i| format!("{i}\n")).collect::<String>()).unwrap();
    let inputs = inputs.to_string_lossy().into_owned();
    let o = host.lardon(&["submit", "--each", &inputs, "--cpus", "1m", "--", "sh", "-c", burn]);
    assert!(o.status.success(), "submit --each: {}", stderr(&o));
    let o = host.lardon(&["wait"]);
    assert!(o.status.success(), "some task failed: {}", stderr(&o));
    let after = own_load(&host);
    // 300 × (a shell start + a 3 000-step loop) is well over a CPU-second;
    // averaged over the kernel's minute that is above 0.01. The grants
    // (300 × 0.001 CPU, a few at a time) stay below 0.005.
    assert!(
        after > 0.01,
        "own share {before:.4} → {after:.4}: the tasks' CPU time was not counted as Lardon's"
    );
}
