//! Strict number parsing shared by every parser of this crate.
//!
//! Kernel files are machine-written; anything unexpected (a sign, an
//! exponent, trailing junk, an overflow) is an error, never a guess.

use thiserror::Error;

/// Why a kernel file could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ParseError {
    /// A field the parser needs is absent.
    #[error("missing field {0}")]
    Missing(String),
    /// A field appears twice.
    #[error("duplicate field {0}")]
    Duplicate(String),
    /// A value is not a well-formed unsigned number.
    #[error("invalid value {value:?} for {field}")]
    Invalid {
        /// The field being parsed.
        field: String,
        /// The offending text.
        value: String,
    },
    /// A value does not fit.
    #[error("value of {0} overflows")]
    Overflow(String),
    /// Unexpected content.
    #[error("unexpected content {0:?}")]
    Junk(String),
}

fn invalid(field: &str, value: &str) -> ParseError {
    ParseError::Invalid { field: field.to_owned(), value: value.chars().take(64).collect() }
}

/// Parses a non-empty run of ASCII digits (no sign, no spaces) as `u64`.
///
/// # Errors
/// [`ParseError::Invalid`] for anything but digits, [`ParseError::Overflow`]
/// past `u64::MAX`.
pub(crate) fn parse_u64(field: &str, text: &str) -> Result<u64, ParseError> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid(field, text));
    }
    text.parse::<u64>().map_err(|_| ParseError::Overflow(field.to_owned()))
}

/// Parses an unsigned decimal `D+` or `D+.D+` (no sign, no exponent).
///
/// # Errors
/// [`ParseError::Invalid`] for any other shape.
pub(crate) fn parse_decimal(field: &str, text: &str) -> Result<f64, ParseError> {
    let (int, frac) = match text.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (text, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(int) || frac.is_some_and(|f| !digits(f)) || int.len() > 30 {
        return Err(invalid(field, text));
    }
    text.parse::<f64>().map_err(|_| invalid(field, text))
}

/// Strips exactly one optional trailing newline (kernel files end with one).
pub(crate) fn one_line<'a>(field: &str, text: &'a str) -> Result<&'a str, ParseError> {
    let line = text.strip_suffix('\n').unwrap_or(text);
    if line.contains('\n') {
        return Err(ParseError::Junk(format!("{field}: more than one line")));
    }
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsigned_integers_are_strict() {
        assert_eq!(parse_u64("x", "0"), Ok(0));
        assert_eq!(parse_u64("x", "18446744073709551615"), Ok(u64::MAX));
        assert_eq!(parse_u64("x", "18446744073709551616"), Err(ParseError::Overflow("x".into())));
        for bad in ["", "+1", "-1", " 1", "1 ", "1a", "0x10", "1.0"] {
            assert!(matches!(parse_u64("x", bad), Err(ParseError::Invalid { .. })), "{bad:?}");
        }
    }

    #[test]
    fn decimals_are_strict() {
        assert_eq!(parse_decimal("x", "1.87"), Ok(1.87));
        assert_eq!(parse_decimal("x", "12"), Ok(12.0));
        for bad in ["", "-0.5", "+0.5", "1e3", ".5", "5.", "1.2.3", "nan", "inf", "1,5", " 1"] {
            assert!(parse_decimal("x", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn one_line_rejects_extra_lines() {
        assert_eq!(one_line("f", "max\n"), Ok("max"));
        assert_eq!(one_line("f", "max"), Ok("max"));
        assert!(one_line("f", "max\n1\n").is_err());
    }
}
