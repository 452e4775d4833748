use std::collections::VecDeque;
use std::sync::mpsc;

use lardon_proto::pb::{self, TaskState, watch_event::Event as WatchBody};
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent};

use super::*;

/// Scripted input: each entry is one poll's outcome.
struct Script(VecDeque<Option<Event>>);

impl Input for Script {
    fn next(&mut self, _timeout: Duration) -> io::Result<Option<Event>> {
        // Past the script, quit so a broken loop cannot hang the test.
        Ok(self.0.pop_front().unwrap_or(Some(Event::Key(KeyEvent::from(KeyCode::Char('q'))))))
    }
}

fn key(c: char) -> Option<Event> {
    Some(Event::Key(KeyEvent::from(KeyCode::Char(c))))
}

fn running(id: &str) -> pb::Task {
    pb::Task { id: id.into(), state: TaskState::Running as i32, ..Default::default() }
}

/// What the app derives from input: the RPC goes to the task the keys
/// selected; a daemon event it applied changes which keys it accepts (and
/// the footer it draws); a key the state does not allow sends nothing and
/// is explained on screen. The fake daemon only answers a pause with a
/// "now paused" event; it never says what to send or draw.
///
/// To see it fail: drop the `state.move_selection(1)` in `update` (the
/// pause goes to task 3), or stop applying watch events in `run` (no
/// task is known and nothing is sent).
#[test]
fn keys_become_requests_for_the_selected_task_and_applied_events_change_what_is_allowed() {
    let (tx, rx) = mpsc::channel();
    let snapshot = pb::WatchSnapshot { tasks: vec![running("3"), running("7")], ..Default::default() };
    tx.send(Incoming::Watch(Box::new(pb::WatchEvent {
        seq: 1,
        at_unix_ms: 1,
        event: Some(WatchBody::Snapshot(snapshot)),
    })))
    .ok();
    let mut state = State::new();
    let mut sent = Vec::new();
    let mut terminal = Terminal::new(TestBackend::new(100, 30)).expect("backend");
    // An idle poll lets the snapshot in; `j` selects the second task, `p`
    // pauses it; an idle poll lets the daemon's answer in; `r` resumes it
    // (allowed only once the pause was applied); `p` on a paused task is
    // refused.
    let script = Script(VecDeque::from([None, key('j'), key('p'), None, key('r'), key('p')]));
    let mut clock = 0;
    let mut now = || {
        clock += 75;
        clock
    };
    let daemon = tx.clone();
    let mut send = |r: Request| {
        if let Request::Pause(id) = &r {
            let mut t = running(id);
            t.state = TaskState::Paused as i32;
            daemon
                .send(Incoming::Watch(Box::new(pb::WatchEvent {
                    seq: 2,
                    at_unix_ms: 2,
                    event: Some(WatchBody::TaskChanged(t)),
                })))
                .ok();
        }
        sent.push(r);
    };
    let result = run(
        &mut terminal,
        Loop {
            state: &mut state,
            theme: Theme::no_color(),
            input: script,
            incoming: &rx,
            send: &mut send,
            now_ms: &mut now,
        },
    );
    assert!(result.is_ok());
    assert_eq!(sent, [Request::Pause("7".into()), Request::Resume("7".into())]);
    let screen = terminal.backend().to_string();
    assert!(
        screen.contains("not possible for the selected task now"),
        "the refused key is explained:\n{screen}"
    );
    assert!(
        screen.contains("r resume") && !screen.contains("p pause"),
        "the footer offers resume:\n{screen}"
    );
}

#[test]
fn lagged_sends_a_resync_and_a_lost_client_is_shown() {
    let (tx, rx) = mpsc::channel();
    tx.send(Incoming::Watch(Box::new(pb::WatchEvent {
        seq: 1,
        at_unix_ms: 1,
        event: Some(WatchBody::Lagged("x".into())),
    })))
    .ok();
    drop(tx);
    let mut state = State::new();
    let mut sent = Vec::new();
    let mut terminal = Terminal::new(TestBackend::new(60, 15)).expect("backend");
    let mut send = |r: Request| sent.push(r);
    let mut now = || 0;
    let script = Script(VecDeque::from([None, None]));
    run(
        &mut terminal,
        Loop {
            state: &mut state,
            theme: Theme::no_color(),
            input: script,
            incoming: &rx,
            send: &mut send,
            now_ms: &mut now,
        },
    )
    .expect("run");
    assert_eq!(sent, [Request::Resync]);
    assert!(matches!(state.link(), Link::Lost(_)));
    assert!(terminal.backend().to_string().contains("disconnected"));
}
