//! Memory accounting over virtual time, shared by every strategy.

/// Real and reserved memory over time, with the figures of an [`super::Outcome`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tracker {
    /// Bytes the budget allows (`RAM − reserve`).
    pub budget: u64,
    /// Physical RAM, bytes.
    pub physical: u64,
    /// Real memory in use now.
    pub usage: u64,
    /// Memory reserved now (governed strategies).
    pub reserved: u64,
    /// Largest real usage seen.
    pub peak_usage: u64,
    /// Largest reservation total seen.
    pub peak_reserved: u64,
    /// Virtual ms with real usage above the budget.
    pub over_budget_ms: u64,
    /// Virtual ms with real usage above physical RAM.
    pub over_physical_ms: u64,
    /// Sequence starts that took real usage above physical RAM.
    pub oom_events: u64,
    /// When the figures were last brought up to date.
    pub last: u64,
}

impl Tracker {
    /// A tracker for a host with `physical` bytes and a `budget`.
    pub fn new(physical: u64, budget: u64) -> Self {
        Tracker { budget, physical, ..Tracker::default() }
    }

    /// Accounts the time from the last update to `now` at the current usage.
    pub fn advance(&mut self, now: u64) {
        let dt = now.saturating_sub(self.last);
        if self.usage > self.budget {
            self.over_budget_ms += dt;
        }
        if self.usage > self.physical {
            self.over_physical_ms += dt;
        }
        self.last = self.last.max(now);
    }

    /// A sequence starts using `real` bytes, `reserved` of them reserved.
    pub fn start(&mut self, real: u64, reserved: u64) {
        self.usage = self.usage.saturating_add(real);
        self.reserved = self.reserved.saturating_add(reserved);
        self.peak_usage = self.peak_usage.max(self.usage);
        self.peak_reserved = self.peak_reserved.max(self.reserved);
        if self.usage > self.physical {
            self.oom_events += 1;
        }
    }

    /// A sequence that used `real` bytes and reserved `reserved` ends.
    pub fn end(&mut self, real: u64, reserved: u64) {
        self.usage = self.usage.saturating_sub(real);
        self.reserved = self.reserved.saturating_sub(reserved);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn over_budget_time_and_oom_by_hand() {
        // Physical 10, budget 8. 0–5: usage 6; 5–7: 9 (over budget);
        // 7–10: 12 (over both, one OOM start); 10–: 3.
        let mut t = Tracker::new(10, 8);
        t.start(6, 6);
        t.advance(5);
        t.start(3, 0);
        t.advance(7);
        t.start(3, 0);
        assert_eq!(t.oom_events, 1);
        t.advance(10);
        t.end(6, 6);
        t.end(3, 0);
        t.advance(20);
        assert_eq!((t.over_budget_ms, t.over_physical_ms), (5, 3));
        assert_eq!((t.peak_usage, t.peak_reserved, t.usage, t.reserved), (12, 6, 3, 0));
    }
}
