//! The kernel: what every route and the hub share about the running
//! daemon ([`Shared`]: the store's writer and reader, the Governor, the
//! executor, settings, the control slots of local runs, the event fan-out,
//! the counters), and the interface every route implements ([`Route`]).
//! A leaf below the hub (`engine`) and the routes (`local`,
//! `offload`, `slurm`): it depends on the store, the spec, the settings and
//! the runner's executor interface, never on them, so that nothing above
//! has to reach back into the hub for its context.

mod events;
mod lifecycle;
mod placement;
mod pool;
mod route;
mod slot;
mod wake;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use lardon::{Governor, HostPolicy, Probe};
use lardon_host::BackendKind;
use tokio::sync::broadcast;

pub(crate) use events::{DaemonEvent, Stats};
pub(crate) use lifecycle::{Applied, Write};
pub(crate) use placement::{Placed, Placements, Sent, Shipped};
pub(crate) use pool::ComputePool;
pub(crate) use route::{
    Answer, ControlError, Dependency, Field, LocalOnly, Refusal, Route, RouteKind, requested,
};
pub(crate) use slot::Slot;
pub(crate) use wake::HookSignal;

use crate::runner::{ClassProbes, Executor, LogFiles};
use crate::settings::{DaemonSettings, EnforceMode};
use crate::spec::TaskId;
use crate::store::{Store, StoreWriter};

/// The queue's id of a daemon task (the same number).
pub(crate) fn qid(id: TaskId) -> lardon::TaskId {
    lardon::TaskId(id.0)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What [`Shared::new`] is built from (the hub's start gathers it).
pub(crate) struct Parts {
    pub(crate) writer: StoreWriter,
    pub(crate) reader: Store,
    pub(crate) governor: Governor,
    pub(crate) executor: Arc<dyn Executor>,
    pub(crate) settings: DaemonSettings,
    pub(crate) info: Info,
    pub(crate) events: broadcast::Sender<DaemonEvent>,
    pub(crate) kill_grace: Duration,
    pub(crate) viewer: Box<dyn Probe>,
    pub(crate) default_policy: HostPolicy,
    pub(crate) enforce_override: Option<EnforceMode>,
    pub(crate) compute: ComputePool,
    pub(crate) logs: Arc<LogFiles>,
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
    /// Where each live task is ([`Placements`]): one table, one lock.
    pub(crate) placements: Placements,
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
    /// Woken when an end that queued a hook is durable (the hook runner
    /// sleeps on it).
    pub(crate) hooks: Arc<HookSignal>,
}

impl Shared {
    /// The read-only store: reads see every committed write, and the
    /// guard hands out `&Store` only, so nothing writes through it.
    pub(crate) fn reader(&self) -> ReadGuard<'_> {
        ReadGuard(lock(&self.reader))
    }

    pub(crate) fn settings(&self) -> DaemonSettings {
        lock(&self.settings).clone()
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
    pub(crate) fn set(&self, handed: u64) {
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

impl Shared {
    /// The kernel of a starting daemon: no slot, not stopping.
    pub(crate) fn new(p: Parts) -> Shared {
        Shared {
            writer: p.writer,
            reader: Mutex::new(p.reader),
            pumped: PumpMark::default(),
            governor: p.governor,
            executor: p.executor,
            settings: Mutex::new(p.settings),
            info: p.info,
            placements: Placements::default(),
            stopping: AtomicBool::new(false),
            wakeups: Wakeups::default(),
            events: p.events,
            stats: Mutex::default(),
            kill_grace: p.kill_grace,
            viewer: p.viewer,
            default_policy: p.default_policy,
            enforce_override: p.enforce_override,
            compute: p.compute,
            probes: ClassProbes::default(),
            logs: p.logs,
            hooks: Arc::default(),
        }
    }

    /// From now on the daemon is stopping ([`Shared::stopping`]).
    pub(crate) fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }
}
