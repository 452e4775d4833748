//! One hook's run: `sh -c CMD` as the leader of its own process group,
//! its stdout and stderr on one pipe (the first [`HOOK_OUTPUT_MAX`] bytes
//! kept, the rest counted and dropped, so a chatty hook never blocks on a
//! full pipe), awaited on a pidfd with its time limit; at the limit, or
//! once its leader exited, the whole group is killed.

use std::ffi::OsString;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use lardon_host::ExitWatch;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::runner::orphans;
use crate::store::{HOOK_OUTPUT_MAX, HookEnd, HookResult};
use crate::submit_env::SubmitEnv;

/// How long the output is still read after the hook's group was killed: a
/// process that left the group (`setsid`) may hold the pipe open; what was
/// read by then is kept.
const OUTPUT_GRACE: Duration = Duration::from_secs(1);

/// What to run, and where.
#[derive(Debug)]
pub(crate) struct HookCommand {
    /// The command line, for `sh -c`.
    pub(crate) command: String,
    /// The task's working directory (`None`: the daemon's).
    pub(crate) cwd: Option<PathBuf>,
    /// The submitter's environment (`None`: the daemon's).
    pub(crate) base_env: Option<SubmitEnv>,
    /// Set over it, in order: the spec's `env`, then Lardon's variables.
    pub(crate) env: Vec<(String, String)>,
    /// The time limit.
    pub(crate) timeout: Duration,
}

/// Output kept so far and bytes dropped, shared with the reading thread.
type Collected = Arc<Mutex<(Vec<u8>, u64)>>;

fn read_output(mut pipe: std::io::PipeReader, into: &Collected, done: &mpsc::Sender<()>) {
    let mut chunk = [0u8; 8192];
    loop {
        match pipe.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let mut c = into.lock().unwrap_or_else(PoisonError::into_inner);
                let room = HOOK_OUTPUT_MAX.saturating_sub(c.0.len()).min(n);
                c.0.extend_from_slice(&chunk[..room]);
                c.1 = c.1.saturating_add((n - room) as u64);
            }
        }
    }
    let _ = done.send(());
}

/// Runs `hook` to its end; `started` gets its process group right after
/// the spawn (so a stopping daemon can kill it). Never fails: a hook that
/// cannot start is [`HookEnd::FailedToStart`].
pub(crate) fn run(hook: HookCommand, started: impl FnOnce(i32)) -> HookResult {
    let t0 = Instant::now();
    let failed = |why: String| HookResult {
        end: HookEnd::FailedToStart(why),
        duration_ms: millis(t0.elapsed()),
        output: Vec::new(),
        output_dropped: 0,
    };
    let (reader, writer) = match std::io::pipe() {
        Ok(p) => p,
        Err(e) => return failed(format!("cannot make its output pipe: {e}")),
    };
    let err = match writer.try_clone() {
        Ok(w) => w,
        Err(e) => return failed(format!("cannot make its output pipe: {e}")),
    };
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c").arg(&hook.command);
    if let Some(base) = &hook.base_env {
        cmd.env_clear().envs(base.vars().map(|(k, v)| (OsString::from(k), OsString::from(v))));
    }
    cmd.envs(hook.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(err)
        .process_group(0);
    if let Some(dir) = &hook.cwd {
        cmd.current_dir(dir);
    }
    // Registered: the daemon's orphan reaper must not take its status.
    let spawned = orphans::spawn_owned(|| cmd.spawn(), std::process::Child::id);
    // Our copies of the pipe's write end go with the command: the reader
    // sees its end once the hook's processes have closed theirs.
    drop(cmd);
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            let dir = hook.cwd.as_ref().map_or_else(String::new, |d| format!(" in {}", d.display()));
            return failed(format!("cannot start /bin/sh{dir}: {e}"));
        }
    };
    let pid = child.id();
    let group = i32::try_from(pid).unwrap_or(0);
    started(group);
    let collected: Collected = Arc::default();
    let (done_tx, done_rx) = mpsc::channel();
    let into = Arc::clone(&collected);
    let reading = std::thread::Builder::new()
        .name("lardon-hook-out".into())
        .spawn(move || read_output(reader, &into, &done_tx));
    let exited = match ExitWatch::new(pid) {
        Ok(watch) => watch.exited_within(hook.timeout),
        // No pidfd (Linux < 5.3): look every 50 ms until the limit.
        Err(_) => loop {
            if matches!(child.try_wait(), Ok(Some(_)) | Err(_)) {
                break true;
            }
            if t0.elapsed() >= hook.timeout {
                break false;
            }
            std::thread::sleep(Duration::from_millis(50));
        },
    };
    // The whole group, at the limit or after the leader's exit: nothing of
    // a hook outlives it (its pipe then closes too).
    let kill_group = || {
        if group > 0 {
            let _ = killpg(Pid::from_raw(group), Signal::SIGKILL);
        }
    };
    if !exited {
        kill_group();
    }
    let status = child.wait();
    kill_group();
    orphans::disown(pid);
    let duration_ms = millis(t0.elapsed());
    if reading.is_ok() {
        let _ = done_rx.recv_timeout(OUTPUT_GRACE);
    }
    let (output, output_dropped) =
        std::mem::take(&mut *collected.lock().unwrap_or_else(PoisonError::into_inner));
    let end = match status {
        _ if !exited => HookEnd::TimedOut,
        Ok(s) => match (s.code(), s.signal()) {
            (Some(code), _) => HookEnd::Exited(code),
            (None, Some(sig)) => HookEnd::Signalled(sig),
            (None, None) => HookEnd::Exited(-1),
        },
        Err(e) => HookEnd::FailedToStart(format!("cannot wait for it: {e}")),
    };
    HookResult { end, duration_ms, output, output_dropped }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn hook(command: &str, timeout: Duration) -> HookCommand {
        HookCommand {
            command: command.to_owned(),
            cwd: None,
            base_env: Some(SubmitEnv::from_vars([("PATH", "/usr/bin:/bin"), ("MINE", "x")])),
            env: vec![("LARDON_TASK_ID".into(), "7".into())],
            timeout,
        }
    }

    #[test]
    fn a_hook_gets_its_environment_exit_code_and_output() {
        let r =
            run(hook("echo \"$MINE $LARDON_TASK_ID\"; echo err >&2; exit 3", Duration::from_secs(10)), drop);
        assert_eq!(r.end, HookEnd::Exited(3));
        assert_eq!(String::from_utf8_lossy(&r.output), "x 7\nerr\n");
    }

    #[test]
    fn output_past_the_cap_is_counted_not_kept() {
        let r = run(hook("head -c 100000 /dev/zero", Duration::from_secs(10)), drop);
        assert_eq!(r.end, HookEnd::Exited(0));
        assert_eq!((r.output.len(), r.output_dropped), (HOOK_OUTPUT_MAX, 100_000 - HOOK_OUTPUT_MAX as u64));
    }

    #[test]
    fn at_its_limit_the_whole_group_is_killed() {
        let t = Instant::now();
        let r = run(hook("sleep 30 & sleep 30", Duration::from_millis(200)), drop);
        assert_eq!(r.end, HookEnd::TimedOut);
        // The background `sleep` held the pipe: only its death ends the
        // read before the grace.
        assert!(t.elapsed() < OUTPUT_GRACE, "{:?}", t.elapsed());
    }
}
