//! Bad input: every malformed flag, unit, TOML field and estimate is ONE
//! line naming the field, exit code 2; an unreachable daemon is exit 3 with
//! the command that starts it. None of these needs a daemon.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;
use crate::support::{lardon, stderr};

fn assert_usage(args: &[&str], field: &str) {
    let dir = tempfile::tempdir().unwrap();
    let o = lardon(dir.path(), args);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?} → {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?} must be one line: {err}");
    assert!(err.starts_with("error: "), "{err}");
    assert!(err.contains(field), "{args:?}: `{field}` not named in: {err}");
}

#[test]
fn malformed_flags_units_and_estimates() {
    let cases: &[(&[&str], &str)] = &[
        (&["submit", "--mem", "GB2", "--", "true"], "--mem: unknown unit `GB2`"),
        (&["submit", "--mem", "-1GiB", "--", "true"], "--mem"),
        (&["submit", "--mem", "", "--", "true"], "--mem"),
        (&["submit", "--mem-per-item", "1,5MiB", "--", "true"], "--mem-per-item"),
        (&["submit", "--gpu-mem", "4 parsecs", "--", "true"], "--gpu-mem"),
        (&["submit", "--scratch", "99999999999TiB", "--", "true"], "--scratch"),
        (&["submit", "--cpus", "0", "--", "true"], "--cpus"),
        (&["submit", "--cpus", "0.0001", "--", "true"], "--cpus"),
        (&["submit", "--cpus", "two", "--", "true"], "--cpus"),
        (&["submit", "--items", "0", "--", "true"], "--items"),
        (&["submit", "--items", "10", "--batch", "0..4", "--", "true"], "--batch"),
        (&["submit", "--items", "10", "--batch", "8..2", "--", "true"], "--batch"),
        (&["submit", "--items", "10", "--batch", "x", "--", "true"], "--batch"),
        (&["submit", "--batch", "1..4", "--", "true"], "--batch"),
        (&["submit", "--class", "Not Valid", "--", "true"], "--class"),
        (
            &["submit", "--items", "9", "--batch", "1..9", "--mem-per-item", "16EiB", "--", "true"],
            "--mem-per-item",
        ),
        (
            &["submit", "--items", "9", "--batch", "1..9", "--mem-per-item", "8000PB", "--", "true"],
            "--mem-per-item",
        ),
        (&["submit", "--env", "NOEQUALS", "--", "true"], "--env"),
        (&["submit", "--env", "1BAD=x", "--", "true"], "--env"),
        (&["submit", "--priority", "high", "--", "true"], "--priority"),
        (&["submit", "--io", "-1", "--", "true"], "--io"),
        (&["submit", "--io", "x", "--", "true"], "--io: `x` is not a whole number"),
        (&["submit", "--items", "-1", "--", "true"], "--items: `-1` is not a whole number"),
        (&["submit", "--cpus", "2GiB", "--", "true"], "--cpus: `2GiB` is not a CPU count (e.g. 2,"),
        (&["submit", "--cwd", "/nonexistent/lardon-dir", "--", "true"], "--cwd: `/nonexistent/lardon-dir`"),
        (&["submit", "--mem", "1GiB"], "COMMAND"),
        (&["submit", "--frobnicate", "--", "true"], "--frobnicate"),
        (&["statuss"], "statuss"),
        (&["cancel"], "ID"),
        (&["cancel", "1", "--grace", "soon"], "--grace"),
        (&["log", "1", "--tail", "lots"], "--tail"),
        (&["policy", "--set", "novalue"], "--set"),
        (&["progress", "7/5"], "DONE/TOTAL"),
        (&["progress", "a/b"], "DONE/TOTAL"),
        (&["progress", "1/5"], "LARDON_TASK_ID"),
        (&["completions", "tcsh"], "tcsh"),
        (&["daemon", "--metrics-addr", "nowhere"], "--metrics-addr"),
        (&["daemon", "--enforce", "maybe"], "--enforce"),
        (&["exercise", "--mem", "12XB"], "--mem"),
        (&["exercise", "--secs", "-3"], "--secs"),
    ];
    for (args, field) in cases {
        assert_usage(args, field);
    }
}

/// Sizes as people write them are rounded to whole bytes, not refused
/// (`1.6GiB` is 1 717 986 918.4 bytes). Break it to see it fail: refuse a
/// fraction of a byte in `lardon::parse_bytes` again (exit 2, "more precise
/// than the unit allows").
#[test]
fn sizes_people_write_are_accepted() {
    let dir = tempfile::tempdir().unwrap();
    for size in ["1.6GiB", "1.1GiB", "0.1GiB", "0.1MiB", "1.333KiB"] {
        // `exercise` parses --mem like every size flag; 0 seconds, no daemon.
        let o = lardon(dir.path(), &["exercise", "--mem", "0.1MiB", "--mem-per-item", size, "--secs", "0"]);
        assert_eq!(o.status.code(), Some(0), "--mem-per-item {size}: {}", stderr(&o));
    }
}

/// A size that is not a whole number of bytes (`0.5B`, a bare `1.5`: a
/// float where a unit was meant) is refused with its field named, on the
/// command line and in a workload file. Break it to see it fail: drop the
/// `NotWholeBytes` check in `lardon::parse_bytes` (both are accepted,
/// rounded to 1 and 2 bytes).
#[test]
fn sizes_that_are_not_whole_bytes_are_refused() {
    for (flag, size) in
        [("--mem", "0.5B"), ("--mem", "1.5"), ("--mem-per-item", "2.5b"), ("--scratch", "0.1")]
    {
        assert_usage(
            &["submit", flag, size, "--", "true"],
            &format!("{flag}: `{size}` is not a whole number of bytes"),
        );
    }
    for (field, value) in [("mem", "1.5"), ("mem", "\"0.5B\""), ("gpu_mem", "0.25"), ("scratch", "1.5")] {
        check_file(
            &format!("[[task]]\nname = \"t\"\ncommand = [\"true\"]\n{field} = {value}\n"),
            &format!("task \"t\": {field}: "),
        );
    }
    check_file(
        "[host]\nmemory = 1.5\ncpus = 2\n[[task]]\nname = \"t\"\ncommand = [\"x\"]\n",
        "[host]: memory: ",
    );
}

fn run_file(body: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("w.toml");
    std::fs::write(&file, body).unwrap();
    let o = std::process::Command::new(support::bin()).arg("run").arg(&file).output().unwrap();
    (o.status.code(), stderr(&o))
}

#[test]
fn malformed_workload_files() {
    let cases: &[(&str, &str)] = &[
        (
            "[[task]]\nname = \"t\"\ncommand = [\"true\"]\nmem = \"GB2\"\n",
            "w.toml:4: task \"t\": mem: unknown unit",
        ),
        ("[[task]]\nname = \"t\"\ncommand = [\"true\"]\nmemory = \"1GiB\"\n", "unknown field `memory`"),
        ("[[task]]\nname = \"t\"\ncommand = \"true\"\n", "w.toml:3"),
        ("[[task]]\nname = \"t\"\n", "command"),
        ("[[task]]\nname = \"t\"\ncommand = []\n", "task \"t\": command"),
        ("[[task]]\nname = \"t\"\ncommand = [\"x\"]\ncpus = \"0\"\n", "task \"t\": cpus"),
        ("[[task]]\nname = \"t\"\ncommand = [\"x\"]\nbatch = \"1..4\"\n", "task \"t\": batch"),
        ("[[task]]\nname = \"t\"\ncommand = [\"x\"]\nitems = 4\nbatch = \"4..1\"\n", "task \"t\": batch"),
        ("[[task]]\nname = \"t\"\ncommand = [\"x\"]\nclass = \"UPPER\"\n", "task \"t\": class"),
        (
            "[[task]]\nname = \"t\"\ncommand = [\"x\"]\nafter = [\"ghost\"]\n",
            "after: no task named \"ghost\"",
        ),
        ("[[task]]\nname = \"t\"\ncommand = [\"x\"]\nenv = { \"A B\" = \"1\" }\n", "task \"t\": env"),
        (
            "[[task]]\nname = \"t\"\ncommand = [\"x\"]\n[[task]]\nname = \"t\"\ncommand = [\"y\"]\n",
            "name: used twice",
        ),
        (
            "[host]\nmemory = \"lots\"\ncpus = 2\n[[task]]\nname = \"t\"\ncommand = [\"x\"]\n",
            "[host]: memory",
        ),
        ("[policy]\nmemory_reserve = \"1GiB\"\n", "no [[task]]"),
        ("[tasks]\nname = 1\n", "unknown field `tasks`"),
        ("this is not toml", "w.toml:1"),
    ];
    for (body, want) in cases {
        check_file(body, want);
    }
    // Each malformed field is named in the message, whatever part refused
    // it (serde's type check, a unit parser, the spec's validation). Break
    // it to see it fail: drop the key from `workload::place_of` (serde's
    // "invalid type: string, expected u32" alone names no field).
    let named: &[(&str, &str)] = &[
        ("command = \"true\"", "command:"),
        ("command = [1, 2]", "command:"),
        ("command = [\"true\"]\nio = -1", "io:"),
        ("command = [\"true\"]\nio = \"two\"", "io:"),
        ("command = [\"true\"]\npriority = \"high\"", "priority:"),
        ("command = [\"true\"]\nafter = \"a\"", "after:"),
        ("command = [\"true\"]\nenv = [\"A=1\"]", "env:"),
        ("command = [\"true\"]\nenv = { A = 1 }", "env:"),
        ("command = [\"true\"]\nenv = { \"1A\" = \"x\" }", "env:"),
        ("command = [\"true\"]\ncwd = 3", "cwd:"),
        ("command = [\"true\"]\ncwd = \"no-such-dir\"", "cwd:"),
        ("command = [\"true\"]\nno_retry = \"yes\"", "no_retry:"),
        ("command = [\"true\"]\nmem = true", "mem:"),
        ("command = [\"true\"]\nmem = [1]", "mem:"),
        ("command = [\"true\"]\ngpu_mem = \"lots\"", "gpu_mem:"),
        ("command = [\"true\"]\nclass = 3", "class:"),
        ("command = [\"true\"]\nitems = -1", "items:"),
        ("command = [\"true\"]\nitems = 1.5", "items:"),
        ("command = [\"true\"]\ncpus = \"2GiB\"", "cpus: `2GiB` is not a CPU count"),
        ("command = [\"true\"]\nscratch = \"-1GiB\"", "scratch:"),
    ];
    for (fields, want) in named {
        check_file(&format!("[[task]]\nname = \"t\"\n{fields}\n"), want);
    }
    check_file("[[task]]\ncommand = [\"true\"]\n", "`name`");
    check_file(
        "[host]\nmemory = \"2GiB\"\ncpus = \"two\"\n[[task]]\nname = \"t\"\ncommand = [\"x\"]\n",
        "[host]: cpus:",
    );
    check_file("[host]\nmemory = \"2GiB\"\n[[task]]\nname = \"t\"\ncommand = [\"x\"]\n", "`cpus`");
}

fn check_file(body: &str, want: &str) {
    {
        let (code, err) = run_file(body);
        assert_eq!(code, Some(2), "{body:?} → {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{body:?} must be one line: {err}");
        assert!(err.contains(want), "{body:?}: want `{want}` in: {err}");
    }
}

#[test]
fn a_bad_policy_key_and_a_missing_file_are_input_errors() {
    let ok = "[[task]]\nname = \"t\"\ncommand = [\"true\"]\n";
    // A valid file with a bad policy key is refused by the engine: still exit 2.
    let (code, err) = run_file(&format!("[policy]\nno_such_key = 3\n{ok}"));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("no_such_key"), "{err}");
    // A missing file.
    let o = std::process::Command::new(support::bin()).args(["run", "/nonexistent/w.toml"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn unreachable_daemon_exits_3_and_says_how_to_start_it() {
    let dir = tempfile::tempdir().unwrap();
    for args in
        [&["status"][..], &["submit", "--", "true"], &["wait"], &["resources"], &["explain", "1"], &["top"]]
    {
        let o = lardon(dir.path(), args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(3), "{args:?}: {err}");
        assert!(err.contains("lardon daemon"), "{err}");
        assert!(err.contains("--state-dir"), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
}

#[test]
fn help_teaches_with_examples_and_completions_print() {
    let dir = tempfile::tempdir().unwrap();
    for verb in [
        "daemon",
        "submit",
        "status",
        "explain",
        "log",
        "pause",
        "resume",
        "cancel",
        "wait",
        "remove",
        "clean",
        "resources",
        "policy",
        "progress",
        "completions",
        "exercise",
        "run",
        "scratch",
    ] {
        let o = lardon(dir.path(), &[verb, "--help"]);
        assert!(o.status.success(), "{verb} --help");
        assert!(support::stdout(&o).contains("Example"), "{verb} --help has no example");
    }
    let o = lardon(dir.path(), &["add", "--help"]);
    assert!(o.status.success());
    let o = lardon(dir.path(), &["completions", "bash"]);
    assert!(o.status.success() && support::stdout(&o).contains("lardon"));
}
