//! What clients ask of the engine: submit, cancel, pause, resume, remove,
//! clean, progress and policy. Synchronous (the service calls these from
//! blocking threads), but for [`Engine::submit_many_async`], which awaits
//! its commit on the runtime.

use std::time::Duration;

use super::Engine;
use crate::kernel::{Answer, Applied, ControlError, DaemonEvent, Placed, Route, Write, qid};
use crate::local::Dependency;
use crate::settings;
use crate::spec::{RunEngine, TaskId, TaskSpec, TaskState};
use crate::store::{CourseEntry, Inserted, NewTask, StoreError, TaskFilter, TaskRecord};

/// Why a request was refused; mapped to a gRPC status by the service.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ActionError {
    /// No such task.
    #[error("no task {0}")]
    NotFound(TaskId),
    /// A malformed request, naming the field.
    #[error("{0}")]
    Invalid(String),
    /// Not possible in the current state.
    #[error("{0}")]
    Conflict(String),
    /// The daemon is stopping.
    #[error("the daemon is shutting down")]
    Unavailable,
    /// The store failed.
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<StoreError> for ActionError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(id) => ActionError::NotFound(id),
            // Only at shutdown: the writer stops after the queue closed.
            StoreError::WriterStopped => ActionError::Unavailable,
            StoreError::UnknownDependency { .. } => ActionError::Invalid(format!("after: {e}")),
            StoreError::NotTerminal { .. }
            | StoreError::StillLive { .. }
            | StoreError::IllegalTransition { .. } => ActionError::Conflict(e.to_string()),
            other => ActionError::Internal(other.to_string()),
        }
    }
}

impl From<ControlError> for ActionError {
    fn from(e: ControlError) -> Self {
        match e {
            ControlError::CannotPause { .. } | ControlError::Conflict(_) => {
                ActionError::Conflict(e.to_string())
            }
            ControlError::Store(e) => ActionError::from(e),
        }
    }
}

impl Engine {
    /// Validates, stores and queues a command. Malformed specs and invalid
    /// estimates are refused naming the field (a CLI maps this to exit 2).
    pub(crate) fn submit(&self, spec: TaskSpec, paused: bool) -> Result<TaskId, ActionError> {
        let ids = self.submit_many(vec![spec], paused, "")?;
        ids.into_iter().next().ok_or_else(|| ActionError::Internal("no id for a stored task".into()))
    }

    /// Validates every spec, stores them all in one transaction (all or
    /// none) and queues each; returns once they are durable. A refusal
    /// names the spec's position as `{prefix}[i].field` (empty `prefix`:
    /// the field alone, for one spec).
    pub(crate) fn submit_many(
        &self,
        specs: Vec<TaskSpec>,
        paused: bool,
        prefix: &str,
    ) -> Result<Vec<TaskId>, ActionError> {
        let submission = self.prepare_submission(specs, paused, prefix)?;
        let news = submission.news;
        // The dependencies are checked and resolved here, once, in the
        // inserting transaction.
        let inserted =
            self.shared.writer.call(move |s| s.insert_tasks_resolved(&news).map(|inserted| (inserted, news)));
        self.queue_submission(inserted, &submission.deps_of, paused, prefix)
    }

    /// [`Engine::submit_many`] for one `--each` call that names no group:
    /// the specs without a group get one of their own, `each-<first id>`,
    /// named in the inserting write (the writer is the one thread that
    /// numbers tasks, so the first id is the one the insert takes).
    /// Returns the ids and the group.
    pub(crate) fn submit_each(
        &self,
        specs: Vec<TaskSpec>,
        paused: bool,
        prefix: &str,
    ) -> Result<(Vec<TaskId>, lardon::GroupName), ActionError> {
        let submission = self.prepare_submission(specs, paused, prefix)?;
        let mut news = submission.news;
        let (tx, rx) = std::sync::mpsc::channel();
        let inserted = self.shared.writer.call(move |s| {
            let first = s.next_task_number()?;
            let group = lardon::GroupName::new(&format!("each-{first}")).map_err(|e| {
                StoreError::Corrupt { what: "generated group name".into(), detail: e.to_string() }
            })?;
            for new in news.iter_mut().filter(|n| n.spec.group.is_none()) {
                new.spec.group = Some(group.clone());
            }
            let _ = tx.send(group);
            s.insert_tasks_resolved(&news).map(|inserted| (inserted, news))
        });
        let ids = self.queue_submission(inserted, &submission.deps_of, paused, prefix)?;
        let group = rx.try_recv().map_err(|_| ActionError::Internal("no group for an --each call".into()))?;
        Ok((ids, group))
    }

    /// [`Engine::submit_many`] for a caller on the async runtime: the same
    /// checks, transaction and queueing, but it awaits the commit instead
    /// of blocking a thread on it. Only for specs that
    /// [`Engine::submits_without_blocking`] accepts: queueing those takes
    /// the queue's lock and nothing else (no `sbatch`, no broker call).
    pub(crate) async fn submit_many_async(
        &self,
        specs: Vec<TaskSpec>,
        paused: bool,
        prefix: &str,
    ) -> Result<Vec<TaskId>, ActionError> {
        debug_assert!(specs.iter().all(submits_locally), "a spec whose queueing may block");
        let submission = self.prepare_submission(specs, paused, prefix)?;
        let news = submission.news;
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.shared.writer.send(
            move |s| s.insert_tasks_resolved(&news).map(|inserted| (inserted, news)),
            move |result| {
                // The caller may have gone (client hung up): nothing to tell;
                // the tasks are stored and queued at the next start.
                let _ = tx.send(result);
            },
        );
        // A dropped reply means the writer stopped before the write.
        let inserted = rx.await.unwrap_or(Err(StoreError::WriterStopped));
        self.queue_submission(inserted, &submission.deps_of, paused, prefix)
    }

    /// Whether [`Engine::submit_many_async`] may take `specs`: every one
    /// runs here (not on Slurm) and is not offered to a broker.
    pub(crate) fn submits_without_blocking(specs: &[TaskSpec]) -> bool {
        specs.iter().all(submits_locally)
    }

    /// The checks before a submission's transaction.
    fn prepare_submission(
        &self,
        specs: Vec<TaskSpec>,
        paused: bool,
        prefix: &str,
    ) -> Result<Submission, ActionError> {
        if self.shared.stopping() {
            return Err(ActionError::Unavailable);
        }
        for (i, spec) in specs.iter().enumerate() {
            let invalid = |m: &dyn std::fmt::Display| ActionError::Invalid(format!("{}{m}", at(prefix, i)));
            self.check(spec).map_err(|m| invalid(&m))?;
            if paused {
                self.routes.check_paused(spec).map_err(|r| invalid(&r))?;
            }
        }
        // To name the spec a missing dependency belongs to.
        let deps_of = specs.iter().map(|s| s.dependencies().map(|(d, _)| d).collect()).collect();
        let news = specs.into_iter().map(|spec| NewTask { spec, paused }).collect();
        Ok(Submission { news, deps_of })
    }

    /// After a submission's transaction: its refusal named, or each task
    /// announced and queued.
    fn queue_submission(
        &self,
        inserted: Result<(Vec<Inserted>, Vec<NewTask>), StoreError>,
        deps_of: &[Vec<TaskId>],
        paused: bool,
        prefix: &str,
    ) -> Result<Vec<TaskId>, ActionError> {
        let (inserted, news) = inserted.map_err(|e| match e {
            StoreError::UnknownDependency { dep } => {
                let i = deps_of.iter().position(|d| d.contains(&dep)).unwrap_or(0);
                ActionError::Invalid(format!("{}after: no task {dep}", at(prefix, i)))
            }
            other => ActionError::from(other),
        })?;
        let mut ids = Vec::with_capacity(inserted.len());
        for (task, new) in inserted.into_iter().zip(&news) {
            self.shared.emit(DaemonEvent::TaskChanged(task.id));
            let deps: Vec<Dependency> = task
                .deps
                .iter()
                .map(|d| Dependency { id: d.id, kind: d.kind, stored: Some(d.state) })
                .collect();
            self.enqueue(task.id, &new.spec, paused, &deps).map_err(|e| {
                // Stored but not queued (the queue is closing): it is queued
                // again at the next start, so nothing is lost.
                tracing::warn!("task {} stored but not queued: {e}", task.id);
                ActionError::Unavailable
            })?;
            ids.push(task.id);
        }
        Ok(ids)
    }

    /// The stored record of a live task.
    fn live(&self, id: TaskId) -> Result<TaskRecord, ActionError> {
        let rec = self.task(id)?.ok_or(ActionError::NotFound(id))?;
        if rec.state.is_terminal() {
            return Err(ActionError::Conflict(format!("task {id} already ended ({})", rec.state)));
        }
        Ok(rec)
    }

    /// The route a live task is on: its placement's, or Slurm for a Slurm
    /// task stored but not yet handed to it ([`Routes::for_placement`]).
    ///
    /// [`Routes::for_placement`]: super::routes::Routes::for_placement
    fn route(&self, rec: &TaskRecord) -> &dyn Route {
        let placed: Placed = self.shared.placements.route_of(rec.id);
        self.routes.for_placement(&placed, &rec.spec)
    }

    /// Cancels: a pending task at once; a running one gets SIGTERM, then
    /// SIGKILL after `grace`. Answers with the stored state once the
    /// change is durable (a running task stays RUNNING until it exits).
    /// The task's placement names the one route that cancels it; a route
    /// that let it go meanwhile (offload handed it back, say) leaves it to
    /// the local route.
    pub(crate) fn cancel(&self, id: TaskId, grace: Option<Duration>) -> Result<TaskState, ActionError> {
        let rec = self.live(id)?;
        let answer = match self.route(&rec).cancel(id, grace)? {
            Answer::LetGo => self.routes.local.cancel(id, grace)?,
            done @ Answer::Done(_) => done,
        };
        settled(id, answer)
    }

    /// Pauses: a running command is stopped (SIGSTOP to its group) and
    /// keeps its reservation; a pending task is skipped by the dispatcher.
    /// Answers once the pause is durable. Only the local route pauses; the
    /// others refuse, naming where the task runs.
    pub(crate) fn pause(&self, id: TaskId) -> Result<TaskState, ActionError> {
        let rec = self.live(id)?;
        Ok(self.route(&rec).pause(id)?)
    }

    /// Resumes a paused task (SIGCONT for a stopped command). Answers once
    /// the change is durable. A route with nothing paused leaves it to the
    /// local queue, which answers.
    pub(crate) fn resume(&self, id: TaskId) -> Result<TaskState, ActionError> {
        let rec = self.live(id)?;
        let answer = match self.route(&rec).resume(id)? {
            Answer::LetGo => self.routes.local.resume(id)?,
            done @ Answer::Done(_) => done,
        };
        settled(id, answer)
    }

    /// Runs a finished task again: same spec, a new attempt; its history
    /// (events, course, log) is kept and the log gains a separator line.
    /// Dependencies are resolved again as at submit: an `after` on a task
    /// that did not complete fails it at once with that reason.
    pub(crate) fn restart(&self, id: TaskId) -> Result<TaskState, ActionError> {
        if self.shared.stopping() {
            return Err(ActionError::Unavailable);
        }
        let rec = self.task(id)?.ok_or(ActionError::NotFound(id))?;
        if !rec.state.is_terminal() {
            return Err(ActionError::Conflict(format!(
                "task {id} is {}; only completed, failed or cancelled tasks can be restarted",
                rec.state
            )));
        }
        // The queue remembers every ended id; the new attempt reuses it.
        // (Unknown to this queue: it ended before the daemon's last start.)
        let _ = self.queue.release_id(qid(id));
        let Applied::Left(from) = self.shared.record(Write::Restarted(id))? else {
            return Err(ActionError::Conflict(format!("task {id}: not restarted")));
        };
        self.mark_log(id, from);
        let deps = {
            let reader = self.shared.reader();
            rec.spec
                .dependencies()
                .map(|(dep, kind)| {
                    let stored = reader.get_task(dep)?.map(|r| r.state);
                    Ok(Dependency { id: dep, kind, stored })
                })
                .collect::<Result<Vec<_>, StoreError>>()?
        };
        self.enqueue(id, &rec.spec, false, &deps).map_err(|e| {
            tracing::warn!("task {id} restarted in the store but not queued: {e}");
            ActionError::Unavailable
        })?;
        Ok(self.routes.local.settled_state(id)?)
    }

    /// Appends a line to the task's log so that `lardon log` shows where
    /// the new attempt's output begins. Best effort: a log that cannot be
    /// written loses nothing but the separator.
    fn mark_log(&self, id: TaskId, from: TaskState) {
        use std::io::Write as _;
        let path = self.shared.log_path(id);
        let line = format!("--- lardon: task {id} restarted (it had ended {from}) ---\n");
        let written = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = written
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!("task {id}: cannot mark the restart in {}: {e}", path.display());
        }
    }

    /// Forgets a terminal task and its log; returns the state it ended in.
    pub(crate) fn remove(&self, id: TaskId) -> Result<TaskState, ActionError> {
        let state = self.task(id)?.ok_or(ActionError::NotFound(id))?.state;
        self.shared.writer.call(move |s| s.remove_task(id))?;
        self.forget(id);
        Ok(state)
    }

    fn forget(&self, id: TaskId) {
        let _ = self.queue.remove(qid(id));
        let _ = std::fs::remove_file(self.shared.log_path(id));
        self.shared.emit(DaemonEvent::TaskRemoved(id));
    }

    /// Removes every terminal task in `states` (empty: all terminal ones).
    pub(crate) fn clean(&self, states: &[TaskState]) -> Result<Vec<TaskId>, ActionError> {
        let states = states.to_vec();
        let removed = self.shared.writer.call(move |s| s.clean(&states))?;
        for id in &removed {
            self.forget(*id);
        }
        Ok(removed)
    }

    /// Durable progress reported from inside a task.
    pub(crate) fn progress(
        &self,
        id: TaskId,
        done: u64,
        total: u64,
        message: &str,
    ) -> Result<(), ActionError> {
        if total > 0 && done > total {
            return Err(ActionError::Invalid(format!("done: {done} is above total {total}")));
        }
        self.live(id)?;
        if total > 0
            && let Ok(p) = lardon::progress::Progress::items(done, total)
        {
            // The task may be between sequences or not started; the durable
            // figure below is what counts.
            let _ = self.queue.report_progress(qid(id), p);
        }
        let message = message.to_owned();
        self.shared.writer.call(move |s| s.set_progress(id, done, total, &message))?;
        self.shared.emit(DaemonEvent::TaskChanged(id));
        Ok(())
    }

    /// Applies policy changes atomically: parsed, validated by the
    /// Governor, then persisted.
    pub(crate) fn set_policy(&self, set: &[(String, String)], reset: &[String]) -> Result<(), ActionError> {
        let overrides = self.policy_overrides()?;
        let defaults = self.default_policy();
        let mut policy = defaults.clone();
        let mut daemon = settings::DaemonSettings::default();
        let mut merged: Vec<(String, String)> = overrides
            .into_iter()
            .filter(|(k, _)| !reset.contains(k) && !set.iter().any(|(s, _)| s == k))
            .collect();
        for key in reset {
            if settings::get(&policy, &daemon, key).is_none() {
                return Err(ActionError::Invalid(format!("{key}: unknown policy key")));
            }
        }
        merged.extend(set.iter().cloned());
        for (k, v) in &settings::in_key_order(merged) {
            settings::set(&mut policy, &mut daemon, k, v).map_err(ActionError::Invalid)?;
        }
        self.shared.governor.set_policy(policy.clone()).map_err(|e| match e {
            // Valid on its own, but the running tasks hold more than it allows.
            lardon::PolicyError::DoesNotCover(_) => ActionError::Conflict(e.to_string()),
            other => ActionError::Invalid(other.to_string()),
        })?;
        let (set, reset) = hook_none_resets(set, reset);
        // The budget with it: `lardon report` draws against it.
        let budget = super::memory_budget(&self.shared.governor);
        self.shared.writer.call(move |s| {
            s.set_policy_overrides(&set, &reset)?;
            s.set_memory_budget(budget)
        })?;
        self.shared.replace_settings(daemon);
        self.shared.compute.apply(&policy);
        self.queue.resources_changed();
        Ok(())
    }

    /// A task as committed (`None`: no such task).
    pub(crate) fn task(&self, id: TaskId) -> Result<Option<TaskRecord>, StoreError> {
        self.shared.reader().get_task(id)
    }

    /// The committed tasks `filter` selects.
    pub(crate) fn tasks(&self, filter: &TaskFilter) -> Result<Vec<TaskRecord>, StoreError> {
        self.shared.reader().list_tasks(filter)
    }

    /// A task's course (its bounded decision history).
    pub(crate) fn course(&self, id: TaskId) -> Result<Vec<CourseEntry>, StoreError> {
        self.shared.reader().course(id)
    }

    /// The persisted policy overrides.
    pub(crate) fn policy_overrides(&self) -> Result<Vec<(String, String)>, StoreError> {
        self.shared.reader().policy_overrides()
    }

    /// The host's default policy (before overrides).
    pub(crate) fn default_policy(&self) -> lardon::HostPolicy {
        self.shared.default_policy.clone()
    }
}

/// `on_end = none` is stored as no override at all (its default): an end
/// reads the policy's hook in its own transaction from the override row
/// (`store/hooks.rs`), which then holds a command whenever it exists.
fn hook_none_resets(set: &[(String, String)], reset: &[String]) -> (Vec<(String, String)>, Vec<String>) {
    let mut reset = reset.to_vec();
    let set = set
        .iter()
        .filter(|(k, v)| {
            let none = k == "on_end" && v.trim().eq_ignore_ascii_case("none");
            if none {
                reset.push(k.clone());
            }
            !none
        })
        .cloned()
        .collect();
    (set, reset)
}

/// A submission between its checks and its transaction.
struct Submission {
    news: Vec<NewTask>,
    /// Each spec's dependencies, to name the spec a missing one belongs to.
    deps_of: Vec<Vec<TaskId>>,
}

/// Where a refusal points: `{prefix}[i].` (nothing for a lone spec).
fn at(prefix: &str, i: usize) -> String {
    if prefix.is_empty() { String::new() } else { format!("{prefix}[{i}].") }
}

/// Queueing `spec` takes only the queue's lock: it runs here and is not
/// offered to a broker.
fn submits_locally(spec: &TaskSpec) -> bool {
    spec.engine != RunEngine::Slurm && spec.offload.is_none()
}

/// The state a route answered with; the local route always answers
/// ([`Answer::Done`]), so a let-go here is a bug reported, not a panic.
fn settled(id: TaskId, answer: Answer) -> Result<TaskState, ActionError> {
    match answer {
        Answer::Done(state) => Ok(state),
        Answer::LetGo => Err(ActionError::Internal(format!("task {id}: no route holds it"))),
    }
}

impl Engine {
    /// A spec's own validity, what the routes it asks for refuse of it,
    /// and its estimate's (its dependencies are checked when it is
    /// stored): the daemon's one check of a submitted spec.
    fn check(&self, spec: &TaskSpec) -> Result<(), String> {
        spec.validate().map_err(|e| e.to_string())?;
        self.routes.check(spec).map_err(|r| r.to_string())?;
        // A missing directory is the submitter's mistake, not a failed run.
        if let Some(cwd) = &spec.cwd {
            crate::spec::check_cwd_exists(cwd).map_err(|e| e.to_string())?;
        }
        spec.estimate.to_estimate().validate().map_err(|e| format!("estimate.{e}"))
    }
}
