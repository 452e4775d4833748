//! `lardon top --cluster` in a real pseudo-terminal against a real broker
//! and agent (docs/DESIGN.md §14): the view shows the agent's row with its
//! capability, tokens and availability; when the broker dies it says
//! "not answering" and, once a broker answers again, follows it again;
//! `q` exits with status 0 and the terminal is restored; an unreachable broker is refused before the
//! terminal is touched, with exit code 3.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::support;
use std::io::{Read, Write};
use std::process::Command;
use std::time::{Duration, Instant};

use portable_pty::{CommandBuilder, PtySize, native_pty_system};

use crate::support::procs::{Proc, free_port, logs};
use crate::support::pty::Screen;
use crate::support::wait::until_logged;

#[test]
fn top_cluster_shows_the_agent_row_then_quits_and_restores_the_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let addr = free_port();
    let broker = Proc::start(d, "broker", &["broker", "--listen", &addr, "--heartbeat", "1s"]);
    let agent = Proc::start(
        d,
        "pty-agent",
        &[
            "agent",
            "--broker",
            &addr,
            "--id",
            "pty-agent",
            "--capability",
            "sh@1",
            "--tokens",
            "3",
            "--heartbeat",
            "1s",
            "--simulate-host",
            "8GiB,8",
        ],
    );
    let procs = [&broker, &agent];
    until_logged("the agent to connect", &procs, || {
        let out = Command::new(support::bin())
            .args(["cluster", "status", "--broker", &addr, "--json"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).contains("pty-agent")
    });

    let pty = native_pty_system()
        .openpty(PtySize { rows: 30, cols: 120, pixel_width: 0, pixel_height: 0 })
        .expect("openpty");
    let flags_before = pty.master.get_termios().map(|t| format!("{:?}", t.local_flags));
    let mut cmd = CommandBuilder::new(support::bin());
    cmd.args(["top", "--cluster", "--broker", &addr]);
    cmd.env("TERM", "xterm-256color");
    let mut child = pty.slave.spawn_command(cmd).expect("spawn lardon top --cluster");
    drop(pty.slave);
    let screen = Screen::read(pty.master.try_clone_reader().expect("reader"));
    let seen = |needle: &str| screen.seen(needle);
    let start = Instant::now();
    while !(seen("pty-agent") && seen("available") && seen("sh@1") && seen("Agents (1)")) {
        let text = screen.text();
        assert!(start.elapsed() < Duration::from_secs(30), "no agent row in {text:?}\n{}", logs(&procs));
        std::thread::sleep(Duration::from_millis(50));
    }

    // The broker dies: the view says it is not answering (keeping the
    // figures) and, once a broker answers there again, subscribes again
    // and is live.
    let mut broker = broker;
    broker.kill9();
    let after = |needle: &str, from: usize| {
        let text = screen.text();
        text.get(from..).and_then(|t| t.find(needle)).map(|i| i + from)
    };
    let start = Instant::now();
    let lost = loop {
        if let Some(at) = after("not answering", 0) {
            break at;
        }
        let text = screen.text();
        assert!(start.elapsed() < Duration::from_secs(30), "no `not answering` in {text:?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let broker = Proc::start(d, "broker-again", &["broker", "--listen", &addr, "--heartbeat", "1s"]);
    let procs = [&broker, &agent];
    let start = Instant::now();
    while after("live", lost).is_none() {
        let text = screen.text();
        assert!(start.elapsed() < Duration::from_secs(30), "not live again in {text:?}\n{}", logs(&procs));
        std::thread::sleep(Duration::from_millis(50));
    }

    let mut keys = pty.master.take_writer().expect("writer");
    keys.write_all(b"q").unwrap();
    keys.flush().unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "`q` did not end `lardon top --cluster`");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "lardon top --cluster exited with {status:?}");
    let out = screen.all(Duration::from_secs(10));
    let entered = out.find("\x1b[?1049h").expect("entered the alternate screen");
    let left = out.rfind("\x1b[?1049l").expect("left the alternate screen");
    assert!(left > entered);
    assert!(out.rfind("\x1b[?25h").is_some_and(|shown| shown > entered), "cursor shown again");
    let flags_after = pty.master.get_termios().map(|t| format!("{:?}", t.local_flags));
    assert_eq!(flags_before, flags_after, "the pty's local flags are restored");

    // No broker there: refused at once, exit code 3, terminal untouched.
    let pty = native_pty_system()
        .openpty(PtySize { rows: 30, cols: 120, pixel_width: 0, pixel_height: 0 })
        .expect("openpty");
    let mut cmd = CommandBuilder::new(support::bin());
    cmd.args(["top", "--cluster", "--broker", &free_port()]);
    let mut child = pty.slave.spawn_command(cmd).expect("spawn");
    drop(pty.slave);
    let mut reader = pty.master.try_clone_reader().expect("reader");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "an unreachable broker did not end it");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.exit_code(), 3, "{status:?}");
    drop(pty.master);
    let mut text = Vec::new();
    let _ = reader.read_to_end(&mut text);
    let text = String::from_utf8_lossy(&text);
    assert!(text.contains("cannot reach the broker"), "{text}");
    assert!(!text.contains("\x1b[?1049h"), "the terminal was taken over: {text:?}");
}
