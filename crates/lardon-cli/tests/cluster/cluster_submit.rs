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

#[test]
fn env_input_and_output_travel_with_a_cluster_submit() {
    use crate::support::procs::agent_args;
    use crate::support::wait::until_logged;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let addr = free_port();
    let broker = Proc::start(dir, "broker", &["broker", "--listen", &addr, "--heartbeat", "1s"]);
    let agent = Proc::start(dir, "agent", &agent_args(&addr, "a1", "sh@1", "1"));
    let procs = [&broker, &agent];
    until_logged("the agent at the broker", &procs, || {
        let o = Command::new(support::bin()).args(["cluster", "status", "--broker", &addr]).output().unwrap();
        String::from_utf8_lossy(&o.stdout).contains("a1")
    });
    let work = dir.join("work");
    std::fs::create_dir_all(work.join("src")).unwrap();
    std::fs::write(work.join("src/in.txt"), "abc\n").unwrap();
    let run = |args: &[&str]| {
        let mut c = Command::new(support::bin());
        c.current_dir(&work)
            .args(["cluster", "submit", "--broker", &addr, "--capability", "sh@1"])
            .args(args);
        c.output().unwrap()
    };
    let script =
        "mkdir -p out && rev src/in.txt > out/r.txt && echo \"GREETING=$GREETING\" && echo junk > extra";
    let o = run(&[
        "--env",
        "GREETING=hi",
        "--input",
        "src/in.txt",
        "--output",
        "out/r.txt",
        "--",
        "sh",
        "-c",
        script,
    ]);
    assert!(o.status.success(), "{}\n{}", support::stderr(&o), logs(&procs));
    assert_eq!(support::stdout(&o), "GREETING=hi\n");
    assert_eq!(std::fs::read_to_string(work.join("out/r.txt")).unwrap(), "cba\n");
    assert!(!work.join("extra").exists(), "only the declared output is written here");
    // Refused before anything is sent, naming the flag.
    let o = run(&["--input", "../outside", "--", "true"]);
    assert_eq!(o.status.code(), Some(2), "{}", support::stderr(&o));
    assert!(support::stderr(&o).contains("--input"), "{}", support::stderr(&o));
    let o = run(&["--output", "/etc/x", "--", "true"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(support::stderr(&o).contains("--output: `/etc/x` is absolute"), "{}", support::stderr(&o));
    // A declared output not produced fails the task.
    let o = run(&["--output", "never.txt", "--", "true"]);
    assert_eq!(o.status.code(), Some(1), "{}", support::stderr(&o));
    assert!(support::stderr(&o).contains("never.txt"), "{}", support::stderr(&o));
}
