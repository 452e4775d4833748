//! Secure by default (issue 26): a broker on an address other than
//! loopback refuses to start without `--tls-dir` unless `--insecure` says
//! the network is trusted (logged at warn); a join token without TLS is
//! refused everywhere; a client whose credentials do not fit the broker is
//! told which flag is wrong (exit 2), and an agent logs why it cannot join.
//!
//! Break it to watch it fail: drop `exposure()` from `lardon broker`, the
//! token check from `ClusterSecurity::token`, or `Dial::diagnose`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};

use lardon_tls::{JoinToken, Role, init_ca, issue};

use crate::support::procs::{Proc, agent_args, free_port};
use crate::support::{self, until_logged};

fn run(args: &[&str]) -> Output {
    Command::new(support::bin()).args(args).env_remove("LARDON_SOCKET").output().unwrap()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Any address but loopback: what `0.0.0.0` binds (never dialled here).
fn any_port() -> String {
    free_port().replace("127.0.0.1", "0.0.0.0")
}

#[test]
fn a_broker_reachable_from_other_machines_needs_tls_or_insecure() {
    let o = run(&["broker", "--listen", &any_port()]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("--tls-dir") && err(&o).contains("--insecure"), "{}", err(&o));

    let dir = tempfile::tempdir().unwrap();
    let addr = any_port();
    let b = Proc::start(dir.path(), "broker", &["broker", "--listen", &addr, "--insecure"]);
    until_logged("the broker to warn that it is insecure", &[&b], || {
        let log = std::fs::read_to_string(&b.log).unwrap_or_default();
        log.contains("WARN") && log.contains("--insecure") && log.contains("broker listening on")
    });
}

#[test]
fn a_join_token_without_tls_is_refused_by_broker_agent_and_client() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    JoinToken::generate().unwrap().write_new(&token).unwrap();
    let token = token.to_str().unwrap();
    let addr = free_port();
    let broker = ["broker", "--listen", &addr, "--join-token-file", token];
    let mut agent = agent_args(&addr, "a1", "sh@1", "1");
    agent.extend(["--join-token-file", token]);
    let status = ["cluster", "status", "--broker", &addr, "--join-token-file", token];
    for args in [&broker[..], &agent[..], &status[..]] {
        let o = run(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", err(&o));
        assert!(
            err(&o).contains("--join-token-file") && err(&o).contains("--tls-dir"),
            "{args:?}: {}",
            err(&o)
        );
    }
}

#[test]
fn credentials_that_do_not_fit_the_broker_name_the_flag_that_fixes_them() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    init_ca(&d.join("ca")).unwrap();
    issue(&d.join("ca"), "broker", Role::Server, &["127.0.0.1".into()], 30, &d.join("broker")).unwrap();
    issue(&d.join("ca"), "agent-1", Role::Client, &[], 30, &d.join("agent")).unwrap();
    init_ca(&d.join("other-ca")).unwrap();
    issue(&d.join("other-ca"), "agent-1", Role::Client, &[], 30, &d.join("intruder")).unwrap();
    let (tls, plain) = (free_port(), free_port());
    let broker_tls = d.join("broker");
    let b =
        Proc::start(d, "broker", &["broker", "--listen", &tls, "--tls-dir", broker_tls.to_str().unwrap()]);
    let p = Proc::start(d, "plain", &["broker", "--listen", &plain]);
    for (proc, addr) in [(&b, &tls), (&p, &plain)] {
        until_logged("the broker to listen", &[proc], || {
            std::fs::read_to_string(&proc.log).unwrap_or_default().contains(&format!("listening on {addr}"))
        });
    }
    let intruder = d.join("intruder");
    let agent = d.join("agent");
    let cases: [(&str, &str, Vec<&str>, &str); 3] = [
        ("no certificate, TLS broker", tls.as_str(), vec![], "speaks mutual TLS: give --tls-dir"),
        (
            "a certificate from another CA",
            tls.as_str(),
            vec!["--tls-dir", intruder.to_str().unwrap(), "--tls-name", "agent-1"],
            "not signed by the CA in --tls-dir",
        ),
        (
            "a certificate, plain broker",
            plain.as_str(),
            vec!["--tls-dir", agent.to_str().unwrap(), "--tls-name", "agent-1"],
            "does not speak TLS: drop --tls-dir",
        ),
    ];
    for (what, addr, creds, said) in cases {
        let mut args = vec!["cluster", "status", "--broker", addr];
        args.extend(creds);
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{what}: {}", err(&o));
        assert!(err(&o).contains(said), "{what}: {}", err(&o));
    }

    // An agent that keeps redialling says why in its log, once.
    let mut agent = agent_args(&tls, "a1", "sh@1", "1");
    agent.extend(["--tls-dir", intruder.to_str().unwrap(), "--tls-name", "agent-1"]);
    let a = Proc::start(d, "agent", &agent);
    until_logged("the agent to log why it cannot join", &[&a], || {
        std::fs::read_to_string(&a.log).unwrap_or_default().contains("not signed by the CA in --tls-dir")
    });
}

/// `lardon cert trial` makes everything a secured one-machine cluster
/// needs, in one command, and the commands it prints work as printed: a
/// broker, an agent and a submit over mutual TLS with the join token; a
/// second trial into the same directory overwrites nothing (exit 2).
#[test]
fn cert_trial_makes_a_working_secured_cluster_in_one_command() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let tls = d.join("tls");
    let o = crate::support::lardon(d, &["cert", "trial", "--dir", tls.to_str().unwrap()]);
    assert!(o.status.success(), "{}", crate::support::stderr(&o));
    let printed = crate::support::stdout(&o);
    for f in [
        "ca/ca.pem",
        "ca/ca.key",
        "broker/broker.pem",
        "broker/broker.key",
        "client/client.pem",
        "join.token",
    ] {
        assert!(tls.join(f).exists(), "{f} missing:\n{printed}");
    }
    // The printed lines, with a free port and a capability filled in.
    let addr = crate::support::procs::free_port();
    let line = |start: &str| -> Vec<String> {
        let l = printed.lines().find(|l| l.trim_start().starts_with(start)).unwrap();
        let cmd = l.split_once(':').unwrap().1.trim();
        cmd.replace("127.0.0.1:7710", &addr)
            .replace("CAP", "sh@1")
            .replace("./broker-state", d.join("bstate").to_str().unwrap())
            .split_whitespace()
            .skip(1) // `lardon`
            .map(str::to_owned)
            .collect()
    };
    let args = |v: &[String]| v.iter().map(String::as_str).collect::<Vec<_>>().join("\u{1f}");
    let broker_args = line("start the broker");
    let broker_args: Vec<&str> = broker_args.iter().map(String::as_str).collect();
    let broker = Proc::start(d, "broker", &broker_args);
    let mut agent_args = line("start an agent");
    agent_args.extend(["--simulate-host".to_owned(), "8GiB,8".to_owned()]);
    let agent_args: Vec<&str> = agent_args.iter().map(String::as_str).collect();
    let agent = Proc::start(d, "agent", &agent_args);
    let mut submit = line("submit");
    assert!(args(&submit).contains("--tls-dir"), "{submit:?}");
    submit.truncate(submit.len() - 1); // COMMAND
    submit.extend(["echo".to_owned(), "secured".to_owned()]);
    let submit: Vec<&str> = submit.iter().map(String::as_str).collect();
    let procs = [&broker, &agent];
    crate::support::wait::until_logged("a secured submit answered", &procs, || {
        let o = crate::support::lardon(d, &submit);
        o.status.success() && crate::support::stdout(&o) == "secured\n"
    });
    // Nothing already there is overwritten.
    let before = std::fs::read(tls.join("join.token")).unwrap();
    let o = crate::support::lardon(d, &["cert", "trial", "--dir", tls.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", crate::support::stderr(&o));
    assert_eq!(std::fs::read(tls.join("join.token")).unwrap(), before);
}
