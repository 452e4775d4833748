//! The queue callback of a command task: one run per sequence. A batched
//! task (`items` set) runs once per granted batch from its durable cursor,
//! records each batch's measured peak, commits the cursor only after the
//! batch succeeded, and asks for a new admission between batches.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{RecvTimeoutError, channel};
use std::time::Duration;

use lardon::{TaskContext, TaskError, TaskResult, format_bytes};

use super::{Run, RunRequest, RunSignal, task_env};
use crate::engine::{Shared, Slot};
use crate::ids::format_id;
use crate::settings::EnforceMode;
use crate::spec::{TaskId, TaskSpec};

/// How often a running command's memory use is fed to its reservation.
const USAGE_EVERY: Duration = Duration::from_millis(500);

/// The callback for task `id` running `spec`.
pub(crate) fn command_callback(
    shared: Arc<Shared>,
    id: TaskId,
    spec: Arc<TaskSpec>,
) -> impl FnOnce(&mut TaskContext) -> TaskResult + Send + 'static {
    move |ctx| {
        let slot = shared.slot(id);
        let result = run_all(&shared, id, &spec, ctx, &slot);
        shared.drop_slot(id);
        result
    }
}

fn store_err(e: impl std::fmt::Display) -> TaskError {
    TaskError::failed(format!("the daemon's store failed: {e}"))
}

fn run_all(shared: &Shared, id: TaskId, spec: &TaskSpec, ctx: &mut TaskContext, slot: &Slot) -> TaskResult {
    let mut cursor = match spec.items {
        Some(_) => shared.store().get_task(id).map_err(store_err)?.map_or(0, |r| r.cursor),
        None => 0,
    };
    let mut run_no = 0u32;
    loop {
        if let Some(total) = spec.items
            && cursor >= total
        {
            return Ok(());
        }
        let contract = ctx.contract().clone();
        let batch = spec.items.map(|total| (cursor, contract.batch.clamp(1, total - cursor), total));
        let settings = shared.settings();
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
            log: shared.log_path(id),
            memory_max,
            memory_high,
            cpus: cpus.cpus(),
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
        if let Err(e) = shared.store().set_run_handle(id, Some(&run.handle())) {
            tracing::warn!("task {id}: run handle not recorded: {e}");
        }
        let exit = wait_reporting_usage(&*run, ctx);
        let peak = run.peak();
        let oom = run.oom_killed();
        run.cleanup();
        slot.lock().run = None;
        // The handle is not cleared here (one fsync saved per run): the end
        // of the task clears it, and a stale one left by a crash between
        // batches is harmless (recovery checks the leader's start time).
        if shared.stopping() || slot.lock().cancelled {
            return Err(TaskError::Cancelled);
        }
        let exit = exit.map_err(TaskError::failed)?;
        let items = batch.map_or(1, |b| b.1);
        // Learn from every run, including one killed for its memory.
        ctx.record_batch(items, exit.wall, peak);
        // Persisted where it can steer a later admission (per-item memory
        // drives the adaptive batch); a plain command's sample would cost a
        // synced write per run for nothing.
        if (spec.items.is_some() || spec.estimate.memory_per_item > 0)
            && let Err(e) = shared.store().record_batch(contract.class.as_str(), items, exit.wall, peak)
        {
            tracing::warn!("task {id}: batch sample not persisted: {e}");
        }
        if let Some(code) = exit.code {
            shared.set_exit(id, code);
        }
        if oom {
            let limit = memory_max.or(memory_high).map_or_else(|| "?".to_owned(), format_bytes);
            let peak = peak.map_or_else(|| "unknown".to_owned(), format_bytes);
            return Err(TaskError::failed(format!("killed: memory limit of {limit} exceeded (peak {peak})")));
        }
        if !exit.success() {
            return Err(TaskError::failed(exit.describe()));
        }
        let Some((offset, size, total)) = batch else { return Ok(()) };
        cursor = offset + size;
        {
            let mut store = shared.store();
            store.advance_cursor(id, cursor).map_err(store_err)?;
            let _ = store.set_progress(id, cursor, total, "");
        }
        let _ = ctx.set_progress(cursor, total);
        if cursor >= total {
            return Ok(());
        }
        ctx.sequence_break()?;
    }
}

/// Waits for the run while feeding its memory use to the reservation, so
/// admission counts only what the task has not yet materialised.
fn wait_reporting_usage(run: &dyn Run, ctx: &TaskContext) -> Result<super::RunExit, super::RunError> {
    let (stop, stopped) = channel::<()>();
    std::thread::scope(|scope| {
        scope.spawn(move || {
            while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(USAGE_EVERY) {
                if let Some(bytes) = run.usage() {
                    ctx.report_usage(bytes);
                }
            }
        });
        let exit = run.wait();
        drop(stop);
        exit
    })
}
