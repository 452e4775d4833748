//! `Engine`: the daemon, started inside this Python process (`lardon
//! run`'s embedded engine), for `lardon.Executor`: the same Governor,
//! task cgroups, measured peaks and learning as `lardon daemon`, with no
//! daemon to start first.

use std::path::PathBuf;
use std::sync::Mutex;

use lardon_daemon::{DaemonConfig, DaemonHandle, ProbeChoice};
use pyo3::prelude::*;

use crate::errors;

/// A running embedded engine. `shutdown()` (or the Python object's end)
/// stops it; tasks still running are stopped with it.
#[pyclass(module = "lardon._native", frozen)]
#[derive(Debug)]
pub(crate) struct Engine {
    socket: PathBuf,
    handle: Mutex<Option<DaemonHandle>>,
}

#[pymethods]
impl Engine {
    /// Starts an engine keeping its state (database, logs) in `state_dir`
    /// and serving `socket`. `memory` and `cpus` simulate a host of that
    /// size (tests, demos) instead of probing the real one; `policy` is
    /// `(key, value)` pairs as `lardon policy --set` takes them.
    #[new]
    #[pyo3(signature = (state_dir, socket, memory=None, cpus=None, policy=Vec::new()))]
    fn new(
        py: Python<'_>,
        state_dir: PathBuf,
        socket: PathBuf,
        memory: Option<u64>,
        cpus: Option<u32>,
        policy: Vec<(String, String)>,
    ) -> PyResult<Self> {
        let mut config = DaemonConfig::new(&state_dir);
        config.socket = Some(socket);
        config.policy = policy;
        match (memory, cpus) {
            (None, None) => {}
            (memory, cpus) => {
                let memory = memory
                    .ok_or_else(|| errors::invalid(py, "memory: needed with cpus to simulate a host"))?;
                let cpus =
                    cpus.ok_or_else(|| errors::invalid(py, "cpus: needed with memory to simulate a host"))?;
                config.probe = ProbeChoice::Fake(lardon::HostProfile::new(memory, cpus));
            }
        }
        let handle = py.detach(|| lardon_daemon::start_in_process(config)).map_err(|e| {
            errors::raise(py, "LardonError", format!("cannot start the embedded engine: {e}"))
        })?;
        Ok(Engine { socket: handle.socket().to_path_buf(), handle: Mutex::new(Some(handle)) })
    }

    /// The socket it serves on.
    #[getter]
    fn socket(&self) -> PathBuf {
        self.socket.clone()
    }

    /// Stops the engine and waits for it; a second call does nothing.
    fn shutdown(&self, py: Python<'_>) -> PyResult<()> {
        let handle =
            self.handle.lock().map_err(|_| errors::raise(py, "LardonError", "engine lock poisoned"))?.take();
        match handle {
            Some(h) => py.detach(|| h.shutdown()).map_err(|e| {
                errors::raise(py, "LardonError", format!("the embedded engine stopped with: {e}"))
            }),
            None => Ok(()),
        }
    }
}
