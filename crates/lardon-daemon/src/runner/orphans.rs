//! Killing the processes of runs a crash left behind (their handles are
//! [`crate::handle`]'s) (docs/DESIGN.md §10 crash recovery).

use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError, RwLock};

use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

/// Held (shared) while a run's main child is spawned and registered in
/// [`OWNED`]; the reaper holds it exclusively while it reaps, so a child it
/// reaps is never one between its fork and its registration.
static SPAWNING: RwLock<()> = RwLock::new(());

/// Pids whose exit status belongs to a waiter (the runner waits on each
/// run's main child): the reaper leaves them alone.
static OWNED: Mutex<BTreeSet<u32>> = Mutex::new(BTreeSet::new());

/// Spawns a child whose exit status its caller will wait for, registered so
/// that [`reap_orphans`] never steals it; [`disown`] it once waited for.
///
/// # Errors
/// Whatever `spawn` returns.
pub fn spawn_owned<T, E>(spawn: impl FnOnce() -> Result<T, E>, pid: impl Fn(&T) -> u32) -> Result<T, E> {
    let _guard = SPAWNING.read().unwrap_or_else(PoisonError::into_inner);
    let child = spawn()?;
    OWNED.lock().unwrap_or_else(PoisonError::into_inner).insert(pid(&child));
    Ok(child)
}

/// Ends the registration of [`spawn_owned`], after the child was reaped.
pub fn disown(pid: u32) {
    OWNED.lock().unwrap_or_else(PoisonError::into_inner).remove(&pid);
}

/// Reaps every zombie child that no one waits for: helpers our tasks left
/// behind (double-forked, `setsid`, own process group) that the kernel
/// re-parented to us as a child subreaper. Left alone: children registered
/// by [`spawn_owned`], and children in our own process group (helpers the
/// daemon runs itself, such as a scratch drain hook, whose spawner waits
/// for them). Called on every SIGCHLD. Returns how many it reaped.
///
/// The scan of `/proc` runs without blocking spawns: every SIGCHLD of a
/// run's own end comes here, and a scan under the exclusive lock held up
/// the next run's spawn for its whole length. Only the zombies the scan
/// found unowned are looked at again under the exclusive lock (usually
/// none, so the lock is not taken at all): a child forked before the lock
/// was taken is registered by then, so ownership and group are checked
/// afresh there before anything is reaped.
pub fn reap_orphans() -> usize {
    if !any_zombie() {
        // The common SIGCHLD: a run's own child, already reaped by its
        // runner. Nothing to scan for.
        return 0;
    }
    let own_group = nix::unistd::getpgrp().as_raw();
    let unowned_zombies = |pids: &[u32]| -> Vec<u32> {
        let owned = OWNED.lock().unwrap_or_else(PoisonError::into_inner).clone();
        pids.iter()
            .copied()
            .filter(|pid| !owned.contains(pid))
            .filter(|&pid| {
                state_and_group(pid).is_some_and(|(state, pgrp)| state == 'Z' && pgrp != own_group)
            })
            .collect()
    };
    let candidates = unowned_zombies(&children());
    if candidates.is_empty() {
        return 0;
    }
    let _guard = SPAWNING.write().unwrap_or_else(PoisonError::into_inner);
    let mut reaped = 0;
    for pid in unowned_zombies(&candidates) {
        let Ok(raw) = i32::try_from(pid) else { continue };
        if let Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) =
            waitpid(Pid::from_raw(raw), Some(WaitPidFlag::WNOHANG))
        {
            reaped += 1;
        }
    }
    reaped
}

/// Whether any child of ours has ended and not been reaped yet (looked at
/// with `WNOWAIT`: nothing is reaped here). One syscall instead of the
/// scan of `/proc` when the answer is no.
fn any_zombie() -> bool {
    use nix::sys::wait::{Id, waitid};
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    // An error (ECHILD: no child at all) means nothing to reap.
    matches!(waitid(Id::All, flags), Ok(status) if status != WaitStatus::StillAlive)
}

/// Our children, from every thread's `/proc/self/task/*/children`.
fn children() -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return Vec::new() };
    let mut pids = Vec::new();
    for task in tasks.flatten() {
        let text = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        pids.extend(text.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
    }
    pids
}

/// State letter and process group of `pid` (`/proc/PID/stat` fields 3 and 5).
fn state_and_group(pid: u32) -> Option<(char, i32)> {
    let stat = lardon_host::read_pseudo(std::path::Path::new(&format!("/proc/{pid}/stat"))).ok()?;
    let mut rest = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = rest.next()?.chars().next()?;
    let _ppid = rest.next()?;
    let pgrp = rest.next()?.parse().ok()?;
    Some((state, pgrp))
}

/// What the store keeps about a live local run (see [`crate::handle`],
/// whose one text form it is written in).
pub use crate::handle::ProcessGroup as RunHandle;

/// Start time (field 22 of `/proc/PID/stat`) of `pid`, if it exists.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = lardon_host::read_pseudo(std::path::Path::new(&format!("/proc/{pid}/stat"))).ok()?;
    // The command name (field 2) may contain spaces: parse after its `)`.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Kills the process group of an orphaned run, unless its pid now belongs
/// to another process (different start time). Returns whether it signalled.
pub fn kill_orphan(h: &RunHandle) -> bool {
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

/// Removes task cgroups left by daemons that died (`lardon-d<pid>-…` whose
/// daemon pid is gone), killing anything still in them. Cgroups of live
/// daemons (including other daemons in this process) are left alone.
/// Returns how many were removed.
pub fn sweep_stale_cgroups() -> usize {
    let Ok(layout) = lardon_host::CgroupLayout::detect(&lardon_host::HostRoot::default()) else { return 0 };
    // Task cgroups sit beside the daemon's v2 leaf: in our own v2 cgroup
    // before the daemon moved into the leaf, in the leaf's parent after.
    let v2_base = layout
        .v2
        .as_ref()
        .filter(|d| d.file_name().is_some_and(|n| n == lardon_host::cgroup::DAEMON_LEAF))
        .and_then(|d| d.parent().map(std::path::Path::to_path_buf));
    let parents = [v2_base.or(layout.v2), layout.v1_memory, layout.v1_cpu];
    let mut removed = 0;
    for parent in parents.iter().flatten() {
        let Ok(entries) = std::fs::read_dir(parent) else { continue };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(pid) = name.to_str().and_then(daemon_pid_of) else { continue };
            if pid == std::process::id() || std::path::Path::new(&format!("/proc/{pid}")).exists() {
                continue;
            }
            let dir = entry.path();
            for line in std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default().lines() {
                if let Ok(p) = line.trim().parse::<i32>() {
                    let _ = nix::sys::signal::kill(Pid::from_raw(p), Signal::SIGKILL);
                }
            }
            // The kernel refuses rmdir until the killed processes are gone.
            for _ in 0..50 {
                if std::fs::remove_dir(&dir).is_ok() {
                    removed += 1;
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
    }
    removed
}

/// The daemon pid in a task cgroup name `lardon-d<pid>-<n>-t<id>-r<run>`.
fn daemon_pid_of(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("lardon-d")?;
    let (pid, tail) = rest.split_once('-')?;
    tail.contains("-t").then(|| pid.parse().ok()).flatten()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn an_orphan_of_pid_1_is_never_signalled_and_cgroup_names_name_their_daemon() {
        assert!(start_time(std::process::id()).is_some());
        assert!(!kill_orphan(&RunHandle { pgid: 1, start: None }));
        assert_eq!(daemon_pid_of("lardon-d42-3-t7-r1"), Some(42));
        assert_eq!(daemon_pid_of("lardon-job-1"), None);
        assert_eq!(daemon_pid_of("lardon-dx-3-t7-r1"), None);
    }
}
