//! The daemon is a child subreaper and reaps on SIGCHLD every helper a task
//! left behind: after a task double-forks a child into its own session and
//! ends, no zombie child of the daemon remains. The task's own exit status
//! still reaches the runner (the reaper leaves a run's main child alone).
//!
//! Break it to see it fail: remove `spawn_reaper()` from `server.rs` (the
//! `setsid` child stays a zombie of the daemon); or drop `spawn_owned` in
//! the local executor (the reaper may take the main child's status and the
//! task fails instead of completing with exit code 0).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::support::{Daemon, lardon, stderr, submit, task_json};

/// Zombie children of `pid`, from `/proc/<pid>/task/*/children`.
fn zombie_children(pid: u32) -> Vec<u32> {
    let mut zombies = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let text = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        for child in text.split_whitespace() {
            let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
            let state = stat.rfind(')').and_then(|i| stat[i + 1..].split_whitespace().next());
            if state == Some("Z") {
                zombies.push(child.parse().unwrap());
            }
        }
    }
    zombies
}

#[test]
fn helpers_that_left_the_task_group_are_reaped() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let d = Daemon::start(dir, "8GiB,2");
    let pid = d.child.id();
    let markers: Vec<_> = (0..3).map(|i| tmp.path().join(format!("helper-{i}"))).collect();
    let ids: Vec<String> = markers
        .iter()
        .map(|m| {
            // The task ends only once its helper is in its own session (a
            // helper still in the task's group is killed with the group).
            let m = m.display();
            let script = format!(
                "setsid sh -c 'touch {m}.in; sleep 0.2; touch {m}' & \
                 while [ ! -e {m}.in ]; do sleep 0.01; done; exit 0"
            );
            submit(dir, &["--", "sh", "-c", &script])
        })
        .collect();
    for id in &ids {
        let o = lardon(dir, &["wait", id]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let t = task_json(dir, id);
        assert_eq!(t["state"], "completed", "{t}");
        assert_eq!(t["exit_code"], 0, "{t}");
    }
    // Every helper left its task's process group and was re-parented to
    // the daemon; the run's cleanup kills what is left in the task's cgroup
    // (helpers included), and without the reaper each would stay a zombie
    // of the daemon for good.
    assert!(markers.iter().all(|m| m.with_extension("in").exists()), "every helper started");
    let left = || {
        zombie_children(pid)
            .iter()
            .map(|z| std::fs::read_to_string(format!("/proc/{z}/stat")).unwrap_or_default())
            .collect::<Vec<_>>()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !zombie_children(pid).is_empty() {
        assert!(std::time::Instant::now() < deadline, "zombie children of the daemon left: {:?}", left());
        std::thread::sleep(Duration::from_millis(25));
    }
}
