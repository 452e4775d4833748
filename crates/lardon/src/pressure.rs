//! The pressure state machine and slow start (docs/DESIGN.md §5): a pure type
//! fed once per host sample.
//!
//! A *signal* is CPU or memory PSI at or above its threshold, any swap-in
//! or swap-out since the previous sample, or (custom policy) MemAvailable
//! at or below the reserve. IO PSI only gates IO-slot work (§4 step 7).
//!
//! # Invariants
//! - counters saturate at their thresholds (2, 3, 3) and never wrap;
//! - slow start is active whenever the level is not GREEN.

use std::fmt;

use crate::snapshot::{Snapshot, SwapCounters};

/// Host pressure level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PressureLevel {
    /// Healthy.
    #[default]
    Green,
    /// One signalled sample, the caution band, or recovering.
    Yellow,
    /// Persistent pressure or the emergency floor: admission waits.
    Red,
}

impl PressureLevel {
    /// `green`, `yellow` or `red`.
    pub fn as_str(self) -> &'static str {
        match self {
            PressureLevel::Green => "green",
            PressureLevel::Yellow => "yellow",
            PressureLevel::Red => "red",
        }
    }
}

impl fmt::Display for PressureLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The memory floors the machine compares `MemAvailable` against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Floors {
    /// At or below: RED at once (0 disables).
    pub(crate) emergency: u64,
    /// Default policy: the caution band's upper edge (non-escalating).
    pub(crate) caution_band: Option<u64>,
    /// Custom policy: at or below the reserve is a signal.
    pub(crate) reserve_signal: Option<u64>,
}

/// PSI figures already compared with the policy's thresholds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct PsiSignal {
    pub(crate) reached: bool,
}

const RED_AFTER: u8 = 2;
const RECOVER_AFTER: u8 = 3;
const DOUBLE_AFTER: u8 = 3;

/// Pressure level, its counters and the slow-start limit.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct PressureMachine {
    level: PressureLevel,
    pressure_streak: u8,
    recovery: u8,
    slow_start: Option<u64>,
    slow_streak: u8,
    swap_baseline: Option<SwapCounters>,
    reason: String,
}

impl PressureMachine {
    pub(crate) fn level(&self) -> PressureLevel {
        self.level
    }

    /// The slow-start batch limit, `None` when inactive.
    pub(crate) fn slow_start(&self) -> Option<u64> {
        self.slow_start
    }

    /// Why the level is what it is (empty when GREEN and never pressed).
    pub(crate) fn reason(&self) -> &str {
        &self.reason
    }

    /// Feeds one host sample. `largest_batch` is the largest `batch_max`
    /// seen so far: slow start ends once its limit reaches it.
    pub(crate) fn observe(&mut self, snap: &Snapshot, psi: PsiSignal, floors: Floors, largest_batch: u64) {
        let swap_changed = match (snap.swap, self.swap_baseline) {
            (Some(now), Some(before)) => now.pages_in > before.pages_in || now.pages_out > before.pages_out,
            _ => false,
        };
        if snap.swap.is_some() {
            self.swap_baseline = snap.swap;
        }
        let available = snap.effective_memory_available();
        let hard = floors.emergency > 0 && available <= floors.emergency;
        let reserve_signal = floors.reserve_signal.is_some_and(|r| available <= r);
        let caution = floors.caution_band.is_some_and(|c| available <= c);
        let signal = psi.reached || swap_changed || reserve_signal;

        if hard {
            self.level = PressureLevel::Red;
            self.pressure_streak = 0;
            self.recovery = 0;
            self.arm_slow_start();
            self.reason =
                format!("MemAvailable {available} B at or below the emergency floor {} B", floors.emergency);
        } else if signal {
            self.recovery = 0;
            self.pressure_streak = (self.pressure_streak + 1).min(RED_AFTER);
            self.arm_slow_start();
            self.level = if self.level == PressureLevel::Red || self.pressure_streak >= RED_AFTER {
                PressureLevel::Red
            } else {
                PressureLevel::Yellow
            };
            self.reason = if psi.reached {
                "PSI at or above its threshold".to_owned()
            } else if swap_changed {
                "swap activity since the previous sample".to_owned()
            } else {
                "MemAvailable at or below the memory reserve".to_owned()
            };
        } else if caution {
            // The band holds the level at YELLOW at most and re-arms slow
            // start, but lets RED recover to YELLOW.
            self.pressure_streak = 0;
            self.arm_slow_start();
            match self.level {
                PressureLevel::Green => {
                    self.level = PressureLevel::Yellow;
                    self.recovery = 0;
                }
                PressureLevel::Yellow => self.recovery = 0,
                PressureLevel::Red => self.recover_from_red(),
            }
            self.reason = format!("MemAvailable {available} B in the caution band");
        } else {
            self.pressure_streak = 0;
            match self.level {
                PressureLevel::Red => self.recover_from_red(),
                PressureLevel::Yellow => {
                    self.arm_slow_start_if_inactive();
                    self.recovery = (self.recovery + 1).min(RECOVER_AFTER);
                    if self.recovery >= RECOVER_AFTER {
                        self.level = PressureLevel::Green;
                        self.recovery = 0;
                        self.slow_streak = 0;
                        self.reason.clear();
                    }
                }
                PressureLevel::Green => self.grow_slow_start(largest_batch),
            }
        }
        debug_assert!(self.level == PressureLevel::Green || self.slow_start.is_some());
        debug_assert!(self.pressure_streak <= RED_AFTER && self.recovery <= RECOVER_AFTER);
    }

    fn recover_from_red(&mut self) {
        self.recovery = (self.recovery + 1).min(RECOVER_AFTER);
        if self.recovery >= RECOVER_AFTER {
            self.level = PressureLevel::Yellow;
            self.recovery = 0;
        }
    }

    fn arm_slow_start(&mut self) {
        self.slow_start = Some(1);
        self.slow_streak = 0;
    }

    fn arm_slow_start_if_inactive(&mut self) {
        if self.slow_start.is_none() {
            self.arm_slow_start();
        }
    }

    fn grow_slow_start(&mut self, largest_batch: u64) {
        let Some(limit) = self.slow_start else { return };
        self.slow_streak = (self.slow_streak + 1).min(DOUBLE_AFTER);
        if self.slow_streak >= DOUBLE_AFTER {
            self.slow_streak = 0;
            let doubled = limit.saturating_mul(2);
            self.slow_start =
                if doubled >= largest_batch || doubled == u64::MAX { None } else { Some(doubled) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::MonoTime;

    const GIB: u64 = 1 << 30;

    fn custom() -> Floors {
        Floors { emergency: GIB, caution_band: None, reserve_signal: Some(2 * GIB) }
    }

    fn default_floors() -> Floors {
        Floors { emergency: 3 * GIB, caution_band: Some(4 * GIB), reserve_signal: None }
    }

    struct Feed {
        m: PressureMachine,
        swap: u64,
        mem: u64,
        floors: Floors,
    }

    impl Feed {
        fn new(floors: Floors) -> Self {
            let mut f = Feed { m: PressureMachine::default(), swap: 0, mem: 16 * GIB, floors };
            f.healthy(); // baseline
            f
        }
        fn sample(&mut self, psi: bool) -> PressureLevel {
            let mut s = Snapshot::healthy(MonoTime(0), self.mem);
            s.swap = Some(SwapCounters { pages_in: 0, pages_out: self.swap });
            self.m.observe(&s, PsiSignal { reached: psi }, self.floors, 8);
            self.m.level()
        }
        fn healthy(&mut self) -> PressureLevel {
            self.sample(false)
        }
        fn swap_out(&mut self) -> PressureLevel {
            self.swap += 1;
            self.sample(false)
        }
    }

    #[test]
    fn cold_start_is_not_slow() {
        let f = Feed::new(custom());
        assert_eq!(f.m.level(), PressureLevel::Green);
        assert_eq!(f.m.slow_start(), None);
    }

    #[test]
    fn first_swap_sample_only_sets_the_baseline() {
        let mut m = PressureMachine::default();
        let mut s = Snapshot::healthy(MonoTime(0), 16 * GIB);
        s.swap = Some(SwapCounters { pages_in: 500, pages_out: 900 });
        m.observe(&s, PsiSignal::default(), custom(), 8);
        assert_eq!(m.level(), PressureLevel::Green);
        // An unknown sample leaves the baseline as is.
        s.swap = None;
        m.observe(&s, PsiSignal::default(), custom(), 8);
        s.swap = Some(SwapCounters { pages_in: 500, pages_out: 900 });
        m.observe(&s, PsiSignal::default(), custom(), 8);
        assert_eq!(m.level(), PressureLevel::Green);
    }

    #[test]
    fn one_signal_yellow_two_consecutive_red() {
        let mut f = Feed::new(custom());
        assert_eq!(f.swap_out(), PressureLevel::Yellow);
        assert_eq!(f.m.slow_start(), Some(1));
        assert_eq!(f.swap_out(), PressureLevel::Red);
    }

    #[test]
    fn non_consecutive_signals_stay_yellow() {
        let mut f = Feed::new(custom());
        assert_eq!(f.swap_out(), PressureLevel::Yellow);
        assert_eq!(f.healthy(), PressureLevel::Yellow);
        assert_eq!(f.swap_out(), PressureLevel::Yellow);
    }

    #[test]
    fn psi_is_a_signal() {
        let mut f = Feed::new(custom());
        assert_eq!(f.sample(true), PressureLevel::Yellow);
        assert_eq!(f.sample(true), PressureLevel::Red);
    }

    #[test]
    fn recovery_three_then_three_then_slow_start_doubles() {
        let mut f = Feed::new(custom());
        f.swap_out();
        f.swap_out();
        assert_eq!(f.healthy(), PressureLevel::Red);
        assert_eq!(f.healthy(), PressureLevel::Red);
        assert_eq!(f.healthy(), PressureLevel::Yellow);
        assert_eq!(f.healthy(), PressureLevel::Yellow);
        assert_eq!(f.healthy(), PressureLevel::Yellow);
        assert_eq!(f.healthy(), PressureLevel::Green);
        assert_eq!(f.m.slow_start(), Some(1));
        for expected in [Some(2), Some(4), None] {
            f.healthy();
            f.healthy();
            assert_ne!(f.m.slow_start(), expected, "must not double before the third sample");
            f.healthy();
            assert_eq!(f.m.slow_start(), expected);
        }
    }

    #[test]
    fn signal_during_recovery_resets_it() {
        let mut f = Feed::new(custom());
        f.swap_out();
        f.swap_out();
        f.healthy();
        f.healthy();
        assert_eq!(f.swap_out(), PressureLevel::Red);
        f.healthy();
        f.healthy();
        assert_eq!(f.healthy(), PressureLevel::Yellow);
    }

    #[test]
    fn emergency_floor_is_red_at_once() {
        let mut f = Feed::new(custom());
        f.mem = GIB;
        assert_eq!(f.healthy(), PressureLevel::Red);
        f.mem = 16 * GIB;
        assert_eq!(f.healthy(), PressureLevel::Red);
    }

    #[test]
    fn custom_policy_reserve_is_a_signal() {
        let mut f = Feed::new(custom());
        f.mem = 2 * GIB;
        assert_eq!(f.healthy(), PressureLevel::Yellow);
        assert_eq!(f.healthy(), PressureLevel::Red);
    }

    #[test]
    fn caution_band_holds_yellow_and_lets_red_recover() {
        let mut f = Feed::new(default_floors());
        f.mem = 3 * GIB + GIB / 2;
        for _ in 0..10 {
            assert_eq!(f.healthy(), PressureLevel::Yellow, "band never escalates to RED");
            assert_eq!(f.m.slow_start(), Some(1));
        }
        f.mem = 16 * GIB;
        f.swap_out();
        assert_eq!(f.swap_out(), PressureLevel::Red);
        f.mem = 3 * GIB + GIB / 2;
        f.healthy();
        f.healthy();
        assert_eq!(f.healthy(), PressureLevel::Yellow, "RED recovers to YELLOW inside the band");
        f.healthy();
        f.healthy();
        assert_eq!(f.healthy(), PressureLevel::Yellow, "but never GREEN inside the band");
    }

    #[test]
    fn counters_saturate() {
        let mut f = Feed::new(custom());
        for _ in 0..1000 {
            f.swap_out();
        }
        assert_eq!(f.m.pressure_streak, RED_AFTER);
        for _ in 0..1000 {
            f.healthy();
        }
        assert_eq!(f.m.level(), PressureLevel::Green);
        assert!(f.m.recovery <= RECOVER_AFTER && f.m.slow_streak <= DOUBLE_AFTER);
    }
}
