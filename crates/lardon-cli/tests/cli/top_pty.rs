//! `lardon top` in a real pseudo-terminal against a real daemon (docs/DESIGN.md §11):
//! the dashboard shows the running task, `p` pauses it in the daemon,
//! `q` exits with status 0, and the terminal is restored (alternate screen
//! left, cursor shown, the pty's line discipline back to what it was).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use portable_pty::{CommandBuilder, PtySize, native_pty_system};

use crate::support::pty::Screen;

use crate::support::wait_until;

const BIN: &str = env!("CARGO_BIN_EXE_lardon");

fn lardon(dir: &Path, args: &[&str]) -> Output {
    Command::new(BIN).arg("--state-dir").arg(dir).args(args).output().expect("run lardon")
}

/// A fresh state directory, removed on drop (std only: this test needs no
/// dev-dependency but the pty crate).
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new() -> Self {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let path = std::env::temp_dir().join(format!("lardon-top-pty-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&path).unwrap();
        Self(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The daemon, stopped with SIGTERM (so it ends its tasks) on drop.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.0.id().to_string()).status();
        let _ = self.0.wait();
    }
}

fn task_state(dir: &Path, id: &str) -> String {
    String::from_utf8_lossy(&lardon(dir, &["status", id]).stdout).to_lowercase()
}

#[test]
fn top_pauses_a_running_task_then_quits_and_restores_the_terminal() {
    let temp = TempDir::new();
    let dir = temp.0.as_path();
    let _daemon = Daemon(
        Command::new(BIN)
            .arg("--state-dir")
            .arg(dir)
            .arg("daemon")
            // A simulated host: on a busy build box the real one would hold
            // the task back on load (the command still really runs).
            .args(["--simulate-host", "8GiB,4"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the daemon"),
    );
    wait_until("the daemon", Duration::from_secs(20), || lardon(dir, &["status"]).status.success());
    let out = lardon(dir, &["submit", "--mem", "16MiB", "--name", "sleeper", "--", "sleep", "600"]);
    assert!(out.status.success(), "submit: {}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let id = stdout.split_whitespace().last().expect("a task id").trim_start_matches('#').to_owned();
    wait_until("the task to run", Duration::from_secs(30), || task_state(dir, &id).contains("running"));

    let pty = native_pty_system()
        .openpty(PtySize { rows: 30, cols: 100, pixel_width: 0, pixel_height: 0 })
        .expect("openpty");
    let flags_before = pty.master.get_termios().map(|t| format!("{:?}", t.local_flags));
    let mut cmd = CommandBuilder::new(BIN);
    cmd.args(["--state-dir".as_ref(), dir.as_os_str(), "top".as_ref()]);
    cmd.env("TERM", "xterm-256color");
    let mut child = pty.slave.spawn_command(cmd).expect("spawn lardon top");
    drop(pty.slave);
    let screen = Screen::read(pty.master.try_clone_reader().expect("reader"));
    let seen = |needle: &str| screen.seen(needle);
    wait_until("the dashboard to show the running task", Duration::from_secs(20), || {
        seen("RUNNING") && seen("sleeper")
    });

    let mut keys = pty.master.take_writer().expect("writer");
    // The only task is selected at start.
    keys.write_all(b"p").unwrap();
    keys.flush().unwrap();
    wait_until("the daemon to report the task PAUSED", Duration::from_secs(15), || {
        task_state(dir, &id).contains("paused")
    });
    wait_until("the dashboard to show PAUSED", Duration::from_secs(10), || seen("PAUSED"));

    keys.write_all(b"q").unwrap();
    keys.flush().unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "`q` did not end `lardon top`");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "lardon top exited with {status:?}");

    // Restored: the alternate screen was entered and then left, the cursor
    // shown again, and raw mode undone.
    let out = screen.all(Duration::from_secs(10));
    let entered = out.find("\x1b[?1049h").expect("entered the alternate screen");
    let left = out.rfind("\x1b[?1049l").expect("left the alternate screen");
    assert!(left > entered);
    assert!(out.rfind("\x1b[?25h").is_some_and(|shown| shown > entered), "cursor shown again");
    let flags_after = pty.master.get_termios().map(|t| format!("{:?}", t.local_flags));
    assert_eq!(flags_before, flags_after, "the pty's local flags (ICANON, ECHO…) are restored");

    let _ = lardon(dir, &["cancel", &id]);
}
