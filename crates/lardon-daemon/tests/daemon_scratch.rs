//! Scratch volumes through the daemon with a real directory (docs/DESIGN.md §7).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use common::*;
use lardon_proto::pb::{self, ScratchState, TaskState};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_gets_a_private_scratch_dir_and_drain_waits_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let volume = tempfile::tempdir().unwrap();
    let gate = dir.path().join("gate");
    let d = start(dir.path());
    let mut c = client(&d).await;
    let before = c.resources(pb::ResourcesRequest {}).await.unwrap().into_inner();
    let added = c
        .scratch_add(pb::ScratchAddRequest {
            path: volume.path().display().to_string(),
            name: "fast".into(),
            capacity: None,
            hook: vec![],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(added.state, ScratchState::Available as i32);
    // What the Governor reports as reserved and available RAM.
    let ram = |r: &pb::ResourcesResponse| {
        let m = r.availability.as_ref().unwrap().memory.unwrap();
        (m.reserved, m.available)
    };
    let after_add = c.resources(pb::ResourcesRequest {}).await.unwrap().into_inner();
    assert_eq!(ram(&after_add), ram(&before), "adding a volume moves no RAM");

    // The task writes into its lease, reports where it is, then waits for the gate.
    let mut spec = sh(&format!(
        "echo dir=$LARDON_SCRATCH_DIR; echo data > $LARDON_SCRATCH_DIR/out; while [ ! -e {} ]; do sleep 0.02; done",
        gate.display()
    ));
    spec.estimate = Some(pb::Estimate { scratch_bytes: 10 * MIB, ..Default::default() });
    let id = submit(&mut c, spec).await;
    until(&mut c, &id, "running", |t| state(t) == TaskState::Running).await;
    let lease = std::path::PathBuf::from(first_line_with(&mut c, &id, "dir=").await);
    assert!(lease.starts_with(volume.path()), "{}", lease.display());
    eventually("the task wrote into its lease", || lease.join("out").exists()).await;

    // RAM is untouched by scratch: the Governor reserves the task's own
    // memory contract and nothing for its 10 MiB lease, which is counted
    // on the volume instead.
    //
    // To see it fail, charge scratch bytes as memory: in
    // `governor/admission.rs`, add `est.scratch_bytes()` to
    // `charged_memory`.
    let during = c.resources(pb::ResourcesRequest {}).await.unwrap().into_inner();
    let contract = get(&mut c, &id).await.contract.expect("a running task has a contract");
    let (reserved, available) = ram(&before);
    assert_eq!(
        ram(&during),
        (reserved + contract.memory, available - contract.memory),
        "reserved/available RAM moved by exactly the task's memory contract ({} B)",
        contract.memory
    );
    let volume_now = &during.availability.as_ref().unwrap().scratch[0];
    assert_eq!(volume_now.leased, 10 * MIB, "{volume_now:?}");

    // Draining while the lease is held stays DRAINING; new leases are refused.
    let draining =
        c.scratch_drain(pb::ScratchDrainRequest { name: "fast".into() }).await.unwrap().into_inner();
    assert_eq!(draining.state, ScratchState::Draining as i32, "{draining:?}");
    assert!(draining.message.contains("lease"), "{}", draining.message);

    std::fs::write(&gate, b"go").unwrap();
    let t = wait_end(&mut c, &id).await;
    assert_eq!(state(&t), TaskState::Completed, "{t:?}");
    assert!(!lease.exists(), "the lease directory is gone after the task");
    let status = c.scratch_status(pb::ScratchStatusRequest {}).await.unwrap().into_inner();
    assert_eq!(status.volumes[0].state, ScratchState::SafeToUnplug as i32, "{status:?}");

    // Back to service; removal works once no lease is held.
    let back = c.scratch_cancel_drain(pb::ScratchCancelDrainRequest { name: "fast".into() }).await.unwrap();
    assert_eq!(back.into_inner().state, ScratchState::Available as i32);
    c.scratch_remove(pb::ScratchRemoveRequest { name: "fast".into() }).await.unwrap();
    let err = c.scratch_drain(pb::ScratchDrainRequest { name: "fast".into() }).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
    drop(c);
    d.shutdown().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volumes_are_durable_and_bad_paths_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let volume = tempfile::tempdir().unwrap();
    {
        let d = start(dir.path());
        let mut c = client(&d).await;
        for (path, field) in [("", "path"), ("relative/dir", "path"), ("/nonexistent/lardon", "path")] {
            let err = c
                .scratch_add(pb::ScratchAddRequest { path: path.into(), ..Default::default() })
                .await
                .unwrap_err();
            assert_eq!(err.code(), tonic::Code::InvalidArgument, "{path}");
            assert!(err.message().starts_with(field), "{}", err.message());
        }
        c.scratch_add(pb::ScratchAddRequest {
            path: volume.path().display().to_string(),
            name: "fast".into(),
            capacity: Some(64 * MIB),
            hook: vec!["true".into()],
        })
        .await
        .unwrap();
        let dup = c
            .scratch_add(pb::ScratchAddRequest {
                path: volume.path().display().to_string(),
                name: "fast".into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_ne!(dup.code(), tonic::Code::Ok);
        drop(c);
        d.shutdown().unwrap();
    }
    let d = start(dir.path());
    let mut c = client(&d).await;
    let status = c.scratch_status(pb::ScratchStatusRequest {}).await.unwrap().into_inner();
    assert_eq!(status.volumes.len(), 1);
    let v = &status.volumes[0];
    assert_eq!(
        (v.name.as_str(), v.capacity, v.hook.clone()),
        ("fast", Some(64 * MIB), vec!["true".to_owned()])
    );
    assert_eq!(v.state, ScratchState::Available as i32);
    drop(c);
    d.shutdown().unwrap();
}

/// The rest of the first line of `id`'s output that starts with `prefix`,
/// read from the follow stream as it is written; fails at [`DEADLINE`].
async fn first_line_with(c: &mut Client, id: &str, prefix: &str) -> String {
    let mut stream = c
        .log(pb::LogRequest {
            id: id.to_owned(),
            follow: true,
            stream: 0,
            tail_bytes: None,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let read = async {
        let mut out = Vec::new();
        while let Some(chunk) = stream.message().await.unwrap() {
            out.extend(chunk.data);
            let text = String::from_utf8_lossy(&out);
            let mut complete = text.lines().collect::<Vec<_>>();
            if !text.ends_with('\n') {
                complete.pop();
            }
            if let Some(line) = complete.into_iter().find(|l| l.starts_with(prefix)) {
                return line[prefix.len()..].to_owned();
            }
        }
        panic!("task {id}'s output ended without a line starting {prefix:?}");
    };
    tokio::time::timeout(DEADLINE, read)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for task {id} to print {prefix:?}"))
}
