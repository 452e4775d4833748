//! The host's static description ([`HostProfile`]) and the rules the
//! Governor applies to it ([`HostPolicy`]), with the defaults of docs/DESIGN.md §3.

use thiserror::Error;

use crate::units::format_bytes;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// Bounds of the default memory reserve (see [`HostPolicy::default_for`]).
const RESERVE_MIN: u64 = 512 * MIB;
const RESERVE_MAX: u64 = 4 * GIB;
/// The default CPU reserve never keeps more than this many logical CPUs.
const CPU_RESERVE_MAX: u32 = 4;

/// One GPU as detected at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuDevice {
    /// Index used in contracts and `LARDON_GPU_DEVICES`.
    pub index: u32,
    /// Human name ("NVIDIA RTX 4090", "card0").
    pub name: String,
    /// Dedicated memory, when it could be read.
    pub vram_total: Option<u64>,
    /// Unified memory: GPU bytes are charged against host RAM.
    pub unified: bool,
}

impl GpuDevice {
    /// Applies the unified-memory rule of docs/DESIGN.md §3: VRAM ≤ 2 GiB and
    /// ≤ RAM/8, or GTT ≥ RAM/4 and VRAM ≤ GTT/2, or VRAM unreadable.
    pub fn is_unified(vram_total: Option<u64>, gtt_total: Option<u64>, host_ram: u64) -> bool {
        let Some(vram) = vram_total else { return true };
        if vram <= 2 * GIB && vram <= host_ram / 8 {
            return true;
        }
        matches!(gtt_total, Some(gtt) if gtt >= host_ram / 4 && vram <= gtt / 2)
    }
}

/// What the host is, as far as budgets go. Read once at start-up by the
/// probe; the dynamic part lives in each [`crate::Snapshot`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostProfile {
    /// Memory governed, bytes: physical RAM, or the memory limit of the
    /// probing process's cgroup (the smallest over its ancestors) when that
    /// is smaller — inside a 2 GiB Slurm job the host is 2 GiB.
    pub total_memory: u64,
    /// Logical CPUs online.
    pub logical_cpus: u32,
    /// Logical CPUs in our affinity mask (equal to `logical_cpus` when
    /// unrestricted). CPUs outside it count towards the CPU reserve.
    pub allowed_cpus: u32,
    /// GPUs, in index order.
    pub gpus: Vec<GpuDevice>,
}

impl HostProfile {
    /// A host with `total_memory` bytes and `cpus` CPUs, no GPU.
    pub fn new(total_memory: u64, cpus: u32) -> Self {
        HostProfile { total_memory, logical_cpus: cpus, allowed_cpus: cpus, gpus: Vec::new() }
    }

    /// Adds a GPU (builder style).
    #[must_use]
    pub fn with_gpu(mut self, vram_total: Option<u64>, unified: bool) -> Self {
        let index = u32::try_from(self.gpus.len()).unwrap_or(u32::MAX);
        self.gpus.push(GpuDevice { index, name: format!("gpu{index}"), vram_total, unified });
        self
    }

    /// True when every GPU is unified (GPU bytes fold into host RAM).
    pub fn gpus_unified(&self) -> bool {
        !self.gpus.is_empty() && self.gpus.iter().all(|g| g.unified)
    }
}

/// Why a [`HostPolicy`] was refused, naming the field.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum PolicyError {
    /// The memory reserve must be below total RAM.
    #[error("memory_reserve ({reserve} B) must be below total RAM ({total} B)")]
    MemoryReserve {
        /// The reserve asked for.
        reserve: u64,
        /// Total RAM.
        total: u64,
    },
    /// The emergency floor cannot exceed the reserve.
    #[error(
        "emergency_floor ({}) must not exceed memory_reserve ({}): lower emergency_floor (0 disables it)",
        format_bytes(*floor),
        format_bytes(*reserve)
    )]
    EmergencyFloor {
        /// The floor asked for.
        floor: u64,
        /// The memory reserve.
        reserve: u64,
    },
    /// The caution band must lie between the reserve and total RAM.
    #[error(
        "memory_caution ({}) must lie between memory_reserve ({}) and total RAM ({}): set memory_caution within that range, or memory_caution=none for a custom policy",
        format_bytes(*caution),
        format_bytes(*reserve),
        format_bytes(*total)
    )]
    Caution {
        /// The band's upper edge asked for.
        caution: u64,
        /// The memory reserve.
        reserve: u64,
        /// Total RAM.
        total: u64,
    },
    /// The CPU reserve must leave at least one CPU.
    #[error("cpu_reserve ({reserve}) must be below the logical CPU count ({logical})")]
    CpuReserve {
        /// The reserve asked for.
        reserve: u32,
        /// Logical CPUs.
        logical: u32,
    },
    /// A load ratio must be a finite number above 0 (`None` turns the gate off).
    #[error("max_load_ratio must be a finite number above 0 (or `off`), got {0}")]
    LoadRatio(f64),
    /// A PSI threshold outside [0, 100].
    #[error("{0} must be within 0..=100")]
    Psi(&'static str),
    /// At least one IO slot.
    #[error("io_slots must be at least 1")]
    IoSlots,
    /// At least one slot per GPU when GPUs exist.
    #[error("gpu_slots must be at least 1 when the host has a GPU")]
    GpuSlots,
    /// One GPU reserve per GPU, each below its VRAM.
    #[error("gpu_memory_reserve for GPU {0} must be below its VRAM")]
    GpuReserve(u32),
    /// `max_running` of zero would never run anything.
    #[error("max_running must be at least 1 when set")]
    MaxRunning,
    /// The new budgets would not cover the reservations already granted.
    #[error("the new policy no longer covers current reservations: {0}")]
    DoesNotCover(String),
}

/// The rules the Governor enforces on one host.
#[derive(Debug, Clone, PartialEq)]
pub struct HostPolicy {
    /// Memory never handed out, in bytes.
    pub memory_reserve: u64,
    /// MemAvailable at or below this is RED at once (0 disables).
    pub emergency_floor: u64,
    /// Default-policy caution band: MemAvailable at or below this (and
    /// above the reserve) holds pressure at YELLOW at most and re-arms slow
    /// start, but never reduces capacity. `None` is a custom policy, where
    /// MemAvailable at or below `memory_reserve` is a pressure signal.
    pub memory_caution: Option<u64>,
    /// Logical CPUs kept for the rest of the host.
    pub cpu_reserve: u32,
    /// Per-GPU memory kept back, in bytes, indexed like the profile's GPUs.
    pub gpu_memory_reserve: Vec<u64>,
    /// Admission waits while the *foreign* load (the 1-minute load minus
    /// Lardon's own share of it) is at or above this ratio × the compute
    /// pool. Values above 1 are allowed (a host whose other work may
    /// oversubscribe it); `None` turns the load gate off.
    pub max_load_ratio: Option<f64>,
    /// CPU PSI `some avg10` at or above which admission waits.
    pub psi_cpu: f64,
    /// Memory PSI `some avg10` at or above which admission waits.
    pub psi_memory: f64,
    /// IO PSI `some avg10` at or above which IO-slot work waits.
    pub psi_io: f64,
    /// Concurrent IO-heavy tasks.
    pub io_slots: u32,
    /// Concurrent tasks per GPU.
    pub gpu_slots: u32,
    /// Optional cap on concurrently running tasks (1 = a single worker).
    pub max_running: Option<u32>,
}

impl HostPolicy {
    /// The defaults for `profile` (docs/DESIGN.md §3), scaled to the machine.
    ///
    /// **Memory reserve** = total RAM / 16, kept within 512 MiB – 4 GiB, and
    /// at most total / 4 (so a 1 GiB board still has three quarters to
    /// govern). Why this rule: admission already subtracts the reserve from
    /// `MemAvailable`, which the kernel computes net of its own watermarks
    /// and of what other programs hold, so the reserve only has to absorb
    /// what other programs may *grab* between two samples and the error of
    /// running tasks' estimates. That grows with the machine, but not
    /// linearly: 512 MiB covers a desktop session's bursts on an 8 GiB
    /// laptop (a 1 GiB task still runs with a browser open and 3.5 GiB
    /// available), 1 GiB on 16 GiB, and from 64 GiB on 4 GiB is plenty
    /// (a 512 GiB server does not keep 128 GiB idle, as a fixed fraction
    /// would). Examples: 2 GiB → 512 MiB, 8 GiB → 512 MiB, 16 GiB → 1 GiB,
    /// 32 GiB → 2 GiB, 64 GiB and more → 4 GiB.
    ///
    /// **Emergency floor** = the reserve: once other programs have eaten
    /// into it, the host is RED at once.
    ///
    /// **Caution band** = 1.5 × the reserve (at most total RAM): below it
    /// pressure is held at YELLOW (batches halved) before the reserve is
    /// reached. Setting `memory_reserve` later moves the floor and the band
    /// with it ([`HostPolicy::set_memory_reserve`]).
    ///
    /// **CPU reserve** = logical CPUs / 8 (rounded down), at most 4: 0 below
    /// 8 CPUs, 1 on 8, 2 on 16, 4 from 32 on. Why this rule: the reserve is
    /// for the rest of the host, not a cage for Lardon's tasks (they are
    /// pinned to the CPUs outside it). On a small machine a whole CPU kept
    /// idle is a large share (the old rule, n − 1 up to 4 CPUs, pinned a
    /// 2-CPU laptop's every task to one CPU while the other stood idle),
    /// and the load gate already gives CPUs back to others as their load
    /// appears: admission waits while the *foreign* load reaches
    /// `max_load_ratio` × the compute pool, so nothing new starts until it
    /// falls. On a large machine a few whole cores kept for interactive
    /// work and the daemon cost little and are the reserve's purpose.
    /// GPU memory reserve: VRAM / 8 where VRAM is known. Load gate: foreign
    /// load at 0.9 × the compute pool. PSI thresholds (some avg10): CPU 20,
    /// memory 1, IO 80. One IO slot, one slot per GPU, no running cap.
    /// [`HostPolicy::explain_defaults`] states these rules with `profile`'s
    /// figures.
    ///
    /// # Examples
    /// ```
    /// use lardon::{HostPolicy, HostProfile};
    /// let p = HostPolicy::default_for(&HostProfile::new(16 << 30, 16));
    /// assert_eq!(p.memory_reserve, 1 << 30);
    /// assert_eq!(p.emergency_floor, 1 << 30);
    /// assert_eq!(p.memory_caution, Some(3 << 29));
    /// assert_eq!(p.cpu_reserve, 2);
    /// ```
    pub fn default_for(profile: &HostProfile) -> Self {
        let total = profile.total_memory;
        let memory_reserve = Self::default_memory_reserve(total);
        let n = profile.logical_cpus;
        let cpu_reserve = Self::default_cpu_reserve(n);
        HostPolicy {
            memory_reserve,
            emergency_floor: memory_reserve,
            memory_caution: Some(Self::default_caution(memory_reserve, total)),
            cpu_reserve,
            gpu_memory_reserve: profile.gpus.iter().map(|g| g.vram_total.map_or(0, |v| v / 8)).collect(),
            max_load_ratio: Some(0.90),
            psi_cpu: 20.0,
            psi_memory: 1.0,
            psi_io: 80.0,
            io_slots: 1,
            gpu_slots: 1,
            max_running: None,
        }
    }

    /// The default CPU reserve for `logical` CPUs (see
    /// [`HostPolicy::default_for`]): `logical / 8`, at most 4, always below
    /// `logical`.
    pub fn default_cpu_reserve(logical: u32) -> u32 {
        (logical / 8).min(CPU_RESERVE_MAX).min(logical.saturating_sub(1))
    }

    /// The default memory reserve for `total` bytes of RAM (see
    /// [`HostPolicy::default_for`]); at least 1 byte.
    pub fn default_memory_reserve(total: u64) -> u64 {
        (total / 16).clamp(RESERVE_MIN, RESERVE_MAX).min(total / 4).max(1)
    }

    /// The default caution band's upper edge for `reserve`: 1.5 × the
    /// reserve, at most `total`.
    fn default_caution(reserve: u64, total: u64) -> u64 {
        reserve.saturating_add(reserve / 2).min(total).max(reserve)
    }

    /// Sets the memory reserve and moves what hangs on it: an emergency
    /// floor equal to the old reserve follows it, and the caution band
    /// keeps its width above it. Without this, raising the reserve above
    /// the band's edge would be refused until the band was moved by hand.
    /// An explicitly different floor stays as set, and a custom policy (no
    /// band) stays custom. [`HostPolicy::validate`] still refuses a band
    /// above total RAM, and its error names the fix.
    pub fn set_memory_reserve(&mut self, reserve: u64) {
        let old = self.memory_reserve;
        if self.emergency_floor == old {
            self.emergency_floor = reserve;
        }
        if let Some(band) = self.memory_caution {
            let width = band.saturating_sub(old);
            self.memory_caution = Some(reserve.saturating_add(width));
        }
        self.memory_reserve = reserve;
    }

    /// The default rules with `profile`'s figures, one per derived field
    /// (keyed by field name), for `lardon policy` to show where a default
    /// came from.
    pub fn explain_defaults(profile: &HostProfile) -> Vec<(&'static str, String)> {
        let d = Self::default_for(profile);
        let total = profile.total_memory;
        let n = profile.logical_cpus;
        vec![
            (
                "memory_reserve",
                format!(
                    "total/16 within {}–{}, at most total/4: {} of {}",
                    format_bytes(RESERVE_MIN),
                    format_bytes(RESERVE_MAX),
                    format_bytes(d.memory_reserve),
                    format_bytes(total)
                ),
            ),
            ("emergency_floor", format!("same as memory_reserve: {}", format_bytes(d.emergency_floor))),
            (
                "memory_caution",
                format!(
                    "1.5 × memory_reserve, at most total RAM: {}",
                    format_bytes(d.memory_caution.unwrap_or(0))
                ),
            ),
            (
                "cpu_reserve",
                format!(
                    "logical CPUs / 8, at most {CPU_RESERVE_MAX} (0 below 8 CPUs: the load gate gives CPUs back as others' load appears): {} of {n}",
                    d.cpu_reserve
                ),
            ),
            (
                "max_load_ratio",
                format!("0.9 × the {}-CPU compute pool, foreign load only", d.compute_cpus(profile)),
            ),
        ]
    }

    /// Checks the policy against `profile` (docs/DESIGN.md §3: every reserve
    /// below its total).
    ///
    /// # Errors
    /// The first [`PolicyError`] found.
    pub fn validate(&self, profile: &HostProfile) -> Result<(), PolicyError> {
        if self.memory_reserve >= profile.total_memory {
            return Err(PolicyError::MemoryReserve {
                reserve: self.memory_reserve,
                total: profile.total_memory,
            });
        }
        if self.emergency_floor > self.memory_reserve {
            return Err(PolicyError::EmergencyFloor {
                floor: self.emergency_floor,
                reserve: self.memory_reserve,
            });
        }
        if let Some(c) = self.memory_caution
            && (c < self.memory_reserve || c > profile.total_memory)
        {
            return Err(PolicyError::Caution {
                caution: c,
                reserve: self.memory_reserve,
                total: profile.total_memory,
            });
        }
        if self.cpu_reserve >= profile.logical_cpus {
            return Err(PolicyError::CpuReserve { reserve: self.cpu_reserve, logical: profile.logical_cpus });
        }
        if let Some(ratio) = self.max_load_ratio
            && !(ratio.is_finite() && ratio > 0.0)
        {
            return Err(PolicyError::LoadRatio(ratio));
        }
        for (name, v) in [("psi_cpu", self.psi_cpu), ("psi_memory", self.psi_memory), ("psi_io", self.psi_io)]
        {
            if !(0.0..=100.0).contains(&v) {
                return Err(PolicyError::Psi(name));
            }
        }
        if self.io_slots == 0 {
            return Err(PolicyError::IoSlots);
        }
        if !profile.gpus.is_empty() && self.gpu_slots == 0 {
            return Err(PolicyError::GpuSlots);
        }
        for gpu in &profile.gpus {
            let reserve = self.gpu_memory_reserve.get(gpu.index as usize).copied().unwrap_or(0);
            if let Some(vram) = gpu.vram_total
                && !gpu.unified
                && reserve >= vram
            {
                return Err(PolicyError::GpuReserve(gpu.index));
            }
        }
        if self.max_running == Some(0) {
            return Err(PolicyError::MaxRunning);
        }
        Ok(())
    }

    /// The compute pool in whole CPUs: logical CPUs minus the reserve,
    /// where CPUs outside our affinity mask already count towards it.
    pub fn compute_cpus(&self, profile: &HostProfile) -> u32 {
        let by_reserve = profile.logical_cpus.saturating_sub(self.cpu_reserve);
        by_reserve.min(profile.allowed_cpus).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_reserve_defaults() {
        let big = HostPolicy::default_for(&HostProfile::new(16 * GIB, 16));
        assert_eq!(big.memory_reserve, GIB);
        assert_eq!(big.emergency_floor, GIB);
        assert_eq!(big.memory_caution, Some(GIB + GIB / 2));
        let small = HostPolicy::default_for(&HostProfile::new(2 * GIB, 2));
        assert_eq!(small.memory_reserve, GIB / 2);
        let exactly3 = HostPolicy::default_for(&HostProfile::new(3 * GIB, 2));
        assert_eq!(exactly3.memory_reserve, GIB / 2);
        for p in [big, small, exactly3] {
            assert_eq!(p.max_load_ratio, Some(0.90));
            assert_eq!((p.psi_cpu, p.psi_memory, p.psi_io), (20.0, 1.0, 80.0));
            assert_eq!((p.io_slots, p.gpu_slots), (1, 1));
        }
    }

    #[test]
    fn cpu_reserve_defaults() {
        for (n, r) in [(1, 0), (2, 0), (4, 0), (7, 0), (8, 1), (15, 1), (16, 2), (31, 3), (32, 4), (128, 4)] {
            assert_eq!(HostPolicy::default_for(&HostProfile::new(16 * GIB, n)).cpu_reserve, r, "{n} cpus");
        }
    }

    #[test]
    fn gpu_reserve_is_an_eighth_of_known_vram() {
        let profile = HostProfile::new(64 * GIB, 8).with_gpu(Some(24 * GIB), false).with_gpu(None, true);
        let p = HostPolicy::default_for(&profile);
        assert_eq!(p.gpu_memory_reserve, vec![3 * GIB, 0]);
        assert_eq!(p.validate(&profile), Ok(()));
    }

    #[test]
    fn compute_pool_counts_excluded_cpus_towards_the_reserve() {
        let mut profile = HostProfile::new(16 * GIB, 16);
        let mut p = HostPolicy::default_for(&profile);
        p.cpu_reserve = 4;
        assert_eq!(p.compute_cpus(&profile), 12);
        profile.allowed_cpus = 10;
        assert_eq!(p.compute_cpus(&profile), 10);
        profile.allowed_cpus = 14;
        assert_eq!(p.compute_cpus(&profile), 12);
    }

    #[test]
    fn validity_rules() {
        let profile = HostProfile::new(16 * GIB, 8).with_gpu(Some(8 * GIB), false);
        let ok = HostPolicy::default_for(&profile);
        assert_eq!(ok.validate(&profile), Ok(()));
        let check = |f: &dyn Fn(&mut HostPolicy)| {
            let mut p = ok.clone();
            f(&mut p);
            p.validate(&profile)
        };
        assert!(matches!(check(&|p| p.memory_reserve = 16 * GIB), Err(PolicyError::MemoryReserve { .. })));
        let floor = check(&|p| p.emergency_floor = 4 * GIB);
        assert!(matches!(floor, Err(PolicyError::EmergencyFloor { .. })));
        let caution = check(&|p| p.memory_caution = Some(GIB / 2));
        assert!(matches!(caution, Err(PolicyError::Caution { .. })));
        let message = caution.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains("memory_caution=none"), "the error names the fix: {message}");
        assert!(matches!(check(&|p| p.cpu_reserve = 8), Err(PolicyError::CpuReserve { .. })));
        assert!(matches!(check(&|p| p.max_load_ratio = Some(0.0)), Err(PolicyError::LoadRatio(_))));
        assert!(matches!(check(&|p| p.max_load_ratio = Some(f64::NAN)), Err(PolicyError::LoadRatio(_))));
        assert!(matches!(check(&|p| p.max_load_ratio = Some(f64::INFINITY)), Err(PolicyError::LoadRatio(_))));
        assert_eq!(check(&|p| p.max_load_ratio = Some(1.5)), Ok(()), "above 1 is allowed");
        assert_eq!(check(&|p| p.max_load_ratio = None), Ok(()), "off is allowed");
        assert_eq!(check(&|p| p.psi_memory = 101.0), Err(PolicyError::Psi("psi_memory")));
        assert_eq!(check(&|p| p.psi_io = -1.0), Err(PolicyError::Psi("psi_io")));
        assert_eq!(check(&|p| p.io_slots = 0), Err(PolicyError::IoSlots));
        assert_eq!(check(&|p| p.gpu_slots = 0), Err(PolicyError::GpuSlots));
        assert_eq!(check(&|p| p.gpu_memory_reserve = vec![8 * GIB]), Err(PolicyError::GpuReserve(0)));
        assert_eq!(check(&|p| p.max_running = Some(0)), Err(PolicyError::MaxRunning));
    }

    #[test]
    fn unified_memory_rule() {
        let ram = 32 * GIB;
        assert!(GpuDevice::is_unified(None, None, ram));
        assert!(GpuDevice::is_unified(Some(512 << 20), None, ram));
        assert!(!GpuDevice::is_unified(Some(8 * GIB), None, ram));
        assert!(GpuDevice::is_unified(Some(4 * GIB), Some(16 * GIB), ram));
        assert!(!GpuDevice::is_unified(Some(12 * GIB), Some(16 * GIB), ram));
        // 2 GiB of VRAM on an 8 GiB host is more than RAM/8: dedicated.
        assert!(!GpuDevice::is_unified(Some(2 * GIB), None, 8 * GIB));
    }

    #[test]
    fn memory_defaults_scale_with_ram() {
        let reserve = |total| HostPolicy::default_memory_reserve(total);
        for (total, expected) in [
            (GIB, GIB / 4),
            (2 * GIB, 512 * MIB),
            (8 * GIB, 512 * MIB),
            (16 * GIB, GIB),
            (32 * GIB, 2 * GIB),
            (64 * GIB, 4 * GIB),
            (512 * GIB, 4 * GIB),
        ] {
            assert_eq!(reserve(total), expected, "{total} B of RAM");
            let p = HostPolicy::default_for(&HostProfile::new(total, 8));
            assert_eq!(p.emergency_floor, expected);
            assert_eq!(p.memory_caution, Some(expected + expected / 2));
            assert_eq!(p.validate(&HostProfile::new(total, 8)), Ok(()));
        }
        assert_eq!(reserve(0), 1);
    }

    #[test]
    #[allow(clippy::unwrap_used)]
    fn floor_and_caution_band_move_with_the_reserve() {
        let profile = HostProfile::new(64 * GIB, 8);
        let mut p = HostPolicy::default_for(&profile);
        assert_eq!((p.memory_reserve, p.memory_caution), (4 * GIB, Some(6 * GIB)));
        // Above the old band's edge: accepted, band and floor follow.
        p.set_memory_reserve(10 * GIB);
        assert_eq!((p.emergency_floor, p.memory_caution), (10 * GIB, Some(12 * GIB)));
        assert_eq!(p.validate(&profile), Ok(()));
        // Near total RAM the band would pass it: refused, naming the fix.
        p.set_memory_reserve(63 * GIB);
        let e = p.validate(&profile).unwrap_err().to_string();
        assert!(e.contains("memory_caution=none"), "{e}");
        // A floor set apart from the reserve stays; a custom policy stays custom.
        let mut p = HostPolicy::default_for(&profile);
        p.emergency_floor = GIB;
        p.memory_caution = None;
        p.set_memory_reserve(8 * GIB);
        assert_eq!((p.memory_reserve, p.emergency_floor, p.memory_caution), (8 * GIB, GIB, None));
    }

    #[test]
    fn explained_defaults_carry_the_figures() {
        let rules = HostPolicy::explain_defaults(&HostProfile::new(16 * GIB, 8));
        let rule = |k| rules.iter().find(|(key, _)| *key == k).map(|(_, r)| r.clone()).unwrap_or_default();
        assert_eq!(
            rule("memory_reserve"),
            "total/16 within 512.0 MiB–4.0 GiB, at most total/4: 1.0 GiB of 16.0 GiB"
        );
        assert_eq!(rule("memory_caution"), "1.5 × memory_reserve, at most total RAM: 1.5 GiB");
        assert_eq!(rule("max_load_ratio"), "0.9 × the 7-CPU compute pool, foreign load only");
        assert_eq!(
            rule("cpu_reserve"),
            "logical CPUs / 8, at most 4 (0 below 8 CPUs: the load gate gives CPUs back as others' load appears): 1 of 8"
        );
    }
}
