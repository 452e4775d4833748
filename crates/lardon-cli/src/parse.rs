//! Value parsers for flags and workload fields: human units, batch ranges,
//! KEY=VALUE pairs. Each returns a message that `main` prefixes with the
//! flag (or the TOML field) it came from.

pub(crate) fn parse_size(text: &str) -> Result<u64, String> {
    lardon::parse_bytes(text).map_err(|e| e.to_string())
}

pub(crate) fn parse_cpu(text: &str) -> Result<u32, String> {
    match lardon::parse_cpus(text) {
        Ok(0) => Err("must be more than 0 (e.g. 1, 0.5, 250m)".into()),
        Ok(m) => Ok(m),
        // The units parser's own example is a size (`2GiB`): suggest CPUs.
        Err(lardon::UnitError::BadNumber(_)) => {
            Err(format!("`{text}` is not a CPU count (e.g. 2, 0.5, 250m)"))
        }
        Err(e) => Err(e.to_string()),
    }
}

pub(crate) fn parse_count(text: &str) -> Result<u64, String> {
    match text.trim().parse::<u64>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("`{text}` is not a whole number of at least 1")),
    }
}

/// A group name (`--group`, `lardon group NAME`): 1-64 of `[A-Za-z0-9._-]`.
pub(crate) fn parse_group(text: &str) -> Result<String, String> {
    lardon::GroupName::new(text).map(|g| g.to_string()).map_err(|e| e.to_string())
}

/// A whole number ≥ 0 that fits 32 bits (`--io`).
pub(crate) fn parse_u32(text: &str) -> Result<u32, String> {
    text.trim().parse::<u32>().map_err(|_| format!("`{text}` is not a whole number of at least 0"))
}

/// A whole number, possibly negative (`--priority`).
pub(crate) fn parse_i32(text: &str) -> Result<i32, String> {
    text.trim().parse::<i32>().map_err(|_| format!("`{text}` is not a whole number (e.g. 10, -5)"))
}

/// `MIN..MAX`, `MIN..=MAX` or a single `N`.
pub(crate) fn parse_batch(text: &str) -> Result<(u64, u64), String> {
    let t = text.trim();
    let (lo, hi) = match t.split_once("..") {
        Some((lo, hi)) => (lo, hi.strip_prefix('=').unwrap_or(hi)),
        None => (t, t),
    };
    let num = |s: &str| {
        s.trim()
            .parse::<u64>()
            .map_err(|_| format!("`{text}` is not a batch range (expected MIN..MAX, e.g. 1..32)"))
    };
    let (lo, hi) = (num(lo)?, num(hi)?);
    if lo == 0 {
        return Err("the minimum batch must be at least 1 (e.g. 1..32)".into());
    }
    if hi < lo {
        return Err(format!("the maximum {hi} is below the minimum {lo}"));
    }
    Ok((lo, hi))
}

/// `MEMORY,CPUS` of a simulated host: `4GiB,2`.
pub(crate) fn parse_host(text: &str) -> Result<(u64, u32), String> {
    let (mem, cpus) =
        text.split_once(',').ok_or_else(|| format!("`{text}` is not MEMORY,CPUS (e.g. 4GiB,2)"))?;
    let mem = lardon::parse_bytes(mem).map_err(|e| e.to_string())?;
    match cpus.trim().parse::<u32>() {
        Ok(c) if c > 0 && mem > 0 => Ok((mem, c)),
        _ => Err(format!("`{text}` is not MEMORY,CPUS with whole CPUs ≥ 1 (e.g. 4GiB,2)")),
    }
}

pub(crate) fn parse_key_value(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_owned(), v.to_owned())),
        _ => Err(format!("`{text}` is not KEY=VALUE")),
    }
}

pub(crate) fn parse_duration_ms(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1000.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60_000.0)
    } else if let Some(n) = t.strip_suffix('h') {
        // Allocations' walltimes are hours.
        (n, 3_600_000.0)
    } else {
        (t, 1000.0)
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok((v * scale).round() as u64),
        _ => Err(format!("`{text}` is not a duration (e.g. 5s, 500ms, 1m, 2h)")),
    }
}

pub(crate) fn parse_secs(text: &str) -> Result<f64, String> {
    match text.trim().trim_end_matches('s').parse::<f64>() {
        Ok(v) if (0.0..1e7).contains(&v) => Ok(v),
        _ => Err(format!("`{text}` is not a number of seconds (e.g. 2, 0.5)")),
    }
}

pub(crate) fn parse_progress(text: &str) -> Result<(u64, u64), String> {
    let bad = || format!("`{text}` is not DONE/TOTAL (e.g. 40/100)");
    let (done, total) = match text.split_once('/') {
        Some((d, t)) => {
            (d.trim().parse::<u64>().map_err(|_| bad())?, t.trim().parse::<u64>().map_err(|_| bad())?)
        }
        None => (text.trim().parse::<u64>().map_err(|_| bad())?, 0),
    };
    if total != 0 && done > total {
        return Err(format!("done ({done}) is more than the total ({total})"));
    }
    Ok((done, total))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    #[test]
    fn batch_ranges() {
        assert_eq!(parse_batch("1..32"), Ok((1, 32)));
        assert_eq!(parse_batch("4"), Ok((4, 4)));
        assert_eq!(parse_batch("2..=8"), Ok((2, 8)));
        assert!(parse_batch("0..3").is_err());
        assert!(parse_batch("5..3").is_err());
        assert!(parse_batch("a..b").is_err());
    }

    #[test]
    fn progress_and_durations() {
        assert_eq!(parse_progress("3/10"), Ok((3, 10)));
        assert_eq!(parse_progress("7"), Ok((7, 0)));
        assert_eq!(parse_duration_ms("2h"), Ok(7_200_000));
        assert!(parse_progress("11/10").is_err());
        assert_eq!(parse_duration_ms("1.5s"), Ok(1500));
        assert_eq!(parse_duration_ms("200ms"), Ok(200));
        assert!(parse_duration_ms("soon").is_err());
    }

    proptest::proptest! {
        #[test]
        fn parsers_are_total(text in "\\PC{0,40}") {
            let _ = parse_size(&text);
            let _ = parse_cpu(&text);
            let _ = parse_count(&text);
            if let Ok((lo, hi)) = parse_batch(&text) {
                proptest::prop_assert!(lo >= 1 && hi >= lo);
            }
            let _ = parse_key_value(&text);
            let _ = parse_duration_ms(&text);
            let _ = parse_secs(&text);
            if let Ok((done, total)) = parse_progress(&text) {
                proptest::prop_assert!(total == 0 || done <= total);
            }
            let _ = parse_host(&text);
        }
    }
}

/// `--since`: a time before now, or a date.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Since {
    /// This long before now, ms (`2h`, `30m`, `7d`).
    Ago(u64),
    /// From this instant, Unix ms (`2026-03-01`, `2026-03-01T14:00`, UTC).
    At(i64),
}

impl Since {
    /// The instant it names, Unix ms, given the time now.
    pub(crate) fn resolve(self, now_ms: i64) -> i64 {
        match self {
            Since::Ago(ms) => now_ms.saturating_sub(i64::try_from(ms).unwrap_or(i64::MAX)),
            Since::At(ms) => ms,
        }
    }
}

/// `--since DURATION|DATE`: a duration (`90s`, `30m`, `2h`, `7d`) before
/// now, or a UTC date `YYYY-MM-DD`, optionally with `THH:MM[:SS]` (or a
/// space instead of `T`).
pub(crate) fn parse_since(text: &str) -> Result<Since, String> {
    let t = text.trim();
    let bad = || {
        format!(
            "`{text}` is neither a duration (e.g. 30m, 2h, 7d) nor a UTC date (e.g. 2026-03-01 or 2026-03-01T14:00)"
        )
    };
    if t.len() >= 10 && t.as_bytes().get(4) == Some(&b'-') {
        return parse_utc(t).map(Since::At).ok_or_else(bad);
    }
    if let Some(days) = t.strip_suffix('d') {
        return match days.trim().parse::<f64>() {
            Ok(v) if v.is_finite() && v >= 0.0 => Ok(Since::Ago((v * 86_400_000.0).round() as u64)),
            _ => Err(bad()),
        };
    }
    parse_duration_ms(t).map(Since::Ago).map_err(|_| bad())
}

/// `YYYY-MM-DD[(T| )HH:MM[:SS]]` in UTC, as Unix ms.
fn parse_utc(t: &str) -> Option<i64> {
    let (date, time) = match t.split_once(['T', ' ']) {
        Some((d, tm)) => (d, Some(tm)),
        None => (t, None),
    };
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    if d.next().is_some() || !(1..=12).contains(&m) || day < 1 || day > days_in_month(y, m) {
        return None;
    }
    let secs = match time {
        None => 0,
        Some(tm) => {
            let parts: Vec<Option<i64>> = tm.split(':').map(|p| p.parse::<i64>().ok()).collect();
            let (h, mi, s) = match parts.as_slice() {
                [Some(h), Some(mi)] => (*h, *mi, 0),
                [Some(h), Some(mi), Some(s)] => (*h, *mi, *s),
                _ => return None,
            };
            if !(0..24).contains(&h) || !(0..60).contains(&mi) || !(0..60).contains(&s) {
                return None;
            }
            h * 3600 + mi * 60 + s
        }
    };
    Some((days_from_civil(y, m, day) * 86_400 + secs) * 1000)
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
/// `days_from_civil`).
pub(crate) fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day since 1970-01-01: the inverse of [`days_from_civil`].
pub(crate) fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { yoe + era * 400 + 1 } else { yoe + era * 400 }, m, d)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod since_tests {
    use super::*;

    #[test]
    fn since_takes_durations_and_utc_dates() {
        assert_eq!(parse_since("2h"), Ok(Since::Ago(7_200_000)));
        assert_eq!(parse_since("7d"), Ok(Since::Ago(7 * 86_400_000)));
        assert_eq!(parse_since("90s"), Ok(Since::Ago(90_000)));
        assert_eq!(parse_since("1970-01-02"), Ok(Since::At(86_400_000)));
        assert_eq!(parse_since("2026-03-01T14:05"), Ok(Since::At(1_772_373_900_000)));
        assert_eq!(parse_since("2026-03-01 14:05:09"), Ok(Since::At(1_772_373_909_000)));
        for bad in ["yesterday", "2026-02-30", "2026-13-01", "2026-03-01T25:00", "-5m", "3x"] {
            let e = parse_since(bad).unwrap_err();
            assert!(e.contains("neither a duration") && e.contains(bad), "{bad}: {e}");
        }
        assert_eq!(Since::Ago(1_000).resolve(5_000), 4_000);
    }

    #[test]
    fn civil_dates_round_trip() {
        for days in [-1, 0, 59, 365, 11_016, 20_513, 100_000] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days, "{y}-{m}-{d}");
        }
        assert_eq!(civil_from_days(20_513), (2026, 3, 1));
    }
}
