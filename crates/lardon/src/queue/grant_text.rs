//! # Implementation details
//!
//! A grant's recorded message, "batch N, X memory, Y CPUs", written when
//! an observer reads it (see `state::Note`).

/// "batch N, X memory, Y CPUs": a grant's recorded message, written when
/// an observer reads it (a view, or an event for a subscriber), in one
/// allocation and without float formatting.
pub(crate) fn granted_message(batch: u64, memory: u64, cpu_millis: u32) -> String {
    use std::fmt::Write;
    let mut m = String::with_capacity(48);
    let _ = write!(m, "batch {batch}, ");
    write_bytes(&mut m, memory);
    m.push_str(" memory, ");
    crate::units::write_cpus(&mut m, cpu_millis);
    m.push_str(" CPUs");
    m
}

/// Writes exactly what [`crate::units::format_bytes`] returns, in integer
/// arithmetic: `{:.1}` of the exact quotient, ties to even (the quotient
/// of an integer by a power of two is exact in an `f64` up to 2^53 bytes;
/// above, the float version is used).
fn write_bytes(out: &mut String, bytes: u64) {
    use std::fmt::Write;
    const NAMES: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        let _ = write!(out, "{bytes} B");
        return;
    }
    if bytes >= 1 << 53 {
        out.push_str(&crate::units::format_bytes(bytes));
        return;
    }
    let mut unit = 0;
    while unit + 1 < NAMES.len() && bytes >> (10 * (unit + 2)) > 0 {
        unit += 1;
    }
    let shift = 10 * (unit as u32 + 1);
    let scaled = u128::from(bytes) * 10;
    let mut tenths = scaled >> shift;
    let rest = scaled & ((1u128 << shift) - 1);
    let half = 1u128 << (shift - 1);
    if rest > half || (rest == half && tenths % 2 == 1) {
        tenths += 1;
    }
    let _ = write!(out, "{}.{} {}", tenths / 10, tenths % 10, NAMES[unit]);
}

#[cfg(all(test, not(loom)))]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::{granted_message, write_bytes};

    /// A grant's recorded message says what `format_bytes` and
    /// `format_cpus` say, whole and fractional CPUs alike.
    #[test]
    fn granted_message_matches_the_formatters() {
        use crate::{
            Estimate, FakeClock, FakeProbe, Governor, HostPolicy, HostProfile, MonoTime, format_bytes,
            format_cpus,
        };
        let profile = HostProfile::new(64 << 30, 16);
        // A fake clock that stamps the snapshots: with the system clock, an
        // unstamped snapshot is stale once the test binary has run a second
        // (a busy machine's full suite), and nothing is admitted.
        let clock = std::sync::Arc::new(FakeClock::new(MonoTime(1_000_000_000)));
        let probe = FakeProbe::new(profile.clone()).stamped_by(clock.clone());
        let governor = Governor::with_clock(HostPolicy::default_for(&profile), probe, clock).unwrap();
        for (memory, millis) in [(1u64 << 20, 100u32), (3 << 30, 1000), (1536, 2500), (5 << 30, 1005)] {
            let estimate = Estimate::builder().memory(memory).cpu_millis(millis).build();
            let r = governor.reserve_available(&estimate).expect("admitted");
            let c = r.contract();
            let expected = format!(
                "batch {}, {} memory, {} CPUs",
                c.batch,
                format_bytes(c.memory),
                format_cpus(c.cpu_millis)
            );
            assert_eq!(granted_message(c.batch, c.memory, c.cpu_millis), expected);
        }
    }

    /// The integer writer says exactly what `format_bytes` says: unit
    /// boundaries, ties (1280 B = 1.25 KiB), and a spread of other values.
    #[test]
    fn write_bytes_matches_format_bytes() {
        let mut values: Vec<u64> = vec![0, 1, 1023, 1024, 1075, 1126, 1280, 1331, 1_048_575, 1_048_576];
        for k in 1..=5u32 {
            let unit = 1u64 << (10 * k);
            for m in [1u64, 3, 5, 7, 999, 1023, 1024] {
                values.extend([unit * m, unit * m - 1, unit * m + unit / 20, unit * m + unit / 2]);
            }
        }
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            values.push(x >> (x % 50));
        }
        for v in values {
            let mut mine = String::new();
            write_bytes(&mut mine, v);
            assert_eq!(mine, crate::units::format_bytes(v), "{v} bytes");
        }
    }
}
