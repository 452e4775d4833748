//! Hooks when a task ends (`submit --on-end`, policy `on_end`,
//! docs/DESIGN.md §10 Hooks): a hook sees the end it runs for; its failure
//! or time limit never changes the task's state and its outcome shows in
//! `status` and `explain --history`; the policy's hook applies to tasks
//! without one; every end's hook runs exactly once across a daemon kill -9,
//! and one whose end was durable but which had not run yet runs after the
//! restart.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::support::{Daemon, lardon, lardon_env, stderr, stdout, submit, task_json, wait_until};

const LONG: Duration = Duration::from_secs(60);

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_owned).collect()
}

/// Whether the task's latest hook has its outcome recorded.
fn hook_done(dir: &Path, id: &str) -> bool {
    task_json(dir, id)["hook"]["status"] == "done"
}

fn ok(o: &std::process::Output) {
    assert!(o.status.success(), "{}{}", stdout(o), stderr(o));
}

/// Break it to see it fail: set `LARDON_TASK_STATE` from anything but the
/// row's state in `hooks/mod.rs`, or run the hook without the task's
/// environment (`base_env: None`).
#[test]
fn a_hook_sees_the_end_of_a_completed_a_failed_and_a_cancelled_task() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let _d = Daemon::start(dir, "8GiB,4");
    let work = dir.join("work");
    std::fs::create_dir(&work).unwrap();
    let out = dir.join("ends");
    let hook = format!(
        "printf '%s|%s|%s|%s|%s|%s|%s\\n' \"$LARDON_TASK_ID\" \"$LARDON_TASK_STATE\" \"$LARDON_EXIT_CODE\" \
         \"$LARDON_TASK_NAME\" \"$LARDON_GROUP\" \"$LARDON_HOOK_ATTEMPT\" \"$MINE:$EXTRA:$(pwd)\" >> {}",
        out.display()
    );
    let work_s = work.to_str().unwrap();
    let sub = |name: &str, cmd: &[&str]| {
        let mut args = vec![
            "submit", "--name", name, "--cpus", "0.25", "--cwd", work_s, "--env", "EXTRA=y", "--on-end",
            &hook, "--",
        ];
        args.extend_from_slice(cmd);
        let o = lardon_env(dir, &[("MINE", "x")], &args);
        ok(&o);
        stdout(&o).trim().to_owned()
    };
    let good = sub("good", &["true"]);
    let bad = sub("bad", &["sh", "-c", "exit 3"]);
    let long = sub("long", &["sleep", "100"]);
    wait_until("the long task running", LONG, || task_json(dir, &long)["state"] == "running");
    ok(&lardon(dir, &["cancel", &long]));
    wait_until("three hooks", LONG, || lines(&out).len() == 3);
    let by_id: BTreeMap<String, Vec<String>> = lines(&out)
        .into_iter()
        .map(|l| {
            let f: Vec<String> = l.split('|').map(str::to_owned).collect();
            (f[0].clone(), f)
        })
        .collect();
    let code = |id: &str| task_json(dir, id)["exit_code"].as_i64().map(|c| c.to_string()).unwrap_or_default();
    let here = format!("x:y:{}", work.display());
    for (id, state, name) in
        [(&good, "completed", "good"), (&bad, "failed", "bad"), (&long, "cancelled", "long")]
    {
        let f = &by_id[id.as_str()];
        assert_eq!(
            f[1..].to_vec(),
            vec![state.to_owned(), code(id), name.to_owned(), String::new(), "1".to_owned(), here.clone()],
            "task {id}"
        );
    }
    assert_eq!(by_id[bad.as_str()][2], "3");
    assert_eq!(by_id[good.as_str()][2], "0");
}

/// Break it to see it fail: let a hook's exit fail its task, or drop the
/// kill at `on_end_timeout` in `hooks/run.rs` (the second hook sleeps 100 s).
#[test]
fn a_failing_or_timed_out_hook_leaves_the_task_completed_and_shows_its_outcome() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let _d = Daemon::start(dir, "8GiB,4");
    ok(&lardon(dir, &["policy", "--set", "on_end_timeout=1s"]));
    let failing = submit(dir, &["--cpus", "0.25", "--on-end", "echo oops; exit 7", "--", "true"]);
    let hung = submit(dir, &["--cpus", "0.25", "--on-end", "echo start; sleep 100", "--", "true"]);
    wait_until("both hooks recorded", LONG, || hook_done(dir, &failing) && hook_done(dir, &hung));
    let t = task_json(dir, &failing);
    assert_eq!(t["state"], "completed", "{t}");
    let h = &t["hook"];
    assert_eq!(
        (&h["outcome"], &h["exit_code"], &h["output"]),
        (&"exited".into(), &7.into(), &"oops\n".into()),
        "{t}"
    );
    let t = task_json(dir, &hung);
    assert_eq!(t["state"], "completed", "{t}");
    assert_eq!(
        (&t["hook"]["outcome"], &t["hook"]["output"]),
        (&"timed_out".into(), &"start\n".into()),
        "{t}"
    );
    let o = lardon(dir, &["status", &failing]);
    assert!(stdout(&o).contains("hook: exited 7") && stdout(&o).contains("| oops"), "{}", stdout(&o));
    let o = lardon(dir, &["status", &hung]);
    assert!(stdout(&o).contains("hook: timed out"), "{}", stdout(&o));
    let o = lardon(dir, &["explain", &failing, "--history"]);
    assert!(stdout(&o).contains("hook") && stdout(&o).contains("[exited]"), "{}", stdout(&o));
    let o = lardon(dir, &["explain", &hung, "--history"]);
    assert!(stdout(&o).contains("[timed_out]"), "{}", stdout(&o));
}

/// Break it to see it fail: drop the policy's `on_end` from the end's
/// `coalesce` in `store/hooks.rs`.
#[test]
fn the_policy_on_end_applies_to_tasks_without_their_own() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let _d = Daemon::start(dir, "8GiB,4");
    let out = dir.join("ends");
    let policy = format!("on_end=echo policy $LARDON_TASK_ID >> {}", out.display());
    ok(&lardon(dir, &["policy", "--set", &policy]));
    let plain = submit(dir, &["--cpus", "0.25", "--", "true"]);
    let own_hook = format!("echo own $LARDON_TASK_ID >> {}", out.display());
    let own = submit(dir, &["--cpus", "0.25", "--on-end", &own_hook, "--", "true"]);
    wait_until("both hooks recorded", LONG, || hook_done(dir, &plain) && hook_done(dir, &own));
    let mut got = lines(&out);
    got.sort();
    assert_eq!(got, vec![format!("own {own}"), format!("policy {plain}")]);
    // `none` turns it off for the ends after it.
    ok(&lardon(dir, &["policy", "--set", "on_end=none"]));
    let after = submit(dir, &["--cpus", "0.25", "--", "true"]);
    wait_until("the task ended", LONG, || task_json(dir, &after)["state"] == "completed");
    assert!(task_json(dir, &after)["hook"].is_null(), "{}", task_json(dir, &after));
}

/// 20 short tasks and 3 long ones, each with a hook appending its end:
/// kill -9 once the short tasks' hooks are recorded, restart, cancel the
/// long ones; every task's end is in the file exactly once. Break it to
/// see it fail: queue the hook outside the end's transaction (after its
/// commit, not durable with it), or rerun finished rows at start.
#[test]
fn every_end_hook_runs_exactly_once_across_a_kill_9() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let d = Daemon::start(dir, "8GiB,4");
    let out = dir.join("ends");
    let hook = format!("echo \"$LARDON_TASK_ID $LARDON_TASK_STATE\" >> {}", out.display());
    let longs: Vec<String> =
        (0..3).map(|_| submit(dir, &["--cpus", "0.25", "--on-end", &hook, "--", "sleep", "30"])).collect();
    let inputs = dir.join("inputs");
    std::fs::write(&inputs, (1..=20).map(|i| format!("{i}\n")).collect::<String>()).unwrap();
    let o = lardon(
        dir,
        &["submit", "--cpus", "0.25", "--on-end", &hook, "--each", inputs.to_str().unwrap(), "--", "true"],
    );
    ok(&o);
    let shorts: Vec<String> = stdout(&o).lines().map(str::to_owned).collect();
    assert_eq!(shorts.len(), 20);
    wait_until("the short tasks' hooks in the file", LONG, || lines(&out).len() == 20);
    wait_until("their outcomes recorded", LONG, || shorts.iter().all(|id| hook_done(dir, id)));
    d.kill9();
    let _d = Daemon::start(dir, "8GiB,4");
    wait_until("the long tasks running again", LONG, || {
        longs.iter().all(|id| task_json(dir, id)["state"] == "running")
    });
    let mut cancel = vec!["cancel"];
    cancel.extend(longs.iter().map(String::as_str));
    ok(&lardon(dir, &cancel));
    wait_until("the long tasks' hooks recorded", LONG, || longs.iter().all(|id| hook_done(dir, id)));
    let mut seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for l in lines(&out) {
        let (id, state) = l.split_once(' ').unwrap();
        seen.entry(id.to_owned()).or_default().push(state.to_owned());
    }
    for id in &shorts {
        assert_eq!(seen.get(id), Some(&vec!["completed".to_owned()]), "task {id}: {seen:?}");
    }
    for id in &longs {
        assert_eq!(seen.get(id), Some(&vec!["cancelled".to_owned()]), "task {id}: {seen:?}");
    }
    assert_eq!(seen.len(), 23, "{seen:?}");
}

/// Four hooks block (all the runner's workers) until a file appears, so a
/// fifth task's end is durable with its hook not started when the daemon
/// is killed; after the restart the fifth runs once (attempt 1) and the
/// four that were running run again (attempt 2: the at-least-once window).
/// A hook running at a crash outlives it (its own process group): the test
/// kills those itself, as their rerun's attempt 2 says. Break it to see it
/// fail: start the runner's workers only on a wake (not at start).
#[test]
fn a_durable_end_whose_hook_had_not_run_runs_after_the_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let d = Daemon::start(dir, "8GiB,4");
    let (gate, out, pids) = (dir.join("gate"), dir.join("ends"), dir.join("pids"));
    let hook = format!(
        "echo $$ >> {pids}; while [ ! -e {gate} ]; do sleep 0.05; done; \
         echo \"$LARDON_TASK_ID $LARDON_HOOK_ATTEMPT\" >> {out}",
        pids = pids.display(),
        gate = gate.display(),
        out = out.display()
    );
    let blocked: Vec<String> =
        (0..4).map(|_| submit(dir, &["--cpus", "0.25", "--on-end", &hook, "--", "true"])).collect();
    wait_until("four hooks running", LONG, || lines(&pids).len() == 4);
    let fifth = submit(dir, &["--cpus", "0.25", "--on-end", &hook, "--", "true"]);
    wait_until("the fifth task ended", LONG, || task_json(dir, &fifth)["state"] == "completed");
    assert_eq!(task_json(dir, &fifth)["hook"]["status"], "pending");
    d.kill9();
    // The four hooks outlive the daemon; the next one kills them (their
    // process groups are in their rows) before it runs them again, so
    // none of the first runs can still write once the gate opens.
    let old: Vec<String> = lines(&pids);
    let _d = Daemon::start(dir, "8GiB,4");
    wait_until("the restart to kill the hooks left running", LONG, || {
        old.iter().all(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            stat.rsplit_once(") ").is_none_or(|(_, rest)| rest.starts_with('Z'))
        })
    });
    std::fs::write(&gate, "").unwrap();
    wait_until("all five hooks recorded", LONG, || {
        blocked.iter().chain([&fifth]).all(|id| hook_done(dir, id))
    });
    let mut got = lines(&out);
    got.sort();
    let mut want: Vec<String> =
        blocked.iter().map(|id| format!("{id} 2")).chain([format!("{fifth} 1")]).collect();
    want.sort();
    assert_eq!(got, want);
}

/// A grouped task's hook gets its group in `LARDON_GROUP` (empty without).
#[test]
fn a_hook_gets_the_tasks_group() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let _d = Daemon::start(dir, "8GiB,4");
    let out = dir.join("groups");
    let hook = format!("echo \"$LARDON_TASK_ID [$LARDON_GROUP]\" >> {}", out.display());
    let grouped = submit(dir, &["--group", "render", "--on-end", &hook, "--", "true"]);
    let plain = submit(dir, &["--on-end", &hook, "--", "true"]);
    wait_until("both hooks recorded", LONG, || hook_done(dir, &grouped) && hook_done(dir, &plain));
    let mut got = lines(&out);
    got.sort();
    let mut want = vec![format!("{grouped} [render]"), format!("{plain} []")];
    want.sort();
    assert_eq!(got, want);
}
