use std::collections::VecDeque;
use std::io;

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
    }
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
    state.apply(Ok(s), 1_000);
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
    state.apply(Ok(status()), 2_000);
    assert_eq!(state.selected(), 1, "clamped to the two agents left");
    state.move_selection(-5);
    assert_eq!(state.selected(), 0);
}

/// A failed poll keeps the last figures and says how old they are.
#[test]
fn a_lost_broker_keeps_the_last_figures_marked_stale() {
    let mut state = ClusterState::new("broker:7700");
    state.apply(Ok(status()), 1_000);
    state.apply(Err("connection refused".into()), 2_000);
    assert_eq!(state.link(), &BrokerLink::Lost("connection refused".into()));
    assert_eq!(state.agents().len(), 2);
    let text = screen(&state, 100, 24, 6_000);
    assert!(text.contains("unreachable: connection refused, figures 5s old"), "{text}");
    assert!(text.contains("a-1"), "{text}");
}

#[test]
fn the_view_shows_agents_routes_and_totals() {
    let mut state = ClusterState::new("broker:7700");
    let text = screen(&state, 100, 24, 0);
    assert!(text.contains("waiting for the broker's first answer"), "{text}");
    assert!(text.contains("no agent connected"), "{text}");
    state.apply(Ok(status()), 1_000);
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

/// Scripted input: each entry is one poll's outcome; past the script, q.
struct Script(VecDeque<Option<Event>>);

impl Input for Script {
    fn next(&mut self, _timeout: Duration) -> io::Result<Option<Event>> {
        Ok(self.0.pop_front().unwrap_or(Some(Event::Key(KeyEvent::from(KeyCode::Char('q'))))))
    }
}

/// The loop applies the poller's answers and the keys: a second answer
/// with a new agent is drawn, `j` moves the selection onto it, and `q`
/// ends the loop.
#[test]
fn the_loop_draws_each_answer_and_follows_the_keys() {
    let (tx, rx) = std_mpsc::channel();
    tx.send(Ok(status())).unwrap();
    let mut state = ClusterState::new("broker:7700");
    let mut terminal = Terminal::new(TestBackend::new(100, 24)).unwrap();
    let mut more = status();
    more.agents.push(agent("c-3", 4, 0, 1 << 30, false));
    let mut script = VecDeque::from([None, Some(Event::Key(KeyEvent::from(KeyCode::Char('j'))))]);
    script.push_back(Some(Event::Key(KeyEvent::from(KeyCode::Char('j')))));
    // The second answer arrives while the script runs (sent before the
    // loop; it is read on the loop's first pass with the first one).
    tx.send(Ok(more)).unwrap();
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
