//! `Connection`: one daemon, over its Unix socket. Every call releases the
//! GIL while it waits on the daemon, and the long waits (`wait`, a
//! watcher's `next`) wake every 200 ms to let Ctrl-C through.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use lardon_proto::{LardonClient, pb};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use tonic::transport::Channel;

use crate::errors;
use crate::views;

/// How often a long wait comes back to check for Ctrl-C.
const SIGNAL_CHECK: Duration = Duration::from_millis(200);

/// The runtime every connection's calls run on: one small worker (the
/// calls only wait on a socket), started on first use.
pub(crate) fn runtime() -> Result<&'static tokio::runtime::Runtime, String> {
    static RT: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("lardon-py")
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the client runtime: {e}"))
    })
    .as_ref()
    .map_err(Clone::clone)
}

fn block_on<F: std::future::Future + Send>(py: Python<'_>, fut: F) -> PyResult<F::Output>
where
    F::Output: Send,
{
    let rt = runtime().map_err(|e| errors::raise(py, "LardonError", e))?;
    Ok(py.detach(|| rt.block_on(fut)))
}

/// A connection to one daemon (`lardon daemon`, or an Executor's own
/// engine). Cheap to share between threads: calls run concurrently.
#[pyclass(module = "lardon._native", frozen)]
#[derive(Debug)]
pub(crate) struct Connection {
    socket: PathBuf,
    client: LardonClient<Channel>,
}

impl Connection {
    fn client(&self) -> LardonClient<Channel> {
        self.client.clone()
    }

    fn status_err(&self, py: Python<'_>, status: &tonic::Status) -> PyErr {
        errors::from_status(py, status, &self.socket)
    }
}

/// The arguments of a submission, flattened (the Python side names and
/// checks them; sizes and CPUs arrive parsed).
#[derive(Debug, Default, FromPyObject)]
#[pyo3(from_item_all)]
pub(crate) struct SubmitArgs {
    argv: Vec<String>,
    name: String,
    memory: u64,
    memory_per_item: u64,
    cpu_millis: Option<u32>,
    items: Option<u64>,
    batch_min: Option<u64>,
    batch_max: Option<u64>,
    class: String,
    group: String,
    env: Vec<(String, String)>,
    submit_env: Option<Vec<u8>>,
    cwd: String,
    timeout_ms: Option<u64>,
    oom_retry: Option<bool>,
    priority: i32,
    paused: bool,
}

impl SubmitArgs {
    fn into_request(self) -> pb::SubmitRequest {
        let estimate = pb::Estimate {
            memory_fixed: self.memory,
            memory_per_item: self.memory_per_item,
            batch_min: self.batch_min,
            batch_max: self.batch_max,
            cpu_millis: self.cpu_millis,
            class: self.class,
            ..Default::default()
        };
        let spec = pb::TaskSpec {
            name: self.name,
            argv: self.argv,
            cwd: self.cwd,
            env: self.env.into_iter().map(|(key, value)| pb::EnvVar { key, value }).collect(),
            estimate: Some(estimate),
            priority: self.priority,
            items: self.items,
            oom_retry: self.oom_retry,
            submit_env: self.submit_env,
            timeout_ms: self.timeout_ms,
            group: self.group,
            ..Default::default()
        };
        pb::SubmitRequest { spec: Some(spec), paused: self.paused, id_only: true }
    }
}

#[pymethods]
impl Connection {
    /// Connects to the daemon serving `socket`; raises
    /// `lardon.DaemonUnreachable` naming it when none answers.
    #[new]
    fn new(py: Python<'_>, socket: PathBuf) -> PyResult<Self> {
        let path = socket.clone();
        match block_on(py, async move { lardon_proto::connect(&path).await })? {
            Ok(client) => Ok(Connection { socket, client }),
            Err(_) => Err(errors::unreachable(py, &socket)),
        }
    }

    /// The socket this connection uses.
    #[getter]
    fn socket(&self) -> PathBuf {
        self.socket.clone()
    }

    /// The daemon's version, host, pid and state dir.
    fn hello<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let mut c = self.client();
        let r = block_on(py, async move { c.hello(pb::HelloRequest {}).await })?
            .map_err(|s| self.status_err(py, &s))?
            .into_inner();
        let out = PyDict::new(py);
        out.set_item("version", r.version)?;
        out.set_item("host", r.host)?;
        out.set_item("pid", r.pid)?;
        out.set_item("state_dir", r.state_dir)?;
        Ok(out)
    }

    /// Submits one task (a dict of `SubmitArgs`' fields); returns its id.
    fn submit(&self, py: Python<'_>, args: SubmitArgs) -> PyResult<String> {
        let request = args.into_request();
        let mut c = self.client();
        let r = block_on(py, async move { c.submit(request).await })?.map_err(|s| self.status_err(py, &s))?;
        Ok(r.into_inner().id)
    }

    /// One task, by id.
    fn get<'py>(&self, py: Python<'py>, id: String) -> PyResult<Bound<'py, PyDict>> {
        let mut c = self.client();
        let r = block_on(py, async move { c.get(pb::GetRequest { id, env_values: false }).await })?
            .map_err(|s| self.status_err(py, &s))?
            .into_inner();
        match r.task {
            Some(t) => views::task(py, &t),
            None => Err(errors::raise(py, "TaskNotFound", "the daemon answered without the task")),
        }
    }

    /// Tasks: these ids (all when empty), of this group (any when empty).
    #[pyo3(signature = (ids=Vec::new(), group=String::new()))]
    fn list<'py>(
        &self,
        py: Python<'py>,
        ids: Vec<String>,
        group: String,
    ) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let mut c = self.client();
        let request = pb::ListRequest { ids, group, ..Default::default() };
        let r = block_on(py, async move { c.list(request).await })?.map_err(|s| self.status_err(py, &s))?;
        r.into_inner().tasks.iter().map(|t| views::task(py, t)).collect()
    }

    /// Blocks until every task in `ids` (and of `group`) has ended; the
    /// ended tasks, in the order they ended. `timeout` (seconds) raises
    /// `TimeoutError` when passed.
    #[pyo3(signature = (ids, group=String::new(), timeout=None))]
    fn wait<'py>(
        &self,
        py: Python<'py>,
        ids: Vec<String>,
        group: String,
        timeout: Option<f64>,
    ) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let mut c = self.client();
        let request = pb::WaitRequest { ids, group, except: String::new() };
        let mut stream = block_on(py, async move { c.wait(request).await })?
            .map_err(|s| self.status_err(py, &s))?
            .into_inner();
        let deadline = timeout.map(|t| std::time::Instant::now() + Duration::from_secs_f64(t.max(0.0)));
        let mut ended = Vec::new();
        loop {
            if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                return Err(pyo3::exceptions::PyTimeoutError::new_err(
                    "wait: the tasks did not all end in time",
                ));
            }
            let next = block_on(py, async { tokio::time::timeout(SIGNAL_CHECK, stream.message()).await })?;
            match next {
                Err(_elapsed) => py.check_signals()?,
                Ok(Err(s)) => return Err(self.status_err(py, &s)),
                Ok(Ok(None)) => return Ok(ended),
                Ok(Ok(Some(event))) => match event.event {
                    Some(pb::wait_event::Event::Finished(t)) => ended.push(views::task(py, &t)?),
                    Some(pb::wait_event::Event::Summary(_)) | None => return Ok(ended),
                },
            }
        }
    }

    /// Cancels these tasks: `(id, ok, error)` for each.
    #[pyo3(signature = (ids, group=String::new()))]
    fn cancel(
        &self,
        py: Python<'_>,
        ids: Vec<String>,
        group: String,
    ) -> PyResult<Vec<(String, bool, String)>> {
        let mut c = self.client();
        let request = pb::CancelRequest { ids, grace_ms: None, group };
        let r = block_on(py, async move { c.cancel(request).await })?.map_err(|s| self.status_err(py, &s))?;
        Ok(r.into_inner().results.into_iter().map(|r| (r.id, r.ok, r.error)).collect())
    }

    /// Pauses these tasks: `(id, ok, error)` for each.
    fn pause(&self, py: Python<'_>, ids: Vec<String>) -> PyResult<Vec<(String, bool, String)>> {
        let mut c = self.client();
        let request = pb::PauseRequest { ids, group: String::new() };
        let r = block_on(py, async move { c.pause(request).await })?.map_err(|s| self.status_err(py, &s))?;
        Ok(r.into_inner().results.into_iter().map(|r| (r.id, r.ok, r.error)).collect())
    }

    /// Resumes these tasks: `(id, ok, error)` for each.
    fn resume(&self, py: Python<'_>, ids: Vec<String>) -> PyResult<Vec<(String, bool, String)>> {
        let mut c = self.client();
        let request = pb::ResumeRequest { ids, group: String::new() };
        let r = block_on(py, async move { c.resume(request).await })?.map_err(|s| self.status_err(py, &s))?;
        Ok(r.into_inner().results.into_iter().map(|r| (r.id, r.ok, r.error)).collect())
    }

    /// Why a task is where it is: its last decision, needs against the
    /// host, and its decision history.
    fn explain<'py>(&self, py: Python<'py>, id: String) -> PyResult<Bound<'py, PyDict>> {
        let mut c = self.client();
        let r = block_on(py, async move { c.explain(pb::ExplainRequest { id, history: true }).await })?
            .map_err(|s| self.status_err(py, &s))?;
        views::explanation(py, &r.into_inner())
    }

    /// The task's output so far (stdout and stderr interleaved), as bytes.
    fn log<'py>(&self, py: Python<'py>, id: String) -> PyResult<Bound<'py, PyBytes>> {
        let mut c = self.client();
        let request = pb::LogRequest { id, follow: false, ..Default::default() };
        let collected = block_on(py, async move {
            let mut stream = c.log(request).await?.into_inner();
            let mut data = Vec::new();
            while let Some(chunk) = stream.message().await? {
                data.extend_from_slice(&chunk.data);
            }
            Ok::<_, tonic::Status>(data)
        })?
        .map_err(|s| self.status_err(py, &s))?;
        Ok(PyBytes::new(py, &collected))
    }

    /// Reports a running task's progress (`lardon progress`).
    #[pyo3(signature = (task_id, done, total=0, message=String::new()))]
    fn progress(
        &self,
        py: Python<'_>,
        task_id: String,
        done: u64,
        total: u64,
        message: String,
    ) -> PyResult<()> {
        let mut c = self.client();
        let request = pb::ProgressRequest { task_id, done, total, message };
        block_on(py, async move { c.progress(request).await })?.map_err(|s| self.status_err(py, &s))?;
        Ok(())
    }

    /// The host's budgets as the daemon's Governor counts them.
    fn resources<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let mut c = self.client();
        let r = block_on(py, async move { c.resources(pb::ResourcesRequest {}).await })?
            .map_err(|s| self.status_err(py, &s))?;
        views::availability(py, r.into_inner().availability.as_ref())
    }

    /// A stream of task changes (`lardon top`'s feed), from now on.
    fn watch(&self, py: Python<'_>) -> PyResult<Watcher> {
        let mut c = self.client();
        let stream = block_on(py, async move { c.watch(pb::WatchRequest { skip_snapshot: true }).await })?
            .map_err(|s| self.status_err(py, &s))?
            .into_inner();
        Ok(Watcher { socket: self.socket.clone(), stream: Arc::new(tokio::sync::Mutex::new(stream)) })
    }
}

/// Task changes as they happen. `next(timeout)` returns a changed task's
/// dict, `"lagged"` when events were dropped (re-read what you track), or
/// `None` when `timeout` passed first.
#[pyclass(module = "lardon._native", frozen)]
#[derive(Debug)]
pub(crate) struct Watcher {
    socket: PathBuf,
    stream: Arc<tokio::sync::Mutex<tonic::Streaming<pb::WatchEvent>>>,
}

#[pymethods]
impl Watcher {
    /// The next task change, within `timeout` seconds.
    #[pyo3(signature = (timeout=1.0))]
    fn next<'py>(&self, py: Python<'py>, timeout: f64) -> PyResult<Option<Bound<'py, PyAny>>> {
        let deadline = std::time::Instant::now() + Duration::from_secs_f64(timeout.max(0.0));
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            let stream = self.stream.clone();
            let next = block_on(py, async move {
                let mut s = stream.lock().await;
                tokio::time::timeout(left.min(SIGNAL_CHECK), s.message()).await
            })?;
            match next {
                Err(_elapsed) => py.check_signals()?,
                Ok(Err(s)) => return Err(errors::from_status(py, &s, &self.socket)),
                Ok(Ok(None)) => return Err(errors::unreachable(py, &self.socket)),
                Ok(Ok(Some(event))) => match event.event {
                    Some(pb::watch_event::Event::TaskChanged(t)) => {
                        return Ok(Some(views::task(py, &t)?.into_any()));
                    }
                    Some(pb::watch_event::Event::Lagged(_)) => {
                        return Ok(Some(pyo3::types::PyString::new(py, "lagged").into_any()));
                    }
                    _ => {}
                },
            }
        }
    }
}
