//! The load gate on the real host, through the real binary (a daemon in a
//! memory-limited cgroup, see `support/realhost.rs`; no simulated host).
//! The gate compares *foreign* load — the 1-minute load minus the CPUs
//! Lardon's own running tasks hold — with `max_load_ratio` × the pool.
//!
//! 2. Lardon's own tasks are never the reason: two of its CPU-bound tasks
//!    run for 30 s on a 2-CPU pool with the gate at 0.6 × 2 = 1.2, the
//!    machine's load below 0.9 at the start; a third task waits for a free
//!    CPU, and never on `cpu_load`, although the 1-minute load they cause
//!    rises past the threshold. Break the code to see it fail: make
//!    `LoadFigures::reached` in `governor/load.rs` compare `load` instead
//!    of `foreign`, and the third task is held on `cpu_load`.
//! 1. Foreign load is: two busy loops the test starts outside Lardon make
//!    a CPU-bound task wait with reason `cpu_load`, and the message names
//!    the foreign load. The threshold (0.25 × 2 CPUs = 0.5) is one the two
//!    loops reach within ~20 s whatever else the machine does, since other
//!    load only adds to theirs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::support::realhost::RealHost;
use crate::support::{stderr, stdout};

const GIB: u64 = 1 << 30;

fn load1() -> f64 {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap();
    text.split_whitespace().next().and_then(|v| v.parse().ok()).unwrap()
}

/// Busy loops outside Lardon, killed when dropped.
struct Spinners(Vec<Child>);

impl Drop for Spinners {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn submit(host: &RealHost, args: &[&str]) -> String {
    let o = host.lardon(&[&["submit"], args].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    stdout(&o).trim().to_owned()
}

fn set(host: &RealHost, kv: &str) {
    let o = host.lardon(&["policy", "--set", kv]);
    assert!(o.status.success(), "{kv}: {}", stderr(&o));
}

#[test]
fn lardons_own_tasks_never_hold_it_back_and_foreign_load_does() {
    let tmp = tempfile::tempdir().unwrap();
    let host = RealHost::start(tmp.path(), 2 * GIB, &[])
        .unwrap_or_else(|why| panic!("cannot host this test: {why}"));
    // PSI gates off (busy CPUs raise CPU PSI; this test is about load);
    // every CPU in the pool.
    for kv in ["psi_cpu=0", "psi_memory=0", "psi_io=0", "emergency_floor=0", "cpu_reserve=0"] {
        set(&host, kv);
    }
    let r: serde_json::Value = serde_json::from_slice(&host.lardon(&["resources", "--json"]).stdout)
        .expect("resources --json parses");
    let pool = r["cpus"]["pool"].as_array().map_or(0, Vec::len);
    assert_eq!(pool, 2, "this test needs a pool of exactly 2 CPUs (the CI machine's): {r}");

    // 1. Foreign load.
    set(&host, "max_load_ratio=0.25");
    let spinners = Spinners(
        (0..2).map(|_| Command::new("sh").args(["-c", "while :; do :; done"]).spawn().unwrap()).collect(),
    );
    // Submitted once the 1-minute load shows the loops (other load only
    // adds to it): from then on foreign load is at the threshold.
    let start = Instant::now();
    while load1() < 0.7 {
        assert!(start.elapsed() < Duration::from_secs(90), "two busy loops never raised the load to 0.7");
        std::thread::sleep(Duration::from_millis(200));
    }
    let waiting = submit(&host, &["--cpus", "1", "--", "true"]);
    let start = Instant::now();
    loop {
        let t = host.task(&waiting);
        let decision = &t["last_decision"];
        if decision["reason_code"] == "cpu_load" {
            assert_eq!(t["state"], "pending", "{t}");
            let message = decision["message"].as_str().unwrap_or_default();
            assert!(message.contains("foreign"), "the reason names the foreign load: {message}");
            break;
        }
        assert_eq!(t["state"], "pending", "the task ran although two foreign busy loops hold the load up");
        assert!(start.elapsed() < Duration::from_secs(90), "never held on cpu_load: {t}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let o = host.lardon(&["cancel", &waiting]);
    assert!(o.status.success(), "{}", stderr(&o));
    drop(spinners);

    // 2. Own tasks. Once the loops' load has decayed below 0.9, the gate is
    // set at 1.2 (0.6 × 2 CPUs): two busy tasks of Lardon's own push the
    // 1-minute load past it within ~20 s, while the foreign part — what is
    // left of the loops' load — only decays.
    let start = Instant::now();
    while load1() >= 0.9 {
        assert!(
            start.elapsed() < Duration::from_secs(150),
            "the machine's load stays at {:.2}: cannot host this test",
            load1()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let before = load1();
    set(&host, "max_load_ratio=0.6");
    let spin = "timeout 30 sh -c 'while :; do :; done'; exit 0";
    let busy: Vec<String> = (0..2).map(|_| submit(&host, &["--cpus", "1", "--", "sh", "-c", spin])).collect();
    let third = submit(&host, &["--cpus", "1", "--", "true"]);
    let start = Instant::now();
    let mut reasons = std::collections::BTreeSet::new();
    let mut peak_load = before;
    loop {
        let t = host.task(&third);
        if let Some(code) = t["last_decision"]["reason_code"].as_str() {
            reasons.insert(code.to_owned());
        }
        peak_load = peak_load.max(load1());
        if t["state"] == "completed" {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(90), "the third task never ran: {t}");
        std::thread::sleep(Duration::from_millis(100));
    }
    for t in host.wait_all(&busy, Duration::from_secs(30)) {
        assert_eq!(t["state"], "completed", "{t}");
    }
    assert!(
        !reasons.contains("cpu_load"),
        "Lardon's own tasks held the next one on cpu_load (reasons {reasons:?}; load {before:.2} → \
         {peak_load:.2}, threshold 1.2)"
    );
    assert!(
        peak_load > 1.2,
        "the own tasks never raised the load past the threshold ({peak_load:.2}): the test proved nothing"
    );
    assert!(
        reasons.contains("cpu"),
        "the third task waited for a free CPU, not on anything else: {reasons:?}"
    );
}
