//! How an agent runs an admitted task: behind the [`Executor`] seam, so
//! the harness can use a fake; [`ProcessExecutor`] runs real child
//! processes from argv (never through a shell).

use std::future::Future;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lardon_proto::cluster as pb;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

/// Most bytes of stdout (and of stderr) sent back; the rest is dropped and
/// the result says so.
pub const MAX_OUTPUT: usize = 1 << 20;

/// The future an executor returns: the task's end.
pub type Running = Pin<Box<dyn Future<Output = pb::TaskEnded> + Send>>;

/// Runs one admitted task to its end. `cancel` fires when the broker
/// cancels it; the task then ends failed with reason `cancelled`.
pub trait Executor: Send + Sync + std::fmt::Debug + 'static {
    /// Starts `spec` (already validated; its capability is one the agent
    /// declared) and resolves when it ends.
    fn run(&self, spec: pb::TaskSpec, cancel: oneshot::Receiver<()>) -> Running;

    /// Starts `spec` with `dir` as its working directory (a task with
    /// files runs in its own fresh directory). Executors that start real
    /// processes override this; the default runs as [`Executor::run`],
    /// which serves fakes that touch no files.
    fn run_in(&self, spec: pb::TaskSpec, dir: &Path, cancel: oneshot::Receiver<()>) -> Running {
        let _ = dir;
        self.run(spec, cancel)
    }
}

/// Runs tasks as child processes: `argv[0]` looked up in `PATH`, the
/// agent's environment with the task's variables over it, stdin written
/// from the spec, stdout and stderr captured (up to [`MAX_OUTPUT`] each).
/// Each child leads its own process group, which is killed on cancel and
/// at the deadline.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessExecutor;

impl Executor for ProcessExecutor {
    fn run(&self, spec: pb::TaskSpec, cancel: oneshot::Receiver<()>) -> Running {
        Box::pin(run_process(spec, None, cancel))
    }

    fn run_in(&self, spec: pb::TaskSpec, dir: &Path, cancel: oneshot::Receiver<()>) -> Running {
        Box::pin(run_process(spec, Some(dir.to_path_buf()), cancel))
    }
}

fn failed(reason: String) -> pb::TaskEnded {
    pb::TaskEnded { success: false, exit_code: None, reason, ..Default::default() }
}

/// Time left before `deadline_unix_ms` (0: none).
fn time_left(deadline_unix_ms: i64) -> Option<Duration> {
    if deadline_unix_ms <= 0 {
        return None;
    }
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
    let deadline = u128::try_from(deadline_unix_ms).unwrap_or(0);
    Some(Duration::from_millis(u64::try_from(deadline.saturating_sub(now)).unwrap_or(u64::MAX)))
}

async fn capture(pipe: Option<impl AsyncRead + Unpin>) -> (Vec<u8>, bool) {
    let Some(mut pipe) = pipe else { return (Vec::new(), false) };
    let mut kept = Vec::new();
    let mut cut = false;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = MAX_OUTPUT.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
                cut |= n > room;
            }
        }
    }
    (kept, cut)
}

async fn run_process(
    spec: pb::TaskSpec,
    dir: Option<PathBuf>,
    cancel: oneshot::Receiver<()>,
) -> pb::TaskEnded {
    let Some((program, args)) = spec.argv.split_first() else {
        return failed("argv: empty".to_owned());
    };
    let left = time_left(spec.deadline_unix_ms);
    if left.is_some_and(|l| l.is_zero()) {
        return failed("deadline passed before it started".to_owned());
    }
    // A std child reaped with wait4(2) (lardon_host::wait_child) rather
    // than tokio's, for its ru_maxrss: the task's measured peak, which the
    // broker learns per class (docs/DESIGN.md §14).
    let mut cmd = std::process::Command::new(program);
    cmd.args(args)
        .envs(spec.env.iter().map(|v| (v.name.as_str(), v.value.as_str())))
        .stdin(if spec.stdin.is_empty() { Stdio::null() } else { Stdio::piped() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some(dir) = dir {
        cmd.current_dir(dir);
    }
    let started = Instant::now();
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => return failed(format!("cannot start `{program}`: {e}")),
    };
    let group = i32::try_from(child.id()).ok().map(Pid::from_raw);
    // Killed with its group if this future is dropped before the reap.
    let mut guard = GroupGuard(group);
    if let Some(stdin) = child.stdin.take().and_then(|s| tokio::process::ChildStdin::from_std(s).ok()) {
        let bytes = spec.stdin;
        let mut stdin = stdin;
        tokio::spawn(async move {
            // A task that does not read its stdin is not an error.
            let _ = stdin.write_all(&bytes).await;
        });
    }
    let out = tokio::spawn(capture(
        child.stdout.take().and_then(|p| tokio::process::ChildStdout::from_std(p).ok()),
    ));
    let err = tokio::spawn(capture(
        child.stderr.take().and_then(|p| tokio::process::ChildStderr::from_std(p).ok()),
    ));
    let mut reaped = tokio::task::spawn_blocking(move || lardon_host::wait_child(child));
    let deadline = async {
        match left {
            Some(left) => tokio::time::sleep(left).await,
            None => std::future::pending().await,
        }
    };
    let mut stopped = None;
    let exit = tokio::select! {
        exit = &mut reaped => exit,
        Ok(()) = cancel => {
            stopped = Some("cancelled");
            kill_group(group);
            (&mut reaped).await
        }
        () = deadline => {
            stopped = Some("deadline passed");
            kill_group(group);
            (&mut reaped).await
        }
    };
    guard.0 = None;
    let wall = started.elapsed();
    let (stdout, out_cut) = out.await.unwrap_or_default();
    let (stderr, err_cut) = err.await.unwrap_or_default();
    let mut ended = match exit {
        Err(e) => failed(format!("waiting for `{program}`: {e}")),
        Ok(Err(e)) => failed(format!("waiting for `{program}`: {e}")),
        Ok(Ok(exit)) => {
            let status = exit.status;
            pb::TaskEnded {
                success: status.success() && stopped.is_none(),
                exit_code: status.code(),
                reason: match (stopped, status.code(), status.signal()) {
                    (Some(why), _, _) => why.to_owned(),
                    (None, Some(0), _) => String::new(),
                    (None, Some(code), _) => format!("exit {code}"),
                    (None, None, Some(sig)) => format!("killed by signal {sig}"),
                    (None, None, None) => "ended without a status".to_owned(),
                },
                peak_memory: exit.max_rss,
                wall_ms: u64::try_from(wall.as_millis()).unwrap_or(u64::MAX).max(1),
                ..Default::default()
            }
        }
    };
    if out_cut || err_cut {
        let note = format!("output cut at {MAX_OUTPUT} bytes");
        ended.reason = if ended.reason.is_empty() { note } else { format!("{}; {note}", ended.reason) };
    }
    ended.stdout = stdout;
    ended.stderr = stderr;
    ended
}

/// SIGKILLs the task's whole process group: helpers it started go with it.
fn kill_group(group: Option<Pid>) {
    if let Some(pgid) = group {
        let _ = killpg(pgid, Signal::SIGKILL);
    }
}

/// Kills the group on drop unless disarmed (the task was reaped).
struct GroupGuard(Option<Pid>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        kill_group(self.0.take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(argv: &[&str]) -> pb::TaskSpec {
        pb::TaskSpec {
            task_id: "t".into(),
            argv: argv.iter().map(|s| (*s).to_owned()).collect(),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn runs_argv_without_a_shell_and_captures_output() {
        let (_keep, cancel) = oneshot::channel();
        // A shell would expand `$HOME`; argv passes it through as is.
        let ended = ProcessExecutor.run(spec(&["echo", "$HOME", ";", "false"]), cancel).await;
        assert!(ended.success, "{ended:?}");
        assert_eq!(String::from_utf8_lossy(&ended.stdout), "$HOME ; false\n");
        // Measured for the broker's learning: wait4's peak and the wall time.
        assert!(ended.peak_memory > 0 && ended.wall_ms > 0, "{ended:?}");
    }

    #[tokio::test]
    async fn stdin_env_exit_codes_and_a_missing_program() {
        let (_keep, cancel) = oneshot::channel();
        let mut s = spec(&["sh", "-c", "cat; echo \"$X\"; exit 3"]);
        s.stdin = b"in ".to_vec();
        s.env = vec![pb::EnvVar { name: "X".into(), value: "x".into() }];
        let ended = ProcessExecutor.run(s, cancel).await;
        assert_eq!((ended.success, ended.exit_code, ended.reason.as_str()), (false, Some(3), "exit 3"));
        assert_eq!(String::from_utf8_lossy(&ended.stdout), "in x\n");
        let (_keep, cancel) = oneshot::channel();
        let ended = ProcessExecutor.run(spec(&["/nonexistent/lardon-no-such-program"]), cancel).await;
        assert!(!ended.success && ended.reason.starts_with("cannot start"), "{ended:?}");
    }

    #[tokio::test]
    async fn cancel_kills_the_task() {
        let (stop, cancel) = oneshot::channel();
        let running = ProcessExecutor.run(spec(&["sleep", "600"]), cancel);
        let _ = stop.send(());
        let ended = running.await;
        assert_eq!((ended.success, ended.reason.as_str()), (false, "cancelled"));
    }

    #[tokio::test]
    async fn a_passed_deadline_fails_without_starting() {
        let (_keep, cancel) = oneshot::channel();
        let mut s = spec(&["true"]);
        s.deadline_unix_ms = 1;
        let ended = ProcessExecutor.run(s, cancel).await;
        assert_eq!(ended.reason, "deadline passed before it started");
    }
}
