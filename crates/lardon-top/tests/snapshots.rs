//! Snapshot tests of the three layouts, with colour and without, through
//! ratatui's `TestBackend` (the buffer is snapshotted as text; the colour
//! variant also asserts a few cells' styles).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fixture;

use lardon_top::{State, Theme, view};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::style::{Color, Modifier};

fn render(state: &State, theme: Theme, width: u16, height: u16) -> Terminal<TestBackend> {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("test backend");
    terminal.draw(|frame| view::draw(frame, state, &theme)).expect("draw");
    terminal
}

/// The first cell whose row contains `needle` at its start.
fn find(buffer: &Buffer, needle: &str) -> (u16, u16) {
    let area = buffer.area;
    for y in 0..area.height {
        let line: String = (0..area.width).map(|x| buffer[(x, y)].symbol().to_owned()).collect();
        if let Some(byte) = line.find(needle) {
            let x = line[..byte].chars().count();
            return (u16::try_from(x).expect("x"), y);
        }
    }
    panic!("{needle:?} not on screen:\n{buffer:?}");
}

#[test]
fn full_layout_colour() {
    let terminal = render(&fixture::state(), Theme::color(), 100, 30);
    insta::assert_snapshot!("full_100x30", terminal.backend());
    let buffer = terminal.backend().buffer();
    let running = buffer[find(buffer, "RUNNING")].style();
    assert_eq!(running.fg, Some(Color::Green));
    assert!(running.add_modifier.contains(Modifier::BOLD));
    let yellow = buffer[find(buffer, "YELLOW ▲")].style();
    assert_eq!(yellow.fg, Some(Color::Yellow));
    assert_eq!(buffer[find(buffer, "FAILED")].style().fg, Some(Color::Red));
    assert_eq!(buffer[find(buffer, "DRAINING")].style().fg, Some(Color::Yellow));
    // The selected task's row is reversed, which needs no colour.
    assert!(buffer[find(buffer, "› 3")].style().add_modifier.contains(Modifier::REVERSED));
}

#[test]
fn full_layout_no_colour() {
    let terminal = render(&fixture::state(), Theme::no_color(), 100, 30);
    insta::assert_snapshot!("full_100x30", terminal.backend());
    let buffer = terminal.backend().buffer();
    for cell in buffer.content() {
        assert_eq!(cell.fg, Color::Reset, "no colour at all: {cell:?}");
        assert_eq!(cell.bg, Color::Reset, "no colour at all: {cell:?}");
    }
    let failed = buffer[find(buffer, "FAILED")].style();
    assert!(failed.add_modifier.contains(Modifier::BOLD), "meaning survives as bold");
}

#[test]
fn compact_layout_colour() {
    let terminal = render(&fixture::state(), Theme::color(), 60, 15);
    insta::assert_snapshot!("compact_60x15", terminal.backend());
    let buffer = terminal.backend().buffer();
    assert_eq!(buffer[find(buffer, "PAUSED")].style().fg, Some(Color::Yellow));
    assert_eq!(buffer[find(buffer, "YELLOW")].style().fg, Some(Color::Yellow));
}

#[test]
fn compact_layout_no_colour() {
    let terminal = render(&fixture::state(), Theme::no_color(), 60, 15);
    insta::assert_snapshot!("compact_60x15", terminal.backend());
    assert!(terminal.backend().buffer().content().iter().all(|c| c.fg == Color::Reset));
}

#[test]
fn too_small_colour() {
    let terminal = render(&fixture::state(), Theme::color(), 59, 14);
    insta::assert_snapshot!("too_small_59x14", terminal.backend());
    let buffer = terminal.backend().buffer();
    assert_eq!(buffer[find(buffer, "terminal too small")].style().fg, Some(Color::Yellow));
}

#[test]
fn too_small_no_colour() {
    let terminal = render(&fixture::state(), Theme::no_color(), 59, 14);
    insta::assert_snapshot!("too_small_59x14", terminal.backend());
}

#[test]
fn layouts_switch_at_the_documented_sizes() {
    use view::Layout;
    assert_eq!(Layout::for_size(100, 30), Layout::Full);
    assert_eq!(Layout::for_size(99, 30), Layout::Compact);
    assert_eq!(Layout::for_size(100, 29), Layout::Compact);
    assert_eq!(Layout::for_size(60, 15), Layout::Compact);
    assert_eq!(Layout::for_size(59, 15), Layout::TooSmall);
    assert_eq!(Layout::for_size(60, 14), Layout::TooSmall);
}

#[test]
fn help_overlay_and_confirmation() {
    use ratatui::crossterm::event::{KeyCode, KeyEvent};
    let mut state = fixture::state();
    lardon_top::update::update(&mut state, KeyEvent::from(KeyCode::Char('?')));
    let terminal = render(&state, Theme::no_color(), 100, 30);
    insta::assert_snapshot!("help_100x30", terminal.backend());
    lardon_top::update::update(&mut state, KeyEvent::from(KeyCode::Esc));
    lardon_top::update::update(&mut state, KeyEvent::from(KeyCode::Char('c')));
    let terminal = render(&state, Theme::no_color(), 60, 15);
    insta::assert_snapshot!("confirm_cancel_60x15", terminal.backend());
}
