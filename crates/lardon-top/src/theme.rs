//! Colours and text attributes by meaning.
//!
//! Every meaning has a bold (or dim) attribute as well as a colour, and the
//! views always spell states out as words, so nothing is lost when colour
//! is off ([`Theme::no_color`], `--no-color`, or `NO_COLOR` in the
//! environment).

use ratatui::style::{Color, Modifier, Style};

/// What a piece of text means; the [`Theme`] decides how it looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Semantic {
    /// Plain text.
    Normal,
    /// Good news: running, GREEN, available.
    Healthy,
    /// Needs attention: waiting, paused, YELLOW, draining.
    Warning,
    /// Something went wrong: failed, RED, an RPC error.
    Error,
    /// GPU figures.
    Gpu,
    /// CPU figures.
    Cpu,
    /// Scratch (SSD) figures.
    Ssd,
    /// Secondary text: headers of columns, finished tasks, reserves.
    Dim,
}

/// How meanings are drawn: with colour, or with attributes only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Theme {
    color: bool,
}

impl Theme {
    /// Colours plus attributes.
    pub const fn color() -> Self {
        Self { color: true }
    }

    /// Attributes only (bold, dim, reversed).
    pub const fn no_color() -> Self {
        Self { color: false }
    }

    /// The theme for this run: no colour when `no_color_flag` is set or
    /// when `NO_COLOR` is present and not empty (<https://no-color.org>).
    pub fn from_env(no_color_flag: bool) -> Self {
        let env = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        if no_color_flag || env { Self::no_color() } else { Self::color() }
    }

    /// Whether colours are used.
    pub const fn has_color(&self) -> bool {
        self.color
    }

    /// The style of text with meaning `what`.
    pub fn style(&self, what: Semantic) -> Style {
        let base = match what {
            Semantic::Normal => Style::new(),
            Semantic::Dim => Style::new().add_modifier(Modifier::DIM),
            _ => Style::new().add_modifier(Modifier::BOLD),
        };
        if !self.color {
            return base;
        }
        let fg = match what {
            Semantic::Normal | Semantic::Dim => return base,
            Semantic::Healthy => Color::Green,
            Semantic::Warning => Color::Yellow,
            Semantic::Error => Color::Red,
            Semantic::Gpu => Color::Cyan,
            Semantic::Cpu => Color::Blue,
            Semantic::Ssd => Color::Magenta,
        };
        base.fg(fg)
    }

    /// The selected row: reversed, which needs no colour.
    pub fn selected(&self) -> Style {
        Style::new().add_modifier(Modifier::REVERSED)
    }

    /// Panel titles and column headers.
    pub fn title(&self) -> Style {
        Style::new().add_modifier(Modifier::BOLD)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_color_keeps_attributes_drops_colours() {
        let t = Theme::no_color();
        assert_eq!(t.style(Semantic::Error), Style::new().add_modifier(Modifier::BOLD));
        assert_eq!(t.style(Semantic::Dim), Style::new().add_modifier(Modifier::DIM));
        assert_eq!(t.style(Semantic::Error).fg, None);
        let c = Theme::color();
        assert_eq!(c.style(Semantic::Error).fg, Some(Color::Red));
        assert!(c.style(Semantic::Warning).add_modifier.contains(Modifier::BOLD));
    }
}
