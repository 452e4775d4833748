//! `/proc/pressure/{cpu,memory,io}` (PSI).

use crate::parse::{ParseError, parse_decimal, parse_u64};

/// Parses a PSI file and returns `some avg10` (0–100).
///
/// Each line must be `some|full avg10=D avg60=D avg300=D total=N`; the
/// `some` line is required, the `full` line optional.
///
/// # Errors
/// [`ParseError`] on any deviation.
pub fn parse_psi_some_avg10(text: &str) -> Result<f64, ParseError> {
    let mut some = None;
    let mut full_seen = false;
    for line in text.lines() {
        let mut parts = line.split(' ');
        let kind = parts.next().unwrap_or_default();
        let mut values = [0.0; 3];
        for (key, slot) in ["avg10", "avg60", "avg300"].iter().zip(values.iter_mut()) {
            let field = parts.next().ok_or_else(|| ParseError::Missing(format!("{kind} {key}")))?;
            let value = field
                .strip_prefix(key)
                .and_then(|v| v.strip_prefix('='))
                .ok_or_else(|| ParseError::Junk(field.to_owned()))?;
            *slot = parse_decimal(key, value)?;
            if *slot > 100.0 {
                return Err(ParseError::Invalid { field: (*key).to_owned(), value: value.to_owned() });
            }
        }
        let total = parts.next().ok_or_else(|| ParseError::Missing(format!("{kind} total")))?;
        let total = total.strip_prefix("total=").ok_or_else(|| ParseError::Junk(total.to_owned()))?;
        parse_u64("total", total)?;
        if let Some(extra) = parts.next() {
            return Err(ParseError::Junk(extra.to_owned()));
        }
        let seen = match kind {
            "some" => some.replace(values[0]).is_some(),
            "full" => std::mem::replace(&mut full_seen, true),
            other => return Err(ParseError::Junk(other.to_owned())),
        };
        if seen {
            return Err(ParseError::Duplicate(kind.to_owned()));
        }
    }
    some.ok_or_else(|| ParseError::Missing("some".to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_recorded_files() {
        let cpu = include_str!("../tests/fixtures/proc/pressure/cpu");
        let memory = include_str!("../tests/fixtures/proc/pressure/memory");
        assert_eq!(parse_psi_some_avg10(cpu), Ok(1.87));
        assert_eq!(parse_psi_some_avg10(memory), Ok(0.04));
        // Older kernels have no `full` line for cpu.
        assert_eq!(parse_psi_some_avg10("some avg10=3.50 avg60=0.00 avg300=0.00 total=1\n"), Ok(3.5));
    }

    #[test]
    fn rejects_malformed() {
        for bad in [
            "",
            "full avg10=0.00 avg60=0.00 avg300=0.00 total=0",
            "some avg10=-1.00 avg60=0.00 avg300=0.00 total=0",
            "some avg10=+1.00 avg60=0.00 avg300=0.00 total=0",
            "some avg10=100.01 avg60=0.00 avg300=0.00 total=0",
            "some avg10=1.00 avg60=0.00 avg300=0.00",
            "some avg10=1.00 avg60=0.00 avg300=0.00 total=0 junk",
            "some avg60=0.00 avg10=1.00 avg300=0.00 total=0",
            "some avg10=1.00 avg60=0.00 avg300=0.00 total=99999999999999999999999",
            "some avg10=1.00 avg60=0.00 avg300=0.00 total=0\nsome avg10=1.00 avg60=0.00 avg300=0.00 total=0",
            "many avg10=1.00 avg60=0.00 avg300=0.00 total=0",
        ] {
            assert!(parse_psi_some_avg10(bad).is_err(), "{bad:?}");
        }
    }
}
