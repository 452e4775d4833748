//! cgroup v2 backend: one task cgroup per task under a delegated subtree,
//! beside the daemon's own leaf (see [`super::delegate_v2`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::files::{parse_counter, parse_keyed};
use super::fsops::{self, CgroupFs, RealFs};
use super::{BackendKind, Enforcer, TaskCgroup, TaskLimits, task_dir_name};
use crate::error::HostError;
use crate::parse::ParseError;

const CPU_PERIOD_US: u64 = 100_000;

/// How long a kill waits for the cgroup to empty.
const KILL_DEADLINE: Duration = Duration::from_secs(2);

/// The cgroup v2 backend.
#[derive(Debug, Clone)]
pub struct V2Enforcer {
    base: PathBuf,
    fs: Arc<dyn CgroupFs>,
}

impl V2Enforcer {
    /// Task cgroups go under `base`, a delegated cgroup we may write to,
    /// normally the [`super::Delegation::base`] that [`super::delegate_v2`]
    /// prepared. A controller a limit needs and `base` has not enabled yet
    /// is enabled on demand; cgroup v2's "no internal processes" rule makes
    /// that fail with `EBUSY` ([`HostError::Io`]) when `base` holds a
    /// process itself — hence the daemon's leaf.
    pub fn new(base: PathBuf) -> Self {
        Self::with_fs(base, Arc::new(RealFs))
    }

    /// As [`V2Enforcer::new`], creating and configuring task cgroups
    /// through `fs` (a fixture tree in tests).
    pub fn with_fs(base: PathBuf, fs: Arc<dyn CgroupFs>) -> Self {
        V2Enforcer { base, fs }
    }

    /// The controllers `base` offers (`cgroup.controllers`).
    ///
    /// # Errors
    /// [`HostError`] when the file cannot be read.
    pub fn controllers(&self) -> Result<Vec<String>, HostError> {
        Ok(read(&*self.fs, &self.base.join("cgroup.controllers"))?
            .split_whitespace()
            .map(str::to_owned)
            .collect())
    }

    fn enable(&self, controller: &'static str) -> Result<(), HostError> {
        let control = self.base.join("cgroup.subtree_control");
        if read(&*self.fs, &control)?.split_whitespace().any(|c| c == controller) {
            return Ok(());
        }
        if !self.controllers()?.iter().any(|c| c == controller) {
            return Err(HostError::MissingController { controller, path: self.base.clone() });
        }
        self.fs.write(&control, &format!("+{controller}")).map_err(|e| HostError::io("write", control, e))
    }
}

fn read(fs: &dyn CgroupFs, path: &Path) -> Result<String, HostError> {
    fs.read(path).map_err(|e| HostError::io("read", path, e))
}

fn parsed<T>(
    fs: &dyn CgroupFs,
    path: &Path,
    f: impl FnOnce(&str) -> Result<T, ParseError>,
) -> Result<T, HostError> {
    f(&read(fs, path)?).map_err(|source| HostError::Parse { path: path.to_path_buf(), source })
}

impl Enforcer for V2Enforcer {
    fn kind(&self) -> BackendKind {
        BackendKind::V2
    }

    fn task_parents(&self) -> Vec<PathBuf> {
        vec![self.base.clone()]
    }

    fn create(&self, name: &str, limits: &TaskLimits) -> Result<Box<dyn TaskCgroup>, HostError> {
        let dir = self.base.join(task_dir_name(name)?);
        if limits.memory_max.is_some() || limits.memory_high.is_some() {
            self.enable("memory")?;
        }
        if limits.cpu_millis.is_some() {
            self.enable("cpu")?;
        }
        match self.fs.create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                // A leftover of the same name (a crash): empty and recreate
                // it so its counters start from zero.
                kill(&*self.fs, &dir)?;
                fsops::rmdir_with(&*self.fs, &dir)?;
                self.fs.create_dir(&dir).map_err(|e| HostError::io("mkdir", &dir, e))?;
            }
            Err(e) => return Err(HostError::io("mkdir", dir, e)),
        }
        // On error `task` drops here and removes what was created.
        let task = V2Task {
            name: name.to_owned(),
            dir,
            fs: Arc::clone(&self.fs),
            sampled: AtomicU64::new(0),
            removed: false,
        };
        if limits.memory_max.is_some() || limits.memory_high.is_some() {
            task.set_memory_limit(limits.memory_max, limits.memory_high)?;
        }
        if limits.cpu_millis.is_some() {
            task.set_cpu_quota(limits.cpu_millis)?;
        }
        Ok(Box::new(task))
    }
}

#[derive(Debug)]
struct V2Task {
    name: String,
    dir: PathBuf,
    fs: Arc<dyn CgroupFs>,
    /// The largest `memory.current` read so far: the peak on kernels
    /// without `memory.peak`.
    sampled: AtomicU64,
    removed: bool,
}

impl V2Task {
    fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// `name` in the task cgroup, which exists only where the parent
    /// enabled `controller`: a limit is never "written" to nowhere.
    fn controller_file(&self, controller: &'static str, name: &str) -> Result<PathBuf, HostError> {
        let path = self.file(name);
        if self.fs.exists(&path) {
            Ok(path)
        } else {
            Err(HostError::MissingController { controller, path: self.dir.clone() })
        }
    }

    fn write(&self, path: &Path, value: &str) -> Result<(), HostError> {
        self.fs.write(path, value).map_err(|e| HostError::io("write", path, e))
    }

    fn teardown(&mut self) -> Result<(), HostError> {
        if self.removed {
            return Ok(());
        }
        let killed = kill(&*self.fs, &self.dir);
        let removed = fsops::rmdir_with(&*self.fs, &self.dir);
        self.removed = true;
        killed.and(removed)
    }
}

/// Kills every process of the task cgroup `dir` and waits until none is
/// left. The common case — the task's processes all exited — reads
/// `cgroup.events` once and returns without waiting.
fn kill(fs: &dyn CgroupFs, dir: &Path) -> Result<(), HostError> {
    let events = dir.join("cgroup.events");
    if !fs.exists(&events) {
        // Not a cgroupfs directory as we know it: go by cgroup.procs.
        return fsops::kill_procs(dir);
    }
    if parsed(fs, &events, |t| parse_keyed(t, "populated"))? == 0 {
        return Ok(());
    }
    let cgroup_kill = dir.join("cgroup.kill");
    if !fs.exists(&cgroup_kill) {
        // Linux before 5.14: kill pid by pid.
        return fsops::kill_procs(dir);
    }
    fs.write(&cgroup_kill, "1").map_err(|e| HostError::io("write", &cgroup_kill, e))?;
    fsops::wait_unpopulated(dir, Instant::now() + KILL_DEADLINE)
}

impl TaskCgroup for V2Task {
    fn name(&self) -> &str {
        &self.name
    }

    fn add_pid(&self, pid: u32) -> Result<(), HostError> {
        self.write(&self.file("cgroup.procs"), &pid.to_string())
    }

    fn procs_files(&self) -> Vec<PathBuf> {
        vec![self.file("cgroup.procs")]
    }

    fn set_memory_limit(&self, max: Option<u64>, high: Option<u64>) -> Result<(), HostError> {
        let value = |v: Option<u64>| v.map_or_else(|| "max".to_owned(), |b| b.to_string());
        self.write(&self.controller_file("memory", "memory.max")?, &value(max))?;
        self.write(&self.controller_file("memory", "memory.high")?, &value(high))
    }

    fn set_cpu_quota(&self, millis: Option<u32>) -> Result<(), HostError> {
        let quota = millis.map_or_else(
            || "max".to_owned(),
            |m| (u64::from(m) * CPU_PERIOD_US / 1000).max(1000).to_string(),
        );
        self.write(&self.controller_file("cpu", "cpu.max")?, &format!("{quota} {CPU_PERIOD_US}"))
    }

    fn memory_current(&self) -> Result<Option<u64>, HostError> {
        let path = self.controller_file("memory", "memory.current")?;
        let bytes = parsed(&*self.fs, &path, |t| parse_counter("memory.current", t))?;
        self.sampled.fetch_max(bytes, Ordering::AcqRel);
        Ok(Some(bytes))
    }

    fn memory_peak(&self) -> Result<Option<u64>, HostError> {
        // memory.peak exists from Linux 5.19. Before, the largest
        // memory.current sampled while the task ran (the daemon reads it
        // for its usage reports) is the best the kernel offers.
        let path = self.file("memory.peak");
        if self.fs.exists(&path) {
            return parsed(&*self.fs, &path, |t| parse_counter("memory.peak", t)).map(Some);
        }
        let now = self.memory_current()?.unwrap_or(0);
        Ok(Some(now.max(self.sampled.load(Ordering::Acquire))).filter(|b| *b > 0))
    }

    fn oom_killed(&self) -> Result<bool, HostError> {
        let path = self.controller_file("memory", "memory.events")?;
        parsed(&*self.fs, &path, |t| parse_keyed(t, "oom_kill")).map(|n| n > 0)
    }

    fn kill_all(&self) -> Result<(), HostError> {
        kill(&*self.fs, &self.dir)
    }

    fn remove(mut self: Box<Self>) -> Result<(), HostError> {
        self.teardown()
    }
}

impl Drop for V2Task {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}
