//! Engine wiring: the durable [`Store`], a [`Governor`] over the host probe
//! (default policy + persisted overrides) and a [`TaskQueue`] running
//! command tasks. Crash recovery and the replay of learned history happen
//! in [`Engine::start`]; [`pump`] persists every queue event.

mod actions;
mod events;
mod pool;
mod probe;
mod pump;
mod slot;
mod startlog;

pub(crate) use startlog::log_start;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use lardon::{Class, FakeProbe, Governor, HostPolicy, Probe, Task, TaskQueue};
use lardon_host::{BackendKind, CpuLayout, HostProbe, HostRoot, detect_enforcer};
use tokio::sync::broadcast;

pub(crate) use actions::ActionError;
pub(crate) use events::{DaemonEvent, Stats};
pub(crate) use pool::ComputePool;
pub use probe::ProbeChoice;
pub(crate) use slot::Slot;

use crate::DaemonError;
use crate::runner::{ClassProbes, Executor, LocalExecutor, LogFiles, command_callback, orphans};
use crate::settings::{self, DaemonSettings, EnforceMode};
use crate::spec::{DepKind, RunEngine, TaskId, TaskSpec, TaskState};
use crate::store::{Outcome, Store, StoreWriter};

/// Capacity of the event fan-out; a slower watcher is told it lagged.
const EVENT_CAPACITY: usize = 4096;

/// What [`Engine::start`] needs.
#[derive(Debug, Clone)]
pub(crate) struct EngineConfig {
    pub(crate) state_dir: PathBuf,
    pub(crate) socket: PathBuf,
    pub(crate) probe: ProbeChoice,
    pub(crate) enforce: Option<EnforceMode>,
    pub(crate) kill_grace: Duration,
    pub(crate) cgroup_root: HostRoot,
    /// Offload to this broker (`--broker`); `None`: shippable tasks run here.
    pub(crate) offload: Option<crate::offload::OffloadConfig>,
}

/// Facts fixed at start.
#[derive(Debug, Clone)]
pub(crate) struct Info {
    pub(crate) host: String,
    pub(crate) state_dir: PathBuf,
    pub(crate) logs_dir: PathBuf,
    pub(crate) socket: PathBuf,
    pub(crate) started_ms: i64,
    /// Unique per daemon instance: prefixes cgroup names so that two
    /// daemons on one host never collide.
    pub(crate) instance: String,
    pub(crate) backend: BackendKind,
    pub(crate) backend_why: String,
}

/// Pending tasks the in-memory queue holds (far beyond docs/DESIGN.md §12's
/// 100 000; each costs well under a kilobyte).
const QUEUE_CAPACITY: usize = 10_000_000;

/// Everything a running task's callback may touch (not the queue, which
/// owns the callbacks: no reference cycle).
#[derive(Debug)]
pub(crate) struct Shared {
    /// The only path to the database for writes (group commit).
    pub(crate) writer: StoreWriter,
    /// A read-only connection: sees what the writer committed.
    reader: Mutex<Store>,
    /// How far the pump has handed queue events to the writer.
    pub(crate) pumped: PumpMark,
    pub(crate) governor: Governor,
    pub(crate) executor: Arc<dyn Executor>,
    settings: Mutex<DaemonSettings>,
    pub(crate) info: Info,
    slots: Mutex<HashMap<TaskId, Arc<Slot>>>,
    stopping: AtomicBool,
    /// How often the daemon's event-driven loops woke (for the metrics).
    pub(crate) wakeups: Wakeups,
    pub(crate) events: broadcast::Sender<DaemonEvent>,
    pub(crate) stats: Mutex<Stats>,
    pub(crate) kill_grace: Duration,
    /// A second probe, for figures the Governor does not keep (load, PSI):
    /// sampling through the Governor would feed its pressure state and
    /// move its generation just because someone looked.
    pub(crate) viewer: Box<dyn Probe>,
    /// The host's policy before overrides.
    pub(crate) default_policy: HostPolicy,
    /// `DaemonConfig::enforce`: wins over the policy key.
    enforce_override: Option<EnforceMode>,
    /// CPUs task processes are pinned to; follows the policy.
    pub(crate) compute: ComputePool,
    /// Unproven classes' first runs, one at a time.
    pub(crate) probes: ClassProbes,
    /// Task logs: runs open them here, `Log` streams register as readers.
    pub(crate) logs: Arc<LogFiles>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    /// The read-only store: reads see every committed write, and the
    /// guard hands out `&Store` only, so nothing writes through it.
    pub(crate) fn reader(&self) -> ReadGuard<'_> {
        ReadGuard(lock(&self.reader))
    }

    pub(crate) fn settings(&self) -> DaemonSettings {
        *lock(&self.settings)
    }

    pub(crate) fn replace_settings(&self, mut settings: DaemonSettings) {
        if let Some(mode) = self.enforce_override {
            settings.enforce = mode;
        }
        *lock(&self.settings) = settings;
    }

    pub(crate) fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    pub(crate) fn log_path(&self, id: TaskId) -> PathBuf {
        self.info.logs_dir.join(format!("{}.log", id.0))
    }

    /// The control slot of a running task (created on first use).
    pub(crate) fn slot(&self, id: TaskId) -> Arc<Slot> {
        Arc::clone(lock(&self.slots).entry(id).or_default())
    }

    pub(crate) fn existing_slot(&self, id: TaskId) -> Option<Arc<Slot>> {
        lock(&self.slots).get(&id).cloned()
    }

    pub(crate) fn drop_slot(&self, id: TaskId) {
        lock(&self.slots).remove(&id);
    }

    pub(crate) fn all_slots(&self) -> Vec<Arc<Slot>> {
        lock(&self.slots).values().cloned().collect()
    }

    pub(crate) fn emit(&self, event: DaemonEvent) {
        // No receiver is fine: nobody is watching.
        let _ = self.events.send(event);
    }
}

/// A read guard on the store's read-only connection (see [`Shared::reader`]).
pub(crate) struct ReadGuard<'a>(MutexGuard<'a, Store>);

impl std::ops::Deref for ReadGuard<'_> {
    type Target = Store;
    fn deref(&self) -> &Store {
        &self.0
    }
}

/// How many queue events the pump has handed to the writer, so that an
/// action can wait until the events its queue call emitted are queued for
/// the store (then one write through the writer makes them durable).
#[derive(Debug, Default)]
pub(crate) struct PumpMark {
    handed: Mutex<u64>,
    moved: Condvar,
}

impl PumpMark {
    fn set(&self, handed: u64) {
        *lock(&self.handed) = handed;
        self.moved.notify_all();
    }

    /// Blocks until the pump has handed `count` events over (or stopped).
    pub(crate) fn wait_for(&self, count: u64) {
        let mut handed = lock(&self.handed);
        while *handed < count {
            handed = self.moved.wait(handed).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// Wake-ups of the daemon's loops that must only wake on an event: an idle
/// daemon leaves them unchanged (exported as
/// `lardon_loop_wakeups_total`; the tests read them there).
#[derive(Debug, Default)]
pub(crate) struct Wakeups {
    /// Queue events the pump handled.
    pub(crate) pump: AtomicU64,
    /// Re-reads of a followed log (`lardon log --follow`).
    pub(crate) log_follow: AtomicU64,
}

/// The running engine.
#[derive(Debug)]
pub(crate) struct Engine {
    pub(crate) shared: Arc<Shared>,
    pub(crate) queue: Arc<TaskQueue>,
    pump: Mutex<Option<JoinHandle<()>>>,
    /// Native Slurm mode; `None` when its thread could not start (its
    /// tasks then fail saying so).
    slurm: Option<crate::slurm::SlurmEngine>,
    /// Offload to a broker; `None` without `--broker`.
    pub(crate) offload: Option<crate::offload::OffloadEngine>,
}

pub(crate) fn qid(id: TaskId) -> lardon::TaskId {
    lardon::TaskId(id.0)
}

pub(crate) fn host_name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "localhost".to_owned())
}

impl Engine {
    /// Opens the store, recovers from a crash (killing orphaned runs),
    /// builds the Governor with the persisted policy and history, and
    /// queues every unfinished task again.
    pub(crate) fn start(cfg: EngineConfig) -> Result<Engine, DaemonError> {
        let logs_dir = cfg.state_dir.join("logs");
        std::fs::create_dir_all(&logs_dir).map_err(|source| DaemonError::Io {
            what: "create the logs dir",
            path: logs_dir.clone(),
            source,
        })?;
        let mut store = Store::open(cfg.state_dir.join(lardon_proto::paths::DB_FILE))?;
        let report = store.recover_after_crash()?;
        // Jobs of native Slurm mode outlive the daemon: their tasks adopt
        // them again below (those recovery failed have them cancelled).
        let mut slurm_jobs: HashMap<TaskId, String> = HashMap::new();
        // Tasks out at a broker: asked for again under the same id below.
        let mut shipped: HashMap<TaskId, String> = HashMap::new();
        for (id, handle) in &report.orphans {
            if crate::slurm::job_of_handle(handle).is_some() {
                slurm_jobs.insert(*id, handle.clone());
                continue;
            }
            if let Some(remote) = crate::offload::remote_of_handle(handle) {
                shipped.insert(*id, remote.to_owned());
                continue;
            }
            let killed = orphans::kill_orphan(handle);
            tracing::info!(
                "task {id}: orphaned run {handle} {}",
                if killed { "killed" } else { "already gone" }
            );
        }
        let swept = orphans::sweep_stale_cgroups();
        if swept > 0 {
            tracing::info!("removed {swept} task cgroups left by a dead daemon");
        }
        // After the orphans are gone: no process of theirs holds a spare.
        let logs = Arc::new(LogFiles::new(&logs_dir).map_err(|source| DaemonError::Io {
            what: "prepare the spare log files",
            path: logs_dir.join(crate::runner::SPARE_LOG_DIR),
            source,
        })?);
        if report.interrupted() > 0 {
            tracing::warn!(
                "crash recovery: {} requeued, {} still paused, {} failed",
                report.requeued.len(),
                report.still_paused.len(),
                report.failed.len()
            );
        }

        let (governor_probe, default_policy, cpu_layout): (
            Box<dyn FnOnce(HostPolicy) -> _>,
            HostPolicy,
            Option<CpuLayout>,
        ) = match &cfg.probe {
            ProbeChoice::Host => {
                let probe = HostProbe::new()?;
                let policy = probe.default_policy();
                let layout = probe.cpu_layout().clone();
                (Box::new(move |p| Governor::new(p, probe)), policy, Some(layout))
            }
            ProbeChoice::Fake(profile) => {
                let probe = probe::StampedFake(FakeProbe::new(profile.clone()));
                (Box::new(move |p| Governor::new(p, probe)), HostPolicy::default_for(profile), None)
            }
        };
        let mut policy = default_policy.clone();
        let mut daemon_settings = DaemonSettings::default();
        for (key, value) in settings::in_key_order(store.policy_overrides()?) {
            if let Err(e) = settings::set(&mut policy, &mut daemon_settings, &key, &value) {
                tracing::warn!("ignoring persisted policy override: {e}");
            }
        }
        if let Some(mode) = cfg.enforce {
            daemon_settings.enforce = mode;
        }
        let governor = match governor_probe(policy) {
            Ok(g) => g,
            Err(e) => {
                // The host changed under the overrides: run on the defaults
                // rather than not at all.
                tracing::warn!("persisted policy refused ({e}); using the host's default policy");
                Self::fallback_governor(&cfg.probe, default_policy.clone())?
            }
        };
        for sample in store.all_history()? {
            governor.record_run(&Class::new(sample.class), sample.record);
        }

        // The start-up summary (startlog) logs the backend and why, a
        // warning when a limit is asked for and none applies.
        let detection = detect_enforcer(&cfg.cgroup_root);
        let info = Info {
            host: host_name(),
            state_dir: cfg.state_dir.clone(),
            logs_dir,
            socket: cfg.socket.clone(),
            started_ms: crate::now_ms(),
            instance: format!("d{}-{}", std::process::id(), next_instance()),
            backend: detection.kind(),
            backend_why: detection.reason.clone(),
        };
        // From the policy the Governor runs on (the defaults when it refused
        // the persisted overrides).
        let compute = ComputePool::new(cpu_layout, &governor.policy());
        let (events, _) = broadcast::channel(EVENT_CAPACITY);
        let volumes = store.scratch_volumes()?;
        let tasks = store.load_all()?;
        let db = store.path().to_path_buf();
        let writer = StoreWriter::spawn(store)
            .map_err(|e| DaemonError::Runtime(format!("cannot start the store writer: {e}")))?;
        let reader = Store::open_reader(&db)?;
        let shared = Arc::new(Shared {
            writer,
            reader: Mutex::new(reader),
            pumped: PumpMark::default(),
            governor: governor.clone(),
            executor: Arc::new(
                LocalExecutor::new(Some(detection.enforcer)).with_log_files(Arc::clone(&logs)),
            ),
            settings: Mutex::new(daemon_settings),
            info,
            slots: Mutex::default(),
            stopping: AtomicBool::new(false),
            wakeups: Wakeups::default(),
            events,
            stats: Mutex::default(),
            kill_grace: cfg.kill_grace,
            viewer: Self::viewer(&cfg.probe)?,
            default_policy,
            enforce_override: cfg.enforce,
            compute,
            probes: ClassProbes::default(),
            logs,
        });
        for row in volumes {
            let name = row.name.clone();
            match governor.add_volume(name.clone(), crate::service::scratch::controller(&row), row.capacity) {
                Ok(_) if row.draining => {
                    if let Err(e) = governor.drain(&name) {
                        tracing::warn!("scratch volume {name}: cannot resume its drain: {e}");
                    }
                }
                Ok(_) => {}
                Err(e) => tracing::warn!("scratch volume {name}: {e}"),
            }
        }
        // The store is the durable bound on queued work; an in-memory cap
        // would make `Submit` block once that many tasks wait (a blocked RPC
        // with the task already stored), so the queue's is set out of reach.
        let queue = Arc::new(TaskQueue::with_config(
            governor,
            lardon::QueueConfig { capacity: QUEUE_CAPACITY, ..lardon::QueueConfig::default() },
        ));
        let pump = pump::spawn(Arc::clone(&shared), &queue)
            .map_err(|e| DaemonError::Runtime(format!("cannot start the event pump: {e}")))?;
        let slurm = crate::slurm::SlurmEngine::start(Arc::clone(&shared))
            .inspect_err(|e| tracing::error!("native Slurm mode unavailable: {e}"))
            .ok();
        let offload = cfg.offload.as_ref().and_then(|c| {
            crate::offload::OffloadEngine::start(c, Arc::clone(&shared), Arc::clone(&queue))
                .inspect_err(|e| tracing::error!("offload unavailable, shippable tasks run here: {e}"))
                .ok()
        });
        let engine = Engine { shared, queue, pump: Mutex::new(Some(pump)), slurm, offload };
        // Dependencies are resolved from this one read: a dependency has a
        // lower id, so it is queued (or found ended) before its dependents.
        let states: HashMap<TaskId, TaskState> = tasks.iter().map(|r| (r.id, r.state)).collect();
        for rec in tasks.into_iter().filter(|r| !r.state.is_terminal()) {
            if let (Some(handle), Some(slurm)) = (slurm_jobs.remove(&rec.id), &engine.slurm) {
                slurm.adopt(rec.id, &rec.spec, &handle, rec.memory_retries > 0);
                continue;
            }
            if let (Some(remote), Some(offload)) = (shipped.remove(&rec.id), &engine.offload) {
                offload.adopt(rec.id, &rec.spec, &remote);
                continue;
            }
            let paused = rec.state == TaskState::Paused;
            let deps = rec
                .spec
                .dependencies()
                .map(|(dep, kind)| Dependency { id: dep, kind, stored: states.get(&dep).copied() })
                .collect::<Vec<_>>();
            if let Err(e) = engine.enqueue(rec.id, &rec.spec, paused, &deps) {
                tracing::error!("task {}: cannot queue again after restart: {e}", rec.id);
            }
        }
        for (id, handle) in slurm_jobs {
            // The task ended at recovery (no retry wanted): so must its job.
            if let Some(job) = crate::slurm::job_of_handle(&handle) {
                tracing::info!("task {id}: cancelling slurm job {job} (the task is not run again)");
                crate::slurm::scancel(job);
            }
        }
        Ok(engine)
    }

    fn viewer(probe: &ProbeChoice) -> Result<Box<dyn Probe>, DaemonError> {
        Ok(match probe {
            ProbeChoice::Host => Box::new(HostProbe::new()?),
            ProbeChoice::Fake(profile) => Box::new(probe::StampedFake(FakeProbe::new(profile.clone()))),
        })
    }

    fn fallback_governor(probe: &ProbeChoice, policy: HostPolicy) -> Result<Governor, DaemonError> {
        Ok(match probe {
            ProbeChoice::Host => Governor::new(policy, HostProbe::new()?)?,
            ProbeChoice::Fake(profile) => {
                Governor::new(policy, probe::StampedFake(FakeProbe::new(profile.clone())))?
            }
        })
    }

    /// Hands a stored task to the queue with its id, priority and
    /// dependencies, resolved once by the caller from the store
    /// ([`Dependency`]): an ended one is satisfied (completed, or any end
    /// for `after_any`) or fails the task at once; a live one is left to the
    /// queue, which knows every live task and every end since it started.
    pub(crate) fn enqueue(
        &self,
        id: TaskId,
        spec: &TaskSpec,
        paused: bool,
        deps: &[Dependency],
    ) -> Result<(), String> {
        if spec.engine == RunEngine::Slurm {
            match &self.slurm {
                Some(slurm) => slurm.submit(id, spec),
                None => fail_unqueued(
                    &self.shared,
                    id,
                    "native Slurm mode is unavailable (see the daemon's log)".into(),
                ),
            }
            return Ok(());
        }
        // Shippable tasks are never paused nor dependent (refused at submit).
        let shippable = !paused && deps.is_empty() && spec.offload.is_some();
        if shippable
            && let Some(offload) = &self.offload
            && offload.offer(id, spec)
        {
            return Ok(());
        }
        queue_locally(&self.shared, &self.queue, id, spec, paused, deps)?;
        if shippable && let Some(offload) = &self.offload {
            offload.watch(id, spec);
        }
        Ok(())
    }

    /// Waits until every queue event emitted so far (those of a queue call
    /// that just returned included) is committed: after it, the store
    /// shows what the queue did.
    pub(crate) fn settle(&self) -> Result<(), crate::store::StoreError> {
        self.shared.pumped.wait_for(self.queue.events_emitted());
        // The pump's writes for those events are queued ahead of this one.
        self.shared.writer.call(|_| Ok(()))
    }

    /// Stops: running commands are terminated (they stay RUNNING in the
    /// store, so the next start requeues them as interrupted and batched
    /// tasks resume from their cursor), then the queue closes.
    pub(crate) fn shutdown(&self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        if let Some(slurm) = &self.slurm {
            slurm.stop();
        }
        for slot in self.shared.all_slots() {
            slot.terminate(self.shared.kill_grace.min(Duration::from_secs(2)));
        }
        // Closing ends the queue's event stream: the pump drains it and exits.
        self.queue.close();
        if let Some(pump) = lock(&self.pump).take() {
            let _ = pump.join();
        }
        // Everything the pump handed over is committed before this returns.
        self.shared.writer.close();
    }
}

/// A dependency of a task being queued, with its state as stored when it
/// was resolved (`None`: removed, so it ended).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Dependency {
    pub(crate) id: TaskId,
    pub(crate) kind: DepKind,
    pub(crate) stored: Option<TaskState>,
}

fn next_instance() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

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
fn fail_unqueued(shared: &Shared, id: TaskId, reason: String) {
    let outcome = Outcome { state: TaskState::Failed, exit_code: None, reason: Some(reason) };
    if let Err(e) = shared.writer.call(move |s| s.finish(id, &outcome)) {
        tracing::error!("task {id}: cannot record failure: {e}");
    }
    shared.emit(DaemonEvent::TaskChanged(id));
    shared.emit(DaemonEvent::TaskFinished(id));
}
