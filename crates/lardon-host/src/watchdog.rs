//! The RSS watchdog's one kill rule, shared by every watchdog that
//! samples a task's summed resident memory instead of leaving the limit
//! to a cgroup: the daemon's cgroup-less backend
//! ([`NoneEnforcer`](crate::NoneEnforcer)) and a cluster agent's soft
//! enforcement (docs/DESIGN.md §3, §14).
//!
//! A task is killed once its sampled RSS exceeds its limit plus a
//! [`tolerance`] of 5 % of the limit, at least [`MIN_TOLERANCE`]. The
//! sample sums `VmRSS` over the task's process tree ([`ProcessTree`]),
//! which counts a shared page (a library, a forked parent's heap) once
//! per process that maps it, where a cgroup charges it once: an honest
//! task of several processes reads a little over what the kernel would
//! charge it, and the slack keeps the watchdog from killing a task the
//! cgroup backends would have let run. The rule is pure, so its tests
//! need no process.
//!
//! [`ProcessTree`]: crate::ProcessTree

/// The least slack over a limit: 8 MiB.
pub const MIN_TOLERANCE: u64 = 8 << 20;

/// How far past `limit` bytes a task may go before a watchdog kills it:
/// 5 % of the limit, at least [`MIN_TOLERANCE`].
#[must_use]
pub fn tolerance(limit: u64) -> u64 {
    (limit / 20).max(MIN_TOLERANCE)
}

/// Whether `used` bytes of summed RSS break a limit of `limit` bytes:
/// more than `limit` + [`tolerance`]. A limit of 0 (nothing declared) or
/// `u64::MAX` (none set) is never broken.
#[must_use]
pub fn over_limit(used: u64, limit: u64) -> bool {
    limit > 0 && used > limit.saturating_add(tolerance(limit))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn the_rule_allows_the_tolerance_and_nothing_more() {
        // 5 % of the limit, at least 8 MiB.
        assert_eq!(tolerance(64 * MIB), 8 * MIB);
        assert_eq!(tolerance(1024 * MIB), 1024 * MIB / 20);
        assert!(!over_limit(64 * MIB, 64 * MIB));
        assert!(!over_limit(72 * MIB, 64 * MIB), "within the tolerance");
        assert!(over_limit(72 * MIB + 1, 64 * MIB), "one byte past it");
        assert!(!over_limit(1075 * MIB, 1024 * MIB));
        assert!(over_limit(1076 * MIB, 1024 * MIB));
        assert!(!over_limit(u64::MAX, 0), "nothing declared: nothing to hold it to");
        assert!(!over_limit(u64::MAX, u64::MAX), "no limit set; no overflow at the top");
    }
}
