//! Least privilege at the agent (docs/DESIGN.md §14), through the real
//! binaries on loopback: a capability declared with its programs runs
//! only those (a bare name resolved in the agent's own `PATH`); anything
//! else, and a task setting `LD_PRELOAD` or `PATH`, ends failed before it
//! runs, with a reason naming the program or the variable.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::process::{Command, Output};

use crate::support;
use crate::support::procs::{Proc, agent_args, free_port, logs};
use crate::support::wait::until_logged;

fn submit(addr: &str, capability: &str, argv: &[&str]) -> Output {
    let mut c = Command::new(support::bin());
    c.args(["cluster", "submit", "--broker", addr, "--capability", capability, "--"]).args(argv);
    c.output().unwrap()
}

#[test]
fn a_capability_runs_only_its_programs_and_loader_variables_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let addr = free_port();
    let broker = Proc::start(dir, "broker", &["broker", "--listen", &addr, "--heartbeat", "1s"]);
    let mut args = agent_args(&addr, "a1", "sh@1=/bin/sh", "2");
    args.extend(["--capability", "any@1"]);
    let agent = Proc::start(dir, "agent", &args);
    let procs = [&broker, &agent];
    until_logged("the agent at the broker", &procs, || {
        let o = Command::new(support::bin()).args(["cluster", "status", "--broker", &addr]).output().unwrap();
        String::from_utf8_lossy(&o.stdout).contains("a1")
    });

    // The listed program, by its bare name and by its path.
    let o = submit(&addr, "sh@1", &["sh", "-c", "echo listed"]);
    assert!(o.status.success(), "{}\n{}", support::stderr(&o), logs(&procs));
    assert_eq!(support::stdout(&o), "listed\n");
    let o = submit(&addr, "sh@1", &["/bin/sh", "-c", "echo by-path"]);
    assert_eq!(support::stdout(&o), "by-path\n", "{}", support::stderr(&o));

    // Another program under the same label: refused before it runs.
    let marker = dir.join("ran");
    let o = submit(&addr, "sh@1", &["touch", marker.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", support::stderr(&o));
    let err = support::stderr(&o);
    assert!(err.contains("argv[0]: `touch` (") && err.contains("is not a program capability sh@1"), "{err}");
    assert!(!marker.exists(), "it never ran");

    // A capability declared without programs runs any (the agent warned).
    let o = submit(&addr, "any@1", &["touch", marker.to_str().unwrap()]);
    assert!(o.status.success(), "{}", support::stderr(&o));
    assert!(marker.exists());
    assert!(std::fs::read_to_string(&agent.log).unwrap().contains("capability any@1:* runs any program"));

    // The agent's own log names every refusal.
    let log = std::fs::read_to_string(&agent.log).unwrap();
    assert!(log.contains("refused: argv[0]: `touch`"), "{log}");
}

#[test]
fn a_shipped_task_setting_ld_preload_or_path_fails_naming_the_variable() {
    use crate::support::offload_cluster::{Cluster, REMOTE, sh};
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let c = Cluster::start(d, REMOTE, "1");
    for name in ["LD_PRELOAD", "PATH"] {
        let marker = d.join(format!("ran-{name}"));
        let kv = format!("{name}=/tmp/evil");
        let mut args = vec!["--env", kv.as_str()];
        let script = format!("touch '{}'", marker.display());
        args.extend(sh(&script));
        let id = c.submit(&args);
        let t = c.ended(&id);
        assert_eq!(t["state"], "failed", "{t}\n{}", logs(&c.procs()));
        let reason = t["failure_reason"].as_str().unwrap_or_default();
        assert!(reason.contains(&format!("env: `{name}` changes what runs")), "{t}");
        assert!(!marker.exists(), "it never ran");
    }
}
