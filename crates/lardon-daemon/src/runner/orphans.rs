//! Run handles persisted in the store, and killing the processes of runs a
//! crash left behind (DESIGN.md §10 crash recovery).

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// What the store keeps about a live local run: its process group and the
/// start time of the group leader (`/proc/PID/stat` field 22), so that a
/// recycled pid is never mistaken for our run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunHandle {
    /// Process group id (= the leader's pid).
    pub pgid: u32,
    /// Leader start time in clock ticks since boot, when readable.
    pub start: Option<u64>,
}

impl RunHandle {
    /// `pgid:<n>[:start:<t>]`.
    pub fn encode(&self) -> String {
        match self.start {
            Some(t) => format!("pgid:{}:start:{t}", self.pgid),
            None => format!("pgid:{}", self.pgid),
        }
    }

    /// Parses [`RunHandle::encode`]'s form.
    pub fn decode(text: &str) -> Option<RunHandle> {
        let mut parts = text.split(':');
        if parts.next()? != "pgid" {
            return None;
        }
        let pgid = parts.next()?.parse().ok()?;
        let start = match (parts.next(), parts.next()) {
            (Some("start"), Some(t)) => Some(t.parse().ok()?),
            _ => None,
        };
        Some(RunHandle { pgid, start })
    }
}

/// Start time (field 22 of `/proc/PID/stat`) of `pid`, if it exists.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces: parse after its `)`.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Kills the process group of an orphaned run, unless its pid now belongs
/// to another process (different start time). Returns whether it signalled.
pub fn kill_orphan(handle: &str) -> bool {
    let Some(h) = RunHandle::decode(handle) else { return false };
    if h.pgid <= 1 {
        return false;
    }
    match (start_time(h.pgid), h.start) {
        // The leader lives but is someone else now: not ours.
        (Some(now), Some(then)) if now != then => return false,
        _ => {}
    }
    let Ok(raw) = i32::try_from(h.pgid) else { return false };
    killpg(Pid::from_raw(raw), Signal::SIGKILL).is_ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip() {
        for h in [RunHandle { pgid: 42, start: Some(7) }, RunHandle { pgid: 9, start: None }] {
            assert_eq!(RunHandle::decode(&h.encode()), Some(h));
        }
        assert_eq!(RunHandle::decode("junk"), None);
        assert!(start_time(std::process::id()).is_some());
        assert!(!kill_orphan("pgid:1"));
    }
}
