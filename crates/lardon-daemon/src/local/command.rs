//! The queue callback of a command task: one run per sequence. A batched
//! task (`items` set) runs once per granted batch from its durable cursor,
//! commits the cursor only after the batch succeeded, and asks for a new
//! admission between batches.
//!
//! Every run is recorded with its shape (unbatched, or the batch it ran):
//! completed with its measured peak, or killed at its memory limit — the
//! limit is then a lower bound, never a peak (docs/DESIGN.md §6). A run
//! killed for memory costs a retry, not the task: the next admission is
//! sized from what the kill taught (a smaller batch at a larger per-item
//! size, or a larger grant), the cursor stays where it was, and the task
//! fails only after [`MAX_MEMORY_RETRIES`] retries, with `--no-oom-retry`,
//! or when admission finds even `batch_min` at the learned size impossible.
//! Under `enforce = soft` an overrun past the slack is warned about, noted
//! on the task and learned. The first task of an unproven class goes
//! first ([`crate::runner::ClassProbes`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{RecvTimeoutError, channel};
use std::time::Duration;

use lardon::{RunOutcome, RunRecord, TaskContext, TaskError, TaskResult, format_bytes};

use crate::ids::format_id;
use crate::kernel::{Applied, DaemonEvent, Shared, Slot, Write};
use crate::runner::logcap::LiveCap;
use crate::runner::{Run, RunError, RunExit, RunRequest, RunSignal, task_env};
use crate::settings::EnforceMode;
use crate::spec::{TIMEOUT, TaskId, TaskSpec};

/// How often a running command's memory use is fed to its reservation.
const USAGE_EVERY: Duration = Duration::from_millis(500);

/// How often a running command's log is checked against its cap; the
/// wait wakes this often (a run shorter than this is never woken).
const LOG_EVERY: Duration = Duration::from_millis(250);

/// The next check after one that dropped bytes: the writer is fast, and a
/// check is two system calls.
const LOG_SOON: Duration = Duration::from_millis(25);

/// Runs of one task killed at their memory limit that are run again before
/// the task fails.
pub(crate) const MAX_MEMORY_RETRIES: u32 = 3;

/// The callback for task `id` running `spec`.
pub(crate) fn command_callback(
    shared: Arc<Shared>,
    id: TaskId,
    spec: Arc<TaskSpec>,
) -> impl FnOnce(&mut TaskContext) -> TaskResult + Send + 'static {
    move |ctx| {
        let slot = shared.placements.slot(id);
        // One cap across the task's runs: a batched task's runs share one
        // log file (docs/DESIGN.md §10, log caps).
        let mut log = shared.settings().log_max.map(LiveCap::new);
        let result = run_all(&shared, id, &spec, ctx, &slot, log.as_mut());
        // Every run of this attempt has been cleaned up: no writer is left.
        if let Some(log) = log {
            log.finish(&shared.log_path(id));
        }
        shared.placements.ran_here(id);
        result
    }
}

fn store_err(e: impl std::fmt::Display) -> TaskError {
    TaskError::failed(format!("the daemon's store failed: {e}"))
}

fn run_all(
    shared: &Shared,
    id: TaskId,
    spec: &TaskSpec,
    ctx: &mut TaskContext,
    slot: &Slot,
    mut log: Option<&mut LiveCap>,
) -> TaskResult {
    // The row is read only when needed: a batched task's durable cursor
    // now, the memory retries (kept across restarts) at the first kill.
    // A plain run reads nothing from the store.
    let stored = if spec.items.is_some() { shared.reader().get_task(id).map_err(store_err)? } else { None };
    let mut cursor = stored.as_ref().map_or(0, |r| r.cursor);
    let mut retries = stored.as_ref().map(|r| r.memory_retries);
    let class = spec.learning_class();
    let timeout = spec.timeout_ms.or(shared.settings().timeout_ms);
    let mut timeouts = 0u32;
    let mut run_no = 0u32;
    loop {
        if let Some(total) = spec.items
            && cursor >= total
        {
            return Ok(());
        }
        let settings = shared.settings();
        let contract = ctx.contract().clone();
        let batch = spec.items.map(|total| (cursor, contract.batch.clamp(1, total - cursor), total));
        let limit = match settings.enforce {
            EnforceMode::Off => None,
            _ => settings.memory_limit(contract.memory),
        };
        let (memory_max, memory_high) =
            if settings.enforce == EnforceMode::Soft { (None, limit) } else { (limit, None) };
        run_no += 1;
        // Held until this run ends (given back on every path out).
        let cpus = shared.compute.lease(if contract.cpu_millis == 0 { 0 } else { contract.whole_cpus() });
        let scratch = contract.scratch.as_ref().map(|g| g.path.to_string_lossy().into_owned());
        let req = RunRequest {
            name: format!("{}-t{}-r{run_no}", shared.info.instance, id.0),
            argv: spec.argv.clone(),
            cwd: spec.cwd.as_ref().map(PathBuf::from),
            env: task_env(
                &format_id(id),
                spec,
                &contract,
                &shared.info.socket.to_string_lossy(),
                scratch.as_deref(),
                batch,
            ),
            base_env: spec.submit_env.clone(),
            log: shared.log_path(id),
            memory_max,
            memory_high,
            cpus: cpus.cpus(),
        };
        let shipped_deadline = spec.offload.as_ref().and_then(|o| o.deadline_unix_ms);
        if shipped_deadline.is_some_and(|d| d <= crate::now_ms()) {
            return Err(TaskError::failed(DEADLINE_PASSED));
        }
        // This run's timeout, from its start (each batch run has its own),
        // checked by the wait below on this thread: no timer thread.
        let timeout_at =
            timeout.map(|ms| crate::now_ms().saturating_add(i64::try_from(ms).unwrap_or(i64::MAX)));
        let deadline = match (shipped_deadline, timeout_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let run: Arc<dyn Run> = {
            let mut st = slot.lock();
            if st.cancelled || shared.stopping() {
                return Err(TaskError::Cancelled);
            }
            let run: Arc<dyn Run> = Arc::from(shared.executor.start(&req).map_err(TaskError::failed)?);
            if st.paused {
                let _ = run.signal(RunSignal::Stop);
            }
            st.run = Some(Arc::clone(&run));
            run
        };
        // Sent, not waited for: the handle is durable with the next group
        // commit, and the run's end writes queue behind it (the writer
        // keeps their order). Waiting here would not shrink the window in
        // which a crash finds a live run with no durable handle (the run
        // exists from the spawn on either way); it would only hold this
        // worker for an fsync per run (docs/DESIGN.md §10, crash recovery).
        shared.record_background(Write::RunHandle(id, run.handle()));
        let tend = log.as_deref_mut().map(|cap| (cap, req.log.as_path()));
        let (exit, past_deadline) = wait_reporting_usage(&*run, ctx, deadline, tend);
        let peak = run.peak();
        let oom = run.oom_killed();
        run.cleanup();
        if let Some(log) = log.as_deref_mut() {
            log.note_len(run.log_len());
        }
        drop(cpus);
        slot.lock().run = None;
        // The handle is not cleared here (one fsync saved per run): the end
        // of the task clears it, and a stale one left by a crash between
        // batches is harmless (recovery checks the leader's start time).
        if shared.stopping() || slot.lock().cancelled {
            return Err(TaskError::Cancelled);
        }
        if past_deadline {
            // A run cut short says nothing about its need: nothing learned.
            let timed_out = timeout_at.is_some_and(|t| shipped_deadline.is_none_or(|d| t <= d));
            if !timed_out {
                return Err(TaskError::failed(DEADLINE_PASSED));
            }
            let limit = lardon::format_duration_ms(timeout.unwrap_or(0));
            if timeouts < spec.retry_on_timeout {
                timeouts += 1;
                tracing::warn!(
                    "task {id}: run killed at its timeout of {limit}; run again ({timeouts} of {})",
                    spec.retry_on_timeout
                );
                ctx.sequence_break()?;
                continue;
            }
            return Err(TaskError::failed(format!("{TIMEOUT}: the run was killed after {limit}")));
        }
        let exit = exit.map_err(TaskError::failed)?;
        // Learn from every run; a kill at the limit only bounds the need.
        let outcome = match (oom, memory_max) {
            (true, Some(limit)) => RunOutcome::KilledAtLimit { limit },
            (true, None) => RunOutcome::Completed { peak: None },
            (false, _) => RunOutcome::Completed { peak },
        };
        let record = match batch {
            Some((_, size, _)) => RunRecord::batch(size, exit.wall, outcome),
            None => RunRecord::unbatched(exit.wall, outcome),
        };
        ctx.record_run(record);
        persist_run(shared, id, class.as_str(), record, contract.memory, exit.code);
        if settings.enforce == EnforceMode::Soft
            && let (Some(limit), Some(peak)) = (memory_high, peak)
            && peak > limit
        {
            note_soft_overrun(shared, id, &contract, limit, peak);
        }
        if oom {
            let limit = memory_max.or(memory_high).map_or_else(|| "?".to_owned(), format_bytes);
            let peak = peak.map_or_else(|| "unknown".to_owned(), format_bytes);
            let killed = format!("killed: memory limit of {limit} exceeded (peak {peak})");
            if !spec.oom_retry {
                return Err(TaskError::failed(format!("{killed} (not run again: --no-oom-retry)")));
            }
            let so_far = match retries {
                Some(n) => n,
                None => shared.reader().get_task(id).map_err(store_err)?.map_or(0, |r| r.memory_retries),
            };
            if so_far >= MAX_MEMORY_RETRIES {
                return Err(TaskError::failed(format!("{killed} after {so_far} memory retries")));
            }
            let what = match batch {
                Some((offset, size, _)) => format!("batch of {size} at item {offset}"),
                None => "run".to_owned(),
            };
            let note = format!("{what} {killed}; run again at the size learned from the kill");
            tracing::warn!("task {id}: {note}");
            let applied = shared.record(Write::MemoryRetry(id, note)).map_err(store_err)?;
            retries = Some(match applied {
                Applied::Retries(n) => n,
                Applied::Done | Applied::Left(_) | Applied::HookQueued => 0,
            });
            // A new admission sized from the kill: smaller batch or larger
            // grant; a REJECT (even batch_min can never fit) fails the task
            // with admission's reason.
            ctx.sequence_break()?;
            continue;
        }
        if !exit.success() {
            return Err(TaskError::failed(exit.describe()));
        }
        let Some((offset, size, total)) = batch else { return Ok(()) };
        cursor = offset + size;
        // Durable before the next batch starts: a crash re-runs at most
        // the batch after it (one transaction with the progress it implies).
        shared
            .writer
            .call(move |s| {
                s.advance_cursor(id, cursor)?;
                s.set_progress(id, cursor, total, "")
            })
            .map_err(store_err)?;
        let _ = ctx.set_progress(cursor, total);
        if cursor >= total {
            return Ok(());
        }
        ctx.sequence_break()?;
    }
}

/// Keeps `record` in the store so that learning survives a restart (the
/// store ignores a record that carries nothing), and the run's exit code on
/// the task's row. Not waited for: the writer applies writes in the order
/// they were sent, so this lands before the task's end, which the pump
/// sends only after this callback returned. It can land before the pump's
/// start of the same attempt; the start clears nothing it wrote
/// (`store/order_tests.rs` applies every such order).
fn persist_run(
    shared: &Shared,
    id: TaskId,
    class: &str,
    record: RunRecord,
    reserved: u64,
    code: Option<i32>,
) {
    shared.record_background(Write::RunEnded { id, class: class.to_owned(), record, reserved, code });
}

/// A run went past its grant plus slack and soft enforcement let it: say so
/// in the log, on the task (status, explain, its course) and to watchers.
fn note_soft_overrun(shared: &Shared, id: TaskId, contract: &lardon::Contract, limit: u64, peak: u64) {
    let ratio = if contract.memory > 0 { peak as f64 / contract.memory as f64 } else { 0.0 };
    let note = format!(
        "peak {} is {ratio:.1}× its grant of {} (over the {} soft limit; enforce = soft let it run)",
        format_bytes(peak),
        format_bytes(contract.memory),
        format_bytes(limit)
    );
    tracing::warn!("task {id}: {note}");
    let events = shared.events.clone();
    shared.writer.send_background(
        move |s| s.note_soft_overrun(id, &note),
        move |result| {
            if let Err(e) = result {
                tracing::warn!("task {id}: overrun not recorded: {e}");
            }
            // Nobody watching is fine.
            let _ = events.send(DaemonEvent::TaskChanged(id));
        },
    );
}

/// Why a run past its task's deadline failed (the agent's words too).
const DEADLINE_PASSED: &str = "deadline passed";

/// A task's log cap and its run's log, checked from the run's wait.
type Tend<'a> = Option<(&'a mut LiveCap, &'a Path)>;

/// The periodic part of a run's wait: its memory use every
/// [`USAGE_EVERY`], its log every [`LOG_EVERY`] (sooner after a check that
/// dropped bytes). Counts the time by the steps it was woken after, so a
/// run pays no clock reads before its first wake.
struct Periodic<'a> {
    tend: Tend<'a>,
    since_usage: Duration,
    step: Duration,
}

impl<'a> Periodic<'a> {
    fn new(tend: Tend<'a>) -> Self {
        let step = if tend.is_some() { LOG_EVERY } else { USAGE_EVERY };
        Periodic { tend, since_usage: Duration::ZERO, step }
    }

    /// How long to wait before the next wake, given the time `left` to
    /// the deadline (ms).
    fn step(&self, left: Option<i64>) -> Duration {
        match left {
            Some(ms) if ms > 0 => self.step.min(Duration::from_millis(ms.unsigned_abs())),
            _ => self.step,
        }
    }

    /// After a wake `waited` after the last.
    fn woke(&mut self, waited: Duration, run: &dyn Run, ctx: &TaskContext) {
        self.since_usage += waited;
        if self.since_usage >= USAGE_EVERY || self.tend.is_none() {
            self.since_usage = Duration::ZERO;
            if let Some(bytes) = run.usage() {
                ctx.report_usage(bytes);
            }
        }
        if let Some((cap, path)) = self.tend.as_mut() {
            self.step = if cap.tend(path) { LOG_SOON } else { LOG_EVERY };
        }
    }
}

/// Waits for the run while feeding its memory use to the reservation, so
/// admission counts only what the task has not yet materialised; kills its
/// group at `deadline` (Unix ms; a shippable task's, which holds here as
/// at an agent). The second value: whether the deadline killed it.
///
/// On this thread when the run can be waited for with a timeout (a pidfd):
/// no thread is started per run. Otherwise a scoped sampler thread does
/// the periodic part while this one blocks in [`Run::wait`].
fn wait_reporting_usage(
    run: &dyn Run,
    ctx: &TaskContext,
    deadline: Option<i64>,
    tend: Tend<'_>,
) -> (Result<RunExit, RunError>, bool) {
    let mut killed = false;
    let mut periodic = Periodic::new(tend);
    loop {
        let left = deadline.map(|d| d.saturating_sub(crate::now_ms()));
        if left.is_some_and(|ms| ms <= 0) && !killed {
            killed = true;
            let _ = run.signal(RunSignal::Kill);
        }
        // Wakes at the next periodic check or at the deadline, whichever is first.
        let step = periodic.step(left);
        match run.ended_within(step) {
            Some(true) => return (run.wait(), killed),
            Some(false) => periodic.woke(step, run, ctx),
            None => return wait_with_sampler(run, ctx, deadline, periodic),
        }
    }
}

/// [`wait_reporting_usage`] for a run that can only be waited for without
/// a timeout: the sampling runs on a scoped thread.
fn wait_with_sampler(
    run: &dyn Run,
    ctx: &TaskContext,
    deadline: Option<i64>,
    mut periodic: Periodic<'_>,
) -> (Result<RunExit, RunError>, bool) {
    let (stop, stopped) = channel::<()>();
    let killed = std::sync::atomic::AtomicBool::new(false);
    let hit = &killed;
    let exit = std::thread::scope(|scope| {
        scope.spawn(move || {
            loop {
                let left = deadline.map(|d| d.saturating_sub(crate::now_ms()));
                if left.is_some_and(|ms| ms <= 0) && !hit.swap(true, std::sync::atomic::Ordering::SeqCst) {
                    let _ = run.signal(RunSignal::Kill);
                }
                // Wakes at the next periodic check or at the deadline, whichever is first.
                let step = periodic.step(left);
                match stopped.recv_timeout(step) {
                    Err(RecvTimeoutError::Timeout) => {}
                    _ => return,
                }
                periodic.woke(step, run, ctx);
            }
        });
        let exit = run.wait();
        drop(stop);
        exit
    });
    (exit, killed.load(std::sync::atomic::Ordering::SeqCst))
}
