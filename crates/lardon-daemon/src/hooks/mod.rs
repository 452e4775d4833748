//! The hook runner (docs/DESIGN.md §10 Hooks): the one owner of running
//! the hooks task ends queued. A task's end inserts its hook's row in the
//! end's own transaction (`store/hooks.rs`); once that is durable the
//! end's write wakes this runner ([`crate::kernel::HookSignal`]), whose
//! [`HOOK_WORKERS`] threads take the unfinished rows in their order, mark
//! each started (durable before the command starts: its start count is
//! `LARDON_HOOK_ATTEMPT`), run it ([`run::run`]) and record its outcome
//! through the store's writer. At start they take every row a crash left
//! unfinished, so every durable end's hook runs; one that was running when
//! the daemon died runs again (at least once in that window).

mod run;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::kernel::{DaemonEvent, Shared};
use crate::spec::TaskSpec;
use crate::store::{HookEnd, PendingHook, Store, StoreError};

/// Hooks that run at once, at most.
pub(crate) const HOOK_WORKERS: usize = 4;

/// The task's group for `LARDON_GROUP` (empty when none).
fn task_group(spec: &TaskSpec) -> Option<&str> {
    spec.group.as_ref().map(lardon::GroupName::as_str)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the workers share.
#[derive(Debug)]
struct Inner {
    shared: Arc<Shared>,
    /// Its own read-only connection (the RPCs keep theirs), and the last
    /// row this daemon took: rows are committed in `seq` order by the one
    /// writer, so every unfinished row above it is still to be taken.
    next: Mutex<(Store, u64)>,
    /// The process groups of the hooks running now, by row.
    running: Mutex<Vec<(u64, i32)>>,
    stopping: AtomicBool,
}

/// The running hook workers.
#[derive(Debug)]
pub(crate) struct HookRunner {
    inner: Arc<Inner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl HookRunner {
    /// Starts the workers on the store at `db`; they begin with every
    /// unfinished row (what a crash left).
    ///
    /// # Errors
    /// The store cannot be opened for reading; a thread cannot start.
    pub(crate) fn start(shared: Arc<Shared>, db: PathBuf) -> Result<HookRunner, String> {
        let reader = Store::open_reader(&db).map_err(|e| e.to_string())?;
        kill_left_running(&reader);
        let inner = Arc::new(Inner {
            shared,
            next: Mutex::new((reader, 0)),
            running: Mutex::default(),
            stopping: AtomicBool::new(false),
        });
        let mut threads = Vec::with_capacity(HOOK_WORKERS);
        for i in 0..HOOK_WORKERS {
            let inner = Arc::clone(&inner);
            let t = std::thread::Builder::new()
                .name(format!("lardon-hook-{i}"))
                .spawn(move || worker(&inner))
                .map_err(|e| e.to_string())?;
            threads.push(t);
        }
        Ok(HookRunner { inner, threads: Mutex::new(threads) })
    }

    /// Stops: no hook starts any more, the running ones are killed (their
    /// rows stay unfinished, so they run again at the next start), and the
    /// workers are joined.
    pub(crate) fn stop(&self) {
        self.inner.stopping.store(true, Ordering::SeqCst);
        self.inner.shared.hooks.stop();
        for (_, group) in lock(&self.inner.running).iter() {
            let _ = killpg(Pid::from_raw(*group), Signal::SIGKILL);
        }
        for t in lock(&self.threads).drain(..) {
            let _ = t.join();
        }
    }
}

/// Kills the hooks a dead daemon left running (their process group is in
/// their unfinished row), before any of them runs again: a hook never
/// overlaps its own rerun. One whose group was not yet recorded when the
/// daemon died is not found (the window between its spawn and that
/// background write).
fn kill_left_running(reader: &Store) {
    match reader.unfinished_hook_processes() {
        Ok(groups) => {
            for (seq, group) in groups {
                if crate::runner::orphans::kill_orphan(&group) {
                    tracing::info!(
                        "hooks: killed hook {seq}, left running by a previous daemon (group {})",
                        group.pgid
                    );
                }
            }
        }
        Err(e) => tracing::warn!("hooks: cannot read the hooks left running: {e}"),
    }
}

fn worker(inner: &Inner) {
    let signal = &inner.shared.hooks;
    loop {
        // The generation before the read: a wake after it is not missed.
        let Some(seen) = signal.now() else { return };
        match take(inner) {
            Ok(Some(hook)) => run_one(inner, hook),
            Ok(None) => {
                if signal.wait_past(seen).is_none() {
                    return;
                }
            }
            Err(e) => {
                tracing::warn!("hooks: cannot read the pending hooks: {e}");
                if signal.wait_past(seen).is_none() {
                    return;
                }
            }
        }
    }
}

/// The oldest unfinished row this daemon has not taken yet.
fn take(inner: &Inner) -> Result<Option<PendingHook>, StoreError> {
    let mut next = lock(&inner.next);
    let (reader, after) = &mut *next;
    let hook = reader.pending_hooks(*after, 1)?.into_iter().next();
    if let Some(h) = &hook {
        *after = h.seq;
    }
    Ok(hook)
}

fn run_one(inner: &Inner, hook: PendingHook) {
    let shared = &inner.shared;
    let (seq, id) = (hook.seq, hook.task);
    let attempt = match shared.writer.call(move |s| s.start_hook(seq)) {
        Ok(Some(n)) => n,
        // Its task was removed, or another start finished it.
        Ok(None) => return,
        Err(e) => {
            tracing::warn!("task {id}: its hook not started: {e}");
            return;
        }
    };
    let rec = match shared.reader().get_task(id) {
        Ok(Some(rec)) => rec,
        Ok(None) => return,
        Err(e) => {
            tracing::warn!("task {id}: its hook not started: {e}");
            return;
        }
    };
    let spec = &rec.spec;
    let mut env: Vec<(String, String)> = spec.env.iter().map(|v| (v.key.clone(), v.value.clone())).collect();
    let mut put = |k: &str, v: String| env.push((k.to_owned(), v));
    put("LARDON_TASK_ID", id.to_string());
    put("LARDON_TASK_STATE", hook.task_state.as_str().to_owned());
    put("LARDON_EXIT_CODE", hook.exit_code.map(|c| c.to_string()).unwrap_or_default());
    put("LARDON_TASK_NAME", spec.name.clone());
    put("LARDON_GROUP", task_group(spec).unwrap_or_default().to_owned());
    put("LARDON_HOOK_ATTEMPT", attempt.to_string());
    put("LARDON_SOCKET", shared.info.socket.to_string_lossy().into_owned());
    let command = run::HookCommand {
        command: hook.command.clone(),
        cwd: spec.cwd.as_ref().map(PathBuf::from),
        base_env: spec.submit_env.clone(),
        env,
        timeout: Duration::from_millis(shared.settings().on_end_timeout_ms),
    };
    let result = run::run(command, |group| {
        lock(&inner.running).push((seq, group));
        let Ok(pgid) = u32::try_from(group) else { return };
        let process = crate::handle::ProcessGroup { pgid, start: crate::runner::orphans::start_time(pgid) };
        shared.writer.send_background(move |s| s.set_hook_process(seq, &process), |_| {});
    });
    lock(&inner.running).retain(|(s, _)| *s != seq);
    // Killed by the daemon's stop, not by itself: not an outcome; it runs
    // again at the next start.
    if inner.stopping.load(Ordering::SeqCst) && !matches!(result.end, HookEnd::Exited(_)) {
        return;
    }
    tracing::info!(
        "task {id}: hook {} ({:?}) after {} ms",
        result.end.as_str(),
        result.end.code(),
        result.duration_ms
    );
    match shared.writer.call(move |s| s.finish_hook(seq, &result)) {
        Ok(_) => shared.emit(DaemonEvent::TaskChanged(id)),
        Err(e) => tracing::warn!("task {id}: its hook's outcome not recorded: {e}"),
    }
}
