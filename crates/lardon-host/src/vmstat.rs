//! `/proc/vmstat`: swap page counters.

use lardon::SwapCounters;

use crate::parse::{ParseError, parse_u64};

/// Parses `pswpin` and `pswpout` from `/proc/vmstat` (`name value` lines).
///
/// # Errors
/// [`ParseError`] when either is missing, duplicated or malformed.
pub fn parse_vmstat_swap(text: &str) -> Result<SwapCounters, ParseError> {
    let (mut pages_in, mut pages_out) = (None, None);
    for line in text.lines() {
        let Some((key, value)) = line.split_once(' ') else { continue };
        let slot = match key {
            "pswpin" => &mut pages_in,
            "pswpout" => &mut pages_out,
            _ => continue,
        };
        if slot.replace(parse_u64(key, value)?).is_some() {
            return Err(ParseError::Duplicate(key.to_owned()));
        }
    }
    Ok(SwapCounters {
        pages_in: pages_in.ok_or_else(|| ParseError::Missing("pswpin".to_owned()))?,
        pages_out: pages_out.ok_or_else(|| ParseError::Missing("pswpout".to_owned()))?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_recorded_file() {
        let s = parse_vmstat_swap(include_str!("../tests/fixtures/proc/vmstat")).unwrap();
        assert_eq!(s, SwapCounters { pages_in: 12, pages_out: 345 });
    }

    #[test]
    fn rejects_malformed() {
        for bad in [
            "pswpin 1\n",
            "pswpout 1\n",
            "pswpin -1\npswpout 1\n",
            "pswpin +1\npswpout 1\n",
            "pswpin 1 2\npswpout 1\n",
            "pswpin 1\npswpout 99999999999999999999999\n",
            "pswpin 1\npswpin 1\npswpout 1\n",
        ] {
            assert!(parse_vmstat_swap(bad).is_err(), "{bad:?}");
        }
    }
}
