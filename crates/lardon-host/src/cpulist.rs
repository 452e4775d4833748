//! Kernel CPU lists (`0-3,8,10-11`): sysfs `online`, cpusets.

use std::collections::BTreeSet;

use crate::parse::{ParseError, one_line, parse_u64};

/// Highest CPU number accepted (the kernel's `NR_CPUS` ceiling is 8192).
const MAX_CPU: u64 = 1 << 16;

/// Parses a CPU list such as `0-3,8,10-11`. An empty list is an empty set.
///
/// # Errors
/// [`ParseError`] on signs, reversed ranges, junk or numbers past 65536.
pub fn parse_cpu_list(text: &str) -> Result<BTreeSet<u32>, ParseError> {
    let line = one_line("cpu list", text)?;
    let mut cpus = BTreeSet::new();
    if line.is_empty() {
        return Ok(cpus);
    }
    for part in line.split(',') {
        let (lo, hi) = match part.split_once('-') {
            Some((lo, hi)) => (parse_u64("cpu", lo)?, parse_u64("cpu", hi)?),
            None => {
                let n = parse_u64("cpu", part)?;
                (n, n)
            }
        };
        if hi >= MAX_CPU || lo > hi {
            return Err(ParseError::Invalid { field: "cpu range".to_owned(), value: part.to_owned() });
        }
        // Both bounds are below 2^16, so the casts are lossless.
        cpus.extend(lo as u32..=hi as u32);
    }
    Ok(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lists() {
        assert_eq!(parse_cpu_list("0-1\n").unwrap(), BTreeSet::from([0, 1]));
        assert_eq!(parse_cpu_list("0-3,8,10-11").unwrap(), BTreeSet::from([0, 1, 2, 3, 8, 10, 11]));
        assert_eq!(parse_cpu_list("\n").unwrap(), BTreeSet::new());
    }

    #[test]
    fn rejects_malformed() {
        for bad in ["-1", "+1", "3-1", "0-", "0,,1", "0-1 ", "a", "99999999999999999999999", "70000", "0\n1"]
        {
            assert!(parse_cpu_list(bad).is_err(), "{bad:?}");
        }
    }
}
