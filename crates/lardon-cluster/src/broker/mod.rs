//! `lardon broker`: the gRPC service around the [`Router`](lardon_cluster_core::Router)
//! (docs/DESIGN.md §14). One task owns the router and the SQLite
//! [`Store`]; each agent's and submitter's stream is read by its own task
//! that validates every message ([`lardon_cluster_core::wire`]) and forwards it to the
//! owner over a channel, so routing stays single-threaded and
//! deterministic while streams come and go.
//!
//! After a restart the broker reads its live tasks back: queued ones wait
//! on their routes, in-flight ones are held for their agent, which
//! reconnects and says hello with the ids it still runs. An agent that
//! does not come back within the recovery window loses its tasks to the
//! queue (one more attempt each); a route no agent serves by then is
//! handed back to its submitters to run locally.

mod core;
#[cfg(test)]
mod core_tests;
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod fault_tests;
mod metrics;
#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod metrics_tests;
mod provisioning;
mod service;
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod thread_tests;
mod watch;
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod watch_tests;

use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lardon_proto::cluster::broker_server::BrokerServer;
use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::service::interceptor::InterceptedService;

use crate::store::{Store, StoreError};

pub use metrics::{MetricsBoard, serve_metrics};
pub use service::BrokerService;

/// How a broker runs.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// Where its SQLite state lives (`None`: in memory, lost at exit).
    pub state: Option<PathBuf>,
    /// How long agents that held tasks before a restart have to say hello
    /// again before their tasks are queued elsewhere.
    pub recovery: Duration,
    /// How often heartbeats go down each stream; a peer silent for three
    /// of these is taken as lost.
    pub heartbeat: Duration,
    /// Seed of the router's random choices.
    pub seed: u64,
    /// The broker's certificate and the cluster CA: serve mutual TLS and
    /// refuse clients without a certificate from that CA.
    pub tls: Option<lardon_tls::Identity>,
    /// Refuse requests without this join token.
    pub token: Option<lardon_tls::JoinToken>,
    /// Serve the REAPI result cache (CAS, action cache, capabilities,
    /// bytestream) on the same port, within these limits (`None`: no
    /// cache). With `state`, it lives under `state/cache` and survives a
    /// restart; without, in memory.
    pub cache: Option<crate::cache::store::CacheLimits>,
    /// Publish the demand per capability here after every change (for the
    /// KEDA scaler).
    pub demand: Option<crate::keda::DemandBoard>,
    /// Answer metrics scrapes through this board ([`serve_metrics`]).
    pub metrics: Option<MetricsBoard>,
    /// Drive this Provisioner (`None`: capacity is someone else's).
    pub provision: Option<ProvisionLoop>,
    /// Capabilities whose agents an outside engine starts from this
    /// broker's demand (KEDA through the external scaler): a task of one
    /// waits for an agent, as a provisionable one does, instead of being
    /// answered "no executor" while none is connected (scale from zero).
    pub scaled: Vec<crate::Capability>,
}

/// A Provisioner shared by the provisioning loop and the explain RPC.
pub type SharedProvisioner = Arc<Mutex<crate::provision::Provisioner>>;

/// How the broker drives its Provisioner (docs/DESIGN.md §14).
#[derive(Debug, Clone)]
pub struct ProvisionLoop {
    /// The Provisioner; its shapes' capabilities are provisionable (their
    /// tasks wait for an allocation instead of "no executor").
    pub provisioner: SharedProvisioner,
    /// Time between ticks.
    pub every: Duration,
    /// One task's wall time, for sizing allocations, when the broker has
    /// neither learned nor been told the duration of any queued task of a
    /// capability.
    pub task_duration: Duration,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            state: None,
            recovery: Duration::from_secs(15),
            heartbeat: Duration::from_secs(5),
            seed: 0x1a2d_0b0c,
            tls: None,
            token: None,
            cache: None,
            demand: None,
            metrics: None,
            provision: None,
            scaled: Vec::new(),
        }
    }
}

/// The broker's result cache: the stores its REAPI services serve, which
/// its pre-route cache hook also reads and its successes fill.
#[derive(Debug, Clone)]
pub(crate) struct BrokerCache {
    cas: Arc<crate::cache::store::Cas>,
    actions: Arc<Mutex<crate::cache::store::ActionCache>>,
}

impl BrokerCache {
    /// The cache within `limits`: under `state/cache` when the broker has
    /// a state directory (blobs and results a previous broker stored are
    /// held again), else in memory.
    fn open(
        limits: crate::cache::store::CacheLimits,
        state: Option<&std::path::Path>,
    ) -> Result<Self, BrokerError> {
        use crate::cache::store::{ActionCache, Cas};
        let (cas, actions) = match state {
            Some(dir) => {
                let dir = dir.join("cache");
                let opened =
                    Cas::open(&dir.join("blobs"), limits.blob_bytes, limits.max_blob).and_then(|cas| {
                        let actions = ActionCache::open(
                            &dir.join("results"),
                            limits.result_bytes,
                            CACHE_TTL,
                            std::time::Instant::now(),
                        )?;
                        Ok((cas, actions))
                    });
                opened.map_err(|e| BrokerError::Cache(dir.display().to_string(), e))?
            }
            None => (
                Cas::in_memory(limits.blob_bytes, limits.max_blob),
                ActionCache::new(limits.result_bytes, CACHE_TTL),
            ),
        };
        if cas.bytes() > 0 || !actions.is_empty() {
            tracing::info!(
                "cache: {} bytes of blobs and {} results kept from before",
                cas.bytes(),
                actions.len()
            );
        }
        Ok(BrokerCache { cas: Arc::new(cas), actions: Arc::new(Mutex::new(actions)) })
    }

    fn service(&self) -> crate::cache::service::CacheService {
        crate::cache::service::CacheService::new(Arc::clone(&self.cas), Arc::clone(&self.actions))
    }

    /// Caches a cacheable task's success: its Action, Command and input
    /// tree go to the CAS (as REAPI requires of a cached result) and its
    /// result, with its output files, to the action cache. A success that
    /// lacks a declared output is not cached.
    fn remember(&self, spec: &lardon_proto::cluster::TaskSpec, ended: &lardon_proto::cluster::TaskEnded) {
        use prost::Message as _;
        let Ok(capability) = lardon_cluster_core::wire::capability("capability", spec.capability.as_ref())
        else {
            return;
        };
        let all_outputs = spec.outputs.iter().all(|p| ended.outputs.iter().any(|o| &o.path == p));
        if !all_outputs || ended.outputs.iter().any(|o| o.digest.is_none()) {
            tracing::warn!("task {}: not cached: a declared output is missing", spec.task_id);
            return;
        }
        let key = core::action_key(&capability, spec);
        // Small blobs (the Action, the Command, the input tree): hashing
        // them on the routing thread costs microseconds.
        let stored = [key.action.encode_to_vec(), key.command.encode_to_vec()]
            .into_iter()
            .chain(key.directories)
            .try_for_each(|blob| self.cas.put(&crate::cache::key::digest_of(&blob), blob));
        if let Err(e) = stored {
            tracing::warn!("task {}: not cached: {e}", spec.task_id);
            return;
        }
        let result = crate::cache::reapi::ActionResult {
            exit_code: ended.exit_code.unwrap_or(0),
            stdout_raw: ended.stdout.clone(),
            stderr_raw: ended.stderr.clone(),
            output_files: ended
                .outputs
                .iter()
                .map(|o| crate::cache::reapi::OutputFile {
                    path: o.path.clone(),
                    digest: o.digest.as_ref().map(lardon_submit::blobs::from_pb),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        let put = self.actions.lock().unwrap_or_else(std::sync::PoisonError::into_inner).put(
            &key.digest,
            result,
            std::time::Instant::now(),
        );
        if let Err(e) = put {
            tracing::warn!("task {}: not cached: {e}", spec.task_id);
        }
    }
}

/// The broker could not start or serve.
#[derive(Debug, Error)]
pub enum BrokerError {
    /// Its state could not be opened or read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The cache's directory could not be opened.
    #[error("broker: the cache under {0} cannot be opened: {1} (check --state's permissions and free space)")]
    Cache(String, #[source] std::io::Error),
    /// The gRPC server failed.
    #[error("broker: serving gRPC: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// The core's thread or its timer runtime could not be started.
    #[error("broker: starting the core thread: {0}")]
    Thread(#[source] std::io::Error),
}

/// Starts the owner task (restoring the state) and returns the service to
/// mount. Must be called inside a Tokio runtime.
///
/// # Errors
/// [`BrokerError::Store`] when the state cannot be opened or read.
pub fn start(config: &BrokerConfig) -> Result<BrokerService, BrokerError> {
    let cache = config.cache.map(|limits| BrokerCache::open(limits, config.state.as_deref())).transpose()?;
    start_with_cache(config, cache)
}

fn start_with_cache(config: &BrokerConfig, cache: Option<BrokerCache>) -> Result<BrokerService, BrokerError> {
    let store = match &config.state {
        Some(dir) => Store::open(dir)?,
        None => Store::in_memory()?,
    };
    let (tx, mut rx) = mpsc::channel(1024);
    let (mut core, restored) = core::Core::restore(store, config.seed, Some(tx.clone()))?;
    if let Some(cache) = cache {
        core = core.with_cache(cache);
    }
    if let Some(board) = &config.metrics {
        board.attach(tx.clone());
    }
    let mut shapes = Vec::new();
    if let Some(p) = &config.provision {
        shapes = p.provisioner.lock().unwrap_or_else(std::sync::PoisonError::into_inner).shapes().to_vec();
        provisioning::spawn(&tx, p.clone());
    }
    core.set_shapes(shapes, &config.scaled);
    if restored {
        let tx = tx.clone();
        let window = config.recovery;
        tokio::spawn(async move {
            tokio::time::sleep(window).await;
            let _ = tx.send(core::Input::RecoveryOver).await;
        });
    }
    let demand = config.demand.clone();
    // The core runs on a thread of its own (with a one-thread runtime for
    // its timers), so its SQLite commits never hold a worker of the
    // runtime that serves the streams. It ends with that runtime: this
    // task holds `alive` until the runtime drops it.
    let (alive, mut gone) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _alive = alive;
        std::future::pending::<()>().await;
    });
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_time().build().map_err(BrokerError::Thread)?;
    let core_loop = async move {
        // When the watchers' snapshot, put off for time, is due.
        let mut watch_at: Option<std::time::Instant> = None;
        loop {
            let input = match watch_at {
                Some(at) => tokio::select! {
                    input = rx.recv() => input,
                    _ = &mut gone => None,
                    () = tokio::time::sleep_until(at.into()) => {
                        watch_at = core.publish_watch(false);
                        continue;
                    }
                },
                None => tokio::select! {
                    input = rx.recv() => input,
                    _ = &mut gone => None,
                },
            };
            let Some(input) = input else { break };
            core.handle(input);
            if let Some(board) = &demand {
                board.publish(core.demand());
            }
            // Watchers read one shared snapshot, computed at most every
            // 10 ms and put off while more inputs wait (bounded), so a
            // burst costs one status, not one per input.
            watch_at = core.publish_watch(!rx.is_empty());
        }
    };
    std::thread::Builder::new()
        .name("lardon-broker-core".into())
        .spawn(move || runtime.block_on(core_loop))
        .map_err(BrokerError::Thread)?;
    Ok(BrokerService::new(
        tx,
        config.heartbeat,
        config.provision.as_ref().map(|p| Arc::clone(&p.provisioner)),
    ))
}

/// How long open calls have to end after `shutdown` resolves before
/// [`serve`] returns anyway. Agent, submitter and `Watch` streams never
/// end on their own, so without this a broker asked to stop with an agent
/// connected waited until the agent left (its idle exit, minutes). What
/// it holds is in its store, so stopping with them open loses nothing: the
/// peers see the connection close and dial again, as after a restart.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// Serves the broker on `listener` until `shutdown` resolves, then lets
/// open calls end for at most [`SHUTDOWN_GRACE`].
///
/// # Errors
/// [`BrokerError`] when the state cannot be opened or the server fails.
pub async fn serve(
    listener: TcpListener,
    config: BrokerConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), BrokerError> {
    let cache = config.cache.map(|limits| BrokerCache::open(limits, config.state.as_deref())).transpose()?;
    let service = start_with_cache(&config, cache.clone())?;
    let mut builder = tonic::transport::Server::builder();
    if let Some(id) = &config.tls {
        builder = builder.tls_config(id.server_config())?;
    }
    let token = config.token.clone();
    let check = move |req: tonic::Request<()>| match &token {
        Some(t) => tonic::service::Interceptor::call(&mut lardon_tls::TokenCheck::new(t.clone()), req),
        None => Ok(req),
    };
    let mut router = builder.add_service(InterceptedService::new(BrokerServer::new(service), check.clone()));
    if let Some(cache) = cache {
        use crate::cache::reapi::{
            action_cache_server::ActionCacheServer, capabilities_server::CapabilitiesServer,
            content_addressable_storage_server::ContentAddressableStorageServer,
        };
        use bazel_remote_apis::google::bytestream::byte_stream_server::ByteStreamServer;
        let cache = cache.service();
        router = router
            .add_service(InterceptedService::new(CapabilitiesServer::new(cache.clone()), check.clone()))
            .add_service(InterceptedService::new(ActionCacheServer::new(cache.clone()), check.clone()))
            .add_service(InterceptedService::new(
                ContentAddressableStorageServer::new(cache.clone()),
                check.clone(),
            ))
            .add_service(InterceptedService::new(ByteStreamServer::new(cache), check));
    }
    let (stopping, stopped) = tokio::sync::oneshot::channel::<()>();
    let shutdown = async move {
        shutdown.await;
        let _ = stopping.send(());
    };
    let server = router.serve_with_incoming_shutdown(no_delay(listener), shutdown);
    tokio::pin!(server);
    tokio::select! {
        served = &mut server => served?,
        () = async {
            if stopped.await.is_ok() {
                tokio::time::sleep(SHUTDOWN_GRACE).await;
            } else {
                std::future::pending::<()>().await;
            }
        } => tracing::info!("stopping with streams still open (agents and submitters will dial again)"),
    }
    Ok(())
}

/// The connections `listener` accepts, with Nagle's algorithm off: a
/// reply is a few small writes, and with Nagle on each waited for the
/// client's delayed acknowledgement (about 40 ms per call on Linux).
fn no_delay(
    listener: TcpListener,
) -> impl tokio_stream::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    use tokio_stream::StreamExt as _;
    TcpListenerStream::new(listener).map(|conn| {
        let conn = conn?;
        conn.set_nodelay(true)?;
        Ok(conn)
    })
}

/// How long the broker's cache keeps an action result.
const CACHE_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// Serves KEDA's external scaler over `board` on `listener` (plain gRPC:
/// KEDA dials it from inside the cluster) until `shutdown` resolves.
///
/// # Errors
/// [`BrokerError::Transport`] when the server fails.
pub async fn serve_keda(
    listener: TcpListener,
    board: crate::keda::DemandBoard,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), BrokerError> {
    use lardon_proto::keda::external_scaler_server::ExternalScalerServer;
    tonic::transport::Server::builder()
        .add_service(ExternalScalerServer::new(crate::keda::Scaler::new(board)))
        .serve_with_incoming_shutdown(no_delay(listener), shutdown)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use tokio_stream::StreamExt as _;

    #[tokio::test]
    async fn accepted_connections_have_nagle_off() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut incoming = std::pin::pin!(super::no_delay(listener));
        let conn = incoming.next().await.unwrap().unwrap();
        assert!(conn.nodelay().unwrap(), "a reply would wait for the peer's delayed ACK");
    }
}
