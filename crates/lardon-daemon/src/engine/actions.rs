//! What clients ask of the engine: submit, cancel, pause, resume, remove,
//! clean, progress and policy. Synchronous; the service calls these from
//! blocking threads.

use std::time::Duration;

use lardon::{QueueError, TaskState as QState};

use super::{DaemonEvent, Engine, qid};
use crate::settings;
use crate::spec::{RunEngine, TaskId, TaskSpec, TaskState};
use crate::store::{NewTask, Outcome, StoreError};

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
            StoreError::UnknownDependency { .. } => ActionError::Invalid(format!("after: {e}")),
            StoreError::NotTerminal { .. }
            | StoreError::StillLive { .. }
            | StoreError::IllegalTransition { .. } => ActionError::Conflict(e.to_string()),
            other => ActionError::Internal(other.to_string()),
        }
    }
}

fn map_state(s: QState) -> TaskState {
    match s {
        QState::Pending => TaskState::Pending,
        QState::Running => TaskState::Running,
        QState::Paused => TaskState::Paused,
        QState::Completed => TaskState::Completed,
        QState::Failed => TaskState::Failed,
        QState::Cancelled => TaskState::Cancelled,
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
    /// none), then queues each. A refusal names the spec's position as
    /// `{prefix}[i].field` (empty `prefix`: the field alone, for one spec).
    pub(crate) fn submit_many(
        &self,
        specs: Vec<TaskSpec>,
        paused: bool,
        prefix: &str,
    ) -> Result<Vec<TaskId>, ActionError> {
        if self.shared.stopping() {
            return Err(ActionError::Unavailable);
        }
        for (i, spec) in specs.iter().enumerate() {
            let at = if prefix.is_empty() { String::new() } else { format!("{prefix}[{i}].") };
            self.check(spec).map_err(|m| ActionError::Invalid(format!("{at}{m}")))?;
            if paused && spec.engine == RunEngine::Slurm {
                return Err(ActionError::Invalid(format!("{at}engine slurm: paused: cannot submit paused")));
            }
        }
        let news: Vec<NewTask> = specs.into_iter().map(|spec| NewTask { spec, paused }).collect();
        let ids = self.shared.store().insert_tasks(&news)?;
        for (id, new) in ids.iter().zip(&news) {
            self.shared.emit(DaemonEvent::TaskChanged(*id));
            self.enqueue(*id, &new.spec, paused).map_err(|e| {
                // Stored but not queued (the queue is closing): it is queued
                // again at the next start, so nothing is lost.
                tracing::warn!("task {id} stored but not queued: {e}");
                ActionError::Unavailable
            })?;
        }
        Ok(ids)
    }

    /// A spec's own validity, its estimate's, and that its dependencies exist.
    fn check(&self, spec: &TaskSpec) -> Result<(), String> {
        spec.validate().map_err(|e| e.to_string())?;
        if spec.engine == RunEngine::Slurm {
            crate::slurm::check(spec)?;
        }
        // A missing directory is the submitter's mistake, not a failed run.
        if let Some(cwd) = &spec.cwd {
            crate::spec::check_cwd_exists(cwd).map_err(|e| e.to_string())?;
        }
        spec.estimate.to_estimate().validate().map_err(|e| format!("estimate.{e}"))?;
        for (dep, _) in spec.dependencies() {
            match self.shared.store().get_task(dep) {
                Ok(Some(_)) => {}
                Ok(None) => return Err(format!("after: no task {dep}")),
                Err(e) => return Err(format!("after: cannot read task {dep}: {e}")),
            }
        }
        Ok(())
    }

    fn live(&self, id: TaskId) -> Result<TaskState, ActionError> {
        let rec = self.shared.store().get_task(id)?.ok_or(ActionError::NotFound(id))?;
        if rec.state.is_terminal() {
            return Err(ActionError::Conflict(format!("task {id} already ended ({})", rec.state)));
        }
        Ok(rec.state)
    }

    /// The state the queue holds now (the store follows through the pump).
    fn queue_state(&self, id: TaskId, fallback: TaskState) -> TaskState {
        self.queue.get(qid(id)).map_or(fallback, |v| map_state(v.state))
    }

    /// Cancels: a pending task at once; a running one gets SIGTERM, then
    /// SIGKILL after `grace`.
    pub(crate) fn cancel(&self, id: TaskId, grace: Option<Duration>) -> Result<TaskState, ActionError> {
        self.live(id)?;
        if let Some(state) = self.slurm.as_ref().and_then(|s| s.cancel(id)) {
            return Ok(state);
        }
        if let Some(slot) = self.shared.existing_slot(id) {
            slot.cancel(grace.unwrap_or(self.shared.kill_grace));
        }
        match self.queue.cancel(qid(id)) {
            Ok(()) | Err(QueueError::AlreadyEnded(_)) => Ok(self.queue_state(id, TaskState::Cancelled)),
            Err(_) => {
                // Live in the store but unknown to the queue: end it here.
                let outcome = Outcome { state: TaskState::Cancelled, exit_code: None, reason: None };
                self.shared.store().finish(id, &outcome)?;
                self.shared.emit(DaemonEvent::TaskChanged(id));
                self.shared.emit(DaemonEvent::TaskFinished(id));
                Ok(TaskState::Cancelled)
            }
        }
    }

    /// Pauses: a running command is stopped (SIGSTOP to its group) and
    /// keeps its reservation; a pending task is skipped by the dispatcher.
    pub(crate) fn pause(&self, id: TaskId) -> Result<TaskState, ActionError> {
        self.live(id)?;
        if self.shared.store().get_task(id)?.is_some_and(|r| r.spec.engine == RunEngine::Slurm) {
            return Err(ActionError::Conflict(format!("task {id} runs in Slurm: it cannot be paused")));
        }
        match self.queue.set_running_paused(qid(id), true) {
            Ok(()) => {
                self.shared.slot(id).pause();
                Ok(TaskState::Paused)
            }
            Err(QueueError::NotStarted(_)) => {
                self.queue.pause(qid(id)).map_err(|e| ActionError::Conflict(e.to_string()))?;
                Ok(TaskState::Paused)
            }
            Err(QueueError::AlreadyEnded(_)) => {
                Err(ActionError::Conflict(format!("task {id} already ended")))
            }
            Err(e) => Err(ActionError::Conflict(e.to_string())),
        }
    }

    /// Resumes a paused task (SIGCONT for a stopped command).
    pub(crate) fn resume(&self, id: TaskId) -> Result<TaskState, ActionError> {
        self.live(id)?;
        match self.queue.set_running_paused(qid(id), false) {
            Ok(()) => {
                if let Some(slot) = self.shared.existing_slot(id) {
                    slot.resume();
                }
                Ok(TaskState::Running)
            }
            Err(QueueError::NotStarted(_)) => {
                self.queue.resume(qid(id)).map_err(|e| ActionError::Conflict(e.to_string()))?;
                Ok(self.queue_state(id, TaskState::Pending))
            }
            Err(e) => Err(ActionError::Conflict(e.to_string())),
        }
    }

    /// Runs a finished task again: same spec, a new attempt; its history
    /// (events, course, log) is kept and the log gains a separator line.
    /// Dependencies are resolved again as at submit: an `after` on a task
    /// that did not complete fails it at once with that reason.
    pub(crate) fn restart(&self, id: TaskId) -> Result<TaskState, ActionError> {
        if self.shared.stopping() {
            return Err(ActionError::Unavailable);
        }
        let rec = self.shared.store().get_task(id)?.ok_or(ActionError::NotFound(id))?;
        if !rec.state.is_terminal() {
            return Err(ActionError::Conflict(format!(
                "task {id} is {}; only completed, failed or cancelled tasks can be restarted",
                rec.state
            )));
        }
        // The queue remembers every ended id; the new attempt reuses it.
        // (Unknown to this queue: it ended before the daemon's last start.)
        let _ = self.queue.release_id(qid(id));
        let from = self.shared.store().restart(id)?;
        self.mark_log(id, from);
        self.shared.emit(DaemonEvent::TaskChanged(id));
        self.enqueue(id, &rec.spec, false).map_err(|e| {
            tracing::warn!("task {id} restarted in the store but not queued: {e}");
            ActionError::Unavailable
        })?;
        Ok(self.queue_state(id, TaskState::Pending))
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

    /// Forgets a terminal task and its log.
    pub(crate) fn remove(&self, id: TaskId) -> Result<(), ActionError> {
        self.shared.store().remove_task(id)?;
        self.forget(id);
        Ok(())
    }

    fn forget(&self, id: TaskId) {
        let _ = self.queue.remove(qid(id));
        let _ = std::fs::remove_file(self.shared.log_path(id));
        self.shared.emit(DaemonEvent::TaskRemoved(id));
    }

    /// Removes every terminal task in `states` (empty: all terminal ones).
    pub(crate) fn clean(&self, states: &[TaskState]) -> Result<Vec<TaskId>, ActionError> {
        let removed = self.shared.store().clean(states)?;
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
        self.shared.store().set_progress(id, done, total, message)?;
        self.shared.emit(DaemonEvent::TaskChanged(id));
        Ok(())
    }

    /// Applies policy changes atomically: parsed, validated by the
    /// Governor, then persisted.
    pub(crate) fn set_policy(&self, set: &[(String, String)], reset: &[String]) -> Result<(), ActionError> {
        let overrides = self.shared.store().policy_overrides()?;
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
        self.shared.store().set_policy_overrides(set, reset)?;
        self.shared.replace_settings(daemon);
        self.shared.compute.apply(&policy);
        self.queue.resources_changed();
        Ok(())
    }

    /// The host's default policy (before overrides).
    pub(crate) fn default_policy(&self) -> lardon::HostPolicy {
        self.shared.default_policy.clone()
    }
}
