//! The submitter's environment (docs/DESIGN.md §10): `lardon submit`
//! records the caller's variables with the task and runs it in them (as
//! `sbatch --export=ALL`), a `PATH` change included; `--env-clear` starts
//! from nothing; `status ID` names what differs from the daemon's and
//! never prints a value unless `--show-env`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::support::{Daemon, lardon, lardon_env, stderr, stdout};

/// Submits with `env` set on the `lardon` process, waits for the task
/// (`wait` returns at its end), and returns its id and log.
fn run_with(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> (String, String) {
    let o = lardon_env(dir, env, &[&["submit"], args].concat());
    assert!(o.status.success(), "submit {args:?}: {}", stderr(&o));
    let id = stdout(&o).trim().to_owned();
    let w = lardon(dir, &["wait", &id]);
    assert_eq!(w.status.code(), Some(0), "{}{}", stdout(&w), stderr(&w));
    let log = stdout(&lardon(dir, &["log", &id]));
    (id, log)
}

/// Break it to see it fail: drop `spec.submit_env = Some(…)` in the CLI's
/// submit (the task gets the daemon's environment: an empty line, the
/// system's `true`, and every variable under `--env-clear`).
#[test]
fn a_task_runs_in_the_submitters_environment_and_path() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let _d = Daemon::start(dir, "8GiB,2");

    // A variable of the caller's.
    let (id, log) = run_with(dir, &[("FOO", "bar")], &["--", "sh", "-c", "echo \"FOO=$FOO\""]);
    assert_eq!(log.trim(), "FOO=bar", "{log}");

    // A PATH change: a directory earlier in PATH whose `true` shadows the
    // system's (a virtualenv's `python`, in little).
    let bin = dir.join("venv-bin");
    std::fs::create_dir(&bin).unwrap();
    let script = bin.join("true");
    std::fs::write(&script, "#!/bin/sh\necho from-the-submitters-path\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let (_, log) = run_with(dir, &[("PATH", &path)], &["--", "true"]);
    assert_eq!(log.trim(), "from-the-submitters-path", "{log}");

    // --env-clear --env A=1: only A and Lardon's own.
    let (_, log) = run_with(dir, &[("FOO", "bar")], &["--env-clear", "--env", "A=1", "--", "env"]);
    let lardon_own = [
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "RAYON_NUM_THREADS",
        "CUDA_VISIBLE_DEVICES",
        "HIP_VISIBLE_DEVICES",
    ];
    let names: Vec<&str> = log.lines().filter_map(|l| l.split_once('=').map(|(k, _)| k)).collect();
    assert!(names.contains(&"A") && log.lines().any(|l| l == "A=1"), "{log}");
    for name in &names {
        assert!(
            *name == "A" || name.starts_with("LARDON_") || lardon_own.contains(name),
            "{name} leaked into an --env-clear task: {log}"
        );
    }

    // status names what differs, never a value without --show-env.
    let secret = "s3cr3t-value-7f1";
    let (id2, _) =
        run_with(dir, &[("LARDON_TEST_SECRET_X", "no"), ("SECRET_TOKEN", secret)], &["--", "true"]);
    for args in [&["status", id2.as_str(), "--json"][..], &["status", id2.as_str()][..]] {
        let o = lardon(dir, args);
        assert!(o.status.success(), "{}", stderr(&o));
        let out = stdout(&o);
        assert!(out.contains("SECRET_TOKEN"), "{args:?}: the name is shown: {out}");
        assert!(!out.contains(secret), "{args:?} printed a value: {out}");
        assert!(!out.contains("LARDON_TEST_SECRET_X"), "{args:?}: Lardon's own are left out: {out}");
    }
    let o = lardon(dir, &["status", &id2, "--json"]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["environment"]["source"], "submitter", "{j}");
    assert!(j["environment"].get("values").is_none(), "{j}");
    let o = lardon(dir, &["status", &id2, "--json", "--show-env"]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["environment"]["values"]["SECRET_TOKEN"], secret, "{j}");
    let o = lardon(dir, &["status", &id, "--show-env"]);
    assert!(stdout(&o).contains("FOO=bar"), "{}", stdout(&o));
}
