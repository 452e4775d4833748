//! The local route: a task run here, by this host's queue and Governor.
//! [`queue_locally`] hands a stored task to the queue with its
//! dependencies and its class's probe, and [`command`] is the callback the
//! queue runs for it (one run per sequence, recorded in the store);
//! [`LocalRoute`] is the route's [`crate::kernel::Route`] (its cancel,
//! pause and resume act on the queue and the run's control slot).
//! Offload's fallback and the hub both queue through here; nothing in this
//! module knows the hub.

mod command;
mod route;

use std::sync::Arc;

use lardon::{Task, TaskQueue};

use command::command_callback;
pub(crate) use route::LocalRoute;

pub(crate) use crate::kernel::Dependency;
use crate::kernel::{Shared, Write, qid};
use crate::spec::{DepKind, TaskId, TaskSpec, TaskState};
use crate::store::Outcome;

/// Hands a stored task to the local queue with its id, priority and
/// dependencies, resolved once by the caller from the store
/// ([`Dependency`]): an ended one is satisfied (completed, or any end for
/// `after_any`) or fails the task at once; a live one is left to the queue,
/// which knows every live task and every end since it started.
pub(crate) fn queue_locally(
    shared: &Arc<Shared>,
    queue: &TaskQueue,
    id: TaskId,
    spec: &TaskSpec,
    paused: bool,
    deps: &[Dependency],
) -> Result<(), String> {
    let callback = command_callback(Arc::clone(shared), id, Arc::new(spec.clone()));
    // A batched task's items, so that admission and the queue order know
    // how much work it has (docs/DESIGN.md §4 step 9, §7); each later
    // sequence is admitted with what its progress says is left. A task
    // resumed after a restart counts from its total until its first batch.
    let estimate = match spec.items {
        Some(items) => spec.to_estimate().with_items_left(items),
        None => spec.to_estimate(),
    };
    let mut task =
        Task::new(spec.display_name(), estimate, callback).with_id(qid(id)).priority(spec.priority);
    if let Some(probe) = probe_for(shared, queue, id, spec) {
        task = task.after_any(qid(probe));
    }
    for dep in deps {
        match dep.stored {
            // Removed: it ended, and only terminal tasks can be removed.
            None => continue,
            Some(state) if !state.is_terminal() => {}
            Some(state) if state == TaskState::Completed || dep.kind == DepKind::End => continue,
            Some(state) => {
                fail_unqueued(shared, id, format!("dependency {} ended {state}", dep.id));
                return Ok(());
            }
        }
        task = match dep.kind {
            DepKind::Success => task.after(qid(dep.id)),
            DepKind::End => task.after_any(qid(dep.id)),
        };
    }
    let submitted = if paused { queue.submit_paused(task) } else { queue.submit(task) };
    match submitted {
        Ok(_) => Ok(()),
        Err(lardon::SubmitError::UnknownDependency(dep)) => {
            fail_unqueued(shared, id, format!("dependency {dep} is unknown"));
            Ok(())
        }
        Err(e) => Err(e.to_string()),
    }
}

/// The live probe `id` must be queued after when its class has learned
/// nothing from a completed run yet and it declares memory
/// ([`crate::runner::ClassProbes`]); `None` otherwise (it may become the
/// probe itself).
fn probe_for(shared: &Shared, queue: &TaskQueue, id: TaskId, spec: &TaskSpec) -> Option<TaskId> {
    let e = &spec.estimate;
    // Only a named class promises that its tasks are alike; the default
    // class gathers unrelated commands, which must not queue behind one
    // another.
    if (e.memory_fixed == 0 && e.memory_per_item == 0) || e.class == lardon::Class::DEFAULT {
        return None;
    }
    let proven = shared.governor.learned(&e.to_estimate()).is_some_and(|l| l.samples > 0);
    if proven {
        return None;
    }
    let live = |t: TaskId| queue.get(qid(t)).is_some_and(|v| !v.state.is_terminal());
    shared.probes.probe_for(&e.class, id, live)
}

/// Ends a task that never reached the queue (durably, before it returns).
pub(crate) fn fail_unqueued(shared: &Shared, id: TaskId, reason: String) {
    let outcome = Outcome { state: TaskState::Failed, exit_code: None, reason: Some(reason) };
    if let Err(e) = shared.record(Write::Finished(id, outcome)) {
        tracing::error!("task {id}: cannot record failure: {e}");
    }
}
