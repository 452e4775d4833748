//! `lardon scratch add PATH --hook CMD`: the hook is one command line run by
//! `sh -c` on drain; `-- PROGRAM ARGS…` stays as the argv form.
//!
//! Break it to see it fail: drop the `--hook` flag (clap refuses it,
//! exit 2) or pass the line as a one-element argv (the drain's hook fails:
//! no program named `touch …`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::support::{Daemon, lardon, stderr, wait_until};

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
        let o = lardon(dir, &["scratch", "drain", name]);
        assert!(o.status.success(), "drain {name}: {}", stderr(&o));
        wait_until("the drain hook to run", Duration::from_secs(30), || mark.exists());
    }
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
