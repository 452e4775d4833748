//! Native Slurm mode's command-line surface that needs no Slurm: what
//! `submit --engine slurm` refuses (exit 2, naming the field), and `lardon
//! exec` run by hand (its report and exit status). The real-Slurm
//! behaviour is in `slurm_native.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::{Daemon, lardon, stderr};

#[test]
fn local_only_features_are_refused_with_the_field_named() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let _d = Daemon::start(dir, "8GiB,4");
    for (flags, field) in [
        (&["--items", "4", "--batch", "1..2"][..], "engine slurm: items:"),
        (&["--paused"][..], "engine slurm: paused:"),
        (&["--scratch", "1GiB"][..], "engine slurm: scratch:"),
    ] {
        let args = [&["submit", "--engine", "slurm"][..], flags, &["--", "true"]].concat();
        let o = lardon(dir, &args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(field), "{args:?}: {}", stderr(&o));
        assert_eq!(stderr(&o).trim().lines().count(), 1, "one line: {}", stderr(&o));
    }
    let o = lardon(dir, &["submit", "--engine", "kubernetes", "--", "true"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--engine"), "{}", stderr(&o));
}

#[test]
fn exec_reports_and_exits_like_its_command() {
    let tmp = tempfile::tempdir().unwrap();
    let report = tmp.path().join("r.json");
    let o = lardon(tmp.path(), &["exec", "--report", report.to_str().unwrap(), "--", "sh", "-c", "exit 3"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(r["exit_code"], 3, "{r}");
    assert!(r["peak_bytes"].as_u64().is_some_and(|p| p > 0), "a measured peak: {r}");
    let o = lardon(tmp.path(), &["exec", "--report", report.to_str().unwrap(), "--", "/nonexistent/prog"]);
    assert_eq!(o.status.code(), Some(127), "{}", stderr(&o));
    assert!(stderr(&o).contains("cannot start `/nonexistent/prog`"), "{}", stderr(&o));
}
