use lardon_proto::pb::{self, ScratchState, TaskState};
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use super::*;

fn key(code: KeyCode) -> KeyEvent {
    KeyEvent::from(code)
}

fn state_with(tasks: &[(&str, TaskState)], volumes: &[(&str, ScratchState)]) -> State {
    let snapshot = pb::WatchSnapshot {
        tasks: tasks
            .iter()
            .enumerate()
            .map(|(i, (id, s))| pb::Task {
                id: (*id).into(),
                state: *s as i32,
                created_unix_ms: i64::try_from(i).unwrap_or(0),
                spec: Some(pb::TaskSpec { name: format!("task-{id}"), ..Default::default() }),
                ..Default::default()
            })
            .collect(),
        availability: None,
        recent_decisions: vec![],
        scratch: volumes
            .iter()
            .map(|(n, s)| pb::ScratchVolume { name: (*n).into(), state: *s as i32, ..Default::default() })
            .collect(),
    };
    State::from_snapshot(snapshot, 0)
}

#[test]
fn quit_keys() {
    let mut state = State::new();
    assert_eq!(update(&mut state, key(KeyCode::Char('q'))), Action::Quit);
    assert_eq!(update(&mut state, key(KeyCode::Esc)), Action::Quit);
    let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
    assert_eq!(update(&mut state, ctrl_c), Action::Quit);
}

#[test]
fn releases_are_ignored() {
    let mut state = State::new();
    let mut release = key(KeyCode::Char('q'));
    release.kind = KeyEventKind::Release;
    assert_eq!(update(&mut state, release), Action::None);
}

#[test]
fn arrows_move_the_selection_pause_resume_act_on_it() {
    let mut state = state_with(&[("1", TaskState::Running), ("2", TaskState::Paused)], &[]);
    assert_eq!(update(&mut state, key(KeyCode::Char('p'))), Action::Request(Request::Pause("1".into())));
    assert_eq!(update(&mut state, key(KeyCode::Down)), Action::Redraw);
    assert_eq!(update(&mut state, key(KeyCode::Char('r'))), Action::Request(Request::Resume("2".into())));
    // Pausing a paused task is refused with a message, not sent.
    assert_eq!(update(&mut state, key(KeyCode::Char('p'))), Action::Redraw);
    assert!(state.error().is_some_and(|e| e.contains("not possible")));
    assert_eq!(update(&mut state, key(KeyCode::Up)), Action::Redraw);
    assert_eq!(state.selected_task().map(|t| t.id.as_str()), Some("1"));
    assert_eq!(update(&mut state, key(KeyCode::Up)), Action::Redraw, "clamped at the top");
    assert_eq!(state.selected_task().map(|t| t.id.as_str()), Some("1"));
}

#[test]
fn cancel_asks_first() {
    let mut state = state_with(&[("7", TaskState::Running)], &[]);
    assert_eq!(update(&mut state, key(KeyCode::Char('c'))), Action::Redraw);
    assert_eq!(state.confirmation(), Some(&Confirm::Cancel { id: "7".into(), name: "task-7".into() }));
    assert_eq!(keys_now(&state), [Key::Yes, Key::No]);
    // Other keys do nothing while the question is open (q included).
    assert_eq!(update(&mut state, key(KeyCode::Char('p'))), Action::None);
    assert_eq!(update(&mut state, key(KeyCode::Char('n'))), Action::Redraw);
    assert_eq!(state.confirmation(), None);
    update(&mut state, key(KeyCode::Char('c')));
    assert_eq!(update(&mut state, key(KeyCode::Char('y'))), Action::Request(Request::Cancel("7".into())));
    assert_eq!(state.confirmation(), None);
}

#[test]
fn ended_tasks_offer_no_task_keys() {
    let state = state_with(&[("1", TaskState::Failed), ("2", TaskState::Completed)], &[]);
    assert_eq!(keys_now(&state), [Key::Select, Key::Help, Key::Quit]);
    let mut state = state;
    assert_eq!(update(&mut state, key(KeyCode::Char('c'))), Action::Redraw);
    assert_eq!(state.confirmation(), None);
}

#[test]
fn footer_keys_follow_the_selection() {
    let state = state_with(&[("1", TaskState::Pending)], &[]);
    assert_eq!(keys_now(&state), [Key::Pause, Key::Cancel, Key::Help, Key::Quit]);
    let state = state_with(&[("1", TaskState::Paused)], &[("ssd", ScratchState::Draining)]);
    assert_eq!(
        keys_now(&state),
        [Key::Resume, Key::Cancel, Key::CancelDrain, Key::Focus, Key::Help, Key::Quit]
    );
}

#[test]
fn drain_acts_only_on_what_the_volume_allows() {
    let mut state = state_with(
        &[],
        &[("a", ScratchState::InUse), ("b", ScratchState::Draining), ("c", ScratchState::Absent)],
    );
    assert_eq!(update(&mut state, key(KeyCode::Char('d'))), Action::Request(Request::Drain("a".into())));
    assert_eq!(update(&mut state, key(KeyCode::Tab)), Action::Redraw);
    assert_eq!(state.focus(), Focus::Scratch);
    update(&mut state, key(KeyCode::Down));
    assert_eq!(
        update(&mut state, key(KeyCode::Char('d'))),
        Action::Request(Request::CancelDrain("b".into()))
    );
    update(&mut state, key(KeyCode::Down));
    assert_eq!(update(&mut state, key(KeyCode::Char('d'))), Action::Redraw);
    assert!(state.error().is_some_and(|e| e.contains("no drain action")));
    assert_eq!(scratch_action(ScratchState::SafeToUnplug), Some(Key::CancelDrain));
    assert_eq!(scratch_action(ScratchState::Error), None);
}

#[test]
fn help_opens_and_closes() {
    let mut state = State::new();
    assert_eq!(update(&mut state, key(KeyCode::Char('?'))), Action::Redraw);
    assert!(state.help_open());
    assert_eq!(keys_now(&state), [Key::Close, Key::Quit]);
    assert_eq!(update(&mut state, key(KeyCode::Char('p'))), Action::None);
    assert_eq!(update(&mut state, key(KeyCode::Esc)), Action::Redraw);
    assert!(!state.help_open());
}

#[test]
fn tab_needs_volumes() {
    let mut state = state_with(&[("1", TaskState::Running)], &[]);
    assert_eq!(update(&mut state, key(KeyCode::Tab)), Action::Redraw);
    assert_eq!(state.focus(), Focus::Tasks, "no volumes: focus stays");
    assert!(state.error().is_some());
}
