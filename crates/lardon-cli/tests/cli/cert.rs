//! `lardon cert init|issue|token` through the real binary: files with the
//! right modes, and every refusal is an input error (exit 2) naming the
//! field or the file. (The TLS rules themselves are tested over loopback
//! in lardon-tls.)
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::os::unix::fs::PermissionsExt as _;

use crate::support::*;

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn a_ca_issues_broker_and_client_certificates_and_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let run = |args: &[&str]| {
        let o = lardon(d, args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        stdout(&o)
    };
    let ca = d.join("ca");
    let ca = ca.to_str().unwrap();
    assert!(run(&["cert", "init", "--dir", ca]).contains("ca.pem"));
    let broker = d.join("broker");
    let out = run(&[
        "cert",
        "issue",
        "broker",
        "--ca",
        ca,
        "--host",
        "127.0.0.1",
        "--host",
        "b.lan",
        "--out",
        broker.to_str().unwrap(),
    ]);
    assert!(out.contains("a broker certificate for 127.0.0.1, b.lan"), "{out}");
    let agent = d.join("agent");
    assert!(
        run(&["cert", "issue", "a1", "--ca", ca, "--out", agent.to_str().unwrap()])
            .contains("a client certificate")
    );
    let token = d.join("join.token");
    run(&["cert", "token", "--out", token.to_str().unwrap()]);

    assert_eq!(mode(&d.join("ca/ca.key")), 0o600);
    assert_eq!(mode(&broker.join("broker.key")), 0o600);
    assert_eq!(mode(&agent.join("a1.key")), 0o600);
    assert_eq!(mode(&token), 0o600);
    assert_eq!(std::fs::read(agent.join("ca.pem")).unwrap(), std::fs::read(d.join("ca/ca.pem")).unwrap());
    lardon_tls::Identity::load(&broker, "broker").unwrap();
    lardon_tls::JoinToken::load(&token).unwrap();
}

#[test]
fn refusals_are_input_errors_naming_the_field_or_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ca = d.join("ca");
    let ca = ca.to_str().unwrap();
    let refused = |args: &[&str], says: &str| {
        let o = lardon(d, args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    };
    refused(&["cert", "issue", "a", "--ca", ca, "--out", "x"], "lardon cert init");
    assert!(lardon(d, &["cert", "init", "--dir", ca]).status.success());
    refused(&["cert", "init", "--dir", ca], "already exists");
    refused(&["cert", "issue", "../a", "--ca", ca, "--out", "x"], "name: ");
    refused(&["cert", "issue", "a", "--ca", ca, "--host", "no way", "--out", "x"], "hosts: ");
    refused(&["cert", "issue", "a", "--ca", ca, "--days", "0", "--out", "x"], "days: ");
    let token = d.join("t");
    assert!(lardon(d, &["cert", "token", "--out", token.to_str().unwrap()]).status.success());
    refused(&["cert", "token", "--out", token.to_str().unwrap()], "already exists");
}
