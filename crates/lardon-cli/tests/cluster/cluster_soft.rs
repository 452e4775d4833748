//! Soft enforcement in an allocation (docs/DESIGN.md §14): a real broker,
//! a real `lardon agent --allocation --enforcement soft` (the flag forces
//! the path an agent takes where it cannot make cgroups) and the submitter
//! library. A task that declares 64 MiB and fills 300 MiB is killed by the
//! soft memory watchdog and reported so; the agent lives on and runs the
//! next task.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use lardon_cluster::{Capability, Need, TaskId};
use lardon_submit::client::{Answer, RemoteTask};

use crate::support::pilot::{answer, submitter, until_status};
use crate::support::procs::{Proc, free_port, logs};

const MIB: u64 = 1 << 20;

fn task(id: &str, argv: &[&str], memory: u64) -> RemoteTask {
    let argv = argv.iter().map(|a| (*a).to_owned()).collect();
    let mut t = RemoteTask::new(TaskId::new(id).unwrap(), Capability::parse("py@3").unwrap(), argv);
    t.need = Need { memory, cpu_millis: 1000 };
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_soft_watchdog_kills_a_liar_and_the_agent_runs_the_next_task() {
    let python = std::process::Command::new("python3").arg("--version").output();
    assert!(
        python.is_ok_and(|o| o.status.success()),
        "this test needs python3 on PATH (the liar task is a python3 -c script)"
    );
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let addr = free_port();
    let b = Proc::start(d, "broker", &["broker", "--listen", &addr, "--heartbeat", "1s"]);
    let a = Proc::start(
        d,
        "agent",
        &[
            "agent",
            "--broker",
            &addr,
            "--id",
            "soft-1",
            "--capability",
            "py@3",
            "--heartbeat",
            "1s",
            "--allocation",
            "--enforcement",
            "soft",
            // Admission against a fixed size, so the loaded machine's own
            // memory does not make the agent wait.
            "--simulate-host",
            "4GiB,2",
            "--no-optimizer",
        ],
    );
    until_status(&addr, "the agent", &[&b, &a], |s| s.agents.len() == 1).await;
    let log = std::fs::read_to_string(&a.log).unwrap();
    assert!(
        log.contains("enforcement: soft memory watchdog (--enforcement soft)"),
        "it says which and why: {log}"
    );

    let s = submitter(&addr);
    // Declares 64 MiB, writes 300 MiB (every page touched), then waits.
    let liar = "import time\nb = b'x' * (300 << 20)\nprint('filled', flush=True)\ntime.sleep(120)\n";
    let ended = match answer(s.submit(&task("liar", &["python3", "-c", liar], 64 * MIB)), &[&b, &a]).await {
        Answer::Done(ended) => ended,
        other => panic!("{other:?}\n{}", logs(&[&b, &a])),
    };
    assert!(!ended.success, "{ended:?}");
    let prefix = "killed by the soft memory watchdog: it used ";
    let suffix = " bytes, more than the 67108864 it declared";
    let used: u64 = ended
        .reason
        .strip_prefix(prefix)
        .and_then(|r| r.strip_suffix(suffix))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not the watchdog's reason: {ended:?}\n{}", logs(&[&b, &a])));
    assert!(used > 72 * MIB, "past the declaration and its 8 MiB tolerance: {used}");
    assert_eq!(ended.agent_id, "soft-1");

    // The agent lives on: the next task runs there, to its end.
    let next = task("next", &["python3", "-c", "print('still here')"], 64 * MIB);
    match answer(s.submit(&next), &[&b, &a]).await {
        Answer::Done(ended) if ended.success => {
            assert_eq!(String::from_utf8_lossy(&ended.stdout), "still here\n");
            assert_eq!(ended.agent_id, "soft-1");
        }
        other => panic!("{other:?}\n{}", logs(&[&b, &a])),
    }
}
