//! `/proc/loadavg`.

use lardon::LoadAverage;

use crate::parse::{ParseError, one_line, parse_decimal, parse_u64};

/// Parses `/proc/loadavg` (`0.46 0.22 0.10 1/83 3972`): exactly five fields.
///
/// # Errors
/// [`ParseError`] on a missing field, a sign, or trailing junk.
pub fn parse_loadavg(text: &str) -> Result<LoadAverage, ParseError> {
    let line = one_line("loadavg", text)?;
    let fields: Vec<&str> = line.split(' ').collect();
    let [one, five, fifteen, tasks, last_pid] = fields[..] else {
        return Err(if fields.len() < 5 {
            ParseError::Missing(format!("loadavg field {}", fields.len() + 1))
        } else {
            ParseError::Junk(line.to_owned())
        });
    };
    let (running, total) = tasks.split_once('/').ok_or_else(|| ParseError::Junk(tasks.to_owned()))?;
    parse_u64("loadavg running", running)?;
    parse_u64("loadavg tasks", total)?;
    parse_u64("loadavg last pid", last_pid)?;
    Ok(LoadAverage {
        one: parse_decimal("load1", one)?,
        five: parse_decimal("load5", five)?,
        fifteen: parse_decimal("load15", fifteen)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_recorded_file() {
        let l = parse_loadavg(include_str!("../tests/fixtures/proc/loadavg")).unwrap();
        assert_eq!((l.one, l.five, l.fifteen), (0.46, 0.22, 0.10));
    }

    #[test]
    fn rejects_malformed() {
        for bad in [
            "",
            "0.46 0.22",
            "0.46 0.22 0.10 1/83",
            "-0.46 0.22 0.10 1/83 3972",
            "+0.46 0.22 0.10 1/83 3972",
            "0.46 0.22 0.10 1/83 3972 junk",
            "0.46 0.22 0.10 1/83 3972x",
            "0.46  0.22 0.10 1/83 3972",
            "0.46 0.22 0.10 183 3972",
            "1e3 0.22 0.10 1/83 3972",
            "0.46 0.22 0.10 1/83 99999999999999999999999",
            "0.46 0.22 0.10 1/83 3972\n\n",
        ] {
            assert!(parse_loadavg(bad).is_err(), "{bad:?}");
        }
    }
}
