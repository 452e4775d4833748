//! `/proc/meminfo`: the figures the Governor needs, in bytes.

use crate::parse::{ParseError, parse_u64};

/// The `/proc/meminfo` fields Lardon uses, converted to bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemInfo {
    /// `MemTotal`.
    pub total: u64,
    /// `MemFree`.
    pub free: u64,
    /// `MemAvailable`.
    pub available: u64,
    /// `SwapTotal`.
    pub swap_total: u64,
    /// `SwapFree`.
    pub swap_free: u64,
}

const FIELDS: [&str; 5] = ["MemTotal", "MemFree", "MemAvailable", "SwapTotal", "SwapFree"];

/// Parses `/proc/meminfo`. Every field Lardon uses must be present once,
/// as `Name: <digits> kB`; other lines are ignored.
///
/// # Errors
/// [`ParseError`] naming the first bad or missing field.
pub fn parse_meminfo(text: &str) -> Result<MemInfo, ParseError> {
    let mut values: [Option<u64>; 5] = [None; 5];
    for line in text.lines() {
        let Some((key, rest)) = line.split_once(':') else { continue };
        let Some(slot) = FIELDS.iter().position(|f| *f == key) else { continue };
        let mut parts = rest.split_ascii_whitespace();
        let (Some(number), Some("kB"), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(ParseError::Junk(line.to_owned()));
        };
        let kib = parse_u64(key, number)?;
        let bytes = kib.checked_mul(1024).ok_or_else(|| ParseError::Overflow(key.to_owned()))?;
        if values[slot].replace(bytes).is_some() {
            return Err(ParseError::Duplicate(key.to_owned()));
        }
    }
    let get = |i: usize| values[i].ok_or_else(|| ParseError::Missing(FIELDS[i].to_owned()));
    Ok(MemInfo { total: get(0)?, free: get(1)?, available: get(2)?, swap_total: get(3)?, swap_free: get(4)? })
}

#[cfg(test)]
mod tests {
    use super::*;

    const REAL: &str = include_str!("../tests/fixtures/proc/meminfo");

    #[test]
    fn parses_a_recorded_file() {
        let m = parse_meminfo(REAL).unwrap();
        assert_eq!(m.total, 24_684_092 * 1024);
        assert_eq!(m.free, 23_879_712 * 1024);
        assert_eq!(m.available, 24_359_776 * 1024);
        assert_eq!((m.swap_total, m.swap_free), (0, 0));
        assert!(m.available <= m.total);
    }

    fn with(field: &str, replacement: &str) -> String {
        REAL.lines()
            .map(|l| if l.starts_with(&format!("{field}:")) { replacement.to_owned() } else { l.to_owned() })
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn rejects_malformed_fields() {
        for bad in [
            "MemAvailable:   -5 kB",
            "MemAvailable:   +5 kB",
            "MemAvailable:   5 kB junk",
            "MemAvailable:   5 MB",
            "MemAvailable:   5",
            "MemAvailable:   5.0 kB",
            "MemAvailable:   18446744073709551615 kB",
            "MemAvailable:   99999999999999999999999 kB",
        ] {
            assert!(parse_meminfo(&with("MemAvailable", bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn rejects_missing_and_duplicate_fields() {
        assert_eq!(parse_meminfo(&with("SwapFree", "")), Err(ParseError::Missing("SwapFree".into())));
        let dup = format!("{REAL}MemFree: 1 kB\n");
        assert_eq!(parse_meminfo(&dup), Err(ParseError::Duplicate("MemFree".into())));
        assert!(parse_meminfo("").is_err());
    }
}
