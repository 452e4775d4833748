//! How every view words the engine's figures where two front ends show the
//! same thing (the CLI's `status`/`explain` and the `lardon top`
//! dashboard): a duration, and what a class learned. One wording, so the
//! two views never disagree on the same task.

use std::fmt::Write as _;

use crate::units::format_bytes;

/// Formats a duration in milliseconds: `1h02m`, `3m05s`, `12s`, and to
/// the tenth below ten seconds when it is not whole (`0.4s`, `4.2s`).
/// Minutes and seconds are always two digits after a larger unit, so the
/// reading is never ambiguous (`1h05m` is 65 minutes).
pub fn format_duration_ms(ms: u64) -> String {
    let s = ms / 1000;
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else if ms < 10_000 && !ms.is_multiple_of(1000) {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else {
        format!("{s}s")
    }
}

/// The figures a class learned about a task's memory and batch, as the
/// daemon reports them (each `None` when nothing was learned about it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LearnedPhrase {
    /// Recorded runs behind the figures.
    pub samples: u32,
    /// Learned fixed memory, bytes.
    pub fixed: Option<u64>,
    /// Learned (worst) per-item memory, bytes.
    pub per_item: Option<u64>,
    /// After a kill at the limit: the need is above this many bytes.
    pub lower_bound: Option<u64>,
    /// The adaptive batch target.
    pub batch_target: Option<u64>,
}

impl LearnedPhrase {
    /// True when no figure was learned (whatever the sample count).
    pub fn is_empty(&self) -> bool {
        self.fixed.is_none()
            && self.per_item.is_none()
            && self.lower_bound.is_none()
            && self.batch_target.is_none()
    }

    /// One phrase, the figures in a fixed order then the sample count:
    /// `fixed 1.0 GiB, per item 40.0 MiB, batch target 8 (3 samples)`;
    /// `nothing beyond the estimate (1 sample)` when [`Self::is_empty`].
    pub fn phrase(&self) -> String {
        let mut out = String::new();
        let mut part = |text: std::fmt::Arguments<'_>| {
            if !out.is_empty() {
                out.push_str(", ");
            }
            let _ = out.write_fmt(text);
        };
        if let Some(f) = self.fixed {
            part(format_args!("fixed {}", format_bytes(f)));
        }
        if let Some(p) = self.per_item {
            part(format_args!("per item {}", format_bytes(p)));
        }
        if let Some(b) = self.lower_bound {
            part(format_args!("killed at {} (need is above it)", format_bytes(b)));
        }
        if let Some(t) = self.batch_target {
            part(format_args!("batch target {t}"));
        }
        if out.is_empty() {
            out.push_str("nothing beyond the estimate");
        }
        let _ = write!(out, " ({} sample{})", self.samples, if self.samples == 1 { "" } else { "s" });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_one_way_at_every_scale() {
        assert_eq!(format_duration_ms(400), "0.4s");
        assert_eq!(format_duration_ms(4_200), "4.2s");
        assert_eq!(format_duration_ms(5_000), "5s");
        assert_eq!(format_duration_ms(12_000), "12s");
        assert_eq!(format_duration_ms(42_999), "42s");
        assert_eq!(format_duration_ms(185_000), "3m05s");
        assert_eq!(format_duration_ms(3_720_000), "1h02m");
        assert_eq!(format_duration_ms(3_900_000), "1h05m", "never the ambiguous `1h05`");
    }

    #[test]
    fn learned_figures_are_one_phrase_in_a_fixed_order() {
        let l = LearnedPhrase {
            samples: 3,
            fixed: Some(1 << 30),
            per_item: Some(40 << 20),
            lower_bound: Some(284 << 20),
            batch_target: Some(8),
        };
        assert!(!l.is_empty());
        assert_eq!(
            l.phrase(),
            "fixed 1.0 GiB, per item 40.0 MiB, killed at 284.0 MiB (need is above it), batch target 8 (3 samples)"
        );
        let none = LearnedPhrase { samples: 1, ..LearnedPhrase::default() };
        assert!(none.is_empty());
        assert_eq!(none.phrase(), "nothing beyond the estimate (1 sample)");
    }
}
