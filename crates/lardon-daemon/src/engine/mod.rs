//! Engine wiring: the durable [`Store`], a [`Governor`] over the host probe
//! (default policy + persisted overrides) and a [`TaskQueue`] running
//! command tasks. Crash recovery and the replay of learned history happen
//! in [`Engine::start`]; [`pump`] persists every queue event.

mod actions;
mod groups;
mod probe;
mod pump;
mod routes;
mod startlog;

pub(crate) use startlog::log_start;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use lardon::{Class, FakeProbe, Governor, HostPolicy, Probe, TaskQueue};
use lardon_host::{CpuLayout, HostProbe, HostRoot, detect_enforcer};
use tokio::sync::broadcast;

pub(crate) use actions::ActionError;
pub(crate) use groups::GroupView;
pub use probe::ProbeChoice;

use crate::DaemonError;
use crate::handle::RunHandle;
use crate::kernel::{ComputePool, Info, Parts, Shared};
use crate::local::{Dependency, LocalRoute};
use crate::offload::OffloadRoute;
use crate::runner::{LocalExecutor, LogFiles, orphans};
use crate::settings::{self, DaemonSettings, EnforceMode};
use crate::slurm::SlurmRoute;
use crate::spec::{TaskId, TaskSpec, TaskState};
use crate::store::{Store, StoreWriter, TaskRecord};
use routes::Routes;

/// Capacity of the event fan-out; a slower watcher is told it lagged.
const EVENT_CAPACITY: usize = 4096;

/// Pending tasks the in-memory queue holds (far beyond docs/DESIGN.md §12's
/// 100 000; each costs well under a kilobyte).
const QUEUE_CAPACITY: usize = 10_000_000;

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

/// The running engine.
#[derive(Debug)]
pub(crate) struct Engine {
    pub(crate) shared: Arc<Shared>,
    pub(crate) queue: Arc<TaskQueue>,
    pump: Mutex<Option<JoinHandle<()>>>,
    /// Runs the hooks ends queue (docs/DESIGN.md §10 Hooks).
    hooks: crate::hooks::HookRunner,
    /// The three routes; an action dispatches on the task's placement to
    /// one of them.
    routes: Routes,
}

pub(crate) fn host_name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "localhost".to_owned())
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What crash recovery left for the later phases of [`Engine::start`].
struct Recovered {
    store: Store,
    logs_dir: PathBuf,
    logs: Arc<LogFiles>,
    /// Runs out at Slurm or a broker outlive the daemon: their tasks'
    /// routes adopt them again (those recovery ended have them abandoned).
    out: HashMap<TaskId, RunHandle>,
}

impl Engine {
    /// Opens the store, recovers from a crash (killing orphaned runs),
    /// builds the Governor with the persisted policy and history, and
    /// queues every unfinished task again: [`Engine::recover`],
    /// [`Engine::build_kernel`], [`Engine::start_routes`],
    /// [`Engine::requeue`], in that order.
    pub(crate) fn start(cfg: EngineConfig) -> Result<Engine, DaemonError> {
        let Recovered { store, logs_dir, logs, out } = Self::recover(&cfg)?;
        let (shared, tasks) = Self::build_kernel(&cfg, store, logs_dir, logs)?;
        // The store is the durable bound on queued work; an in-memory cap
        // would make `Submit` block once that many tasks wait (a blocked RPC
        // with the task already stored), so the queue's is set out of reach.
        let queue = Arc::new(TaskQueue::with_config(
            shared.governor.clone(),
            lardon::QueueConfig { capacity: QUEUE_CAPACITY, ..lardon::QueueConfig::default() },
        ));
        let (pump, routes) = Self::start_routes(&cfg, &shared, &queue)?;
        // From the start: the hooks a crash left unfinished run first.
        let db = cfg.state_dir.join(lardon_proto::paths::DB_FILE);
        let hooks = crate::hooks::HookRunner::start(Arc::clone(&shared), db)
            .map_err(|e| DaemonError::Runtime(format!("cannot start the hook runner: {e}")))?;
        let engine = Engine { shared, queue, pump: Mutex::new(Some(pump)), hooks, routes };
        engine.requeue(tasks, out);
        Ok(engine)
    }

    /// Phase 1: the logs dir, the store, crash recovery; orphaned local
    /// runs are killed and stale task cgroups removed, and the runs out at
    /// Slurm or a broker are kept for [`Engine::requeue`] to adopt.
    fn recover(cfg: &EngineConfig) -> Result<Recovered, DaemonError> {
        let logs_dir = cfg.state_dir.join("logs");
        std::fs::create_dir_all(&logs_dir).map_err(|source| DaemonError::Io {
            what: "create the logs dir",
            path: logs_dir.clone(),
            source,
        })?;
        let mut store = Store::open(cfg.state_dir.join(lardon_proto::paths::DB_FILE))?;
        let report = store.recover_after_crash()?;
        let mut out: HashMap<TaskId, RunHandle> = HashMap::new();
        for (id, text) in &report.orphans {
            match RunHandle::parse(text) {
                Some(handle @ (RunHandle::Slurm(_) | RunHandle::Offload(_))) => {
                    out.insert(*id, handle);
                }
                Some(RunHandle::Local(group)) => {
                    let killed = orphans::kill_orphan(&group);
                    tracing::info!(
                        "task {id}: orphaned run {text} {}",
                        if killed { "killed" } else { "already gone" }
                    );
                }
                None => tracing::warn!("task {id}: unreadable run handle {text:?} (nothing to stop)"),
            }
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
        Ok(Recovered { store, logs_dir, logs, out })
    }

    /// Phase 2: the Governor on the persisted policy and history, the
    /// store's writer and reader, the kernel ([`Shared`]) and the scratch
    /// volumes; returns the kernel with every stored task.
    fn build_kernel(
        cfg: &EngineConfig,
        store: Store,
        logs_dir: PathBuf,
        logs: Arc<LogFiles>,
    ) -> Result<(Arc<Shared>, Vec<TaskRecord>), DaemonError> {
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
        // The groups' limits, as stored: enforced from the first scan on.
        groups::apply_stored(&store, &governor)?;
        // Before the writer owns the store (as recovery's writes are): the
        // budget `lardon report` draws against, read without the daemon.
        let mut store = store;
        store.set_memory_budget(memory_budget(&governor))?;
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
        let executor =
            Arc::new(LocalExecutor::new(Some(detection.enforcer)).with_log_files(Arc::clone(&logs)));
        let shared = Arc::new(Shared::new(Parts {
            writer,
            reader,
            governor: governor.clone(),
            executor,
            settings: daemon_settings,
            info,
            events,
            kill_grace: cfg.kill_grace,
            viewer: Self::viewer(&cfg.probe)?,
            default_policy,
            enforce_override: cfg.enforce,
            compute,
            logs,
        }));
        for row in volumes {
            let name = row.name.clone();
            match governor.add_volume(name.clone(), crate::scratch::controller(&row), row.capacity) {
                Ok(_) if row.draining => {
                    if let Err(e) = governor.drain(&name) {
                        tracing::warn!("scratch volume {name}: cannot resume its drain: {e}");
                    }
                }
                Ok(_) => {}
                Err(e) => tracing::warn!("scratch volume {name}: {e}"),
            }
        }
        Ok((shared, tasks))
    }

    /// Phase 3: the pump (the queue's events into the store) and the
    /// three routes: the local one, native Slurm and offload (with a
    /// broker; shippable tasks run here without one).
    fn start_routes(
        cfg: &EngineConfig,
        shared: &Arc<Shared>,
        queue: &Arc<TaskQueue>,
    ) -> Result<(JoinHandle<()>, Routes), DaemonError> {
        let pump = pump::spawn(Arc::clone(shared), queue)
            .map_err(|e| DaemonError::Runtime(format!("cannot start the event pump: {e}")))?;
        let local = LocalRoute::new(Arc::clone(shared), Arc::clone(queue));
        let slurm = SlurmRoute::start(Arc::clone(shared));
        let offload = cfg.offload.as_ref().and_then(|c| {
            crate::offload::OffloadEngine::start(c, Arc::clone(shared), Arc::clone(queue))
                .inspect_err(|e| tracing::error!("offload unavailable, shippable tasks run here: {e}"))
                .ok()
        });
        let offload = OffloadRoute::new(offload, local.clone());
        Ok((pump, Routes { local, offload, slurm }))
    }

    /// Phase 4: every unfinished task back on its route: a run that
    /// outlived the last daemon (a Slurm job, a shipment) is adopted by the
    /// route its handle names, anything else is queued again. The runs of
    /// tasks recovery ended are abandoned (a Slurm job is cancelled).
    fn requeue(&self, tasks: Vec<TaskRecord>, mut out: HashMap<TaskId, RunHandle>) {
        // Dependencies are resolved from this one read: a dependency has a
        // lower id, so it is queued (or found ended) before its dependents.
        let states: HashMap<TaskId, TaskState> = tasks.iter().map(|r| (r.id, r.state)).collect();
        for rec in tasks.into_iter().filter(|r| !r.state.is_terminal()) {
            if let Some(handle) = out.remove(&rec.id) {
                let route = self.routes.for_handle(&handle);
                // Refused (its route is not running): queued afresh.
                if route.adopt(&rec, handle).is_ok() {
                    continue;
                }
            }
            let paused = rec.state == TaskState::Paused;
            let deps = rec
                .spec
                .dependencies()
                .map(|(dep, kind)| Dependency { id: dep, kind, stored: states.get(&dep).copied() })
                .collect::<Vec<_>>();
            if let Err(e) = self.enqueue(rec.id, &rec.spec, paused, &deps) {
                tracing::error!("task {}: cannot queue again after restart: {e}", rec.id);
            }
        }
        for (id, handle) in out {
            // The task ended at recovery (no retry wanted): so must its run.
            self.routes.for_handle(&handle).abandon(id, handle);
        }
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

    /// Hands a stored task to the route its spec asks for
    /// ([`Routes::for_spec`]) with its dependencies, resolved once by the
    /// caller from the store ([`Dependency`]): an ended one is satisfied
    /// (completed, or any end for `after_any`) or fails the task at once;
    /// a live one is left to the queue, which knows every live task and
    /// every end since it started.
    pub(crate) fn enqueue(
        &self,
        id: TaskId,
        spec: &TaskSpec,
        paused: bool,
        deps: &[Dependency],
    ) -> Result<(), String> {
        self.routes.for_spec(spec).submit(id, spec, paused, deps)
    }

    /// Stops: running commands are terminated (they stay RUNNING in the
    /// store, so the next start requeues them as interrupted and batched
    /// tasks resume from their cursor), then the queue closes.
    pub(crate) fn shutdown(&self) {
        self.shared.stop();
        // A hook still running is killed and runs again at the next start.
        self.hooks.stop();
        self.routes.slurm.stop();
        for slot in self.shared.placements.slots() {
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

/// The memory the Governor hands out: the host's memory less the policy's
/// reserve (what the start-up summary calls the budget).
pub(crate) fn memory_budget(governor: &Governor) -> u64 {
    governor.profile().total_memory.saturating_sub(governor.policy().memory_reserve)
}

fn next_instance() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
