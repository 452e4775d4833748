//! Human units: byte sizes ("2GiB", "512MiB", "1.5GB") and CPU counts
//! ("0.25", "2", "500m"), parsed strictly and formatted back.
//!
//! Every parser here is total: any input yields a value or a [`UnitError`]
//! that says what was wrong, never a panic or a silent guess.

use thiserror::Error;

/// Why a human-unit string was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum UnitError {
    /// Nothing but whitespace was given.
    #[error("empty value: expected a number such as `2GiB` or `512MiB`")]
    Empty,
    /// The numeric part could not be read.
    #[error("`{0}` is not a number (expected e.g. `2GiB`, `1.5GB`, `4096`)")]
    BadNumber(String),
    /// The suffix is not a unit we know.
    #[error("unknown unit `{0}` (use B, KiB, MiB, GiB, TiB, kB, MB, GB, TB)")]
    BadUnit(String),
    /// The value does not fit in 64 bits.
    #[error("`{0}` is too large")]
    Overflow(String),
    /// A negative value was given where only sizes make sense.
    #[error("`{0}` is negative")]
    Negative(String),
    /// More than three decimals of a CPU (sizes are rounded instead).
    #[error("`{0}` is more precise than the unit allows")]
    TooPrecise(String),
    /// A fraction of a size counted in bytes (`0.5B`, `1.5`): there is no
    /// half byte to round to, so it is a mistake (a float where a unit was
    /// meant), not a size.
    #[error("`{0}` is not a whole number of bytes (write a unit, e.g. `1.5GiB`, or whole bytes)")]
    NotWholeBytes(String),
}

const UNITS: &[(&str, u64)] = &[
    ("", 1),
    ("b", 1),
    ("k", 1_000),
    ("kb", 1_000),
    ("m", 1_000_000),
    ("mb", 1_000_000),
    ("g", 1_000_000_000),
    ("gb", 1_000_000_000),
    ("t", 1_000_000_000_000),
    ("tb", 1_000_000_000_000),
    ("ki", 1 << 10),
    ("kib", 1 << 10),
    ("mi", 1 << 20),
    ("mib", 1 << 20),
    ("gi", 1 << 30),
    ("gib", 1 << 30),
    ("ti", 1 << 40),
    ("tib", 1 << 40),
];

/// A decimal number split into its integer part and up to 18 fraction digits,
/// kept exact so that "1.5GiB" is exactly 1 610 612 736 bytes.
struct Decimal {
    int: u64,
    frac: u64,
    frac_digits: u32,
    /// Digits beyond the 18th were dropped (never a whole byte: the largest
    /// unit is 2^40, so they weigh less than 10^-5 of a byte).
    truncated: bool,
}

/// Fraction digits kept: 10^18 still fits a u64.
const MAX_FRAC_DIGITS: usize = 18;

fn parse_decimal(text: &str, original: &str) -> Result<Decimal, UnitError> {
    if text.starts_with('-') {
        return Err(UnitError::Negative(original.to_owned()));
    }
    let bad = || UnitError::BadNumber(original.to_owned());
    let (int_part, frac_part) = match text.split_once('.') {
        Some((i, f)) => (i, f),
        None => (text, ""),
    };
    if int_part.is_empty() && frac_part.is_empty() {
        return Err(bad());
    }
    if !int_part.bytes().all(|b| b.is_ascii_digit()) || !frac_part.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    if text.ends_with('.') {
        return Err(bad());
    }
    let int = if int_part.is_empty() {
        0
    } else {
        int_part.parse::<u64>().map_err(|_| UnitError::Overflow(original.to_owned()))?
    };
    let frac_part = frac_part.trim_end_matches('0');
    let truncated = frac_part.len() > MAX_FRAC_DIGITS;
    let frac_part = &frac_part[..frac_part.len().min(MAX_FRAC_DIGITS)];
    let frac = if frac_part.is_empty() { 0 } else { frac_part.parse::<u64>().map_err(|_| bad())? };
    Ok(Decimal { int, frac, frac_digits: frac_part.len() as u32, truncated })
}

/// Parses a byte size such as `2GiB`, `512 MiB`, `1.5GB`, `64k` or `4096`.
///
/// Binary suffixes (`KiB`, `MiB`, `GiB`, `TiB`, or `Ki`…) are powers of
/// 1024, decimal ones (`kB`, `MB`, `GB`, `TB`, or `k`…) powers of 1000; case
/// is ignored. A fraction of a larger unit that is not a whole number of
/// bytes (`1.1GiB` is 1 181 116 006.4 bytes) is rounded to the nearest
/// byte, halves up: people write sizes to a few digits, and a byte either
/// way never matters. A fraction of a size in bytes (`0.5B`, a bare `1.5`)
/// is refused: it is a float where a unit was meant.
///
/// # Errors
/// [`UnitError`] naming what was wrong: empty, not a number, unknown unit,
/// negative, too large, or a fraction of a byte.
///
/// # Examples
/// ```
/// assert_eq!(lardon::parse_bytes("2GiB").unwrap(), 2 << 30);
/// assert_eq!(lardon::parse_bytes("1.5 KiB").unwrap(), 1536);
/// assert_eq!(lardon::parse_bytes("1.1GiB").unwrap(), 1_181_116_006);
/// assert!(lardon::parse_bytes("2 parsecs").is_err());
/// ```
pub fn parse_bytes(text: &str) -> Result<u64, UnitError> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(UnitError::Empty);
    }
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    if number.starts_with('+') {
        return Err(UnitError::BadNumber(text.to_owned()));
    }
    let unit_lower = unit.trim().to_ascii_lowercase();
    let multiplier = UNITS
        .iter()
        .find(|(name, _)| *name == unit_lower)
        .map(|(_, m)| *m)
        .ok_or_else(|| UnitError::BadUnit(unit.trim().to_owned()))?;
    let dec = parse_decimal(number, text)?;
    if multiplier == 1 && (dec.frac != 0 || dec.truncated) {
        return Err(UnitError::NotWholeBytes(text.to_owned()));
    }
    let overflow = || UnitError::Overflow(text.to_owned());
    let whole = dec.int.checked_mul(multiplier).ok_or_else(overflow)?;
    if dec.frac == 0 {
        return Ok(whole);
    }
    let scale = 10u128.pow(dec.frac_digits);
    let frac_bytes = u128::from(dec.frac) * u128::from(multiplier);
    // Nearest whole byte, halves up.
    let rounded = (frac_bytes + scale / 2) / scale;
    let frac_bytes = u64::try_from(rounded).map_err(|_| overflow())?;
    whole.checked_add(frac_bytes).ok_or_else(overflow)
}

/// Parses a CPU count into thousandths of a CPU ("millicpus", as in
/// Kubernetes): `2` → 2000, `0.25` → 250, `500m` → 500.
///
/// # Errors
/// [`UnitError`] when the text is empty, not a number, negative, finer than
/// a thousandth, or too large.
///
/// # Examples
/// ```
/// assert_eq!(lardon::parse_cpus("0.25").unwrap(), 250);
/// assert_eq!(lardon::parse_cpus("750m").unwrap(), 750);
/// ```
pub fn parse_cpus(text: &str) -> Result<u32, UnitError> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(UnitError::Empty);
    }
    if let Some(millis) = trimmed.strip_suffix('m') {
        if millis.starts_with('-') {
            return Err(UnitError::Negative(text.to_owned()));
        }
        if millis.is_empty() || !millis.bytes().all(|b| b.is_ascii_digit()) {
            return Err(UnitError::BadNumber(text.to_owned()));
        }
        return millis.parse::<u32>().map_err(|_| UnitError::Overflow(text.to_owned()));
    }
    let dec = parse_decimal(trimmed, text)?;
    if dec.frac_digits > 3 || dec.truncated {
        return Err(UnitError::TooPrecise(text.to_owned()));
    }
    let frac_millis = dec.frac * 10u64.pow(3 - dec.frac_digits);
    let millis = dec
        .int
        .checked_mul(1000)
        .and_then(|v| v.checked_add(frac_millis))
        .ok_or_else(|| UnitError::Overflow(text.to_owned()))?;
    u32::try_from(millis).map_err(|_| UnitError::Overflow(text.to_owned()))
}

/// Formats a byte count with a binary unit and at most one decimal:
/// `3221225472` → `"3.0 GiB"`, `512` → `"512 B"`.
pub fn format_bytes(bytes: u64) -> String {
    const NAMES: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < NAMES.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", NAMES[unit])
}

/// Formats millicpus as a CPU count: `2000` → `"2"`, `250` → `"0.25"`.
pub fn format_cpus(millis: u32) -> String {
    let mut out = String::new();
    write_cpus(&mut out, millis);
    out
}

/// Appends what [`format_cpus`] returns to `out` (admission messages are
/// written under the queue's locks on every grant: no temporary string).
pub(crate) fn write_cpus(out: &mut String, millis: u32) {
    use std::fmt::Write;
    if millis.is_multiple_of(1000) {
        let _ = write!(out, "{}", millis / 1000);
    } else {
        // The thousandths without their trailing zeros.
        let (mut frac, mut width) = (millis % 1000, 3);
        while frac.is_multiple_of(10) {
            frac /= 10;
            width -= 1;
        }
        let _ = write!(out, "{}.{frac:0width$}", millis / 1000);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_and_decimal_suffixes() {
        assert_eq!(parse_bytes("2GiB"), Ok(2 << 30));
        assert_eq!(parse_bytes("512MiB"), Ok(512 << 20));
        assert_eq!(parse_bytes("512 mib"), Ok(512 << 20));
        assert_eq!(parse_bytes("1GB"), Ok(1_000_000_000));
        assert_eq!(parse_bytes("64k"), Ok(64_000));
        assert_eq!(parse_bytes("64Ki"), Ok(65_536));
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("4096B"), Ok(4096));
        assert_eq!(parse_bytes("1.5GiB"), Ok(1_610_612_736));
        assert_eq!(parse_bytes("0.5KiB"), Ok(512));
        assert_eq!(parse_bytes(".5KiB"), Ok(512));
        assert_eq!(parse_bytes("1.50KiB"), Ok(1536));
    }

    /// Sizes people write are rounded to the nearest byte, not refused.
    /// Break it to see it fail: bring back the refusal of a fraction of a
    /// byte (`1.1GiB` was "more precise than the unit allows").
    #[test]
    fn fractions_of_a_byte_round_to_the_nearest() {
        assert_eq!(parse_bytes("1.6GiB"), Ok(1_717_986_918)); // 1 717 986 918.4
        assert_eq!(parse_bytes("1.1GiB"), Ok(1_181_116_006)); // 1 181 116 006.4
        assert_eq!(parse_bytes("0.1GiB"), Ok(107_374_182)); // 107 374 182.4
        assert_eq!(parse_bytes("0.0000000000000000000001TiB"), Ok(0));
        assert_eq!(parse_bytes("1.0000000000000000000001KiB"), Ok(1024));
    }

    proptest::proptest! {
        /// Any decimal with up to three fraction digits, in any unit
        /// larger than a byte, parses, and lands within half a byte of its exact value.
        #[test]
        fn decimals_with_three_digits_parse_and_round(
            int in 0u64..1_000_000,
            frac in 0u64..1000,
            digits in 1u32..=3,
            unit in proptest::sample::select(UNITS.iter().copied().filter(|u| u.1 > 1).collect::<Vec<_>>()),
        ) {
            let frac = frac % 10u64.pow(digits);
            let text = format!("{int}.{frac:0width$}{}", unit.0, width = digits as usize);
            let got = parse_bytes(&text);
            proptest::prop_assert!(got.is_ok(), "{text}: {got:?}");
            let got = u128::from(got.unwrap_or_default());
            // Exact value in units of 10^-digits bytes, compared in integers.
            let scale = 10u128.pow(digits);
            let exact = (u128::from(int) * scale + u128::from(frac)) * u128::from(unit.1);
            let twice_error = (got * scale * 2).abs_diff(exact * 2);
            proptest::prop_assert!(twice_error <= scale, "{text} → {got}, exact {exact}/{scale}");
            // Halves go up: never below when exactly half way.
            proptest::prop_assert!(got * scale * 2 + scale > exact * 2, "{text} rounded down from a half");
        }
    }

    /// A fraction of a size in bytes is refused, not rounded: `0.5B` or a
    /// bare `1.5` (a TOML float without a unit) is a float where a unit was
    /// meant. Break it to see it fail: drop the `multiplier == 1` check in
    /// `parse_bytes` (they round to 1 and 2 again).
    #[test]
    fn fractions_of_a_byte_are_refused() {
        for text in ["0.5B", "1.5", "0.4999B", "2.5 b", "0.3B", "1.0000000000000000000001"] {
            assert_eq!(parse_bytes(text), Err(UnitError::NotWholeBytes(text.to_owned())), "{text}");
        }
        assert_eq!(parse_bytes("2.0"), Ok(2));
        assert_eq!(parse_bytes("2.000B"), Ok(2));
    }

    #[test]
    fn malformed_sizes_are_refused_with_a_reason() {
        assert_eq!(parse_bytes(""), Err(UnitError::Empty));
        assert_eq!(parse_bytes("  "), Err(UnitError::Empty));
        assert!(matches!(parse_bytes("GiB"), Err(UnitError::BadNumber(_))));
        assert!(matches!(parse_bytes("2 parsecs"), Err(UnitError::BadUnit(_))));
        assert!(matches!(parse_bytes("-1GiB"), Err(UnitError::Negative(_))));
        assert!(matches!(parse_bytes("+1GiB"), Err(UnitError::BadNumber(_))));
        assert!(matches!(parse_bytes("1.2.3"), Err(UnitError::BadNumber(_))));
        assert!(matches!(parse_bytes("1."), Err(UnitError::BadNumber(_))));
        assert!(matches!(parse_bytes("99999999999TiB"), Err(UnitError::Overflow(_))));
        assert!(matches!(parse_bytes("18446744073709551616"), Err(UnitError::Overflow(_))));
        assert_eq!(parse_bytes("18446744073709551615"), Ok(u64::MAX));
    }

    #[test]
    fn cpus_in_thousandths() {
        assert_eq!(parse_cpus("1"), Ok(1000));
        assert_eq!(parse_cpus("0.25"), Ok(250));
        assert_eq!(parse_cpus("2.5"), Ok(2500));
        assert_eq!(parse_cpus("750m"), Ok(750));
        assert!(matches!(parse_cpus("0.0001"), Err(UnitError::TooPrecise(_))));
        assert!(matches!(parse_cpus("-1"), Err(UnitError::Negative(_))));
        assert!(matches!(parse_cpus("x"), Err(UnitError::BadNumber(_))));
        assert!(matches!(parse_cpus("m"), Err(UnitError::BadNumber(_))));
        assert!(matches!(parse_cpus("9999999"), Err(UnitError::Overflow(_))));
    }

    #[test]
    fn formatting_round_trips_readably() {
        assert_eq!(format_bytes(512), "512 B");
        assert_eq!(format_bytes(3 << 30), "3.0 GiB");
        assert_eq!(format_bytes(1536), "1.5 KiB");
        assert_eq!(format_cpus(2000), "2");
        assert_eq!(format_cpus(250), "0.25");
        assert_eq!(format_cpus(1500), "1.5");
    }

    /// CPUs print as the shortest decimal of the thousandths: no trailing
    /// zeros, no point for whole CPUs, leading zeros of the fraction kept.
    #[test]
    fn cpus_print_without_trailing_zeros() {
        for (millis, text) in
            [(0, "0"), (5, "0.005"), (100, "0.1"), (999, "0.999"), (1050, "1.05"), (12_340, "12.34")]
        {
            assert_eq!(format_cpus(millis), text);
        }
        for millis in (0..100_000).chain([u32::MAX - 1, u32::MAX]) {
            let text = format_cpus(millis);
            let back = parse_cpus(&text).ok();
            assert_eq!(back, Some(millis), "{millis} -> {text}");
            assert!(!text.contains('.') || !text.ends_with('0'), "{millis} -> {text}");
        }
    }
}
