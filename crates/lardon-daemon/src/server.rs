//! Start-up and serving: state-dir lock, subreaper, engine, Unix socket
//! (dir 0700, socket 0600), gRPC server, metrics; orderly stop.

use std::future::Future;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use lardon_proto::LardonServer;
use tokio::net::UnixListener;
use tokio::sync::watch;
use tokio_stream::wrappers::UnixListenerStream;

use crate::engine::{Engine, EngineConfig};
use crate::lock::StateLock;
use crate::service::Service;
use crate::{DaemonConfig, DaemonError};

/// A started daemon, not yet serving.
pub(crate) struct Daemon {
    engine: Arc<Engine>,
    listener: UnixListener,
    socket: PathBuf,
    metrics: Option<tokio::net::TcpListener>,
    _lock: StateLock,
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> DaemonError + 'a {
    move |source| DaemonError::Io { what, path: path.to_path_buf(), source }
}

impl Daemon {
    pub(crate) async fn start(config: DaemonConfig) -> Result<Daemon, DaemonError> {
        let state_dir = config.state_dir.clone();
        std::fs::create_dir_all(&state_dir).map_err(io("create the state dir", &state_dir))?;
        // Only our user reads the queue, the logs and the socket.
        std::fs::set_permissions(&state_dir, std::fs::Permissions::from_mode(0o700))
            .map_err(io("restrict the state dir", &state_dir))?;
        let lock = StateLock::acquire(&state_dir)?;
        // Orphaned grandchildren of our tasks are re-parented to us, so a
        // cancel reaches (and reaps) every one of them.
        if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
            tracing::warn!("cannot become a child subreaper: {e}");
        }
        let socket = config.socket_path()?;
        let engine_cfg = EngineConfig {
            state_dir: state_dir.clone(),
            socket: socket.clone(),
            probe: config.probe.clone(),
            enforce: config.enforce,
            kill_grace: config.kill_grace,
            cgroup_root: config.cgroup_root.clone(),
            offload: config.offload.clone(),
        };
        let pairs = config.policy.clone();
        let engine = tokio::task::spawn_blocking(move || {
            let engine = Engine::start(engine_cfg)?;
            if !pairs.is_empty() {
                let applied = engine.set_policy(&pairs, &[]);
                if let Err(e) = applied {
                    engine.shutdown();
                    return Err(DaemonError::PolicyPair(e.to_string()));
                }
            }
            Ok(engine)
        })
        .await
        .map_err(|e| DaemonError::Runtime(e.to_string()))??;
        let listener = bind(&socket, &state_dir)?;
        let metrics = match config.metrics_addr {
            Some(addr) => Some(
                tokio::net::TcpListener::bind(addr)
                    .await
                    .map_err(io("bind the metrics address", Path::new("metrics")))?,
            ),
            None => None,
        };
        crate::engine::log_start(&engine);
        Ok(Daemon { engine: Arc::new(engine), listener, socket, metrics, _lock: lock })
    }

    pub(crate) fn socket(&self) -> &Path {
        &self.socket
    }

    pub(crate) fn metrics_addr(&self) -> Option<std::net::SocketAddr> {
        self.metrics.as_ref().and_then(|l| l.local_addr().ok())
    }

    pub(crate) async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), DaemonError> {
        let Daemon { engine, listener, socket, metrics, _lock } = self;
        let (stop_tx, stop_rx) = watch::channel(false);
        if let Some(listener) = metrics {
            tokio::spawn(crate::metrics::serve(listener, Arc::clone(&engine), stop_rx.clone()));
        }
        spawn_reaper();
        let service = Service::new(Arc::clone(&engine), stop_rx.clone());
        let signal = async move {
            shutdown.await;
            // Ends every open stream (Watch, Log --follow, Wait) so the
            // server's graceful shutdown does not wait on them.
            let _ = stop_tx.send(true);
        };
        // The accept loop runs as a task on a runtime worker, not in the
        // caller's `block_on`: a connection task it spawns then starts on
        // that worker instead of waking another thread for every client.
        let server = tonic::transport::Server::builder()
            .add_service(LardonServer::new(service))
            .serve_with_incoming_shutdown(UnixListenerStream::new(listener), signal);
        let served = match tokio::spawn(server).await {
            Ok(served) => served.map_err(DaemonError::from),
            Err(e) => Err(DaemonError::Runtime(format!("the server task failed: {e}"))),
        };
        tracing::info!("stopping: running commands get SIGTERM and are requeued at the next start");
        let stopper = Arc::clone(&engine);
        let _ = tokio::task::spawn_blocking(move || stopper.shutdown()).await;
        let _ = std::fs::remove_file(&socket);
        served
    }
}

/// Binds the socket: a stale file is replaced (we hold the state-dir
/// lock, so no live daemon owns it); its directory is created 0700.
fn bind(socket: &Path, state_dir: &Path) -> Result<UnixListener, DaemonError> {
    if let Some(dir) = socket.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.exists() {
            std::fs::create_dir_all(dir).map_err(io("create the socket dir", dir))?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(io("restrict the socket dir", dir))?;
        } else if dir != state_dir && dir.file_name().is_some_and(|n| n == lardon_proto::paths::APP_DIR) {
            // `$XDG_RUNTIME_DIR/lardon`: ours.
            let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
        }
    }
    match std::fs::remove_file(socket) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io("remove the stale socket", socket)(e)),
    }
    let listener = UnixListener::bind(socket).map_err(io("bind the socket", socket))?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))
        .map_err(io("restrict the socket", socket))?;
    Ok(listener)
}

/// The shortest time between two looks for orphaned zombies.
const ORPHAN_SCAN_GAP: std::time::Duration = std::time::Duration::from_millis(50);

/// As a child subreaper we inherit the helpers our tasks leave behind; on
/// SIGCHLD, reap those no one waits for (a run's main child is waited for
/// by its runner and left alone), so none stays a zombie.
///
/// At most one look every [`ORPHAN_SCAN_GAP`]: every run's own end raises
/// a SIGCHLD, and at a thousand runs a second one look (a hop to a
/// blocking thread, and a scan of `/proc` whenever the runner had not yet
/// reaped its child) per signal was a tenth of the daemon's CPU. Signals
/// that arrive during the gap are kept by the stream as one, so an orphan
/// that ends then is reaped right after it: a zombie lives 50 ms longer at
/// most, nothing is missed.
fn spawn_reaper() {
    let mut sigchld = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("no SIGCHLD handler, orphaned helpers may stay zombies: {e}");
            return;
        }
    };
    tokio::spawn(async move {
        while sigchld.recv().await.is_some() {
            let _ = tokio::task::spawn_blocking(crate::runner::orphans::reap_orphans).await;
            tokio::time::sleep(ORPHAN_SCAN_GAP).await;
        }
    });
}
