//! Pilot mode without an engine: a real `lardon broker --provision` with
//! the `local` provider, whose allocations are `lardon agent` child
//! processes (docs/DESIGN.md §14). Scale from zero: a task of a capability
//! a shape offers waits while an allocation comes, one no shape offers (or
//! no shape can hold) is answered "no executor" at once; the allocation's agent exits when idle
//! and the Provisioner sees it over.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::support;
use lardon_submit::client::Answer;

use crate::support::pilot::{broker, done, sh, submitter, until_explain, until_status};
use crate::support::procs::{free_port, logs};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_allocation_comes_for_queued_work_runs_it_and_ends_when_idle() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let addr = free_port();
    let toml = format!(
        "provider = \"local\"\nbroker = \"{addr}\"\nidle_exit = \"2s\"\ntick = \"200ms\"\nheartbeat = \"1s\"\n\
         output_dir = \"{}\"\n[limits]\nmax_allocations = 1\n\
         [[shape]]\nname = \"small\"\nmemory = \"1GiB\"\ncpus = 2\nwalltime = \"10m\"\ncapabilities = [\"sh@1\"]\n",
        d.display()
    );
    let b = broker(d, &addr, &toml);
    let e = until_explain(&addr, "the broker", &[&b], |e| e.provider == "local").await;
    assert!(e.allocations.is_empty(), "nothing asked for before work: {e:?}");

    let s = submitter(&addr);
    // No agent anywhere: a capability no shape offers is answered at once...
    match crate::support::pilot::answer(s.submit(&sh("clang", "clang@17", "true")), &[&b]).await {
        Answer::NoExecutor(why) => assert_eq!(why, "", "no shape offers clang: no reason beyond that"),
        other => panic!("{other:?}\n{}", logs(&[&b])),
    }
    // One whose capability a shape offers but that no shape can hold is
    // answered at once too, with the Provisioner's reason.
    let mut huge = sh("huge", "sh@1", "true");
    huge.need.memory = 4 << 30;
    match crate::support::pilot::answer(s.submit(&huge), &[&b]).await {
        Answer::NoExecutor(why) => {
            assert_eq!(why, "sh@1:*: no shape fits 4.0 GiB and 1 CPUs (largest: 1.0 GiB and 2 CPUs)");
        }
        other => panic!("{other:?}\n{}", logs(&[&b])),
    }
    // ...while one a shape offers waits for the allocation and runs there.
    let tickets: Vec<_> =
        (0..3).map(|i| s.submit(&sh(&format!("t{i}"), "sh@1", &format!("echo {i}")))).collect();
    for (i, t) in tickets.into_iter().enumerate() {
        assert_eq!(done(t, &[&b]).await, format!("{i}\n"));
    }
    let e = until_explain(&addr, "the allocation", &[&b], |e| !e.allocations.is_empty()).await;
    assert_eq!(e.allocations.len(), 1, "max_allocations is 1: {e:?}");
    let id = e.allocations[0].id.clone();
    assert_eq!(e.allocations[0].shape, "small");

    // Idle for 2 s, its agent exits 0 and the Provisioner sees it over.
    until_explain(&addr, "the allocation to end", &[&b], |e| e.allocations.is_empty()).await;
    until_status(&addr, "its agent gone", &[&b], |s| s.agents.is_empty()).await;
    let agent_log = std::fs::read_to_string(d.join(format!("{id}.log"))).unwrap();
    assert!(agent_log.contains("idle for"), "{agent_log}");
    assert!(agent_log.contains("the agent stopped"), "it returned from its run: {agent_log}");

    // `lardon cluster explain` says what the RPC says.
    let o = support::lardon(d, &["cluster", "explain", "--broker", &addr]);
    assert!(o.status.success(), "{}", support::stderr(&o));
    assert_eq!(support::stdout(&o), "provider local: 0 allocation(s) alive\n");
    let o = support::lardon(d, &["cluster", "explain", "--broker", &addr, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["provider"], "local");
    assert_eq!(v["allocations"], serde_json::json!([]));
}
