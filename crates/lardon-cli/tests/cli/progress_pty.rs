//! `lardon wait` and `lardon run` on a terminal show a live bar (done /
//! total, rate, ETA); without a terminal, plain lines only.
//!
//! Break it to see it fail: make `wait` ignore the terminal (`bar = None`):
//! the pty output then has no "0/2 done" bar; or drop `View::overall` in
//! `run` (no "tasks done" line).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;
use std::io::Read;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::{Daemon, lardon, stdout, submit, wait_until};
use portable_pty::{CommandBuilder, PtySize, native_pty_system};

/// Runs `lardon ARGS…` in a pseudo-terminal; its exit success and output.
fn in_pty(args: &[&std::ffi::OsStr]) -> (bool, String) {
    let pty = native_pty_system()
        .openpty(PtySize { rows: 30, cols: 120, pixel_width: 0, pixel_height: 0 })
        .expect("openpty");
    let mut cmd = CommandBuilder::new(support::bin());
    cmd.env_remove("LARDON_SOCKET");
    cmd.env_remove("LARDON_STATE_DIR");
    cmd.args(args);
    cmd.env("TERM", "xterm-256color");
    let mut child = pty.slave.spawn_command(cmd).expect("spawn lardon");
    drop(pty.slave);
    let mut reader = pty.master.try_clone_reader().expect("reader");
    let seen = Arc::new(Mutex::new(String::new()));
    let sink = Arc::clone(&seen);
    let pump = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    let status = child.wait().expect("wait for lardon");
    drop(pty.master);
    let _ = pump.join();
    let out = seen.lock().unwrap().clone();
    (status.success(), out)
}

#[test]
fn run_draws_an_overall_bar_on_a_terminal() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("w.toml");
    std::fs::write(
        &file,
        "[host]\nmemory = \"4GiB\"\ncpus = 2\n[[task]]\nname = \"a\"\ncommand = [\"sleep\", \"0.3\"]\n\
         [[task]]\nname = \"b\"\ncommand = [\"sleep\", \"0.3\"]\n",
    )
    .unwrap();
    let state = tmp.path().join("state");
    let (ok, out) = in_pty(&["run".as_ref(), file.as_os_str(), "--state-dir".as_ref(), state.as_os_str()]);
    assert!(ok, "lardon run on a pty: {out:?}");
    assert!(out.contains("tasks done") && out.contains("eta"), "no overall bar: {out:?}");
    assert!(out.contains("2/2"), "the bar reaches 2/2: {out:?}");
}

#[test]
fn wait_draws_a_bar_on_a_terminal_and_plain_lines_otherwise() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let _d = Daemon::start(dir, "8GiB,2");
    let a = submit(dir, &["--name", "nap-a", "--", "sleep", "1"]);
    let b = submit(dir, &["--name", "nap-b", "--", "sleep", "1"]);

    let pty = native_pty_system()
        .openpty(PtySize { rows: 30, cols: 100, pixel_width: 0, pixel_height: 0 })
        .expect("openpty");
    let mut cmd = CommandBuilder::new(support::bin());
    cmd.env_remove("LARDON_SOCKET");
    cmd.env_remove("LARDON_STATE_DIR");
    cmd.args(["--state-dir".as_ref(), dir.as_os_str(), "wait".as_ref(), a.as_ref(), b.as_ref()]);
    cmd.env("TERM", "xterm-256color");
    let mut child = pty.slave.spawn_command(cmd).expect("spawn lardon wait");
    drop(pty.slave);
    let mut reader = pty.master.try_clone_reader().expect("reader");
    let seen = Arc::new(Mutex::new(String::new()));
    let sink = Arc::clone(&seen);
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    let status = child.wait().expect("wait for lardon wait");
    assert!(status.success(), "lardon wait on a pty: {status:?}");
    wait_until("the summary on the pty", Duration::from_secs(10), || {
        seen.lock().unwrap().contains("2 completed")
    });
    let out = seen.lock().unwrap().clone();
    assert!(out.contains("0/2 done"), "no bar on the terminal: {out:?}");
    assert!(out.contains("eta"), "no ETA on the terminal: {out:?}");
    assert!(out.contains("nap-a: completed") && out.contains("nap-b: completed"), "{out:?}");

    // No terminal: the finished lines and the summary, no bar.
    let o = lardon(dir, &["wait", &a, &b]);
    let plain = stdout(&o);
    assert_eq!(o.status.code(), Some(0));
    assert!(!plain.contains("done,") && plain.contains("nap-a: completed"), "{plain}");
    assert_eq!(plain.lines().count(), 3, "one line per task end, then the summary: {plain}");
}
