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

#[test]
fn a_key_becomes_a_request_and_daemon_events_reach_the_screen() {
    let (tx, rx) = mpsc::channel();
    let snapshot = pb::WatchSnapshot { tasks: vec![running("3")], ..Default::default() };
    tx.send(Incoming::Watch(Box::new(pb::WatchEvent {
        seq: 1,
        at_unix_ms: 1,
        event: Some(WatchBody::Snapshot(snapshot)),
    })))
    .ok();
    let mut state = State::new();
    let mut sent = Vec::new();
    let mut terminal = Terminal::new(TestBackend::new(100, 30)).expect("backend");
    // One idle poll lets the snapshot in; then `p`, then the RPC result.
    let script = Script(VecDeque::from([None, key('p'), None]));
    let mut clock = 0;
    let mut now = || {
        clock += 75;
        clock
    };
    let tx2 = tx.clone();
    let mut send = |r: Request| {
        if let Request::Pause(id) = &r {
            let mut t = running(id);
            t.state = TaskState::Paused as i32;
            tx2.send(Incoming::Watch(Box::new(pb::WatchEvent {
                seq: 2,
                at_unix_ms: 2,
                event: Some(WatchBody::TaskChanged(t)),
            })))
            .ok();
            tx2.send(Incoming::Rpc(Ok(format!("pause #{id}: done")))).ok();
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
    assert_eq!(sent, [Request::Pause("3".into())]);
    assert_eq!(state.tasks()[0].task.state(), TaskState::Paused);
    let screen = terminal.backend().to_string();
    assert!(screen.contains("PAUSED"), "{screen}");
    assert!(screen.contains("pause #3: done"), "{screen}");
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
