//! `lardon scratch add PATH --hook CMD`: the hook is one command line run by
//! `sh -c` on drain; `-- PROGRAM ARGS…` stays as the argv form.
//!
//! Break it to see it fail: drop the `--hook` flag (clap refuses it,
//! exit 2) or pass the line as a one-element argv (the drain's hook fails:
//! no program named `touch …`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::support::{Daemon, lardon, state, stderr, stdout, submit, wait_until};

#[test]
fn hook_flag_and_argv_form_both_run_on_drain() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let _d = Daemon::start(dir, "8GiB,2");
    let (a, b) = (tmp.path().join("vol-a"), tmp.path().join("vol-b"));
    std::fs::create_dir(&a).unwrap();
    std::fs::create_dir(&b).unwrap();
    let (mark_a, mark_b) = (tmp.path().join("drained-a"), tmp.path().join("drained-b"));

    let line = format!("touch '{}'", mark_a.display());
    let o = lardon(dir, &["scratch", "add", a.to_str().unwrap(), "--capacity", "1MiB", "--hook", &line]);
    assert!(o.status.success(), "scratch add --hook: {}", stderr(&o));
    let o = lardon(
        dir,
        &[
            "scratch",
            "add",
            b.to_str().unwrap(),
            "--capacity",
            "1MiB",
            "--",
            "touch",
            mark_b.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "scratch add -- HOOK: {}", stderr(&o));

    let o = lardon(dir, &["scratch", "status", "--json"]);
    let vols: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let hook_of = |name: &str| {
        vols.as_array().unwrap().iter().find(|v| v["name"] == name).map(|v| v["hook"].clone()).unwrap()
    };
    assert_eq!(hook_of("vol-a"), serde_json::json!(["sh", "-c", line]));
    assert_eq!(hook_of("vol-b"), serde_json::json!(["touch", mark_b.to_str().unwrap()]));

    for (name, mark) in [("vol-a", &mark_a), ("vol-b", &mark_b)] {
        // `drain` waits for safe_to_unplug, which comes after the hook ran.
        let o = lardon(dir, &["scratch", "drain", name]);
        assert!(o.status.success(), "drain {name}: {}", stderr(&o));
        assert!(stdout(&o).lines().last().unwrap_or_default().contains("safe_to_unplug"), "{}", stdout(&o));
        assert!(mark.exists(), "the drain returned before its hook ran");
    }
}

/// `scratch drain` waits while a lease is held and returns `safe_to_unplug`
/// once it ended; `--no-wait` returns while the volume is still draining.
/// Break it to see it fail: return the drain RPC's reply at once (the
/// waiting drain exits while the lease is held).
#[test]
fn drain_waits_for_the_last_lease_and_no_wait_returns_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let _d = Daemon::start(dir, "8GiB,2");
    let vol = dir.join("vol");
    std::fs::create_dir(&vol).unwrap();
    let o = lardon(dir, &["scratch", "add", vol.to_str().unwrap(), "--capacity", "1MiB"]);
    assert!(o.status.success(), "scratch add: {}", stderr(&o));
    let stop = dir.join("stop");
    let hold = format!("while [ ! -e '{}' ]; do sleep 0.02; done", stop.display());
    let id = submit(dir, &["--scratch", "1KiB", "--", "sh", "-c", &hold]);
    wait_until("the task to hold its lease", Duration::from_secs(30), || state(dir, &id) == "running");

    let o = lardon(dir, &["scratch", "drain", "vol", "--no-wait"]);
    assert!(o.status.success(), "drain --no-wait: {}", stderr(&o));
    assert!(stdout(&o).contains("draining"), "--no-wait returns while draining: {}", stdout(&o));

    let mut waiting = std::process::Command::new(crate::support::bin())
        .args(["--state-dir", dir.to_str().unwrap(), "scratch", "drain", "vol"])
        .env_remove("LARDON_SOCKET")
        .env_remove("LARDON_STATE_DIR")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The drain cannot end while the lease is held: once the waiting
    // drain has printed its first line, it must still be running.
    let mut out = std::io::BufReader::new(waiting.stdout.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut out, &mut first).unwrap();
    assert!(first.contains("draining"), "{first}");
    assert!(waiting.try_wait().unwrap().is_none(), "drain returned while a lease was held");

    std::fs::write(&stop, b"").unwrap();
    let status = waiting.wait().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert!(status.success(), "drain: {status}: {rest}");
    assert!(rest.contains("safe_to_unplug"), "{rest}");
    wait_until("the task to complete", Duration::from_secs(30), || state(dir, &id) == "completed");
}

#[test]
fn hook_flag_refuses_an_empty_command_and_both_forms_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let o = lardon(dir, &["scratch", "add", "/tmp", "--hook", " "]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--hook"), "{}", stderr(&o));
    let o = lardon(dir, &["scratch", "add", "/tmp", "--hook", "true", "--", "true"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--hook"), "{}", stderr(&o));
}
