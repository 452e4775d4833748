//! Monotonic time, injectable: [`Clock`], the real [`SystemClock`] and the
//! test [`FakeClock`].
//!
//! All engine times are [`MonoTime`]: nanoseconds on one monotonic time line
//! per process. Probes stamp snapshots with the same clock the Governor
//! compares them against, so freshness is exact to the nanosecond.

use std::fmt;
use std::ops::{Add, Sub};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A point on the process's monotonic time line, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct MonoTime(pub u64);

impl MonoTime {
    /// Nanoseconds since the time line's origin.
    pub fn as_nanos(self) -> u64 {
        self.0
    }

    /// `self − earlier`, or `None` when `earlier` is in the future.
    pub fn checked_since(self, earlier: MonoTime) -> Option<Duration> {
        self.0.checked_sub(earlier.0).map(Duration::from_nanos)
    }

    /// `self − earlier`, zero when `earlier` is later.
    pub fn saturating_since(self, earlier: MonoTime) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for MonoTime {
    type Output = MonoTime;
    fn add(self, rhs: Duration) -> MonoTime {
        MonoTime(self.0.saturating_add(u64::try_from(rhs.as_nanos()).unwrap_or(u64::MAX)))
    }
}

impl Sub<Duration> for MonoTime {
    type Output = MonoTime;
    fn sub(self, rhs: Duration) -> MonoTime {
        MonoTime(self.0.saturating_sub(u64::try_from(rhs.as_nanos()).unwrap_or(u64::MAX)))
    }
}

impl fmt::Display for MonoTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.3}s", self.0 as f64 / 1e9)
    }
}

/// A source of monotonic time.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current time; never goes backwards.
    fn now(&self) -> MonoTime;
}

/// The real monotonic clock (`Instant`), shared by every probe in the
/// process so their stamps are comparable.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

impl Clock for SystemClock {
    fn now(&self) -> MonoTime {
        MonoTime(u64::try_from(origin().elapsed().as_nanos()).unwrap_or(u64::MAX))
    }
}

/// A clock that moves only when told to, for deterministic tests.
#[derive(Debug, Default)]
pub struct FakeClock {
    nanos: AtomicU64,
}

impl FakeClock {
    /// A clock reading `start`.
    pub fn new(start: MonoTime) -> Self {
        FakeClock { nanos: AtomicU64::new(start.0) }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        self.nanos.fetch_add(by, Ordering::SeqCst);
    }

    /// Sets the clock to `to` (tests may also move it backwards, which a
    /// real clock never does, to check future-snapshot handling).
    pub fn set(&self, to: MonoTime) {
        self.nanos.store(to.0, Ordering::SeqCst);
    }
}

impl Clock for FakeClock {
    fn now(&self) -> MonoTime {
        MonoTime(self.nanos.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_clock_is_monotonic() {
        let a = SystemClock.now();
        let b = SystemClock.now();
        assert!(b >= a);
    }

    #[test]
    fn fake_clock_moves_only_when_told() {
        let c = FakeClock::new(MonoTime(5));
        assert_eq!(c.now(), MonoTime(5));
        c.advance(Duration::from_nanos(10));
        assert_eq!(c.now(), MonoTime(15));
        assert_eq!(c.now().checked_since(MonoTime(20)), None);
        assert_eq!(c.now().saturating_since(MonoTime(5)), Duration::from_nanos(10));
    }
}
