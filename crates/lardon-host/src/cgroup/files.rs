//! Parsers for cgroup interface files (v1 and v2).

use crate::parse::{ParseError, one_line, parse_u64};

/// v1 limits at or above this are the kernel's "unlimited"
/// (`9223372036854771712` = `i64::MAX` rounded down to a page).
pub const V1_UNLIMITED: u64 = 1 << 62;

/// Parses v2 `memory.max` / `memory.high`: `max` → `None`, else bytes.
///
/// # Errors
/// [`ParseError`] on anything else.
pub fn parse_v2_limit(text: &str) -> Result<Option<u64>, ParseError> {
    match one_line("memory limit", text)? {
        "max" => Ok(None),
        n => parse_u64("memory limit", n).map(Some),
    }
}

/// Parses a v1 `memory.limit_in_bytes`: the huge "unlimited" value → `None`.
///
/// # Errors
/// [`ParseError`] when not a plain unsigned number.
pub fn parse_v1_limit(text: &str) -> Result<Option<u64>, ParseError> {
    let n = parse_u64("memory.limit_in_bytes", one_line("memory.limit_in_bytes", text)?)?;
    Ok((n < V1_UNLIMITED).then_some(n))
}

/// Parses a single unsigned number file (`memory.current`, `memory.peak`,
/// `memory.usage_in_bytes`, `cpu.cfs_period_us` …).
///
/// # Errors
/// [`ParseError`] when not a plain unsigned number on one line.
pub fn parse_counter(field: &str, text: &str) -> Result<u64, ParseError> {
    parse_u64(field, one_line(field, text)?)
}

/// `quota / period` in thousandths of a CPU, rounded down, at least 1.
fn millis(quota: u64, period: u64) -> Result<u32, ParseError> {
    if period == 0 {
        return Err(ParseError::Invalid { field: "cpu period".to_owned(), value: "0".to_owned() });
    }
    let m = u128::from(quota) * 1000 / u128::from(period);
    u32::try_from(m.max(1)).map_err(|_| ParseError::Overflow("cpu quota".to_owned()))
}

/// Parses v2 `cpu.max` (`max 100000` or `50000 100000`) into millicpus.
///
/// # Errors
/// [`ParseError`] on a malformed line.
pub fn parse_cpu_max(text: &str) -> Result<Option<u32>, ParseError> {
    let line = one_line("cpu.max", text)?;
    let (quota, period) = line.split_once(' ').ok_or_else(|| ParseError::Missing("cpu.max period".into()))?;
    let period = parse_u64("cpu.max period", period)?;
    match quota {
        "max" => Ok(None),
        q => millis(parse_u64("cpu.max quota", q)?, period).map(Some),
    }
}

/// Parses v1 `cpu.cfs_quota_us` (`-1` = unlimited) with its period.
///
/// # Errors
/// [`ParseError`] on a malformed file.
pub fn parse_cfs_quota(quota: &str, period: &str) -> Result<Option<u32>, ParseError> {
    let period = parse_counter("cpu.cfs_period_us", period)?;
    match one_line("cpu.cfs_quota_us", quota)? {
        "-1" => Ok(None),
        q => millis(parse_u64("cpu.cfs_quota_us", q)?, period).map(Some),
    }
}

/// Reads `key` from a flat-keyed file (`memory.events`,
/// `memory.oom_control`: `name value` lines).
///
/// # Errors
/// [`ParseError`] when the key is missing, duplicated or malformed.
pub fn parse_keyed(text: &str, key: &str) -> Result<u64, ParseError> {
    let mut found = None;
    for line in text.lines() {
        let (k, v) = line.split_once(' ').ok_or_else(|| ParseError::Junk(line.to_owned()))?;
        if k == key && found.replace(parse_u64(key, v)?).is_some() {
            return Err(ParseError::Duplicate(key.to_owned()));
        }
    }
    found.ok_or_else(|| ParseError::Missing(key.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits() {
        assert_eq!(parse_v2_limit("max\n"), Ok(None));
        assert_eq!(parse_v2_limit("1073741824\n"), Ok(Some(1 << 30)));
        assert_eq!(parse_v1_limit("9223372036854771712\n"), Ok(None));
        assert_eq!(parse_v1_limit("67108864\n"), Ok(Some(64 << 20)));
        for bad in ["", "-1", "+5", "5 ", "max max", "99999999999999999999999", "5\n5\n"] {
            assert!(parse_v2_limit(bad).is_err(), "{bad:?}");
        }
        assert!(parse_v1_limit("max").is_err());
        assert!(parse_v1_limit("-1").is_err());
    }

    #[test]
    fn cpu_quotas() {
        assert_eq!(parse_cpu_max("max 100000\n"), Ok(None));
        assert_eq!(parse_cpu_max("50000 100000\n"), Ok(Some(500)));
        assert_eq!(parse_cpu_max("250000 100000"), Ok(Some(2500)));
        assert_eq!(parse_cfs_quota("-1\n", "100000\n"), Ok(None));
        assert_eq!(parse_cfs_quota("150000\n", "100000\n"), Ok(Some(1500)));
        for bad in ["max", "-1 100000", "50000 0", "50000 100000 x", "5e4 100000", "18446744073709551615 1"] {
            assert!(parse_cpu_max(bad).is_err(), "{bad:?}");
        }
        assert!(parse_cfs_quota("-2", "100000").is_err());
        assert!(parse_cfs_quota("+5", "100000").is_err());
        assert!(parse_cfs_quota("5", "-1").is_err());
    }

    #[test]
    fn keyed_files() {
        let events = "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(parse_keyed(events, "oom_kill"), Ok(1));
        let control = "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n";
        assert_eq!(parse_keyed(control, "oom_kill"), Ok(2));
        assert!(parse_keyed("oom_kill_disable 0\nunder_oom 0\n", "oom_kill").is_err());
        assert!(parse_keyed("oom_kill -1\n", "oom_kill").is_err());
        assert!(parse_keyed("oom_kill 1 2\n", "oom_kill").is_err());
        assert!(parse_keyed("oom_kill 1\noom_kill 1\n", "oom_kill").is_err());
        assert!(parse_keyed("junk\noom_kill 1\n", "oom_kill").is_err());
    }
}
