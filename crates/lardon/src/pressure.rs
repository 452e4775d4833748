//! The pressure state machine and the batch target it sets (docs/DESIGN.md
//! §5): a pure type fed once per host sample.
//!
//! A *signal* is memory PSI at or above its threshold, any swap-in or
//! swap-out since the previous sample, or (custom policy) MemAvailable at
//! or below the reserve. CPU PSI is no signal: it is a gate of §4 step 7
//! (busy CPUs say nothing about memory, and a RED host would also shrink
//! every batch). IO PSI only gates IO-slot work.
//!
//! The batch target: entering YELLOW halves it (from the largest batch
//! granted since the last GREEN; with nothing granted since, batch 1),
//! entering RED drops it to 1, and back in GREEN it doubles after every 3
//! healthy samples until it no longer limits. Admission never goes below an
//! estimate's `batch_min`. A YELLOW entered by the caution band alone is
//! marked ([`PressureMachine::caution_band_only`]): admission does not
//! lower a class with a measured run then.
//!
//! # Invariants
//! - counters saturate at their thresholds (2, 3, 3) and never wrap;
//! - the batch target is set whenever the level is not GREEN.

use std::fmt;

use crate::snapshot::{Snapshot, SwapCounters};
use crate::units::format_bytes;

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

/// Memory PSI when it reached its threshold: the figure and the threshold,
/// for the reason.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct PsiSignal {
    pub(crate) memory: Option<(f64, f64)>,
}

const RED_AFTER: u8 = 2;
const RECOVER_AFTER: u8 = 3;
const DOUBLE_AFTER: u8 = 3;

/// Pressure level, its counters and the batch target.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct PressureMachine {
    level: PressureLevel,
    pressure_streak: u8,
    recovery: u8,
    /// The batch limit pressure sets; `None` when it does not limit.
    target: Option<u64>,
    double_streak: u8,
    /// Largest batch granted since the level was last GREEN-entered.
    granted_peak: u64,
    /// The current YELLOW was entered from GREEN by the caution band, and
    /// no signal, floor or RED has come since (a proven class is then not
    /// lowered, docs/DESIGN.md §5).
    band_only: bool,
    swap_baseline: Option<SwapCounters>,
    reason: String,
}

impl PressureMachine {
    pub(crate) fn level(&self) -> PressureLevel {
        self.level
    }

    /// The batch target pressure sets, `None` when it does not limit.
    pub(crate) fn batch_target(&self) -> Option<u64> {
        self.target
    }

    /// Why the level is what it is (empty when GREEN and never pressed).
    pub(crate) fn reason(&self) -> &str {
        &self.reason
    }

    /// Whether the level is YELLOW from the caution band alone: entered
    /// from GREEN by the band, with no memory PSI, swap, reserve or floor
    /// signal and no RED since.
    pub(crate) fn caution_band_only(&self) -> bool {
        self.level == PressureLevel::Yellow && self.band_only
    }

    /// Notes a granted batch: YELLOW halves the largest one since GREEN.
    pub(crate) fn note_grant(&mut self, batch: u64) {
        self.granted_peak = self.granted_peak.max(batch);
    }

    /// Feeds one host sample. `largest_batch` is the largest `batch_max`
    /// seen so far: the target stops limiting once it reaches it.
    pub(crate) fn observe(&mut self, snap: &Snapshot, psi: PsiSignal, floors: Floors, largest_batch: u64) {
        let swap = match (snap.swap, self.swap_baseline) {
            (Some(now), Some(before)) => {
                (now.pages_in.saturating_sub(before.pages_in), now.pages_out.saturating_sub(before.pages_out))
            }
            _ => (0, 0),
        };
        if snap.swap.is_some() {
            self.swap_baseline = snap.swap;
        }
        let available = snap.effective_memory_available();
        let hard = floors.emergency > 0 && available <= floors.emergency;
        let reserve_signal = floors.reserve_signal.filter(|&r| available <= r);
        let caution = floors.caution_band.filter(|&c| available <= c);
        let mut signals = Vec::new();
        if let Some((value, threshold)) = psi.memory {
            signals.push(format!("memory PSI {value:.1} ≥ {threshold}"));
        }
        if swap.0 > 0 {
            signals.push(format!("swap-in +{} pages", swap.0));
        }
        if swap.1 > 0 {
            signals.push(format!("swap-out +{} pages", swap.1));
        }
        if let Some(reserve) = reserve_signal {
            signals.push(format!(
                "MemAvailable {} ≤ memory_reserve {}",
                format_bytes(available),
                format_bytes(reserve)
            ));
        }
        let before = self.level;

        if hard || !signals.is_empty() {
            self.band_only = false;
        }
        if hard {
            self.pressure_streak = 0;
            self.recovery = 0;
            self.enter(PressureLevel::Red);
            self.reason = format!(
                "MemAvailable {} ≤ emergency floor {}",
                format_bytes(available),
                format_bytes(floors.emergency)
            );
        } else if !signals.is_empty() {
            self.recovery = 0;
            self.pressure_streak = (self.pressure_streak + 1).min(RED_AFTER);
            let level = if before == PressureLevel::Red || self.pressure_streak >= RED_AFTER {
                PressureLevel::Red
            } else {
                PressureLevel::Yellow
            };
            self.enter(level);
            self.reason = signals.join(", ");
        } else if let Some(band) = caution {
            // The band holds the level at YELLOW at most (no recovery while
            // in it), but lets RED recover to YELLOW.
            self.pressure_streak = 0;
            match before {
                PressureLevel::Green => {
                    self.recovery = 0;
                    self.enter(PressureLevel::Yellow);
                    self.band_only = true;
                }
                PressureLevel::Yellow => self.recovery = 0,
                PressureLevel::Red => self.recover_from_red(),
            }
            self.reason =
                format!("MemAvailable {} ≤ caution band {}", format_bytes(available), format_bytes(band));
        } else {
            self.pressure_streak = 0;
            match before {
                PressureLevel::Red => self.recover_from_red(),
                PressureLevel::Yellow => {
                    self.recovery = (self.recovery + 1).min(RECOVER_AFTER);
                    if self.recovery >= RECOVER_AFTER {
                        self.enter(PressureLevel::Green);
                        self.reason.clear();
                    }
                }
                PressureLevel::Green => self.grow(largest_batch),
            }
        }
        debug_assert!(self.level == PressureLevel::Green || self.target.is_some());
        debug_assert!(self.pressure_streak <= RED_AFTER && self.recovery <= RECOVER_AFTER);
    }

    /// Moves to `level`, applying what *entering* it does to the target.
    /// Staying at a level changes nothing.
    fn enter(&mut self, level: PressureLevel) {
        if level == self.level {
            return;
        }
        match level {
            PressureLevel::Red => self.target = Some(1),
            PressureLevel::Yellow if self.level == PressureLevel::Green => {
                // Half the largest batch granted since the last GREEN
                // (counted at most at the target then in force). Nothing
                // granted since: nothing to halve, so batch 1 (each
                // estimate's `batch_min` at least), as the original
                // runtime did; never a figure from some other task's
                // `batch_max`, which made one task's batch depend on which
                // task the Governor had seen first.
                self.target = Some((self.granted_peak / 2).max(1));
            }
            // RED recovering to YELLOW keeps the target at 1.
            PressureLevel::Yellow => {}
            PressureLevel::Green => {
                self.granted_peak = 0;
                self.band_only = false;
                self.double_streak = 0;
                self.recovery = 0;
            }
        }
        self.double_streak = 0;
        self.level = level;
    }

    fn recover_from_red(&mut self) {
        self.recovery = (self.recovery + 1).min(RECOVER_AFTER);
        if self.recovery >= RECOVER_AFTER {
            self.recovery = 0;
            self.level = PressureLevel::Yellow;
        }
    }

    fn grow(&mut self, largest_batch: u64) {
        let Some(limit) = self.target else { return };
        self.double_streak = (self.double_streak + 1).min(DOUBLE_AFTER);
        if self.double_streak >= DOUBLE_AFTER {
            self.double_streak = 0;
            let doubled = limit.saturating_mul(2);
            self.target = if doubled >= largest_batch || doubled == u64::MAX { None } else { Some(doubled) };
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
            self.m.observe(&s, PsiSignal { memory: psi.then_some((5.0, 1.0)) }, self.floors, 8);
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
        assert_eq!(f.m.batch_target(), None);
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
        assert_eq!(f.m.batch_target(), Some(1), "nothing granted since GREEN: batch 1");
        assert_eq!(f.swap_out(), PressureLevel::Red);
        assert_eq!(f.m.batch_target(), Some(1));
    }

    #[test]
    fn non_consecutive_signals_stay_yellow() {
        let mut f = Feed::new(custom());
        assert_eq!(f.swap_out(), PressureLevel::Yellow);
        assert_eq!(f.healthy(), PressureLevel::Yellow);
        assert_eq!(f.swap_out(), PressureLevel::Yellow);
    }

    #[test]
    fn memory_psi_is_a_signal() {
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
        assert_eq!(f.m.batch_target(), Some(1));
        for expected in [Some(2), Some(4), None] {
            f.healthy();
            f.healthy();
            assert_ne!(f.m.batch_target(), expected, "must not double before the third sample");
            f.healthy();
            assert_eq!(f.m.batch_target(), expected);
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
        f.m.note_grant(8);
        f.mem = 3 * GIB + GIB / 2;
        for _ in 0..10 {
            assert_eq!(f.healthy(), PressureLevel::Yellow, "band never escalates to RED");
            assert_eq!(f.m.batch_target(), Some(4), "entering the band halved the target once");
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
        assert!(f.m.recovery <= RECOVER_AFTER && f.m.double_streak <= DOUBLE_AFTER);
    }

    #[test]
    fn yellow_halves_the_largest_grant_since_green_and_green_regrows_it() {
        let mut f = Feed::new(custom());
        f.m.note_grant(6);
        f.m.note_grant(2);
        assert_eq!(f.swap_out(), PressureLevel::Yellow);
        assert_eq!(f.m.batch_target(), Some(3));
        assert_eq!(f.healthy(), PressureLevel::Yellow);
        assert_eq!(f.swap_out(), PressureLevel::Yellow, "not consecutive");
        assert_eq!(f.m.batch_target(), Some(3), "staying YELLOW does not halve again");
        for _ in 0..3 {
            f.healthy();
        }
        assert_eq!(f.m.level(), PressureLevel::Green);
        assert_eq!(f.m.batch_target(), Some(3), "GREEN starts from the halved target");
        f.healthy();
        f.healthy();
        f.healthy();
        assert_eq!(f.m.batch_target(), Some(6));
        f.healthy();
        f.healthy();
        f.healthy();
        assert_eq!(f.m.batch_target(), None, "12 ≥ the largest batch: no longer limits");
        // The peak restarts at GREEN: the next episode halves what was granted since.
        f.m.note_grant(4);
        f.swap_out();
        assert_eq!(f.m.batch_target(), Some(2));
    }

    #[test]
    fn entering_yellow_with_nothing_granted_since_green_gives_batch_1() {
        // Batches of up to 8 were seen (`Feed` passes 8), none granted:
        // nothing to halve, whoever was seen first.
        let mut f = Feed::new(custom());
        assert_eq!(f.swap_out(), PressureLevel::Yellow);
        assert_eq!(f.m.batch_target(), Some(1));
        let mut f = Feed::new(default_floors());
        f.mem = 3 * GIB + GIB / 2;
        assert_eq!(f.healthy(), PressureLevel::Yellow);
        assert_eq!(f.m.batch_target(), Some(1), "the caution band likewise");
        // Slow start in force and nothing granted since GREEN: still 1.
        let mut f = Feed::new(custom());
        f.m.note_grant(6);
        f.swap_out();
        for _ in 0..3 {
            f.healthy();
        }
        assert_eq!((f.m.level(), f.m.batch_target()), (PressureLevel::Green, Some(3)), "{:?}", f.m);
        f.swap_out();
        assert_eq!(f.m.batch_target(), Some(1));
    }

    #[test]
    fn only_a_yellow_entered_by_the_caution_band_alone_is_marked_as_such() {
        let band = 3 * GIB + GIB / 2;
        let mut f = Feed::new(default_floors());
        assert!(!f.m.caution_band_only(), "GREEN");
        f.mem = band;
        f.healthy();
        assert!(f.m.caution_band_only(), "entered from GREEN by the band");
        f.healthy();
        assert!(f.m.caution_band_only(), "staying in the band");
        // A signal inside the band ends it, even once the signal is gone.
        assert_eq!(f.swap_out(), PressureLevel::Yellow);
        assert!(!f.m.caution_band_only());
        assert_eq!(f.healthy(), PressureLevel::Yellow);
        assert!(!f.m.caution_band_only(), "the band alone does not re-mark a signalled YELLOW");
        // Out of the band to GREEN, then into it again: marked again.
        f.mem = 16 * GIB;
        for _ in 0..3 {
            f.healthy();
        }
        assert_eq!(f.m.level(), PressureLevel::Green);
        f.mem = band;
        f.healthy();
        assert!(f.m.caution_band_only());
        // YELLOW from a signal, then the band: not marked.
        let mut f = Feed::new(default_floors());
        f.swap_out();
        f.mem = band;
        assert_eq!(f.healthy(), PressureLevel::Yellow);
        assert!(!f.m.caution_band_only());
        // RED recovering to YELLOW inside the band: not marked.
        let mut f = Feed::new(default_floors());
        f.swap_out();
        assert_eq!(f.swap_out(), PressureLevel::Red);
        f.mem = band;
        for _ in 0..3 {
            f.healthy();
        }
        assert_eq!(f.m.level(), PressureLevel::Yellow);
        assert!(!f.m.caution_band_only());
    }

    #[test]
    fn every_reason_names_its_signal_and_value() {
        let mut f = Feed::new(custom());
        f.sample(true);
        assert_eq!(f.m.reason(), "memory PSI 5.0 ≥ 1");
        f.swap += 120;
        f.healthy();
        assert_eq!(f.m.reason(), "swap-out +120 pages");
        let mut f = Feed::new(custom());
        f.mem = 2 * GIB;
        f.healthy();
        assert_eq!(f.m.reason(), "MemAvailable 2.0 GiB ≤ memory_reserve 2.0 GiB");
        f.mem = GIB / 2;
        f.healthy();
        assert_eq!(f.m.reason(), "MemAvailable 512.0 MiB ≤ emergency floor 1.0 GiB");
        let mut f = Feed::new(default_floors());
        f.mem = 3 * GIB + GIB / 2;
        f.healthy();
        assert_eq!(f.m.reason(), "MemAvailable 3.5 GiB ≤ caution band 4.0 GiB");
    }
}
