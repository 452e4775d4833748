//! The broker's core runs off the serving runtime: a commit held up by
//! the disk (here: another connection holding SQLite's write lock) holds
//! no worker of the runtime that serves the streams, so on a one-thread
//! runtime its timers still fire on time; and once the lock is released
//! the held-up write lands and the broker goes on.

use std::time::{Duration, Instant};

use lardon_proto::cluster as pb;
use lardon_proto::cluster::broker_server::Broker as _;
use lardon_submit::client::{Submitter, SubmitterConfig};

use super::BrokerConfig;
use crate::store::DB_FILE;
use crate::{Capability, SubmitterId, TaskId};

/// Longest the test waits for anything before it fails.
const DEADLINE: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "current_thread")]
async fn a_commit_held_up_by_the_disk_holds_no_worker_of_the_serving_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let cap = Capability::parse("sh@1").unwrap();
    let config = BrokerConfig {
        state: Some(dir.path().to_path_buf()),
        scaled: vec![cap.clone()],
        ..BrokerConfig::default()
    };
    let service = super::start(&config).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = tonic::transport::Server::builder()
        .add_service(lardon_proto::cluster::broker_server::BrokerServer::new(service.clone()));
    tokio::spawn(server.serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)));

    // Every write of the broker now waits on SQLite's busy handler.
    let lock = rusqlite::Connection::open(dir.path().join(DB_FILE)).unwrap();
    lock.execute_batch("BEGIN IMMEDIATE;").unwrap();

    let submitter = Submitter::start(SubmitterConfig {
        broker: addr,
        submitter: SubmitterId::new("s1").unwrap(),
        heartbeat: Duration::from_millis(100),
        backoff: lardon_submit::Backoff {
            initial: Duration::from_millis(10),
            max: Duration::from_millis(100),
        },
        unreachable_after: None,
        dial: Default::default(),
    })
    .unwrap();
    // Queued for an agent of a scaled capability: the broker inserts it.
    let task = lardon_submit::client::RemoteTask::new(TaskId::new("t1").unwrap(), cap, vec!["true".into()]);
    let _ticket = submitter.submit(&task);

    // Until the core is stuck in that insert, a status answers; once it
    // is, a status waits, and the 100 ms timer beside it fires on time.
    let start = Instant::now();
    loop {
        assert!(start.elapsed() < DEADLINE, "the core never got stuck in the held-up insert");
        let asked = Instant::now();
        let status = tokio::time::timeout(
            Duration::from_millis(100),
            service.cluster_status(tonic::Request::new(pb::ClusterStatusRequest {})),
        )
        .await;
        let took = asked.elapsed();
        assert!(
            took < Duration::from_secs(2),
            "a 100 ms timer on the serving runtime fired after {took:?}: the commit held its worker"
        );
        match status {
            Err(_) => break,
            Ok(s) if s.as_ref().is_ok_and(|s| s.get_ref().queued > 0) => {
                panic!("the insert went through while the database was locked")
            }
            Ok(_) => tokio::task::yield_now().await,
        }
    }

    // Released: the held-up insert lands and the core answers again.
    lock.execute_batch("ROLLBACK;").unwrap();
    loop {
        assert!(start.elapsed() < DEADLINE, "the broker did not go on after the lock was released");
        let status = tokio::time::timeout(
            Duration::from_millis(500),
            service.cluster_status(tonic::Request::new(pb::ClusterStatusRequest {})),
        )
        .await;
        if let Ok(Ok(s)) = status
            && s.get_ref().queued == 1
        {
            break;
        }
    }
    let stored: i64 = lock.query_row("SELECT COUNT(*) FROM tasks WHERE id = 't1'", [], |r| r.get(0)).unwrap();
    assert_eq!(stored, 1, "the held-up insert was committed");
}
