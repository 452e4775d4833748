//! The policy as `key = value` pairs: the Governor's [`HostPolicy`] plus
//! the daemon's own enforcement settings. Used by GetPolicy/SetPolicy, and
//! to replay the persisted overrides at start.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use lardon::{HostPolicy, parse_bytes};

use crate::runner::logcap::LogCap;

/// How hard a task's cgroup holds it to its contract (policy `enforce`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum EnforceMode {
    /// No per-task limit (peaks are still measured).
    Off,
    /// A soft limit (reclaim pressure above the contract plus slack).
    Soft,
    /// A hard limit: above the contract plus slack the task is OOM-killed.
    #[default]
    Hard,
}

impl EnforceMode {
    /// `off`, `soft` or `hard`.
    pub fn as_str(self) -> &'static str {
        match self {
            EnforceMode::Off => "off",
            EnforceMode::Soft => "soft",
            EnforceMode::Hard => "hard",
        }
    }
}

impl fmt::Display for EnforceMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EnforceMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "off" => Ok(EnforceMode::Off),
            "soft" => Ok(EnforceMode::Soft),
            "hard" => Ok(EnforceMode::Hard),
            other => Err(format!("enforce: `{other}` is not one of off, soft, hard")),
        }
    }
}

/// The daemon's own policy keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonSettings {
    /// Per-task cgroup limits.
    pub enforce: EnforceMode,
    /// Fixed slack above the contract's memory, bytes.
    pub memory_slack: u64,
    /// Proportional slack above the contract's memory, percent.
    pub memory_slack_percent: u32,
    /// Native Slurm mode (docs/DESIGN.md §14).
    pub slurm: SlurmSettings,
    /// Offload to a broker (docs/DESIGN.md §14).
    pub offload: OffloadSettings,
    /// Policy `timeout`: the wall-clock limit of a local run for a task
    /// that sets none (`submit --timeout`), milliseconds; `None`: no limit.
    pub timeout_ms: Option<u64>,
    /// Policy `on_end`: the hook (`sh -c`) of every task that names none
    /// (`submit --on-end`); `None`: no hook. Shared, not copied: every
    /// run reads the settings.
    pub on_end: Option<Arc<str>>,
    /// Policy `on_end_timeout`: a hook's time limit, milliseconds (at it
    /// its process group is killed and it is recorded as timed out).
    pub on_end_timeout_ms: u64,
    /// Policy `log_max`: a task's log past this keeps its head and tail
    /// and drops its middle (docs/DESIGN.md §10, log caps); `None`: no cap.
    pub log_max: Option<LogCap>,
}

/// `on_end_timeout` by default: one minute.
pub const DEFAULT_HOOK_TIMEOUT_MS: u64 = 60_000;

impl Default for DaemonSettings {
    fn default() -> Self {
        DaemonSettings {
            enforce: EnforceMode::Hard,
            memory_slack: 64 << 20,
            memory_slack_percent: 10,
            slurm: SlurmSettings::default(),
            offload: OffloadSettings::default(),
            timeout_ms: None,
            on_end: None,
            on_end_timeout_ms: DEFAULT_HOOK_TIMEOUT_MS,
            log_max: Some(LogCap::default()),
        }
    }
}

/// Where a shippable task runs when the daemon has a broker (policy
/// `offload_prefer`, or `offload = { prefer = … }` in a policy file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum OffloadPrefer {
    /// Here, unless the local Governor would make it wait.
    #[default]
    Local,
    /// At an agent, whatever the local Governor says.
    Remote,
    /// As `local`, and also at an agent when this host would admit it but
    /// is already busier (its running tasks over its slots) than the
    /// agents serving the capability (their held tokens over all of them)
    /// and one of them has a free token.
    Balance,
}

impl OffloadPrefer {
    /// `local`, `remote` or `balance`.
    pub fn as_str(self) -> &'static str {
        match self {
            OffloadPrefer::Local => "local",
            OffloadPrefer::Remote => "remote",
            OffloadPrefer::Balance => "balance",
        }
    }
}

impl fmt::Display for OffloadPrefer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for OffloadPrefer {
    type Err = String;
    /// The error does not name the field: callers prefix their own
    /// (`offload_prefer` or `offload.prefer`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "local" => Ok(OffloadPrefer::Local),
            "remote" => Ok(OffloadPrefer::Remote),
            "balance" => Ok(OffloadPrefer::Balance),
            other => Err(format!("`{other}` is not one of local, remote, balance")),
        }
    }
}

/// The `offload_*` policy keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffloadSettings {
    /// Where shippable tasks run.
    pub prefer: OffloadPrefer,
    /// How many times a task the broker hands back after an infrastructure
    /// failure (its agents lost) is shipped again before it runs here.
    pub max_retries: u32,
    /// A shippable task that joined the local queue and, this many
    /// milliseconds later, has not started and is told WAIT by the local
    /// Governor ships (0: at its first WAIT).
    pub wait_ms: u64,
}

impl Default for OffloadSettings {
    fn default() -> Self {
        OffloadSettings { prefer: OffloadPrefer::Local, max_retries: 0, wait_ms: DEFAULT_OFFLOAD_WAIT_MS }
    }
}

/// `offload_wait_ms` by default: two seconds in the local queue.
pub const DEFAULT_OFFLOAD_WAIT_MS: u64 = 2000;

/// The most `offload_wait_ms` allows: one day.
pub const MAX_OFFLOAD_WAIT_MS: u64 = 86_400_000;

/// Parses an `offload_wait_ms` value; the error does not name the field.
///
/// # Errors
/// Not a whole number, or above [`MAX_OFFLOAD_WAIT_MS`].
pub fn parse_wait_ms(value: &str) -> Result<u64, String> {
    let n: u64 =
        value.trim().parse().map_err(|_| format!("`{value}` is not a whole number of milliseconds"))?;
    if n > MAX_OFFLOAD_WAIT_MS {
        return Err(format!("at most {MAX_OFFLOAD_WAIT_MS} (one day)"));
    }
    Ok(n)
}

/// Parses a `timeout` value: a whole number with `ms`, `s`, `m` or `h`
/// (`90s`, `2h`); the error does not name the field.
///
/// # Errors
/// Not such a number, zero, or too large.
pub fn parse_timeout(value: &str) -> Result<u64, String> {
    let bad = || format!("`{value}` is not a duration (e.g. 90s, 30m, 2h, or none)");
    let t = value.trim();
    let (num, scale) = [("ms", 1u64), ("s", 1000), ("m", 60_000), ("h", 3_600_000)]
        .iter()
        .find_map(|(unit, scale)| t.strip_suffix(unit).map(|n| (n, *scale)))
        .ok_or_else(bad)?;
    let n: u64 = num.trim().parse().map_err(|_| bad())?;
    match n.checked_mul(scale) {
        Some(0) => Err("must be more than 0".to_owned()),
        Some(ms) => Ok(ms),
        None => Err(bad()),
    }
}

/// The most `offload_max_retries` allows (each retry is a new remote id).
pub const MAX_OFFLOAD_RETRIES: u32 = 100;

/// Parses an `offload_max_retries` value; the error does not name the field.
///
/// # Errors
/// Not a number, or above [`MAX_OFFLOAD_RETRIES`].
pub fn parse_max_retries(value: &str) -> Result<u32, String> {
    let n: u32 = value.trim().parse().map_err(|_| format!("`{value}` is not a valid number"))?;
    if n > MAX_OFFLOAD_RETRIES {
        return Err(format!("at most {MAX_OFFLOAD_RETRIES}"));
    }
    Ok(n)
}

/// The `slurm_*` policy keys: how native mode sizes and paces its jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlurmSettings {
    /// Jobs submitted and not yet ended, at most (backpressure on Slurm);
    /// further tasks wait in the daemon, PENDING. At least 1.
    pub max_jobs: u32,
    /// `--mem` = learned peak × (1 + this / 100) when above the declared size.
    pub mem_slack_percent: u32,
    /// No job asks for more than this `--mem`, bytes (`None`: no cap).
    pub max_mem: Option<u64>,
    /// How often outstanding jobs are looked up (one `squeue` for all of
    /// them), milliseconds; no lookups while none is outstanding.
    pub poll_ms: u32,
}

impl Default for SlurmSettings {
    fn default() -> Self {
        SlurmSettings { max_jobs: 64, mem_slack_percent: 10, max_mem: None, poll_ms: 1000 }
    }
}

impl DaemonSettings {
    /// The memory limit of a contract granting `memory` bytes; `None` when
    /// the task declared no memory (nothing to hold it to).
    pub fn memory_limit(&self, memory: u64) -> Option<u64> {
        (memory > 0).then(|| {
            memory
                .saturating_add(self.memory_slack)
                .saturating_add(memory / 100 * u64::from(self.memory_slack_percent))
        })
    }
}

/// Every key, with its help text, in display order.
pub const KEYS: &[(&str, &str)] = &[
    ("memory_reserve", "memory never handed out to tasks"),
    ("emergency_floor", "MemAvailable at or below this is RED at once (0 disables)"),
    (
        "memory_caution",
        "caution band: MemAvailable at or below holds pressure at YELLOW (`none` = custom policy)",
    ),
    ("cpu_reserve", "logical CPUs kept for the rest of the host (tasks are pinned to the others)"),
    (
        "max_load_ratio",
        "foreign load (1-minute load minus Lardon's own: its tasks and itself) / compute pool at or above which admission waits (`off` = no load gate)",
    ),
    ("psi_cpu", "CPU PSI some avg10 at or above which admission waits (a gate, never a pressure signal)"),
    ("psi_memory", "memory PSI some avg10 at or above which admission waits"),
    ("psi_io", "IO PSI some avg10 at or above which IO-slot work waits"),
    ("io_slots", "concurrent IO-heavy tasks"),
    ("gpu_slots", "concurrent tasks per GPU"),
    ("max_running", "cap on concurrently running tasks (`none` = no cap)"),
    ("enforce", "per-task cgroup limit: off, soft or hard"),
    ("memory_slack", "fixed memory allowed above the contract before enforcement"),
    ("timeout", "a local run's time limit for a task that sets no --timeout (e.g. 2h; `none` = no limit)"),
    (
        "log_max",
        "a task's log past this keeps its first and last halves and drops the middle with a marker line (at least 64KiB; `none` = no cap)",
    ),
    ("memory_slack_percent", "proportional memory allowed above the contract, percent"),
    (
        "on_end",
        "a command run with `sh -c` after each end of a task that sets no --on-end (`none` = no hook)",
    ),
    ("on_end_timeout", "a hook's time limit: at it its process group is killed (e.g. 60s)"),
    ("slurm_max_jobs", "native Slurm mode: jobs submitted and not yet ended, at most"),
    ("slurm_mem_slack_percent", "native Slurm mode: --mem is the learned peak plus this percent"),
    ("slurm_max_mem", "native Slurm mode: cap on any job's --mem (`none` = no cap)"),
    ("slurm_poll_ms", "native Slurm mode: milliseconds between job-state lookups while jobs are out"),
    (
        "offload_prefer",
        "daemon with --broker: where shippable tasks run: local (here unless it would wait), remote, balance",
    ),
    (
        "offload_wait_ms",
        "daemon with --broker: a shippable task told WAIT here this long after it was queued ships (0: at once)",
    ),
    (
        "offload_max_retries",
        "daemon with --broker: re-ships after the broker hands a task back, before running it here",
    ),
];

/// `pairs` in the order of [`KEYS`] (unknown keys last, as given), so that
/// `memory_reserve`, which moves the floor and the caution band, is applied
/// before an explicit `emergency_floor` or `memory_caution` whatever order
/// they were stored or given in.
pub fn in_key_order(mut pairs: Vec<(String, String)>) -> Vec<(String, String)> {
    pairs.sort_by_key(|(k, _)| KEYS.iter().position(|(known, _)| known == k).unwrap_or(KEYS.len()));
    pairs
}

/// Bytes printed exactly, in the largest binary unit that divides them.
pub fn exact_bytes(b: u64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if b != 0 && b.is_multiple_of(1u64 << shift) {
            return format!("{}{unit}", b >> shift);
        }
    }
    b.to_string()
}

/// The value of `key`, or `None` for an unknown key.
pub fn get(policy: &HostPolicy, settings: &DaemonSettings, key: &str) -> Option<String> {
    let opt = |v: Option<String>| v.unwrap_or_else(|| "none".to_owned());
    Some(match key {
        "memory_reserve" => exact_bytes(policy.memory_reserve),
        "emergency_floor" => exact_bytes(policy.emergency_floor),
        "memory_caution" => opt(policy.memory_caution.map(exact_bytes)),
        "cpu_reserve" => policy.cpu_reserve.to_string(),
        "max_load_ratio" => policy.max_load_ratio.map_or_else(|| "off".to_owned(), |r| r.to_string()),
        "psi_cpu" => policy.psi_cpu.to_string(),
        "psi_memory" => policy.psi_memory.to_string(),
        "psi_io" => policy.psi_io.to_string(),
        "io_slots" => policy.io_slots.to_string(),
        "gpu_slots" => policy.gpu_slots.to_string(),
        "max_running" => opt(policy.max_running.map(|n| n.to_string())),
        "enforce" => settings.enforce.to_string(),
        "memory_slack" => exact_bytes(settings.memory_slack),
        "timeout" => opt(settings.timeout_ms.map(|ms| format!("{ms}ms"))),
        "log_max" => opt(settings.log_max.map(|c| exact_bytes(c.bytes()))),
        "memory_slack_percent" => settings.memory_slack_percent.to_string(),
        "on_end" => opt(settings.on_end.as_deref().map(str::to_owned)),
        "on_end_timeout" => format!("{}ms", settings.on_end_timeout_ms),
        "slurm_max_jobs" => settings.slurm.max_jobs.to_string(),
        "slurm_mem_slack_percent" => settings.slurm.mem_slack_percent.to_string(),
        "slurm_max_mem" => opt(settings.slurm.max_mem.map(exact_bytes)),
        "slurm_poll_ms" => settings.slurm.poll_ms.to_string(),
        "offload_prefer" => settings.offload.prefer.to_string(),
        "offload_max_retries" => settings.offload.max_retries.to_string(),
        "offload_wait_ms" => settings.offload.wait_ms.to_string(),
        _ => return None,
    })
}

fn num<T: FromStr>(key: &str, value: &str) -> Result<T, String> {
    value.trim().parse().map_err(|_| format!("{key}: `{value}` is not a valid number"))
}

fn ratio(key: &str, value: &str) -> Result<f64, String> {
    let v: f64 = num(key, value)?;
    if v.is_finite() && v >= 0.0 { Ok(v) } else { Err(format!("{key}: must be a finite number ≥ 0")) }
}

fn bytes(key: &str, value: &str) -> Result<u64, String> {
    parse_bytes(value).map_err(|e| format!("{key}: {e}"))
}

fn none_or<T>(value: &str, parse: impl FnOnce(&str) -> Result<T, String>) -> Result<Option<T>, String> {
    if value.trim().eq_ignore_ascii_case("none") { Ok(None) } else { parse(value).map(Some) }
}

/// Applies `key = value`; the error names the key. The caller validates
/// the resulting policy as a whole (the Governor does).
///
/// # Errors
/// An unknown key or a malformed value.
pub fn set(
    policy: &mut HostPolicy,
    settings: &mut DaemonSettings,
    key: &str,
    value: &str,
) -> Result<(), String> {
    match key {
        // The floor and the caution band move with the reserve.
        "memory_reserve" => policy.set_memory_reserve(bytes(key, value)?),
        "emergency_floor" => policy.emergency_floor = bytes(key, value)?,
        "memory_caution" => policy.memory_caution = none_or(value, |v| bytes(key, v))?,
        "cpu_reserve" => policy.cpu_reserve = num(key, value)?,
        "max_load_ratio" => {
            policy.max_load_ratio = if value.trim().eq_ignore_ascii_case("off") {
                None
            } else {
                let r = ratio(key, value)?;
                if r == 0.0 {
                    return Err(format!("{key}: must be above 0 (`off` turns the load gate off)"));
                }
                Some(r)
            }
        }
        "psi_cpu" => policy.psi_cpu = ratio(key, value)?,
        "psi_memory" => policy.psi_memory = ratio(key, value)?,
        "psi_io" => policy.psi_io = ratio(key, value)?,
        "io_slots" => policy.io_slots = num(key, value)?,
        "gpu_slots" => policy.gpu_slots = num(key, value)?,
        "max_running" => policy.max_running = none_or(value, |v| num(key, v))?,
        "enforce" => settings.enforce = value.parse()?,
        "memory_slack" => settings.memory_slack = bytes(key, value)?,
        "timeout" => {
            settings.timeout_ms = none_or(value, |v| parse_timeout(v).map_err(|e| format!("{key}: {e}")))?
        }
        "on_end" => {
            settings.on_end = none_or(value, |v| {
                crate::spec::check_hook(v).map(|()| Arc::from(v)).map_err(|e| format!("{key}: {e}"))
            })?;
        }
        "on_end_timeout" => {
            settings.on_end_timeout_ms = parse_timeout(value).map_err(|e| format!("{key}: {e}"))?;
        }
        "log_max" => {
            settings.log_max =
                none_or(value, |v| LogCap::new(bytes(key, v)?).map_err(|e| format!("{key}: {e}")))?
        }
        "memory_slack_percent" => {
            let p: u32 = num(key, value)?;
            if p > 1000 {
                return Err(format!("{key}: at most 1000"));
            }
            settings.memory_slack_percent = p;
        }
        "slurm_max_jobs" => {
            let n: u32 = num(key, value)?;
            if n == 0 {
                return Err(format!("{key}: at least 1"));
            }
            settings.slurm.max_jobs = n;
        }
        "slurm_mem_slack_percent" => {
            let p: u32 = num(key, value)?;
            if p > 1000 {
                return Err(format!("{key}: at most 1000"));
            }
            settings.slurm.mem_slack_percent = p;
        }
        "slurm_max_mem" => settings.slurm.max_mem = none_or(value, |v| bytes(key, v))?,
        "slurm_poll_ms" => {
            let ms: u32 = num(key, value)?;
            if ms < 10 {
                return Err(format!("{key}: at least 10"));
            }
            settings.slurm.poll_ms = ms;
        }
        "offload_prefer" => settings.offload.prefer = value.parse().map_err(|e| format!("{key}: {e}"))?,
        "offload_max_retries" => {
            settings.offload.max_retries = parse_max_retries(value).map_err(|e| format!("{key}: {e}"))?;
        }
        "offload_wait_ms" => {
            settings.offload.wait_ms = parse_wait_ms(value).map_err(|e| format!("{key}: {e}"))?;
        }
        _ => {
            return Err(format!(
                "{key}: unknown policy key (known: {})",
                KEYS.iter().map(|k| k.0).collect::<Vec<_>>().join(", ")
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use lardon::HostProfile;

    #[test]
    fn round_trip_every_key() {
        let profile = HostProfile::new(16 << 30, 8);
        let base = HostPolicy::default_for(&profile);
        let mut policy = base.clone();
        let mut settings = DaemonSettings::default();
        for (key, _) in KEYS {
            let v = get(&policy, &settings, key).unwrap();
            set(&mut policy, &mut settings, key, &v).unwrap();
        }
        assert_eq!(policy, base);
        assert_eq!(settings, DaemonSettings::default());
        assert!(set(&mut policy, &mut settings, "nope", "1").unwrap_err().starts_with("nope:"));
        assert!(set(&mut policy, &mut settings, "psi_cpu", "NaN").unwrap_err().starts_with("psi_cpu:"));
        set(&mut policy, &mut settings, "max_running", "none").unwrap();
        assert_eq!(policy.max_running, None);
    }

    #[test]
    fn slurm_keys_are_checked_and_named() {
        let mut policy = HostPolicy::default_for(&HostProfile::new(16 << 30, 8));
        let mut settings = DaemonSettings::default();
        set(&mut policy, &mut settings, "slurm_max_mem", "8GiB").unwrap();
        assert_eq!(settings.slurm.max_mem, Some(8 << 30));
        assert_eq!(get(&policy, &settings, "slurm_max_mem").unwrap(), "8GiB");
        set(&mut policy, &mut settings, "slurm_max_jobs", "3").unwrap();
        assert_eq!(settings.slurm.max_jobs, 3);
        for (key, bad) in
            [("slurm_max_jobs", "0"), ("slurm_poll_ms", "5"), ("slurm_mem_slack_percent", "1001")]
        {
            let e = set(&mut policy, &mut settings, key, bad).unwrap_err();
            assert!(e.starts_with(&format!("{key}:")), "{e}");
        }
    }

    #[test]
    fn offload_keys_are_checked_and_named() {
        let mut policy = HostPolicy::default_for(&HostProfile::new(16 << 30, 8));
        let mut settings = DaemonSettings::default();
        assert_eq!(
            settings.offload,
            OffloadSettings { prefer: OffloadPrefer::Local, max_retries: 0, wait_ms: 2000 }
        );
        set(&mut policy, &mut settings, "offload_prefer", "Remote").unwrap();
        set(&mut policy, &mut settings, "offload_max_retries", "2").unwrap();
        set(&mut policy, &mut settings, "offload_wait_ms", "0").unwrap();
        assert_eq!(
            settings.offload,
            OffloadSettings { prefer: OffloadPrefer::Remote, max_retries: 2, wait_ms: 0 }
        );
        assert_eq!(get(&policy, &settings, "offload_prefer").unwrap(), "remote");
        assert_eq!(get(&policy, &settings, "offload_wait_ms").unwrap(), "0");
        for (key, bad) in [
            ("offload_prefer", "elsewhere"),
            ("offload_max_retries", "-1"),
            ("offload_max_retries", "101"),
            ("offload_wait_ms", "-5"),
            ("offload_wait_ms", "1.5"),
            ("offload_wait_ms", "86400001"),
        ] {
            let e = set(&mut policy, &mut settings, key, bad).unwrap_err();
            assert!(e.starts_with(&format!("{key}:")), "{e}");
        }
    }

    #[test]
    fn max_load_ratio_takes_values_above_one_and_off() {
        let mut policy = HostPolicy::default_for(&HostProfile::new(16 << 30, 8));
        let mut settings = DaemonSettings::default();
        set(&mut policy, &mut settings, "max_load_ratio", "2.5").unwrap();
        assert_eq!(policy.max_load_ratio, Some(2.5));
        set(&mut policy, &mut settings, "max_load_ratio", "OFF").unwrap();
        assert_eq!(policy.max_load_ratio, None);
        assert_eq!(get(&policy, &settings, "max_load_ratio").unwrap(), "off");
        let zero = set(&mut policy, &mut settings, "max_load_ratio", "0").unwrap_err();
        assert!(zero.starts_with("max_load_ratio:") && zero.contains("off"), "{zero}");
        assert!(
            set(&mut policy, &mut settings, "max_load_ratio", "inf")
                .unwrap_err()
                .starts_with("max_load_ratio:")
        );
    }

    #[test]
    fn memory_reserve_moves_the_floor_and_band_unless_they_are_set_too() {
        let profile = HostProfile::new(64 << 30, 8);
        let apply = |pairs: &[(&str, &str)]| {
            let mut policy = HostPolicy::default_for(&profile);
            let mut settings = DaemonSettings::default();
            let pairs = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
            for (k, v) in in_key_order(pairs) {
                set(&mut policy, &mut settings, &k, &v).unwrap();
            }
            policy
        };
        // Above the default band's 6 GiB edge, no memory_caution=none needed.
        let p = apply(&[("memory_reserve", "10GiB")]);
        assert_eq!((p.emergency_floor, p.memory_caution), (10 << 30, Some(12 << 30)));
        assert_eq!(p.validate(&profile), Ok(()));
        // Explicit values win whichever order they come in (the store sorts by key name).
        let p =
            apply(&[("emergency_floor", "1GiB"), ("memory_caution", "none"), ("memory_reserve", "10GiB")]);
        assert_eq!((p.memory_reserve, p.emergency_floor, p.memory_caution), (10 << 30, 1 << 30, None));
    }

    #[test]
    fn limit_has_slack_and_zero_means_none() {
        let s = DaemonSettings::default();
        assert_eq!(s.memory_limit(0), None);
        assert_eq!(s.memory_limit(1000 << 20), Some((1000 << 20) + (64 << 20) + (100 << 20)));
    }

    #[test]
    fn log_max_takes_whole_sizes_above_the_minimum_and_none() {
        let mut policy = HostPolicy::default_for(&HostProfile::new(16 << 30, 8));
        let mut settings = DaemonSettings::default();
        assert_eq!(get(&policy, &settings, "log_max").unwrap(), "256MiB");
        set(&mut policy, &mut settings, "log_max", "1MiB").unwrap();
        assert_eq!(settings.log_max.map(LogCap::bytes), Some(1 << 20));
        set(&mut policy, &mut settings, "log_max", "none").unwrap();
        assert_eq!(settings.log_max, None);
        for bad in ["0", "1KiB", "0.5B", "lots"] {
            let e = set(&mut policy, &mut settings, "log_max", bad).unwrap_err();
            assert!(e.starts_with("log_max:"), "{bad}: {e}");
        }
        assert_eq!(settings.log_max, None, "a refused value changes nothing");
    }
}
