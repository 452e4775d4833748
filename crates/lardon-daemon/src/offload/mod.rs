//! Offload (docs/DESIGN.md §14): a daemon started with a broker address
//! is a submitter of the cluster, as kubecc's consumerd is. A shippable
//! task (one with a capability) runs at an agent when the policy prefers
//! remote, or when this host's Governor would not admit it now; otherwise
//! here. While out, the task is RUNNING with the run handle
//! [`crate::handle::RunHandle::Offload`] (its remote id); its answer comes back into the store exactly as
//! a local run's would (exit code, stdout and stderr into its log, the
//! agent's id in its course). Every infrastructure failure — an unreachable
//! broker, no agent for the capability, agents lost beyond
//! `offload_max_retries`, a refused request — hands the task back to run
//! here, saying why in its course: never a hang, never a loss.
//!
//! A shippable task that joined the local queue is watched (`reroute`):
//! one that still waits there `offload_wait_ms` after it was queued is
//! taken out of the queue (atomically: it can never both start here and
//! ship) and shipped. Its input files travel through the broker's CAS and
//! its outputs come back into its working directory (`lardon_submit::files`).
//!
//! The answers arrive on the daemon's Tokio runtime; each is judged on a
//! blocking thread (the store writer is synchronous). `OffloadRoute`
//! (`interface`) is offload as a route of the daemon
//! (`kernel::Route`): what it refuses, its start, adopt and
//! cancel; it cannot pause.

mod capacity;
mod interface;
mod reroute;
mod route;

use std::io::Write as _;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use lardon::TaskQueue;
use lardon_cluster_core::Need;
use lardon_cluster_core::{Capability, SubmitterId};
use lardon_submit::Backoff;
use lardon_submit::client::{Answer, RemoteTask, Submitter, SubmitterConfig};

pub(crate) use interface::OffloadRoute;
#[cfg(test)]
pub(crate) use interface::check;
use route::{Here, Load, Route, Verdict};

use crate::kernel::{Sent, Shared, Shipped, Write};
use crate::local::queue_locally;
use crate::spec::{Offload, TaskId, TaskSpec, TaskState};
use crate::store::Outcome;

/// How a daemon reaches its broker (`lardon daemon --broker`).
#[derive(Debug, Clone)]
pub struct OffloadConfig {
    /// The broker (`HOST:PORT` or a URI).
    pub broker: String,
    /// TLS and join token to dial with.
    pub dial: lardon_submit::dial::Dial,
    /// Heartbeat interval (at most the broker's).
    pub heartbeat: Duration,
    /// Tasks waiting while no broker has answered for this long run here.
    pub unreachable_after: Duration,
}

impl OffloadConfig {
    /// A config for `broker`: plain connection, 5 s heartbeats, tasks run
    /// here after 10 s without a broker.
    pub fn new(broker: impl Into<String>) -> Self {
        OffloadConfig {
            broker: broker.into(),
            dial: lardon_submit::dial::Dial::default(),
            heartbeat: Duration::from_secs(5),
            unreachable_after: Duration::from_secs(10),
        }
    }
}

/// The daemon's submitter identity: the host name and a digest of the state
/// dir, so that two daemons on one host differ and a restarted one is the
/// same submitter (its remote ids survive the restart).
fn submitter_id(host: &str, state_dir: &Path) -> String {
    let clean: String = host
        .chars()
        .take(64)
        .map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '-' })
        .collect();
    // FNV-1a: stable across builds, unlike the std hasher.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in state_dir.as_os_str().as_encoded_bytes() {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("{}-{:08x}", if clean.is_empty() { "host" } else { &clean }, h as u32)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// See the module docs.
#[derive(Debug)]
pub(crate) struct OffloadEngine {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    shared: Arc<Shared>,
    queue: Arc<TaskQueue>,
    submitter: Submitter,
    submitter_id: String,
    broker: String,
    rt: tokio::runtime::Handle,
    /// The agents' load, for `balance`.
    capacity: capacity::Capacity,
}

impl OffloadEngine {
    /// Starts the submitter on the current Tokio runtime.
    ///
    /// # Errors
    /// One line: no runtime, or a bad broker address.
    pub(crate) fn start(
        config: &OffloadConfig,
        shared: Arc<Shared>,
        queue: Arc<TaskQueue>,
    ) -> Result<OffloadEngine, String> {
        let rt =
            tokio::runtime::Handle::try_current().map_err(|e| format!("offload needs a runtime: {e}"))?;
        let submitter_id = submitter_id(&shared.info.host, &shared.info.state_dir);
        let id = SubmitterId::new(&submitter_id).map_err(|e| e.to_string())?;
        let submitter = {
            let _guard = rt.enter();
            Submitter::start(SubmitterConfig {
                broker: config.broker.clone(),
                submitter: id,
                heartbeat: config.heartbeat,
                backoff: Backoff::default(),
                unreachable_after: Some(config.unreachable_after),
                dial: config.dial.clone(),
            })
            .map_err(|e| format!("--broker: {e}"))?
        };
        tracing::info!("offloading to broker {} as submitter {submitter_id}", config.broker);
        let capacity = capacity::Capacity::new(&config.broker, &config.dial, rt.clone());
        Ok(OffloadEngine {
            inner: Arc::new(Inner {
                shared,
                queue,
                submitter,
                submitter_id,
                broker: config.broker.clone(),
                rt,
                capacity,
            }),
        })
    }

    /// Routes a stored, PENDING shippable task ([`route::route`]): ships
    /// it, or returns false for the caller to queue it here (and then
    /// [`OffloadEngine::watch`] it).
    pub(crate) fn offer(&self, id: TaskId, spec: &TaskSpec) -> bool {
        let Some(offload) = &spec.offload else { return false };
        let shared = &self.inner.shared;
        let settings = shared.settings().offload;
        let here = || {
            let estimate = spec.to_estimate();
            let decision = match shared.governor.sample() {
                Ok(snapshot) => shared.governor.decide(&estimate, &snapshot),
                Err(e) => return Here::Wait(format!("the host probe failed: {e}")),
            };
            let why = format!("{}: {}", decision.reason().as_str(), decision.message());
            match &decision {
                lardon::Decision::Wait(_) => Here::Wait(why),
                lardon::Decision::Reject(_) => Here::Reject(why),
                lardon::Decision::Admit(_) | lardon::Decision::ReduceBatch(..) => Here::Admit,
            }
        };
        let balance = || {
            let remote = self.inner.capacity.load(&offload.capability);
            route::balance(self.inner.local_load(), remote, &offload.capability)
        };
        match route::route(settings.prefer, settings.wait_ms, here, balance) {
            Route::Local => false,
            Route::Remote(why) => {
                self.inner.ship(id, Arc::new(spec.clone()), offload, &why, Ship::Fresh, false);
                true
            }
        }
    }

    /// Takes back a task a previous daemon had shipped as `remote` (recovery
    /// put it back to PENDING): it is RUNNING again and asked for under the
    /// same id, so the broker answers a finished one from its store and
    /// drops a live one as a duplicate — it never runs twice.
    pub(crate) fn adopt(&self, id: TaskId, spec: &TaskSpec, remote: &str) {
        let Some(offload) = &spec.offload else { return };
        let why = "asked for again after a daemon restart";
        self.inner.ship(id, Arc::new(spec.clone()), offload, why, Ship::Adopt(remote.to_owned()), false);
    }

    /// Cancels a task out at the broker: it ends CANCELLED now and the
    /// broker is told (an agent running it kills it). `None` when the task
    /// is not out.
    pub(crate) fn cancel(&self, id: TaskId) -> Option<TaskState> {
        let shipped = self.inner.shared.placements.take_shipped(id)?;
        // A claim was never sent: nothing to cancel there, and it will not
        // be sent now (`Placements::promote`).
        let reason = match shipped {
            Shipped::Claimed => "cancelled by user (before it was sent to the broker)".to_owned(),
            Shipped::Sent(remote) => {
                match lardon_cluster_core::TaskId::new(&remote) {
                    Ok(r) => self.inner.submitter.cancel(&r),
                    Err(e) => tracing::warn!("task {id}: cannot cancel {remote}: {e}"),
                }
                format!("cancelled by user (and at the broker as {remote})")
            }
        };
        self.inner
            .finish(id, &Outcome { state: TaskState::Cancelled, exit_code: None, reason: Some(reason) });
        Some(TaskState::Cancelled)
    }
}

/// Output files fetched from the broker: (path, bytes).
type Files = Vec<(String, Vec<u8>)>;

/// How a task is shipped.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ship {
    /// A new attempt (PENDING → RUNNING), retry 0.
    Fresh,
    /// Again after the broker handed it back (it stays RUNNING).
    Retry(u32),
    /// A previous daemon's shipment, under its remote id.
    Adopt(String),
}

impl Inner {
    /// How busy this host is for `balance`: the larger of its compute pool
    /// reserved and, under `max_running`, its running slots taken.
    fn local_load(&self) -> Load {
        let av = self.shared.governor.availability();
        let cpus = Load { used: av.cpu_reserved_millis, total: av.cpu_pool_millis };
        let Some(max) = self.shared.governor.policy().max_running else { return cpus };
        let slots = Load { used: av.reservations as u64, total: u64::from(max) };
        // slots.used / slots.total > cpus.used / cpus.total, exactly.
        let slots_busier =
            u128::from(slots.used) * u128::from(cpus.total) > u128::from(cpus.used) * u128::from(slots.total);
        if slots_busier || cpus.total == 0 { slots } else { cpus }
    }

    /// Ships task `id`: records it RUNNING with its remote id, reads its
    /// inputs and sends it (uploading them first). `claimed`: the caller
    /// already claimed it (`Placements::claim`), so that a
    /// cancel arriving from then on stops it; otherwise it is claimed here.
    /// A claim a cancel took meanwhile is not sent.
    fn ship(
        self: &Arc<Self>,
        id: TaskId,
        spec: Arc<TaskSpec>,
        offload: &Offload,
        why: &str,
        how: Ship,
        claimed: bool,
    ) {
        let retry = match &how {
            Ship::Fresh | Ship::Adopt(_) => 0,
            Ship::Retry(n) => *n,
        };
        if !claimed {
            self.shared.placements.claim(id, retry);
        }
        if let Some(deadline) = offload.deadline_unix_ms
            && deadline <= crate::now_ms()
        {
            if self.shared.placements.unclaim(id) {
                let reason = "deadline passed before it shipped".to_owned();
                self.finish(id, &Outcome { state: TaskState::Failed, exit_code: None, reason: Some(reason) });
            }
            return;
        }
        // The attempt a fresh shipment starts, or the one a re-shipment
        // continues: the stored count plus one (the claim keeps every
        // other writer off the task meanwhile).
        let stored = self.shared.reader().get_task(id).map(|t| t.map(|t| t.attempts.saturating_add(1)));
        let (remote, new_attempt) = match (&how, stored) {
            (Ship::Adopt(remote), _) => (Ok(remote.clone()), true),
            (Ship::Fresh, Ok(Some(attempt))) => {
                (Ok(route::remote_id(&self.submitter_id, id, attempt, 0)), true)
            }
            (Ship::Retry(n), Ok(Some(attempt))) => {
                (Ok(route::remote_id(&self.submitter_id, id, attempt, *n)), false)
            }
            (_, Ok(None)) => (Err(crate::store::StoreError::NotFound(id)), false),
            (_, Err(e)) => (Err(e), false),
        };
        let recorded = remote.and_then(|remote| {
            let message = format!("shipped to broker {} as {remote}: {why}", self.broker);
            self.shared.record(Write::Shipped { id, remote: remote.clone(), new_attempt, message })?;
            Ok(remote)
        });
        let remote = match recorded {
            Ok(r) => r,
            Err(e) => {
                // Cancelled or removed meanwhile: nothing to ship.
                self.shared.placements.unclaim(id);
                tracing::warn!("task {id}: not shipped: {e}");
                return;
            }
        };
        if !self.shared.placements.promote(id, &remote, &spec) {
            tracing::info!("task {id}: cancelled while it was being shipped: not sent");
            return;
        }
        let built = self.remote_task(&spec, offload, &remote);
        let task = match built {
            Ok(task) => task,
            Err((code, message)) => {
                self.shared.placements.take_sent(id, &remote);
                return self.fall_back(id, &spec, code, &message);
            }
        };
        tracing::info!("task {id}: shipped as {remote} ({why})");
        if task.inputs.is_empty() {
            let ticket = self.send(id, &remote, &task);
            self.await_answer(id, remote, ticket);
            return;
        }
        let me = Arc::clone(self);
        self.rt.spawn(async move {
            if let Err(e) = me.submitter.upload_inputs(&task).await {
                let why = format!("its input files could not be uploaded to the broker ({e}): ran locally");
                let _ = tokio::task::spawn_blocking(move || me.not_sent(id, &remote, &why)).await;
                return;
            }
            let ticket = me.send(id, &remote, &task);
            me.await_answer(id, remote, ticket);
        });
    }

    /// What goes to the broker for `spec` shipped as `remote`; on an error,
    /// the fallback's reason code and words.
    fn remote_task(
        &self,
        spec: &TaskSpec,
        offload: &Offload,
        remote: &str,
    ) -> Result<RemoteTask, (&'static str, String)> {
        let capability = Capability::parse(&offload.capability)
            .map_err(|e| ("broker_rejected", format!("capability: {e}: ran locally")))?;
        let task_id = lardon_cluster_core::TaskId::new(remote)
            .map_err(|e| ("broker_rejected", format!("{e}: ran locally")))?;
        let mut task = RemoteTask::new(task_id, capability, spec.argv.clone());
        task.need = Need { memory: spec.estimate.memory_fixed, cpu_millis: spec.estimate.cpu_millis };
        task.env = spec.env.iter().map(|e| (e.key.clone(), e.value.clone())).collect();
        task.deadline_unix_ms = offload.deadline_unix_ms;
        task.outputs.clone_from(&offload.outputs);
        if !offload.inputs.is_empty() {
            let cwd = Path::new(spec.cwd.as_deref().unwrap_or("/"));
            task.inputs = lardon_submit::files::read_inputs(cwd, &offload.inputs)
                .map_err(|e| ("inputs_unreadable", format!("{e}: ran locally")))?;
        }
        Ok(task)
    }

    /// Sends `task` unless `id` was cancelled since it was shipped as
    /// `remote`. The registry's lock is held across the check and the send,
    /// and a cancel takes the task out under it before it sends its own
    /// cancel: the broker sees the request before the cancel, or neither.
    fn send(&self, id: TaskId, remote: &str, task: &RemoteTask) -> Option<lardon_submit::client::Ticket> {
        self.shared.placements.while_out_as(id, remote, || self.submitter.submit(task))
    }

    /// Waits (on the runtime) for the answer to `ticket` and judges it on
    /// a blocking thread, fetching a successful run's outputs first.
    fn await_answer(
        self: &Arc<Self>,
        id: TaskId,
        remote: String,
        ticket: Option<lardon_submit::client::Ticket>,
    ) {
        let Some(ticket) = ticket else { return };
        let me = Arc::clone(self);
        self.rt.spawn(async move {
            let answer = ticket.answer().await;
            let outputs = match &answer {
                Ok(Answer::Done(ended)) if ended.success && !ended.outputs.is_empty() => {
                    Some(me.submitter.download_outputs(ended).await.map_err(|e| e.to_string()))
                }
                _ => None,
            };
            let _ = tokio::task::spawn_blocking(move || me.answered(id, &remote, answer, outputs)).await;
        });
    }

    /// A task whose request never left (its inputs could not be uploaded):
    /// run here, if it is still out as `remote`.
    fn not_sent(&self, id: TaskId, remote: &str, why: &str) {
        if let Some(sent) = self.shared.placements.take_sent(id, remote) {
            self.fall_back(id, &sent.spec, "upload_failed", why);
        }
    }

    /// Judges the answer for `id` shipped as `remote`; a duplicate or stale
    /// one (the task is no longer out under that id) is dropped.
    fn answered(
        self: &Arc<Self>,
        id: TaskId,
        remote: &str,
        answer: Result<Answer, lardon_submit::client::Stopped>,
        outputs: Option<Result<Files, String>>,
    ) {
        let Ok(answer) = answer else {
            // The submitter stopped: the daemon is stopping. The task stays
            // RUNNING with its handle; the next start asks for it again.
            return;
        };
        let Some(Sent { retry, spec, .. }) = self.shared.placements.take_sent(id, remote) else {
            tracing::debug!("task {id}: a second or stale answer for {remote} dropped");
            return;
        };
        let capability = spec.offload.as_ref().map_or("", |o| o.capability.as_str()).to_owned();
        let max_retries = self.shared.settings().offload.max_retries;
        match route::verdict(&answer, retry, max_retries, &self.broker, &capability) {
            Verdict::Ran => {
                let Answer::Done(mut ended) = answer else { return };
                // Outputs go into the working directory before the task
                // is COMPLETED; a CAS that lost them runs it here.
                match outputs {
                    None => {}
                    Some(Err(e)) => {
                        let why =
                            format!("its outputs could not be fetched from the broker ({e}): ran locally");
                        return self.fall_back(id, &spec, "outputs_lost", &why);
                    }
                    Some(Ok(files)) => {
                        let cwd = Path::new(spec.cwd.as_deref().unwrap_or("/"));
                        let declared = spec.offload.as_ref().map_or(&[][..], |o| o.outputs.as_slice());
                        match lardon_submit::files::write_outputs(cwd, &files, declared, &format!("t{id}")) {
                            Err(e) => {
                                ended.success = false;
                                ended.reason = format!("ran, but {e}");
                            }
                            Ok(refused) if !refused.is_empty() => {
                                tracing::warn!("task {id}: outputs not declared, not written: {refused:?}");
                            }
                            Ok(_) => {}
                        }
                    }
                }
                let deadline = spec.offload.as_ref().and_then(|o| o.deadline_unix_ms);
                self.record_run(id, remote, ended, deadline);
            }
            Verdict::End { cancelled, reason } => {
                let state = if cancelled { TaskState::Cancelled } else { TaskState::Failed };
                self.finish(id, &Outcome { state, exit_code: None, reason: Some(reason) });
            }
            Verdict::Reship(why) => {
                if let Some(offload) = spec.offload.clone() {
                    // Claimed again at once: a cancel from here on stops it.
                    self.shared.placements.claim(id, retry + 1);
                    self.ship(id, spec, &offload, &why, Ship::Retry(retry + 1), true);
                }
            }
            Verdict::Local { code, message } => {
                if answer == Answer::Unreachable
                    && let Ok(r) = lardon_cluster_core::TaskId::new(remote)
                {
                    // A broker that comes back must not run it too.
                    self.submitter.cancel(&r);
                }
                self.fall_back(id, &spec, code, &message);
            }
        }
    }

    /// Records a run at an agent as a local run would be: output into the
    /// log, exit code and end in the store, the agent in the course.
    fn record_run(
        &self,
        id: TaskId,
        remote: &str,
        mut ended: lardon_proto::cluster::TaskEnded,
        deadline: Option<i64>,
    ) {
        // The broker stops a run at its deadline with a cancel, which can
        // reach the agent before the agent's own deadline kill: a run we
        // did not cancel, ended "cancelled" past its deadline, ended at it.
        if !ended.success && ended.reason == "cancelled" && deadline.is_some_and(|d| d <= crate::now_ms()) {
            ended.reason = "deadline passed".to_owned();
        }
        let log = self.shared.log_path(id);
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .and_then(|mut f| f.write_all(&ended.stdout).and_then(|()| f.write_all(&ended.stderr)));
        if let Err(e) = written {
            tracing::warn!("task {id}: cannot write its output to {}: {e}", log.display());
        }
        let exit = match (ended.exit_code, ended.reason.as_str()) {
            (Some(code), _) => format!("exit {code}"),
            (None, "") => "no exit code".to_owned(),
            (None, reason) => reason.to_owned(),
        };
        let message = if ended.agent_id.is_empty() {
            format!("answered from the broker's cache as {remote} ({exit})")
        } else {
            format!("ran on agent {} as {remote} ({exit})", ended.agent_id)
        };
        let outcome = if ended.success {
            Outcome { state: TaskState::Completed, exit_code: ended.exit_code.or(Some(0)), reason: None }
        } else {
            let reason = if ended.reason.is_empty() { exit } else { ended.reason.clone() };
            let reason = match ended.agent_id.as_str() {
                "" => reason,
                agent => format!("{reason} (on agent {agent})"),
            };
            Outcome { state: TaskState::Failed, exit_code: ended.exit_code, reason: Some(reason) }
        };
        tracing::info!("task {id}: {message}");
        if let Err(e) = self.shared.record(Write::RanRemotely { id, message, outcome }) {
            tracing::warn!("task {id}: its remote run not recorded: {e}");
        }
    }

    /// Hands the task back to run here: RUNNING → PENDING with the reason
    /// in its course, then into the local queue.
    fn fall_back(&self, id: TaskId, spec: &TaskSpec, code: &str, message: &str) {
        tracing::info!("task {id}: {message}");
        let returned = Write::Returned { id, code: code.to_owned(), message: message.to_owned() };
        if let Err(e) = self.shared.record(returned) {
            tracing::warn!("task {id}: not handed back: {e}");
            return;
        }
        if let Err(e) = queue_locally(&self.shared, &self.queue, id, spec, false, &[]) {
            // The queue is closing: the next start queues it again.
            tracing::warn!("task {id}: handed back but not queued: {e}");
        }
    }

    fn finish(&self, id: TaskId, outcome: &Outcome) {
        if let Err(e) = self.shared.record(Write::Finished(id, outcome.clone())) {
            tracing::warn!("task {id}: cannot record its end: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_submitter_id_is_stable_per_state_dir_and_valid() {
        let a = submitter_id("build host!", Path::new("/var/lib/a"));
        assert_eq!(a, submitter_id("build host!", Path::new("/var/lib/a")));
        assert_ne!(a, submitter_id("build host!", Path::new("/var/lib/b")));
        assert!(a.starts_with("build-host--"), "{a}");
        assert!(SubmitterId::new(&a).is_ok());
        assert!(SubmitterId::new(&submitter_id("", Path::new("/x"))).is_ok());
    }
}
