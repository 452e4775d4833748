//! A latency distribution with nearest-rank quantiles.

use std::time::Duration;

/// Samples of one latency, in the order pushed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Distribution {
    samples: Vec<Duration>,
    sorted: bool,
}

impl Distribution {
    /// Adds one sample.
    pub fn push(&mut self, sample: Duration) {
        self.samples.push(sample);
        self.sorted = false;
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// True when there is no sample.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// The nearest-rank `q` quantile (`q` in `[0, 1]`): the smallest sample
    /// with at least `q × n` samples at or below it; `None` when empty.
    pub fn quantile(&mut self, q: f64) -> Option<Duration> {
        if self.samples.is_empty() {
            return None;
        }
        if !self.sorted {
            self.samples.sort_unstable();
            self.sorted = true;
        }
        let n = self.samples.len();
        let rank = (q.clamp(0.0, 1.0) * n as f64).ceil() as usize;
        self.samples.get(rank.clamp(1, n) - 1).copied()
    }

    /// The largest sample.
    pub fn max(&self) -> Option<Duration> {
        self.samples.iter().max().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_quantiles() {
        let mut d = Distribution::default();
        assert_eq!(d.quantile(0.5), None);
        for ms in (1..=100).rev() {
            d.push(Duration::from_millis(ms));
        }
        assert_eq!(d.len(), 100);
        assert_eq!(d.quantile(0.5), Some(Duration::from_millis(50)));
        assert_eq!(d.quantile(0.99), Some(Duration::from_millis(99)));
        assert_eq!(d.quantile(1.0), Some(Duration::from_millis(100)));
        assert_eq!(d.quantile(0.0), Some(Duration::from_millis(1)));
        assert_eq!(d.max(), Some(Duration::from_millis(100)));
    }
}
