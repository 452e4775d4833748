use lardon_proto::pb::{self, DecisionKind, PressureState, ScratchState, TaskState, watch_event::Event};

use super::*;

fn task(id: &str, state: TaskState, created: i64) -> pb::Task {
    pb::Task { id: id.into(), state: state as i32, created_unix_ms: created, ..Default::default() }
}

fn event(at: i64, e: Event) -> pb::WatchEvent {
    pb::WatchEvent { seq: 1, at_unix_ms: at, event: Some(e) }
}

fn availability(generation: u64) -> pb::Availability {
    pb::Availability {
        generation,
        pressure: Some(pb::PressureView { state: PressureState::Green as i32, ..Default::default() }),
        ..Default::default()
    }
}

fn snapshot() -> pb::WatchSnapshot {
    pb::WatchSnapshot {
        tasks: vec![
            task("1", TaskState::Completed, 1),
            task("2", TaskState::Pending, 2),
            task("3", TaskState::Running, 3),
        ],
        availability: Some(availability(1)),
        recent_decisions: vec![
            pb::DecisionMade { task_id: "1".into(), decision: None },
            pb::DecisionMade { task_id: "2".into(), decision: None },
        ],
        scratch: vec![],
    }
}

fn ids(state: &State) -> Vec<&str> {
    state.tasks().iter().map(|r| r.task.id.as_str()).collect()
}

#[test]
fn snapshot_orders_live_work_first_and_selects_the_first() {
    let state = State::from_snapshot(snapshot(), 1000);
    assert_eq!(ids(&state), ["3", "2", "1"]);
    assert_eq!(state.selected_task().map(|t| t.id.as_str()), Some("3"));
    assert_eq!(state.link(), &Link::Live);
    // Newest decision first.
    assert_eq!(state.decisions.front().map(|d| d.task_id.as_str()), Some("2"));
    assert_eq!(state.availability().map(|a| a.generation), Some(1));
}

#[test]
fn task_changes_keep_the_selection_on_the_same_task() {
    let mut state = State::from_snapshot(snapshot(), 0);
    state.select_task("2");
    // Task 2 starts running: it moves in the list, the selection follows.
    assert_eq!(state.apply(event(10, Event::TaskChanged(task("2", TaskState::Running, 2)))), Effect::Redraw);
    assert_eq!(ids(&state), ["2", "3", "1"]);
    assert_eq!(state.selected_task().map(|t| t.id.as_str()), Some("2"));
    assert_eq!(state.tasks()[0].seen_ms, 10);
    // A new task is added; a removed selected task moves the selection.
    state.apply(event(11, Event::TaskChanged(task("4", TaskState::Pending, 4))));
    assert_eq!(ids(&state), ["2", "3", "4", "1"]);
    state.apply(event(12, Event::TaskRemoved(pb::TaskRemoved { id: "2".into() })));
    assert_eq!(ids(&state), ["3", "4", "1"]);
    assert_eq!(state.selected_task().map(|t| t.id.as_str()), Some("3"));
}

#[test]
fn decisions_are_bounded_newest_first() {
    let mut state = State::from_snapshot(snapshot(), 0);
    for i in 0..(DECISIONS_KEPT + 10) {
        let d = pb::Decision { kind: DecisionKind::Wait as i32, ..Default::default() };
        state
            .apply(event(1, Event::Decision(pb::DecisionMade { task_id: i.to_string(), decision: Some(d) })));
    }
    assert_eq!(state.decisions.len(), DECISIONS_KEPT);
    assert!(state.tick(1_000), "new decisions are drawn with the next coalesced redraw");
    assert!(!state.tick(1_500));
    assert_eq!(state.decisions[0].task_id, (DECISIONS_KEPT + 9).to_string());
}

#[test]
fn resource_figures_are_coalesced_to_once_a_second() {
    let mut state = State::new();
    state.tick(5_000);
    // The first figures show at once.
    assert_eq!(state.apply(event(5_000, Event::Availability(availability(1)))), Effect::Redraw);
    // Later ones wait until a second has passed since the last shown.
    assert_eq!(state.apply(event(5_100, Event::Availability(availability(2)))), Effect::None);
    assert!(!state.tick(5_500));
    assert_eq!(state.availability().map(|a| a.generation), Some(1));
    assert_eq!(state.apply(event(5_900, Event::Availability(availability(3)))), Effect::None);
    assert!(state.tick(6_000));
    assert_eq!(state.availability().map(|a| a.generation), Some(3), "only the latest is kept");
    assert!(!state.tick(6_500), "nothing new: no redraw");
}

#[test]
fn running_tasks_redraw_each_second_idle_ones_never() {
    let mut state = State::from_snapshot(snapshot(), 0);
    assert!(state.tick(1_000));
    assert!(!state.tick(1_400));
    let idle = pb::WatchSnapshot { tasks: vec![task("1", TaskState::Completed, 1)], ..snapshot() };
    let mut state = State::from_snapshot(idle, 0);
    assert!(!state.tick(1_000));
    assert!(!state.tick(60_000));
}

#[test]
fn lagged_asks_for_a_fresh_snapshot() {
    let mut state = State::from_snapshot(snapshot(), 0);
    assert_eq!(state.apply(event(1, Event::Lagged("12 events dropped".into()))), Effect::Resync);
    assert_eq!(state.link(), &Link::Resyncing);
    let fresh = pb::WatchSnapshot { tasks: vec![task("9", TaskState::Running, 9)], ..snapshot() };
    assert_eq!(state.apply(event(2, Event::Snapshot(fresh))), Effect::Redraw);
    assert_eq!(state.link(), &Link::Live);
    assert_eq!(ids(&state), ["9"]);
    assert_eq!(state.selected_task().map(|t| t.id.as_str()), Some("9"));
}

#[test]
fn scratch_volumes_upsert_by_name() {
    let mut state = State::from_snapshot(snapshot(), 0);
    let vol = |name: &str, s: ScratchState| pb::ScratchVolume {
        name: name.into(),
        state: s as i32,
        ..Default::default()
    };
    state.apply(event(1, Event::ScratchChanged(vol("a", ScratchState::Available))));
    state.apply(event(1, Event::ScratchChanged(vol("b", ScratchState::InUse))));
    state.apply(event(1, Event::ScratchChanged(vol("a", ScratchState::Draining))));
    assert_eq!(state.scratch().len(), 2);
    assert_eq!(state.selected_scratch().map(|v| v.state()), Some(ScratchState::Draining));
    state.focus = Focus::Scratch;
    state.move_selection(1);
    assert_eq!(state.selected_scratch().map(|v| v.name.as_str()), Some("b"));
    state.move_selection(5);
    assert_eq!(state.selected_scratch().map(|v| v.name.as_str()), Some("b"), "clamped");
}

#[test]
fn an_event_without_a_body_changes_nothing() {
    let mut state = State::from_snapshot(snapshot(), 0);
    let before = state.clone();
    assert_eq!(state.apply(pb::WatchEvent { seq: 3, at_unix_ms: 4, event: None }), Effect::None);
    assert_eq!(state, before);
}

#[test]
fn rpc_outcomes_replace_each_other() {
    let mut state = State::new();
    state.set_rpc_result(Err("pause #3: no such task".into()));
    assert_eq!(state.error(), Some("pause #3: no such task"));
    state.set_rpc_result(Ok("resume #3: done".into()));
    assert_eq!(state.error(), None);
    assert_eq!(state.notice.as_deref(), Some("resume #3: done"));
}
