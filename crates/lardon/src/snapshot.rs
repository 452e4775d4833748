//! One sample of host state ([`Snapshot`]) and the [`Probe`] that takes it.
//!
//! Unknown is unknown: every optional source is an `Option`, and the
//! Governor never replaces a missing figure by a guess.

use std::fmt;

use thiserror::Error;

use crate::clock::MonoTime;
use crate::policy::HostProfile;

/// The three load averages of `/proc/loadavg`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LoadAverage {
    /// 1-minute load.
    pub one: f64,
    /// 5-minute load.
    pub five: f64,
    /// 15-minute load.
    pub fifteen: f64,
}

/// PSI `some avg10` figures (0–100), each optional.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Pressure {
    /// `/proc/pressure/cpu`.
    pub cpu: Option<f64>,
    /// `/proc/pressure/memory`.
    pub memory: Option<f64>,
    /// `/proc/pressure/io`.
    pub io: Option<f64>,
}

/// Cumulative swap page counters from `/proc/vmstat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SwapCounters {
    /// `pswpin`.
    pub pages_in: u64,
    /// `pswpout`.
    pub pages_out: u64,
}

/// Figures of our own cgroup, each optional.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CgroupSample {
    /// `memory.max` (v2) or `memory.limit_in_bytes` (v1); `None` = no limit.
    pub memory_limit: Option<u64>,
    /// `memory.current` or `memory.usage_in_bytes`.
    pub memory_usage: Option<u64>,
    /// `cpu.max` quota ÷ period, in thousandths of a CPU.
    pub cpu_quota_millis: Option<u32>,
    /// Number of CPUs in `cpuset.cpus.effective`.
    pub cpuset_cpus: Option<u32>,
}

/// Free memory of one GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuSample {
    /// Device index (as in [`crate::GpuDevice::index`]).
    pub index: u32,
    /// Free bytes, when readable.
    pub free: Option<u64>,
}

/// One sample of host state.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Snapshot {
    /// When it was captured, on the Governor's clock. Two snapshots with the
    /// same capture time are the same host sample.
    pub captured_at: MonoTime,
    /// `MemAvailable`, bytes.
    pub memory_available: u64,
    /// `MemFree`, bytes.
    pub memory_free: u64,
    /// `SwapFree`, bytes.
    pub swap_free: u64,
    /// Load averages.
    pub load: LoadAverage,
    /// PSI figures.
    pub pressure: Pressure,
    /// Swap counters, when `/proc/vmstat` was readable.
    pub swap: Option<SwapCounters>,
    /// Per-GPU free memory.
    pub gpus: Vec<GpuSample>,
    /// Our cgroup's figures, when known.
    pub cgroup: Option<CgroupSample>,
    /// CPU time (user + system) used so far by this process and the
    /// children it reaped, when the probe knows it: what Lardon itself and
    /// its finished tasks added to the host's load. The load gate counts
    /// its rate as Lardon's own, not foreign (docs/DESIGN.md §4 step 7).
    pub own_cpu: Option<std::time::Duration>,
}

impl Snapshot {
    /// A healthy snapshot at `at` with `memory_available` bytes available,
    /// zero load, zero PSI, no swap activity. Handy for tests and demos.
    pub fn healthy(at: MonoTime, memory_available: u64) -> Self {
        Snapshot {
            captured_at: at,
            memory_available,
            memory_free: memory_available,
            swap_free: 0,
            load: LoadAverage::default(),
            pressure: Pressure { cpu: Some(0.0), memory: Some(0.0), io: Some(0.0) },
            swap: Some(SwapCounters::default()),
            gpus: Vec::new(),
            cgroup: None,
            own_cpu: None,
        }
    }

    /// Memory we may count on: `MemAvailable`, lowered to what our cgroup
    /// still allows (`limit − usage`) when both are known.
    pub fn effective_memory_available(&self) -> u64 {
        let cg = self.cgroup.and_then(|c| Some(c.memory_limit?.saturating_sub(c.memory_usage?)));
        cg.map_or(self.memory_available, |room| room.min(self.memory_available))
    }

    /// Checks the figures no host can produce: a load average or a PSI
    /// figure that is negative or not finite (docs/DESIGN.md §5). Admission
    /// waits on such a snapshot, as on a stale one, without feeding it to
    /// the pressure state.
    ///
    /// # Errors
    /// [`SnapshotError::Invalid`] naming the first such field.
    pub fn validate(&self) -> Result<(), SnapshotError> {
        if self.plainly_valid() {
            return Ok(());
        }
        let figures = [
            ("load.one", Some(self.load.one)),
            ("load.five", Some(self.load.five)),
            ("load.fifteen", Some(self.load.fifteen)),
            ("pressure.cpu", self.pressure.cpu),
            ("pressure.memory", self.pressure.memory),
            ("pressure.io", self.pressure.io),
        ];
        for (field, value) in figures {
            if let Some(value) = value
                && !(value.is_finite() && value >= 0.0)
            {
                return Err(SnapshotError::Invalid { field, value });
            }
        }
        Ok(())
    }

    /// Whether every load and PSI figure is plainly valid: true only if
    /// [`Snapshot::validate`] passes (false for −0.0, which is valid, and
    /// for every invalid figure: those take the exact check).
    ///
    /// Admission validates the snapshot on every evaluation, so this is
    /// one integer compare per figure: a non-negative finite f64 is exactly
    /// one whose bits are below +∞'s (sign clear, exponent not all ones).
    /// (`is_finite() && v ≥ 0.0` compiles to a float classification of
    /// about 20 instructions per figure.)
    #[inline]
    pub(crate) fn plainly_valid(&self) -> bool {
        let bits = |v: Option<f64>| v.map_or(0, f64::to_bits);
        let (l, p) = (&self.load, &self.pressure);
        let worst = l.one.to_bits().max(l.five.to_bits()).max(l.fifteen.to_bits());
        let worst = worst.max(bits(p.cpu)).max(bits(p.memory)).max(bits(p.io));
        worst < f64::INFINITY.to_bits()
    }

    /// Free memory of GPU `index`, if known.
    pub fn gpu_free(&self, index: u32) -> Option<u64> {
        self.gpus.iter().find(|g| g.index == index).and_then(|g| g.free)
    }
}

/// Why a snapshot cannot be governed on.
#[derive(Debug, Clone, Copy, PartialEq, Error)]
pub enum SnapshotError {
    /// A load or PSI figure is negative or not finite.
    #[error("{field} is {value}, not a finite figure ≥ 0")]
    Invalid {
        /// The field, e.g. `load.one` or `pressure.memory`.
        field: &'static str,
        /// What it held.
        value: f64,
    },
}

/// Why a probe could not take a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ProbeError {
    /// A mandatory source could not be read.
    #[error("cannot read {source_name}: {message}")]
    Unreadable {
        /// The file or source.
        source_name: String,
        /// What failed.
        message: String,
    },
    /// A mandatory source was malformed.
    #[error("malformed {source_name}: {message}")]
    Malformed {
        /// The file or source.
        source_name: String,
        /// What was wrong.
        message: String,
    },
}

/// Eyes on the host: a static [`HostProfile`] and fresh [`Snapshot`]s.
///
/// Implementations must be cheap enough to call at 4 Hz and must stamp
/// `captured_at` with the same clock the Governor was given.
pub trait Probe: Send + Sync + fmt::Debug {
    /// The host's static description.
    fn profile(&self) -> HostProfile;
    /// A fresh sample.
    ///
    /// # Errors
    /// [`ProbeError`] when a mandatory source cannot be read or parsed.
    fn snapshot(&self) -> Result<Snapshot, ProbeError>;
}
