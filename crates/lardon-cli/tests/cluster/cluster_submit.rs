//! `lardon cluster submit` run twice at once on one host, with the default
//! submitter id: both are answered. (With the host name as the default id,
//! the second submitter's stream took over the first's and the first hung.)
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::support;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::procs::{Proc, free_port, logs};

const WAIT: Duration = Duration::from_secs(60);

#[test]
fn two_submits_at_once_from_one_host_are_both_answered() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let addr = free_port();
    let state = dir.join("state");
    let broker = Proc::start(
        dir,
        "broker",
        &["broker", "--listen", &addr, "--state", state.to_str().unwrap(), "--heartbeat", "1s"],
    );
    // Admitting against a simulated host, so the machine's load decides nothing.
    let agent = Proc::start(
        dir,
        "agent",
        &[
            "agent",
            "--broker",
            &addr,
            "--id",
            "a1",
            "--capability",
            "sh@1",
            "--tokens",
            "4",
            "--simulate-host",
            "8GiB,8",
        ],
    );
    let procs = [&broker, &agent];
    let start = Instant::now();
    while !String::from_utf8_lossy(
        &Command::new(support::bin()).args(["cluster", "status", "--broker", &addr]).output().unwrap().stdout,
    )
    .contains("a1")
    {
        assert!(start.elapsed() < WAIT, "the agent never connected\n{}", logs(&procs));
        std::thread::sleep(Duration::from_millis(50));
    }
    let gate = dir.join("go");
    let hold = format!(
        "i=0; while [ ! -e '{}' ] && [ $i -lt 2400 ]; do sleep 0.05; i=$((i+1)); done; echo first",
        gate.display()
    );
    let submit = |argv: &[&str]| {
        let mut c = Command::new(support::bin());
        c.args(["cluster", "submit", "--broker", &addr, "--capability", "sh@1", "--"])
            .args(argv)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c.spawn().unwrap()
    };
    let first = submit(&["sh", "-c", &hold]);
    // The first is running at the agent before the second connects.
    let start = Instant::now();
    while !String::from_utf8_lossy(
        &Command::new(support::bin()).args(["cluster", "status", "--broker", &addr]).output().unwrap().stdout,
    )
    .contains("1 in flight")
    {
        assert!(start.elapsed() < WAIT, "the first task never started\n{}", logs(&procs));
        std::thread::sleep(Duration::from_millis(50));
    }
    let second = submit(&["echo", "second"]);
    let second = second.wait_with_output().unwrap();
    assert!(second.status.success(), "{second:?}\n{}", logs(&procs));
    assert_eq!(String::from_utf8_lossy(&second.stdout).trim(), "second");
    std::fs::write(&gate, "").unwrap();
    let first = first.wait_with_output().unwrap();
    assert!(first.status.success(), "the first submit was not answered: {first:?}\n{}", logs(&procs));
    assert_eq!(String::from_utf8_lossy(&first.stdout).trim(), "first");
}
