//! Native Slurm mode against a real Slurm (docs/DESIGN.md §14), through
//! the real `lardon` binary: no mocked `sbatch`. Built with the
//! `slurm-tests` feature (CI's `--all-features`); `.ci/run` starts the
//! two-node cluster of `scripts/slurm-up.sh` first and exports
//! `SLURM_CONF`. With the feature on and no Slurm, every test fails naming
//! the script — never a skip.
//!
//! Each test runs its own daemon (simulated host, so admission figures do
//! not depend on this machine) and names its tasks uniquely: Slurm's job
//! name is the task's name, which is how the tests find their jobs in
//! `scontrol show job` (what Slurm itself says it was asked for).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;
use std::process::Command;
use std::time::Duration;

use crate::support::slurm::{Mode, require_slurm};

use crate::support::{Daemon, lardon, state, stderr, submit, task_json, wait_until};

const MIB: u64 = 1 << 20;
/// Generous: a job on the test cluster takes about a second.
const DEADLINE: Duration = Duration::from_secs(120);

/// One job as `scontrol show job -o` describes it.
#[derive(Debug, Clone)]
struct Job {
    id: u64,
    state: String,
    /// `MinMemoryNode`, as Slurm prints it (`71M`).
    mem: String,
}

/// Every job Slurm still lists whose name is `name`, oldest first.
fn jobs_named(name: &str) -> Vec<Job> {
    let o = Command::new("scontrol").args(["show", "job", "-o"]).output().expect("run scontrol");
    let text = String::from_utf8_lossy(&o.stdout);
    let field = |line: &str, key: &str| {
        line.split_whitespace().find_map(|w| w.strip_prefix(key)).unwrap_or_default().to_owned()
    };
    let mut jobs: Vec<Job> = text
        .lines()
        // The name is the one field that may hold spaces; ours do not.
        .filter(|l| field(l, "JobName=") == name)
        .map(|l| Job {
            id: field(l, "JobId=").parse().unwrap_or(0),
            state: field(l, "JobState="),
            mem: field(l, "MinMemoryNode="),
        })
        .collect();
    jobs.sort_by_key(|j| j.id);
    jobs
}

/// Cancels every job named `.0` when dropped, so a failed test leaves no
/// long job holding the test cluster's two CPUs.
struct ScancelOnDrop(String);

impl Drop for ScancelOnDrop {
    fn drop(&mut self) {
        let _ = Command::new("scancel").arg(format!("--name={}", self.0)).output();
    }
}

/// A name no other test run (past, or parallel in this binary) uses.
fn unique(what: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("lt-{}-{nanos}-{what}", std::process::id())
}

fn daemon(dir: &std::path::Path) -> Daemon {
    let d = Daemon::start(dir, "8GiB,4");
    let o = lardon(dir, &["policy", "--set", "slurm_poll_ms=100"]);
    assert!(o.status.success(), "{}", stderr(&o));
    d
}

/// Blocks on `lardon wait ID` (the daemon's event stream, no polling),
/// failing after [`DEADLINE`]; the task's JSON once it ended.
fn wait_end(dir: &std::path::Path, id: &str) -> serde_json::Value {
    let o = Command::new("timeout")
        .arg(DEADLINE.as_secs().to_string())
        .arg(support::bin())
        .env_remove("LARDON_SOCKET")
        .env_remove("LARDON_STATE_DIR")
        .arg("--state-dir")
        .arg(dir)
        .args(["wait", id])
        .output()
        .expect("run timeout lardon wait");
    // 0: completed, 1: failed or cancelled; 124: timeout's deadline.
    assert!(matches!(o.status.code(), Some(0 | 1)), "lardon wait {id}: {:?} {}", o.status, stderr(&o));
    task_json(dir, id)
}

fn exercise(mem: &str) -> Vec<String> {
    let bin = support::bin().to_str().unwrap().to_owned();
    vec![bin, "exercise".into(), "--mem".into(), mem.into(), "--secs".into(), "0.3".into()]
}

fn submit_slurm(dir: &std::path::Path, flags: &[&str], argv: &[String]) -> String {
    let mut args: Vec<&str> = vec!["--engine", "slurm"];
    args.extend_from_slice(flags);
    args.push("--");
    args.extend(argv.iter().map(String::as_str));
    submit(dir, &args)
}

/// A class that under-declares: its first job ends OUT_OF_MEMORY at the
/// declared 40 MiB, is submitted once more at the size the kill taught
/// (2 × 40 MiB + 10 %), completes there and the class learns the measured
/// peak; the class's next task asks Slurm for that peak + 10 %, not for its
/// declaration. Break it: size `--mem` from the declaration only
/// (`learned` = None in `slurm/tracker.rs`) and the resubmission asks for
/// 40M again (seen: the first task ends failed instead of completed).
#[test]
fn the_next_job_asks_slurm_for_the_learned_memory() {
    let _cluster = require_slurm(Mode::Native);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let _d = daemon(dir);
    let first = unique("first");
    let id = submit_slurm(dir, &["--mem", "40MiB", "--class", "grow", "--name", &first], &exercise("64MiB"));
    let t = wait_end(dir, &id);
    assert_eq!((t["engine"].as_str(), t["state"].as_str()), (Some("slurm"), Some("completed")), "{t}");
    assert_eq!(t["memory_retries"], 1, "{t}");
    let jobs = jobs_named(&first);
    let seen: Vec<(&str, &str)> = jobs.iter().map(|j| (j.state.as_str(), j.mem.as_str())).collect();
    assert_eq!(seen, [("OUT_OF_MEMORY", "40M"), ("COMPLETED", "88M")], "{jobs:?}");

    let learned = t["learned"]["fixed"].as_u64().unwrap_or_else(|| panic!("a learned peak: {t}"));
    assert!((64 * MIB..88 * MIB).contains(&learned), "the measured peak of a 64 MiB run: {t}");
    let want = (learned + learned / 10).div_ceil(MIB);

    let second = unique("second");
    let id = submit_slurm(dir, &["--mem", "40MiB", "--class", "grow", "--name", &second], &exercise("64MiB"));
    let t = wait_end(dir, &id);
    let jobs = jobs_named(&second);
    assert_eq!(jobs.len(), 1, "one job, at the learned size: {jobs:?} {t}");
    assert_eq!(jobs[0].mem, format!("{want}M"), "learned peak + 10 %: {jobs:?}");
    assert_eq!((t["state"].as_str(), jobs[0].state.as_str()), (Some("completed"), "COMPLETED"), "{t}");
    assert_eq!(t["memory_retries"], 0, "{t}");
}

/// A class that over-declares: its first job asks for the declared 400 MiB
/// and completes; the next task of the class asks Slurm for the measured
/// peak + 10 %, far below the declaration, and completes there too. Break
/// it: size `--mem` as max(declared, learned) in `slurm/sbatch.rs` and the
/// second job asks for 400M again.
#[test]
fn an_over_estimate_shrinks_to_the_learned_memory() {
    let _cluster = require_slurm(Mode::Native);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let _d = daemon(dir);
    let first = unique("big-first");
    let id =
        submit_slurm(dir, &["--mem", "400MiB", "--class", "shrink", "--name", &first], &exercise("32MiB"));
    let t = wait_end(dir, &id);
    assert_eq!(t["state"].as_str(), Some("completed"), "{t}");
    let jobs = jobs_named(&first);
    let seen: Vec<(&str, &str)> = jobs.iter().map(|j| (j.state.as_str(), j.mem.as_str())).collect();
    assert_eq!(seen, [("COMPLETED", "400M")], "the first job asks for the declaration: {jobs:?}");
    let learned = t["learned"]["fixed"].as_u64().unwrap_or_else(|| panic!("a learned peak: {t}"));
    assert!((32 * MIB..100 * MIB).contains(&learned), "the measured peak of a 32 MiB run: {t}");
    let want = (learned + learned / 10).div_ceil(MIB);

    let second = unique("big-second");
    let id =
        submit_slurm(dir, &["--mem", "400MiB", "--class", "shrink", "--name", &second], &exercise("32MiB"));
    let t = wait_end(dir, &id);
    let jobs = jobs_named(&second);
    assert_eq!(jobs.len(), 1, "one job: {jobs:?} {t}");
    assert_eq!(jobs[0].mem, format!("{want}M"), "learned peak + 10 %, not the 400 MiB declared: {jobs:?}");
    assert_eq!((t["state"].as_str(), jobs[0].state.as_str()), (Some("completed"), "COMPLETED"), "{t}");
}

/// OUT_OF_MEMORY is FAILED with that reason: at once with --no-oom-retry,
/// else after the one resubmission at the learned size (also too small
/// here: 2 × 30 MiB + 10 % for a 200 MiB run). Break it: map OUT_OF_MEMORY
/// to COMPLETED in `slurm/outcome.rs` (seen: fails on the state).
#[test]
fn out_of_memory_fails_with_its_reason_after_one_resubmission() {
    let _cluster = require_slurm(Mode::Native);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let _d = daemon(dir);
    let once = unique("once");
    let id = submit_slurm(
        dir,
        &["--mem", "30MiB", "--no-oom-retry", "--class", "once", "--name", &once],
        &exercise("200MiB"),
    );
    let t = wait_end(dir, &id);
    assert_eq!(t["state"], "failed", "{t}");
    let reason = t["failure_reason"].as_str().unwrap_or_default();
    assert!(reason.contains("OUT_OF_MEMORY") && reason.contains("--no-oom-retry"), "{t}");
    let jobs = jobs_named(&once);
    assert_eq!(jobs.iter().map(|j| j.state.as_str()).collect::<Vec<_>>(), ["OUT_OF_MEMORY"], "{jobs:?}");

    let twice = unique("twice");
    // Another class: this one has learned nothing yet, so it starts at its
    // declaration.
    let id =
        submit_slurm(dir, &["--mem", "30MiB", "--class", "twice", "--name", &twice], &exercise("200MiB"));
    let t = wait_end(dir, &id);
    assert_eq!(t["state"], "failed", "{t}");
    assert_eq!(t["memory_retries"], 1, "{t}");
    let reason = t["failure_reason"].as_str().unwrap_or_default();
    assert!(reason.contains("OUT_OF_MEMORY") && reason.contains("after one resubmission"), "{t}");
    let jobs = jobs_named(&twice);
    let seen: Vec<(&str, &str)> = jobs.iter().map(|j| (j.state.as_str(), j.mem.as_str())).collect();
    assert_eq!(seen, [("OUT_OF_MEMORY", "30M"), ("OUT_OF_MEMORY", "66M")], "{jobs:?}");
}

/// `lardon cancel` of a task whose job runs is an `scancel`: the task is
/// CANCELLED and Slurm ends the job CANCELLED. Break it: drop the
/// `scancel` call in `SlurmEngine::cancel` (seen: the job runs on).
#[test]
fn cancel_runs_scancel() {
    let _cluster = require_slurm(Mode::Native);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let _d = daemon(dir);
    let name = unique("cancel");
    let _cleanup = ScancelOnDrop(name.clone());
    let id = submit_slurm(dir, &["--mem", "20MiB", "--name", &name], &["sleep".to_owned(), "300".to_owned()]);
    wait_until("the job to run", DEADLINE, || {
        jobs_named(&name).first().is_some_and(|j| j.state == "RUNNING")
    });
    let o = lardon(dir, &["cancel", &id]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(state(dir, &id), "cancelled");
    wait_until("Slurm to cancel the job", DEADLINE, || {
        jobs_named(&name).first().is_some_and(|j| j.state == "CANCELLED")
    });
}

/// A daemon killed while its task's job runs: the next start adopts the
/// job (its run handle names it and its report file) instead of running
/// the task again, and `cancel` still reaches it. Break it: make
/// `SlurmEngine::adopt` cancel the job and submit afresh (seen: a second
/// job appears).
#[test]
fn a_restart_adopts_the_running_job() {
    let _cluster = require_slurm(Mode::Native);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let d = daemon(dir);
    let name = unique("adopt");
    let _cleanup = ScancelOnDrop(name.clone());
    let id = submit_slurm(dir, &["--mem", "20MiB", "--name", &name], &["sleep".to_owned(), "300".to_owned()]);
    wait_until("the job to run", DEADLINE, || {
        jobs_named(&name).first().is_some_and(|j| j.state == "RUNNING")
    });
    d.kill9();
    let _d = Daemon::start(dir, "8GiB,4");
    assert_eq!(state(dir, &id), "running", "{}", task_json(dir, &id));
    let o = lardon(dir, &["cancel", &id]);
    assert!(o.status.success(), "{}", stderr(&o));
    wait_until("Slurm to cancel the adopted job", DEADLINE, || {
        jobs_named(&name).first().is_some_and(|j| j.state == "CANCELLED")
    });
    assert_eq!(jobs_named(&name).len(), 1, "one job, adopted, never a second: {:?}", jobs_named(&name));
}

/// A job that ends while no daemon watches is judged once at the next
/// start: the task completes from its report and the class learns its
/// peak; nothing runs twice (docs/DESIGN.md §10's crash rule). Break it:
/// as above (seen: two jobs).
#[test]
fn a_job_that_ended_while_the_daemon_was_down_is_judged_once() {
    let _cluster = require_slurm(Mode::Native);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let d = daemon(dir);
    let name = unique("down");
    let _cleanup = ScancelOnDrop(name.clone());
    let mut argv = exercise("48MiB");
    argv[5] = "2".into();
    let id = submit_slurm(dir, &["--mem", "100MiB", "--class", "down", "--name", &name], &argv);
    wait_until("the job to run", DEADLINE, || {
        jobs_named(&name).first().is_some_and(|j| j.state == "RUNNING")
    });
    d.kill9();
    wait_until("the job to end unwatched", DEADLINE, || {
        jobs_named(&name).first().is_some_and(|j| j.state == "COMPLETED")
    });
    let _d = daemon(dir);
    let t = wait_end(dir, &id);
    assert_eq!(t["state"], "completed", "{t}");
    assert_eq!(t["learned"]["samples"], 1, "the unwatched run's peak is learned: {t}");
    let jobs = jobs_named(&name);
    assert_eq!(jobs.len(), 1, "nothing ran twice: {jobs:?}");
}

/// `slurm_max_jobs = 1`: the second task waits in the daemon (PENDING, no
/// job) while the first one's job is out, then runs. Break it: ignore the
/// cap in the tracker's loop (seen: both jobs exist at once).
#[test]
fn outstanding_jobs_are_capped() {
    let _cluster = require_slurm(Mode::Native);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let _d = daemon(dir);
    let o = lardon(dir, &["policy", "--set", "slurm_max_jobs=1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (a, b) = (unique("cap-a"), unique("cap-b"));
    let sleep = ["sh".to_owned(), "-c".to_owned(), "sleep 3".to_owned()];
    let ia = submit_slurm(dir, &["--mem", "20MiB", "--name", &a], &sleep);
    let ib = submit_slurm(dir, &["--mem", "20MiB", "--name", &b], &sleep);
    wait_until("the first job", DEADLINE, || !jobs_named(&a).is_empty());
    assert_eq!(state(dir, &ib), "pending", "the second waits in the daemon");
    assert!(jobs_named(&b).is_empty(), "no second job while the first is out");
    let ta = wait_end(dir, &ia);
    let tb = wait_end(dir, &ib);
    assert_eq!(
        (ta["state"].as_str(), tb["state"].as_str()),
        (Some("completed"), Some("completed")),
        "{ta} {tb}"
    );
    assert_eq!(jobs_named(&b).len(), 1);
}
