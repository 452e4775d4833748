//! How an agent runs an admitted task: behind the [`Executor`] seam, so
//! the harness can use a fake; [`ProcessExecutor`] runs real child
//! processes from argv (never through a shell), and [`ConfinedExecutor`]
//! runs them the same way inside a cgroup of their own, limited to the
//! memory they declared (through a [`Confiner`]: the real one is
//! [`Cgroups`](super::host::Cgroups), over the host crate's enforcement
//! backends). Spawning, the pidfd wait, the peak and killing the tree are
//! the host crate's process layer ([`lardon_host::process`]), the same the
//! daemon's runner uses; this module adds the async face (the wait on the
//! runtime, captured output, cancel and deadline).

use std::future::Future;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lardon_host::{ExitWatch, GroupGuard, HostError, Output, TaskCgroup, spawn_group};
use lardon_proto::cluster as pb;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

use super::watchdog::{RssSource, SOFT_EVERY, SoftLimit};

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
        Box::pin(run_process(spec, None, cancel, Limit::None))
    }

    fn run_in(&self, spec: pb::TaskSpec, dir: &Path, cancel: oneshot::Receiver<()>) -> Running {
        Box::pin(run_process(spec, Some(dir.to_path_buf()), cancel, Limit::None))
    }
}

/// Makes a task's memory limit: a child cgroup of the agent's own.
pub trait Confiner: Send + Sync + std::fmt::Debug + 'static {
    /// A new confinement named `name` (unique among the agent's tasks)
    /// whose processes may use at most `memory` bytes together.
    ///
    /// # Errors
    /// The host's error when it cannot be made (the task then runs
    /// unconfined, with the engine's limit on the allocation as the
    /// backstop).
    fn confine(&self, name: &str, memory: u64) -> Result<Box<dyn Confinement>, HostError>;
}

/// One task's memory limit; dropping it kills what is left in it and
/// removes it.
pub trait Confinement: Send + Sync + std::fmt::Debug {
    /// The task cgroup the task is spawned into from its first
    /// instruction, and whose high-water mark is its peak; `None` (the
    /// default): the task is started outside and [`Confinement::adopt`]ed
    /// right after, its peak its `ru_maxrss`.
    fn cgroup(&self) -> Option<&dyn TaskCgroup> {
        None
    }
    /// Moves process `pid` (and its future children) in.
    ///
    /// # Errors
    /// The host's error when the kernel refused.
    fn adopt(&self, pid: u32) -> Result<(), HostError>;
    /// Whether the kernel killed one of its processes at the limit.
    fn oom_killed(&self) -> bool;
}

/// [`ProcessExecutor`] with each task that declared its memory in a
/// confinement of exactly that size: a task using more than it declared
/// (a liar) is killed by the kernel at its own limit, before the
/// allocation's limit takes down the agent and every other task. A
/// confinement with a [`Confinement::cgroup`] holds the task from its
/// first instruction (the host crate's [`spawn_group`]); another one
/// adopts it right after it starts, so what it allocates in that instant
/// stays charged to the agent.
#[derive(Debug, Clone)]
pub struct ConfinedExecutor {
    confiner: std::sync::Arc<dyn Confiner>,
    next: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl ConfinedExecutor {
    /// Confines tasks with `confiner`.
    #[must_use]
    pub fn new(confiner: std::sync::Arc<dyn Confiner>) -> Self {
        ConfinedExecutor { confiner, next: std::sync::Arc::new(std::sync::atomic::AtomicU64::new(1)) }
    }
}

impl ConfinedExecutor {
    /// The confinement for a task declaring `memory` bytes (`None`: it
    /// declared none, or none could be made and it runs unconfined).
    fn confinement(&self, spec: &pb::TaskSpec) -> Option<(Box<dyn Confinement>, u64)> {
        let memory = spec.need.map_or(0, |n| n.memory);
        if memory == 0 {
            return None; // Nothing declared, nothing to hold it to.
        }
        let n = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("agent{}-{n}", std::process::id());
        match self.confiner.confine(&name, memory) {
            Ok(c) => Some((c, memory)),
            Err(e) => {
                tracing::warn!("task {}: runs unconfined: {e}", spec.task_id);
                None
            }
        }
    }
}

impl Executor for ConfinedExecutor {
    fn run(&self, spec: pb::TaskSpec, cancel: oneshot::Receiver<()>) -> Running {
        let limit = self.confinement(&spec).map_or(Limit::None, |(c, m)| Limit::Confined(c, m));
        Box::pin(run_process(spec, None, cancel, limit))
    }

    fn run_in(&self, spec: pb::TaskSpec, dir: &Path, cancel: oneshot::Receiver<()>) -> Running {
        let limit = self.confinement(&spec).map_or(Limit::None, |(c, m)| Limit::Confined(c, m));
        Box::pin(run_process(spec, Some(dir.to_path_buf()), cancel, limit))
    }
}

/// An executor that runs tasks as [`ProcessExecutor`] does, each task
/// that declared its memory watched by the soft memory watchdog
/// ([`super::watchdog`]).
#[derive(Debug, Clone)]
pub struct WatchedExecutor {
    source: std::sync::Arc<dyn RssSource>,
    every: Duration,
}

impl WatchedExecutor {
    /// Samples tasks with `source` every [`SOFT_EVERY`].
    #[must_use]
    pub fn new(source: std::sync::Arc<dyn RssSource>) -> Self {
        WatchedExecutor { source, every: SOFT_EVERY }
    }

    /// Samples every `every` instead (tests).
    #[must_use]
    pub fn every(mut self, every: Duration) -> Self {
        self.every = every;
        self
    }

    fn limit(&self, spec: &lardon_proto::cluster::TaskSpec) -> Option<SoftLimit> {
        let declared = spec.need.map_or(0, |n| n.memory);
        (declared > 0).then(|| SoftLimit {
            source: std::sync::Arc::clone(&self.source),
            declared,
            every: self.every,
        })
    }
}

impl Executor for WatchedExecutor {
    fn run(
        &self,
        spec: lardon_proto::cluster::TaskSpec,
        cancel: tokio::sync::oneshot::Receiver<()>,
    ) -> Running {
        let limit = self.limit(&spec).map_or(Limit::None, Limit::Soft);
        Box::pin(run_process(spec, None, cancel, limit))
    }

    fn run_in(
        &self,
        spec: lardon_proto::cluster::TaskSpec,
        dir: &std::path::Path,
        cancel: tokio::sync::oneshot::Receiver<()>,
    ) -> Running {
        let limit = self.limit(&spec).map_or(Limit::None, Limit::Soft);
        Box::pin(run_process(spec, Some(dir.to_path_buf()), cancel, limit))
    }
}

/// What holds a running task to its declared memory.
enum Limit {
    /// Nothing (the engine's limit on the allocation, if any).
    None,
    /// A cgroup of its own limited to the declared bytes.
    Confined(Box<dyn Confinement>, u64),
    /// The soft memory watchdog.
    Soft(SoftLimit),
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

/// Runs `spec` to its end (see [`ProcessExecutor`]), held by `limit`.
async fn run_process(
    spec: pb::TaskSpec,
    dir: Option<PathBuf>,
    cancel: oneshot::Receiver<()>,
    limit: Limit,
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
        .stdin(if spec.stdin.is_empty() { Stdio::null() } else { Stdio::piped() });
    if let Err(e) = Output::Capture.apply(&mut cmd) {
        return failed(format!("cannot start `{program}`: {e}"));
    }
    if let Some(dir) = dir {
        cmd.current_dir(dir);
    }
    let confined = match &limit {
        Limit::Confined(c, _) => c.cgroup(),
        Limit::None | Limit::Soft(_) => None,
    };
    let started = Instant::now();
    let (mut child, group) = match spawn_group(&mut cmd, confined, None) {
        Ok(started) => started,
        Err(HostError::Io { source, .. }) => return failed(format!("cannot start `{program}`: {source}")),
        Err(e) => return failed(format!("cannot start `{program}`: {e}")),
    };
    // Killed with its group if this future is dropped before the reap.
    let mut guard = GroupGuard::new(Some(group));
    let (confinement, soft) = match limit {
        Limit::None => (None, None),
        Limit::Confined(c, memory) => {
            if c.cgroup().is_none()
                && let Err(e) = c.adopt(child.id())
            {
                tracing::warn!("task {}: runs unconfined: {e}", spec.task_id);
            }
            (Some((c, memory)), None)
        }
        Limit::Soft(soft) => match soft.source.watch(child.id()) {
            Ok(sampler) => (None, Some((sampler, soft.declared, soft.every))),
            Err(e) => {
                tracing::warn!("task {}: runs unwatched: {e}", spec.task_id);
                (None, None)
            }
        },
    };
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
    let mut reaped = std::pin::pin!(reap(child));
    let deadline = async {
        match left {
            Some(left) => tokio::time::sleep(left).await,
            None => std::future::pending().await,
        }
    };
    let mut soft = soft;
    let task_id = spec.task_id.clone();
    let watchdog = async {
        match soft.as_mut() {
            Some((sampler, declared, every)) => {
                let used = super::watchdog::watch(sampler.as_mut(), *declared, *every, &task_id).await;
                (used, *declared)
            }
            None => std::future::pending().await,
        }
    };
    let mut stopped: Option<String> = None;
    let exit = tokio::select! {
        exit = reaped.as_mut() => exit,
        Ok(()) = cancel => {
            stopped = Some("cancelled".to_owned());
            group.kill();
            reaped.as_mut().await
        }
        () = deadline => {
            stopped = Some("deadline passed".to_owned());
            group.kill();
            reaped.as_mut().await
        }
        (used, declared) = watchdog => {
            stopped = Some(super::watchdog::killed_reason(used, declared));
            group.kill();
            if let Some((sampler, _, _)) = soft.as_mut() {
                sampler.kill_strays();
            }
            reaped.as_mut().await
        }
    };
    guard.disarm();
    let wall = started.elapsed();
    let (stdout, out_cut) = out.await.unwrap_or_default();
    let (stderr, err_cut) = err.await.unwrap_or_default();
    let mut ended = match exit {
        Err(e) => failed(format!("waiting for `{program}`: {e}")),
        Ok(exit) => {
            let status = exit.status;
            pb::TaskEnded {
                success: status.success() && stopped.is_none(),
                exit_code: status.code(),
                reason: match (stopped, status.code(), status.signal()) {
                    (Some(why), _, _) => why,
                    (None, Some(0), _) => String::new(),
                    (None, Some(code), _) => format!("exit {code}"),
                    (None, None, Some(sig)) => format!("killed by signal {sig}"),
                    (None, None, None) => "ended without a status".to_owned(),
                },
                // The cgroup's high-water mark where the task ran in one.
                peak_memory: lardon_host::peak(
                    confinement.as_ref().and_then(|(c, _)| c.cgroup()),
                    Some(&exit),
                )
                .unwrap_or(exit.max_rss),
                wall_ms: u64::try_from(wall.as_millis()).unwrap_or(u64::MAX).max(1),
                ..Default::default()
            }
        }
    };
    if let Some((c, limit)) = &confinement
        && c.oom_killed()
    {
        let note = format!("killed at its memory limit: it used more than the {limit} bytes it declared");
        ended.success = false;
        ended.reason = if ended.reason.is_empty() { note } else { format!("{}; {note}", ended.reason) };
    }
    // Dropping it kills what is left in the cgroup and removes it.
    drop(confinement);
    if out_cut || err_cut {
        let note = format!("output cut at {MAX_OUTPUT} bytes");
        ended.reason = if ended.reason.is_empty() { note } else { format!("{}; {note}", ended.reason) };
    }
    ended.stdout = stdout;
    ended.stderr = stderr;
    ended
}

/// Waits for `child` to exit and reaps it with its peak RSS. The wait
/// needs no thread per task: the host crate's pidfd ([`ExitWatch`]) turns
/// readable when the child exits (the reap that follows does not block);
/// without pidfds (a kernel before 5.3) a blocking thread waits instead.
async fn reap(child: std::process::Child) -> Result<lardon_host::ChildExit, String> {
    let pidfd = ExitWatch::new(child.id()).ok().and_then(|w| watch_readable(w.into_fd()));
    if let Some(fd) = pidfd
        && fd.readable().await.is_ok()
    {
        // It exited: this reap returns at once.
        return lardon_host::wait_child(child).map_err(|e| e.to_string());
    }
    tokio::task::spawn_blocking(move || lardon_host::wait_child(child))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())
}

/// `fd` registered with the runtime for readability.
#[allow(unsafe_code)]
fn watch_readable(fd: std::os::fd::OwnedFd) -> Option<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>> {
    // SAFETY: an `OwnedFd` is a valid open descriptor that the `AsyncFd`
    // owns until it is dropped, and its `as_raw_fd` always returns that
    // same descriptor (tokio's I/O-safety requirement).
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE).ok() }
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

    #[test]
    fn a_running_task_holds_no_thread_so_others_end_meanwhile() {
        // One blocking thread in all: were each task's wait a blocking
        // thread, `quick` could not be reaped while `slow` runs.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .max_blocking_threads(1)
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let gate = dir.path().join("gate");
        let script = format!("while [ ! -e '{}' ]; do sleep 0.02; done", gate.display());
        rt.block_on(async {
            let (_keep_slow, cancel) = oneshot::channel();
            let slow = tokio::spawn(ProcessExecutor.run(spec(&["sh", "-c", &script]), cancel));
            // Let `slow` start and reach its wait first (one thread: it
            // runs until it awaits the exit).
            tokio::task::yield_now().await;
            let (_keep_quick, cancel) = oneshot::channel();
            let quick = ProcessExecutor.run(spec(&["true"]), cancel);
            let ended = tokio::time::timeout(Duration::from_secs(30), quick).await;
            assert!(ended.is_ok_and(|e| e.success), "the quick task ends while the slow one runs");
            std::fs::write(&gate, "").unwrap_or_else(|e| panic!("{e}"));
            assert!(slow.await.is_ok_and(|e| e.success));
        });
    }

    #[tokio::test]
    async fn a_passed_deadline_fails_without_starting() {
        let (_keep, cancel) = oneshot::channel();
        let mut s = spec(&["true"]);
        s.deadline_unix_ms = 1;
        let ended = ProcessExecutor.run(s, cancel).await;
        assert_eq!(ended.reason, "deadline passed before it started");
    }

    #[derive(Debug, Default)]
    struct Fake(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

    #[derive(Debug)]
    struct FakeConfinement(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

    impl Confiner for Fake {
        fn confine(&self, name: &str, memory: u64) -> Result<Box<dyn Confinement>, HostError> {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(format!("confine {memory}"));
            assert!(name.starts_with("agent"), "{name}");
            Ok(Box::new(FakeConfinement(std::sync::Arc::clone(&self.0))))
        }
    }

    impl Confinement for FakeConfinement {
        fn adopt(&self, pid: u32) -> Result<(), HostError> {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(format!("adopt {}", pid > 0));
            Ok(())
        }
        fn oom_killed(&self) -> bool {
            true
        }
    }

    impl Drop for FakeConfinement {
        fn drop(&mut self) {
            self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push("removed".into());
        }
    }

    #[tokio::test]
    async fn a_task_that_declared_memory_runs_confined_to_it_and_a_kill_at_the_limit_is_named() {
        let fake = Fake::default();
        let log = std::sync::Arc::clone(&fake.0);
        let executor = ConfinedExecutor::new(std::sync::Arc::new(fake));
        let (_keep, cancel) = oneshot::channel();
        let mut s = spec(&["true"]);
        s.need = Some(pb::Need { memory: 50 << 20, cpu_millis: 1000 });
        let ended = executor.run(s, cancel).await;
        assert!(!ended.success, "killed at the limit is a failure even with status 0: {ended:?}");
        assert_eq!(
            ended.reason,
            "killed at its memory limit: it used more than the 52428800 bytes it declared"
        );
        let seen = log.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        assert_eq!(seen, ["confine 52428800", "adopt true", "removed"]);
        // Nothing declared: nothing to hold it to.
        let (_keep, cancel) = oneshot::channel();
        assert!(executor.run(spec(&["true"]), cancel).await.success);
        assert_eq!(log.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len(), 3);
    }
}
