//! The local executor: the daemon's [`Executor`] seam implemented over the
//! host crate's process layer ([`lardon_host::process`]): a process group
//! per run, in its own task cgroup (v2, v1 or the none backend's RSS
//! watcher), pinned to the compute pool, output appended to the task's log
//! file. Nothing on a run's path sleeps: its end is a blocking `wait4`,
//! and its group's cleanup returns at once when nothing is left (see
//! [`ProcessGroup::kill_and_reap`] and the backends' teardown). With
//! [`LogFiles`], a run's log comes from and, when it stayed empty, goes
//! back to a pool of spare files (no new inode per run).

use std::fs::OpenOptions;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use lardon_host::{
    ChildExit, Enforcer, ExitWatch, HostRoot, NoneEnforcer, Output, ProcessGroup, TaskCgroup, TaskLimits,
    spawn_group, wait_child,
};
use nix::sys::signal::Signal;

use super::logfile::LogFiles;
use super::orphans::{RunHandle, start_time};
use super::{Executor, Run, RunError, RunExit, RunRequest, RunSignal};
use crate::submit_env::resolve_program;

/// How often the RSS watcher samples a run that has no cgroup.
const WATCH_EVERY: Duration = Duration::from_millis(50);

/// Starts runs on this host.
#[derive(Debug, Clone)]
pub struct LocalExecutor {
    enforcer: Option<Arc<dyn Enforcer>>,
    /// The none backend's RSS watcher, for a run whose cgroup could not be
    /// created: it still gets its whole process tree measured and its
    /// memory limit watched, rather than nothing.
    watcher: Arc<dyn Enforcer>,
    /// Where logs are opened and empty ones given back; `None`: each run's
    /// log is opened (created) directly.
    logs: Option<Arc<LogFiles>>,
}

impl LocalExecutor {
    /// An executor grouping every run through `enforcer` (a cgroup, or the
    /// none backend's RSS watcher), so peaks cover the run's whole process
    /// tree; `None` groups nothing (peaks from `ru_maxrss` only).
    pub fn new(enforcer: Option<Arc<dyn Enforcer>>) -> Self {
        LocalExecutor {
            enforcer,
            watcher: Arc::new(NoneEnforcer::new(HostRoot::default(), WATCH_EVERY)),
            logs: None,
        }
    }

    /// Opens run logs through `logs`: a run whose log stayed empty gives
    /// the file back once its cgroup is gone (so no process of it can still
    /// write there), and the next run reuses it instead of creating one.
    #[must_use]
    pub fn with_log_files(mut self, logs: Arc<LogFiles>) -> Self {
        self.logs = Some(logs);
        self
    }

    /// The run's group: a task cgroup with `limits`, or where that fails
    /// the RSS watcher (with a warning naming why).
    fn group(&self, name: &str, limits: &TaskLimits) -> Option<Box<dyn TaskCgroup>> {
        let enforcer = self.enforcer.as_ref()?;
        match enforcer.create(name, limits) {
            Ok(cg) => Some(cg),
            Err(e) => {
                // Better a run watched by RSS than none; the Governor's
                // reservation still bounds admission.
                tracing::warn!(
                    "task cgroup {name} not created ({e}); watching its RSS instead (no kernel limit)"
                );
                self.watcher
                    .create(name, limits)
                    .inspect_err(|e| {
                        tracing::warn!("task {name}: no RSS watcher either ({e}); running unwatched")
                    })
                    .ok()
            }
        }
    }
}

/// The program to start: `argv[0]` as given when the child's `PATH` is the
/// daemon's (`posix_spawnp` looks it up), else looked up in the child's
/// `PATH` here ([`resolve_program`]), so that `Command` keeps `posix_spawn`.
/// `None`: not found there.
fn start_path(req: &RunRequest) -> Option<PathBuf> {
    let program = req.argv.first().map_or("", String::as_str);
    let set = req.env.iter().rev().find(|(k, _)| k == "PATH").map(|(_, v)| std::ffi::OsStr::new(v.as_str()));
    let path = match (&req.base_env, set) {
        (_, Some(path)) => Some(path),
        (Some(base), None) if base.delta().path_differs => base.get("PATH"),
        _ => return Some(PathBuf::from(program)),
    };
    resolve_program(program, path, req.cwd.as_deref())
}

impl Executor for LocalExecutor {
    fn start(&self, req: &RunRequest) -> Result<Box<dyn Run>, RunError> {
        let program = req.argv.first().cloned().unwrap_or_default();
        let fail = |detail: String| RunError::Start { program: program.clone(), detail };
        let log = match &self.logs {
            Some(logs) => logs.open(&req.log),
            None => OpenOptions::new().create(true).append(true).open(&req.log),
        }
        .map_err(|e| fail(format!("cannot open log {}: {e}", req.log.display())))?;
        let mut cmd =
            Command::new(start_path(req).ok_or_else(|| fail("not found in the task's PATH".into()))?);
        // The submitter's environment as its difference from the daemon's
        // (worked out once per submission), not a copy set after
        // `env_clear`: a cleared environment or a `PATH` among the set
        // variables makes the standard library `fork` instead of
        // `posix_spawn` for a program it has to look up (it must then
        // search the child's `PATH` itself), which doubled the daemon's CPU
        // per run, and copying every variable costs each launch.
        // `start_path` hands it an absolute path whenever the child's
        // `PATH` is not the daemon's.
        if let Some(base) = &req.base_env {
            let delta = base.delta();
            for name in &delta.remove {
                cmd.env_remove(name);
            }
            cmd.envs(delta.set.iter().map(|(k, v)| (k, v)));
        }
        cmd.args(req.argv.iter().skip(1)).envs(req.env.iter().map(|(k, v)| (k, v))).stdin(Stdio::null());
        Output::Log(log).apply(&mut cmd).map_err(|e| fail(e.to_string()))?;
        if let Some(dir) = &req.cwd {
            cmd.current_dir(dir);
        }
        let limits =
            TaskLimits { memory_max: req.memory_max, memory_high: req.memory_high, cpu_millis: None };
        let cgroup = self.group(&req.name, &limits);
        // Only a run in a real cgroup can give its log back: its removal
        // proves no process of the run is left to write there.
        let give_back = match (&self.logs, cgroup.as_deref()) {
            (Some(logs), Some(cg)) if !cg.procs_files().is_empty() => Some(Arc::clone(logs)),
            _ => None,
        };
        // Registered: the orphan reaper must not take this child's status.
        // Its own process group: signals reach every descendant.
        let (child, group) = super::orphans::spawn_owned(
            || spawn_group(&mut cmd, cgroup.as_deref(), req.cpus.as_ref()),
            |(child, _)| child.id(),
        )
        .map_err(|e| fail(e.to_string()))?;
        if let Some(watched) = cgroup.as_deref().filter(|g| g.procs_files().is_empty()) {
            // The watcher has no cgroup to join before exec: hand it the
            // leader, whose descendants it adopts. A leader already gone
            // (`true`) is measured by ru_maxrss at its reaping.
            let _ = watched.add_pid(child.id());
        }
        let pid = child.id();
        let handle = RunHandle { pgid: pid, start: start_time(pid) };
        // Without a pidfd (Linux < 5.3) the runner samples from a thread.
        let watch = ExitWatch::new(pid).ok();
        Ok(Box::new(LocalRun {
            pid,
            group,
            handle,
            watch,
            child: Mutex::new(Some(child)),
            cgroup: Mutex::new(cgroup),
            exit: Mutex::new(None),
            started: Instant::now(),
            done: AtomicBool::new(false),
            log: req.log.clone(),
            give_back,
            log_len: Mutex::new(None),
        }))
    }
}

#[derive(Debug)]
struct LocalRun {
    pid: u32,
    /// The process group the run leads.
    group: ProcessGroup,
    handle: RunHandle,
    /// The main child's exit, to wait for with a timeout.
    watch: Option<ExitWatch>,
    child: Mutex<Option<Child>>,
    /// Taken (and removed) by `cleanup`; a leftover is removed on drop.
    cgroup: Mutex<Option<Box<dyn TaskCgroup>>>,
    exit: Mutex<Option<ChildExit>>,
    started: Instant,
    /// Set once cleaned up: later signals (a grace timer) must not reach
    /// a process group id the kernel may have recycled.
    done: AtomicBool,
    /// The run's log.
    log: PathBuf,
    /// The pool to give the log back to after a clean removal of the
    /// run's cgroup (when the log stayed empty).
    give_back: Option<Arc<LogFiles>>,
    /// The log's length seen by `cleanup` (for its cap).
    log_len: Mutex<Option<u64>>,
}

impl LocalRun {
    fn cgroup(&self) -> std::sync::MutexGuard<'_, Option<Box<dyn TaskCgroup>>> {
        self.cgroup.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Run for LocalRun {
    fn handle(&self) -> crate::handle::RunHandle {
        crate::handle::RunHandle::Local(self.handle)
    }

    fn signal(&self, signal: RunSignal) -> Result<(), RunError> {
        let sig = match signal {
            RunSignal::Stop => Signal::SIGSTOP,
            RunSignal::Continue => Signal::SIGCONT,
            RunSignal::Terminate => Signal::SIGTERM,
            RunSignal::Kill => Signal::SIGKILL,
        };
        if self.done.load(Ordering::SeqCst) {
            return Ok(());
        }
        if let Err(e) = self.group.signal(sig) {
            return Err(RunError::Control(format!("cannot send {sig} to group {}: {e}", self.group.id())));
        }
        if signal == RunSignal::Kill
            && let Some(cg) = self.cgroup().as_ref()
        {
            // Processes that left the group (setsid) are still in the cgroup.
            let _ = cg.kill_all();
        }
        Ok(())
    }

    fn wait(&self) -> Result<RunExit, RunError> {
        let child = self.child.lock().unwrap_or_else(PoisonError::into_inner).take();
        let Some(child) = child else { return Err(RunError::Control("run already waited for".into())) };
        let exit = wait_child(child);
        super::orphans::disown(self.pid);
        let exit = exit.map_err(|e| RunError::Control(e.to_string()))?;
        if let Some(cg) = self.cgroup().as_ref() {
            cg.record_exit(&exit);
        }
        *self.exit.lock().unwrap_or_else(PoisonError::into_inner) = Some(exit);
        Ok(RunExit { code: exit.status.code(), signal: exit.status.signal(), wall: self.started.elapsed() })
    }

    fn ended_within(&self, timeout: Duration) -> Option<bool> {
        self.watch.as_ref().map(|w| w.exited_within(timeout))
    }

    fn usage(&self) -> Option<u64> {
        self.cgroup().as_ref().and_then(|cg| cg.memory_current().ok().flatten())
    }

    fn peak(&self) -> Option<u64> {
        let exit = *self.exit.lock().unwrap_or_else(PoisonError::into_inner);
        lardon_host::peak(self.cgroup().as_deref(), exit.as_ref())
    }

    fn oom_killed(&self) -> bool {
        self.cgroup().as_ref().is_some_and(|cg| cg.oom_killed().unwrap_or(false))
    }

    fn cleanup(&self) {
        if self.done.swap(true, Ordering::SeqCst) {
            return;
        }
        self.group.kill_and_reap();
        let cgroup = self.cgroup().take();
        let mut len = None;
        if let Some(cg) = cgroup {
            let name = cg.name().to_owned();
            match cg.remove() {
                // Emptied and removed: nothing of the run can write to its
                // log any more.
                Ok(()) => {
                    if let Some(logs) = &self.give_back {
                        // Its look at the log's length serves the cap too.
                        len = Some(logs.give_back(&self.log));
                    }
                }
                Err(e) => tracing::warn!("task cgroup {name} not removed: {e}"),
            }
        }
        let len = len.unwrap_or_else(|| std::fs::metadata(&self.log).ok().map(|m| m.len()));
        *self.log_len.lock().unwrap_or_else(PoisonError::into_inner) = len;
    }

    fn log_len(&self) -> Option<u64> {
        *self.log_len.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for LocalRun {
    fn drop(&mut self) {
        // A run dropped without `wait` (an error path) must not leave a
        // process behind or an unreaped child.
        let child = self.child.get_mut().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(mut child) = child {
            let _ = child.kill();
            let _ = child.wait();
            super::orphans::disown(self.pid);
            self.group.kill_and_reap();
        }
    }
}
