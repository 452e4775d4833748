use std::collections::VecDeque;
use std::io;
use std::time::Duration;

use ratatui::backend::TestBackend;
use ratatui::crossterm::event::KeyEvent;

use super::*;
use crate::cluster::state::{AgentRow, Availability};

fn agent(id: &str, tokens: u32, in_flight: u32, memory: u64, recovering: bool) -> pb::AgentStatus {
    pb::AgentStatus {
        agent_id: id.into(),
        capabilities: vec!["gcc@12:x86_64-linux-gnu".into(), "sh@1:".into()],
        tokens,
        in_flight,
        availability: Some(pb::Availability { memory, cpu_millis: 2_500 }),
        recovering,
        ..Default::default()
    }
}

fn status() -> pb::ClusterStatusResponse {
    pb::ClusterStatusResponse {
        // Out of order on purpose: rows are by id.
        agents: vec![agent("b-2", 2, 2, 1 << 30, false), agent("a-1", 4, 1, 8 << 30, false)],
        queued: 3,
        in_flight: 3,
        finished: 40,
        submitters: 2,
        routes: vec![
            pb::RouteStatus { capability: "sh@1:".into(), queued: 0, in_flight: 1 },
            pb::RouteStatus { capability: "gcc@12:x86_64-linux-gnu".into(), queued: 3, in_flight: 2 },
        ],
        ..Default::default()
    }
}

/// A change event carrying `status` at `sequence`.
fn event(status: pb::ClusterStatusResponse, sequence: u64) -> pb::ClusterWatchEvent {
    pb::ClusterWatchEvent { sequence, status: Some(status), heartbeat: false, heartbeat_ms: 1_000 }
}

fn screen(state: &ClusterState, width: u16, height: u16, now_ms: i64) -> String {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal.draw(|f| view::draw(f, state, &Theme::no_color(), now_ms)).unwrap();
    let buffer = terminal.backend().buffer().clone();
    let mut text = String::new();
    for y in 0..buffer.area.height {
        for x in 0..buffer.area.width {
            text.push_str(buffer[(x, y)].symbol());
        }
        text.push('\n');
    }
    text
}

/// Rows are by id; availability reads tokens first (full), then the
/// placeholder flag, then the mirror (no room); the selection stays within
/// the agents when one leaves.
#[test]
fn agent_rows_say_what_each_agent_can_take() {
    let mut state = ClusterState::new("broker:7700");
    assert!(state.agents().is_empty() && state.totals().is_none());
    let mut s = status();
    s.agents.push(agent("c-3", 4, 0, 0, false));
    s.agents.push(agent("d-4", 0, 0, 0, true));
    state.apply(Ok(event(s, 1)), 1_000);
    let rows: Vec<(String, Availability)> =
        state.agents().into_iter().map(|AgentRow { id, availability, .. }| (id, availability)).collect();
    assert_eq!(
        rows,
        vec![
            ("a-1".into(), Availability::Available),
            ("b-2".into(), Availability::Full),
            ("c-3".into(), Availability::NoRoom),
            ("d-4".into(), Availability::Recovering),
        ]
    );
    let t = state.totals().unwrap();
    assert_eq!((t.agents, t.queued, t.in_flight, t.finished, t.submitters, t.tokens), (4, 3, 3, 40, 2, 10));
    assert_eq!(state.routes()[0], ("gcc@12:x86_64-linux-gnu".into(), 3, 2));
    state.move_selection(10);
    assert_eq!(state.selected(), 3);
    state.apply(Ok(event(status(), 2)), 2_000);
    assert_eq!(state.selected(), 1, "clamped to the two agents left");
    state.move_selection(-5);
    assert_eq!(state.selected(), 0);
}

/// A broken stream keeps the last figures, says it is not answering and
/// how old they are; the next snapshot makes it live again.
#[test]
fn a_lost_stream_keeps_the_last_figures_marked_stale() {
    let mut state = ClusterState::new("broker:7700");
    state.apply(Ok(event(status(), 7)), 1_000);
    state.apply(Err("connection refused; subscribing again in 0.5 s".into()), 2_000);
    assert_eq!(state.link(), &BrokerLink::Lost("connection refused; subscribing again in 0.5 s".into()));
    assert_eq!(state.agents().len(), 2);
    assert_eq!(state.sequence(), Some(7));
    let text = screen(&state, 120, 24, 6_000);
    assert!(
        text.contains("not answering, figures 5s old: connection refused; subscribing again in 0.5 s"),
        "{text}"
    );
    assert!(text.contains("a-1"), "{text}");
    // Subscribed again (a restarted broker counts from 0 again).
    let mut one = status();
    one.agents.truncate(1);
    state.apply(Ok(event(one, 2)), 7_000);
    assert_eq!(state.link(), &BrokerLink::Live);
    assert_eq!((state.agents().len(), state.sequence()), (1, Some(2)));
    assert_eq!(state.age_ms(7_500), Some(500));
}

/// A change event replaces the figures; a heartbeat repeats them and
/// confirms they are current (their age starts again), keeping the
/// selection.
#[test]
fn events_replace_the_figures_and_heartbeats_confirm_them() {
    let mut state = ClusterState::new("broker:7700");
    assert_eq!(state.link(), &BrokerLink::Connecting);
    state.apply(Ok(event(status(), 3)), 1_000);
    state.move_selection(1);
    let mut more = status();
    more.queued = 9;
    state.apply(Ok(event(more.clone(), 5)), 2_000);
    assert_eq!((state.totals().unwrap().queued, state.sequence()), (9, Some(5)));
    let beat = pb::ClusterWatchEvent { heartbeat: true, ..event(more, 5) };
    state.apply(Ok(beat), 9_000);
    assert_eq!(state.link(), &BrokerLink::Live);
    assert_eq!(state.age_ms(9_000), Some(0), "a heartbeat confirms the figures");
    assert_eq!((state.totals().unwrap().queued, state.selected()), (9, 1));
}

#[test]
fn the_view_shows_agents_routes_and_totals() {
    let mut state = ClusterState::new("broker:7700");
    let text = screen(&state, 100, 24, 0);
    assert!(text.contains("waiting for the broker's first answer"), "{text}");
    assert!(text.contains("no agent connected"), "{text}");
    state.apply(Ok(event(status(), 1)), 1_000);
    let text = screen(&state, 100, 24, 1_000);
    assert!(text.contains("lardon top — cluster broker:7700  live"), "{text}");
    assert!(
        text.contains("2 agents  tokens 3/6  3 queued  3 in flight  40 answered  2 submitters"),
        "{text}"
    );
    let a1 = text.lines().find(|l| l.contains("a-1")).unwrap();
    for word in ["available", "4", "1", "8.0G", "2.5", "gcc@12:x86_64-linux-gnu sh@1:"] {
        assert!(a1.contains(word), "`{word}` missing from `{a1}`");
    }
    let b2 = text.lines().find(|l| l.contains("b-2")).unwrap();
    assert!(b2.contains("full"), "{b2}");
    // a-1 comes first: the agents are by id.
    assert!(text.find("a-1").unwrap() < text.find("b-2").unwrap());
    let route = text.lines().find(|l| l.starts_with("│gcc@12:x86_64-linux-gnu")).unwrap();
    assert!(route.split_whitespace().collect::<Vec<_>>().ends_with(&["3", "2", "│"]), "{route}");
    let small = screen(&state, 40, 10, 1_000);
    assert!(small.contains("terminal too small"), "{small}");
}

/// Scripted input: each entry is one key (or none); past the script, q.
struct Script(VecDeque<Option<Event>>);

impl Input for Script {
    fn next(&mut self, _timeout: Duration) -> io::Result<Option<Event>> {
        Ok(self.0.pop_front().unwrap_or(Some(Event::Key(KeyEvent::from(KeyCode::Char('q'))))))
    }
}

/// The loop applies the watcher's events and the keys: a second event
/// with a new agent is drawn, `j` moves the selection onto it, and `q`
/// ends the loop.
#[test]
fn the_loop_draws_each_answer_and_follows_the_keys() {
    let (tx, rx) = std_mpsc::channel();
    tx.send(Ok(event(status(), 1))).unwrap();
    let mut state = ClusterState::new("broker:7700");
    let mut terminal = Terminal::new(TestBackend::new(100, 24)).unwrap();
    let mut more = status();
    more.agents.push(agent("c-3", 4, 0, 1 << 30, false));
    let mut script = VecDeque::from([None, Some(Event::Key(KeyEvent::from(KeyCode::Char('j'))))]);
    script.push_back(Some(Event::Key(KeyEvent::from(KeyCode::Char('j')))));
    // The second event arrives while the script runs (sent before the
    // loop; it is read on the loop's first pass with the first one).
    tx.send(Ok(event(more, 2))).unwrap();
    let mut clock = 0;
    run(&mut terminal, &mut state, Theme::no_color(), Script(script), &rx, &mut || {
        clock += 75;
        clock
    })
    .unwrap();
    assert_eq!(state.agents().len(), 3);
    assert_eq!(state.selected(), 2);
    let buffer = terminal.backend().buffer().clone();
    let line =
        |y: u16| -> String { (0..buffer.area.width).map(|x| buffer[(x, y)].symbol().to_owned()).collect() };
    let y = (0..buffer.area.height).find(|y| line(*y).contains("c-3")).expect("c-3 drawn");
    let reversed = |y: u16| buffer[(2, y)].modifier.contains(ratatui::style::Modifier::REVERSED);
    assert!(reversed(y), "c-3 is selected: {}", line(y));
    assert!(!reversed(y - 1), "only c-3 is selected: {}", line(y - 1));
    drop(tx);
}

/// Subscriptions scripted for the watcher: each call takes the next entry
/// (a refusal, or a stream of events that then ends or stays silent).
fn scripted(mut script: VecDeque<Result<(Vec<Watched>, bool), String>>) -> Subscribe {
    Box::new(move || {
        let next = script.pop_front().unwrap_or_else(|| Err("script over".into()));
        Box::pin(async move {
            let (events, silent) = next?;
            let stream = tokio_stream::iter(events);
            let events: Events = if silent {
                Box::pin(tokio_stream::StreamExt::chain(stream, tokio_stream::pending()))
            } else {
                Box::pin(stream)
            };
            Ok(events)
        })
    })
}

fn fast() -> watcher::Backoff {
    watcher::Backoff { initial: Duration::from_millis(1), max: Duration::from_millis(4) }
}

/// The first subscription is refused, or its stream fails before the
/// snapshot: the broker is unreachable before any terminal is touched.
#[test]
fn a_first_subscription_that_fails_is_a_broker_error() {
    let (tx, _rx) = std_mpsc::channel();
    let refused = scripted(VecDeque::from([Err("connection refused".into())]));
    match watcher::Watcher::start(refused, fast(), tx.clone()) {
        Err(TopError::Broker(why)) => assert_eq!(why, "connection refused"),
        other => panic!("{:?}", other.err()),
    }
    let broken = scripted(VecDeque::from([Ok((vec![Err("broker: token refused".into())], false))]));
    match watcher::Watcher::start(broken, fast(), tx) {
        Err(TopError::Broker(why)) => assert_eq!(why, "broker: token refused"),
        other => panic!("{:?}", other.err()),
    }
}

/// When the stream ends, fails or goes silent the watcher says why and
/// subscribes again (a refused attempt too is said), and the events of
/// the new stream flow as before.
#[test]
fn a_broken_stream_is_reported_and_subscribed_again() {
    let (tx, rx) = std_mpsc::channel();
    let silent = pb::ClusterWatchEvent { heartbeat_ms: 1, ..event(status(), 3) };
    let subscribe = scripted(VecDeque::from([
        // The first stream: its snapshot, one change, then it ends.
        Ok((vec![Ok(event(status(), 1)), Ok(event(status(), 2))], false)),
        Err("connection refused".into()),
        // Its heartbeat is 1 ms: silent past 1 s + 3 ms is lost.
        Ok((vec![Ok(silent)], true)),
        Ok((vec![Err("broker: the broker is stopping".into())], false)),
        Ok((vec![Ok(event(status(), 9))], true)),
    ]));
    let watcher = watcher::Watcher::start(subscribe, fast(), tx).unwrap();
    let mut got = Vec::new();
    while got.len() < 7 {
        got.push(rx.recv_timeout(Duration::from_secs(10)).expect("the watcher went quiet"));
    }
    drop(watcher);
    let seen: Vec<String> = got
        .iter()
        .map(|w| match w {
            Ok(e) => format!("event {}", e.sequence),
            Err(why) => why.split(';').next().unwrap_or_default().to_owned(),
        })
        .collect();
    assert_eq!(
        seen,
        [
            "event 1",
            "event 2",
            "the broker ended the stream",
            "connection refused",
            "event 3",
            "no event for 1.0 s",
            "broker: the broker is stopping",
        ]
    );
    assert!(got[2].as_ref().unwrap_err().ends_with("subscribing again in 0.0 s"), "{:?}", got[2]);
    let mut state = ClusterState::new("broker:7700");
    for watched in got {
        state.apply(watched, 0);
    }
    assert!(
        matches!(state.link(), BrokerLink::Lost(why) if why.starts_with("broker: the broker is stopping"))
    );
    assert_eq!(state.sequence(), Some(3), "the last figures stay");
}
