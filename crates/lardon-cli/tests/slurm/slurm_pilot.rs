//! Pilot mode on a real Slurm (docs/DESIGN.md §14): `lardon broker
//! --provision` with the `slurm` provider submits real batch jobs (no
//! mocked `sbatch`) whose `lardon agent` dials back over loopback. Built
//! with the `slurm-tests` feature; `.ci/run` starts the two-node cluster of
//! `scripts/slurm-up.sh` first. With the feature on and no Slurm, every
//! test fails naming the script — never a skip.
//!
//! Each test names its jobs uniquely (`job_prefix`), reads their states
//! from `scontrol show job` (this Slurm keeps no accounting: no `sacct`)
//! and cancels them when it ends.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::support;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::pilot::{
    WAIT, broker, count, done, sh, submitter, until_explain, until_lines, until_status,
};
use crate::support::procs::{Proc, free_port, logs};
use crate::support::slurm::{Mode, require_slurm};

/// A job prefix no other run uses; its jobs are cancelled on drop.
struct Jobs(String);

impl Jobs {
    fn new(what: &str) -> Jobs {
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
        Jobs(format!("lp-{}-{nanos}-{what}", std::process::id()))
    }
}

impl Drop for Jobs {
    fn drop(&mut self) {
        // Job names are PREFIX-SHAPE; every shape here is `s`.
        let _ = Command::new("scancel").arg(format!("--name={}-s", self.0)).output();
    }
}

/// `scontrol show job -o ID`'s `JobState`, or `None` once Slurm forgot it.
fn job_state(id: &str) -> Option<String> {
    let o = Command::new("scontrol").args(["show", "job", "-o", id]).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    text.split_whitespace().find_map(|w| w.strip_prefix("JobState=")).map(str::to_owned)
}

/// Polls the job's state until it is `want`, failing at the deadline or
/// when the job ends otherwise.
async fn until_job(id: &str, want: &str, procs: &[&Proc]) {
    let start = Instant::now();
    loop {
        let state = job_state(id);
        if state.as_deref() == Some(want) {
            return;
        }
        let over = matches!(
            state.as_deref(),
            Some("CANCELLED" | "FAILED" | "TIMEOUT" | "OUT_OF_MEMORY" | "NODE_FAIL")
        );
        assert!(!over && start.elapsed() < WAIT, "job {id}: {state:?}, expected {want}\n{}", logs(procs));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A provision file: one shape `s` of `nodes` nodes, 1 CPU and 200 MiB
/// each, offering `sh@1`; agents exit after `idle_exit`.
fn provision(dir: &Path, addr: &str, jobs: &Jobs, nodes: u32, idle_exit: &str) -> String {
    format!(
        "provider = \"slurm\"\nbroker = \"{addr}\"\nidle_exit = \"{idle_exit}\"\ntick = \"300ms\"\n\
         heartbeat = \"1s\"\ngrace = \"30s\"\noutput_dir = \"{}\"\njob_prefix = \"{}\"\n\
         [limits]\nmax_allocations = 1\nbacklog = 1\n\
         [[shape]]\nname = \"s\"\nmemory = \"200MiB\"\ncpus = 1\nwalltime = \"10m\"\nnodes = {nodes}\n\
         capabilities = [\"sh@1\"]\n",
        dir.display(),
        jobs.0
    )
}

/// The agents' job outputs, for a failure message.
fn job_logs(dir: &Path) -> String {
    let mut text = String::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("lardon-agent-") {
            text.push_str(&format!("--- {name}\n{}", std::fs::read_to_string(e.path()).unwrap_or_default()));
        }
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allocation_dials_back_runs_the_tasks_and_ends_completed_after_idle_exit() {
    let _cluster = require_slurm(Mode::Pilot);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let addr = free_port();
    let jobs = Jobs::new("idle");
    let b = broker(d, &addr, &provision(d, &addr, &jobs, 1, "3s"));
    let s = submitter(&addr);
    let tickets: Vec<_> =
        (0..3).map(|i| s.submit(&sh(&format!("t{i}"), "sh@1", "echo \"$SLURM_JOB_ID\""))).collect();
    let mut ran_in = Vec::new();
    for t in tickets {
        ran_in.push(done(t, &[&b]).await.trim().to_owned());
    }
    let e = until_explain(&addr, "the allocation", &[&b], |e| e.allocations.iter().any(|a| a.started)).await;
    let job = e.allocations[0].id.clone();
    assert_eq!(ran_in, [job.clone(), job.clone(), job.clone()], "all three ran in the one allocation");
    let st = until_status(&addr, "its agent", &[&b], |s| s.agents.len() == 1).await;
    assert_eq!(st.agents[0].agent_id, format!("slurm-{job}"));

    // Idle for 3 s: the agent exits 0, so the job ends COMPLETED, and the
    // Provisioner sees it over.
    until_job(&job, "COMPLETED", &[&b]).await;
    until_explain(&addr, "the allocation over", &[&b], |e| e.allocations.is_empty()).await;
    let out = std::fs::read_to_string(d.join(format!("lardon-agent-{job}.out"))).unwrap();
    assert!(out.contains("idle for") && out.contains("the agent stopped"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scancel_mid_task_requeues_it_and_a_new_allocation_finishes_it_once() {
    let _cluster = require_slurm(Mode::Pilot);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let addr = free_port();
    let jobs = Jobs::new("scancel");
    let b = broker(d, &addr, &provision(d, &addr, &jobs, 1, "3s"));
    let runs = d.join("runs");
    // The task ignores SIGTERM, so scancel's TERM ends the agent (its
    // stream closes) and Slurm's SIGKILL, KillWait (5 s) later, the task.
    let script = format!(
        "trap '' TERM; echo start >> '{runs}'; sleep 8; echo done >> '{runs}'; echo \"$SLURM_JOB_ID\"",
        runs = runs.display()
    );
    let s = submitter(&addr);
    let ticket = s.submit(&sh("victim", "sh@1", &script));
    until_lines(&runs, "start", 1, &[&b]).await;
    let e = until_explain(&addr, "the allocation", &[&b], |e| e.allocations.len() == 1).await;
    let first = e.allocations[0].id.clone();
    let o = Command::new("scancel").arg(&first).output().unwrap();
    assert!(o.status.success(), "scancel: {}", String::from_utf8_lossy(&o.stderr));

    let ran_in = done(ticket, &[&b]).await;
    let second = ran_in.trim();
    assert_ne!(second, first, "it finished in a new allocation\n{}", job_logs(d));
    assert_eq!((count(&runs, "start"), count(&runs, "done")), (2, 1), "started twice, finished once");
    until_job(&first, "CANCELLED", &[&b]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_node_allocation_runs_tasks_on_both_nodes() {
    let _cluster = require_slurm(Mode::Pilot);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let addr = free_port();
    let jobs = Jobs::new("two");
    let b = broker(d, &addr, &provision(d, &addr, &jobs, 2, "3s"));
    let s = submitter(&addr);
    // One token per agent (one CPU per node): two tasks that overlap in
    // time must run on different nodes.
    let tickets: Vec<_> = (0..2)
        .map(|i| s.submit(&sh(&format!("n{i}"), "sh@1", "sleep 3; echo \"$SLURMD_NODENAME\"")))
        .collect();
    let mut nodes = Vec::new();
    for t in tickets {
        nodes.push(done(t, &[&b]).await.trim().to_owned());
    }
    nodes.sort();
    assert_eq!(nodes, ["n1", "n2"], "{}", job_logs(d));
    let e = until_explain(&addr, "the allocation", &[&b], |e| e.allocations.len() == 1).await;
    let job = e.allocations[0].id.clone();
    let st = client_agents(&addr).await;
    assert_eq!(st, [format!("slurm-{job}-0"), format!("slurm-{job}-1")]);
    until_job(&job, "COMPLETED", &[&b]).await;
}

async fn client_agents(addr: &str) -> Vec<String> {
    let s = lardon_submit::client::status(addr, &Default::default()).await.unwrap();
    let mut ids: Vec<String> = s.agents.into_iter().map(|a| a.agent_id).collect();
    ids.sort();
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_liar_is_killed_in_its_own_cgroup_before_the_jobs_limit_and_the_allocation_lives_on() {
    let _cluster = require_slurm(Mode::Pilot);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let addr = free_port();
    let jobs = Jobs::new("liar");
    let b = broker(d, &addr, &provision(d, &addr, &jobs, 1, "3s"));
    let s = submitter(&addr);
    // Declares 50 MiB, touches 400 MiB: past its own limit, and past the
    // job's 200 MiB (which would end the whole allocation OUT_OF_MEMORY).
    let bin = support::bin().to_str().unwrap().to_owned();
    let argv = vec![bin, "exercise".into(), "--mem".into(), "400MiB".into(), "--secs".into(), "1".into()];
    let mut liar = lardon_submit::client::RemoteTask::new(
        lardon_cluster::TaskId::new("liar").unwrap(),
        lardon_cluster::Capability::parse("sh@1").unwrap(),
        argv,
    );
    liar.need = lardon_cluster::Need { memory: 50 << 20, cpu_millis: 1000 };
    match crate::support::pilot::answer(s.submit(&liar), &[&b]).await {
        lardon_submit::client::Answer::Done(ended) => {
            assert!(!ended.success, "{ended:?}");
            assert!(ended.reason.contains("killed at its memory limit"), "{ended:?}\n{}", job_logs(d));
        }
        other => panic!("{other:?}\n{}", logs(&[&b])),
    }
    // The agent lived on: the next task runs in the same allocation.
    let e = until_explain(&addr, "the allocation", &[&b], |e| e.allocations.len() == 1).await;
    let job = e.allocations[0].id.clone();
    let next = done(s.submit(&sh("after", "sh@1", "echo \"$SLURM_JOB_ID\"")), &[&b]).await;
    assert_eq!(next.trim(), job);
    until_job(&job, "COMPLETED", &[&b]).await;
}
