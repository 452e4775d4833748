//! cgroup v2 backend: one task cgroup per task under a delegated subtree.

use std::path::{Path, PathBuf};

use super::files::parse_keyed;
use super::fsops;
use super::{BackendKind, Enforcer, TaskCgroup, TaskLimits, task_dir_name};
use crate::error::HostError;

const CPU_PERIOD_US: u64 = 100_000;

/// The cgroup v2 backend.
#[derive(Debug, Clone)]
pub struct V2Enforcer {
    base: PathBuf,
}

impl V2Enforcer {
    /// Task cgroups go under `base`, a delegated cgroup we may write to.
    /// The controllers a limit needs are enabled in `base`'s
    /// `cgroup.subtree_control` on demand. cgroup v2's "no internal
    /// processes" rule means a non-root `base` must hold no process itself
    /// (run the daemon in a leaf sibling, e.g. systemd `Delegate=yes` with
    /// the daemon moved to `base/supervisor`); otherwise enabling a
    /// controller fails with `EBUSY`, reported as [`HostError::Io`].
    pub fn new(base: PathBuf) -> Self {
        V2Enforcer { base }
    }

    /// The controllers `base` offers (`cgroup.controllers`).
    ///
    /// # Errors
    /// [`HostError`] when the file cannot be read.
    pub fn controllers(&self) -> Result<Vec<String>, HostError> {
        Ok(fsops::read(&self.base.join("cgroup.controllers"))?
            .split_whitespace()
            .map(str::to_owned)
            .collect())
    }

    fn enable(&self, controller: &'static str) -> Result<(), HostError> {
        let enabled = fsops::read(&self.base.join("cgroup.subtree_control"))?;
        if enabled.split_whitespace().any(|c| c == controller) {
            return Ok(());
        }
        if !self.controllers()?.iter().any(|c| c == controller) {
            return Err(HostError::MissingController { controller, path: self.base.clone() });
        }
        fsops::write(&self.base.join("cgroup.subtree_control"), &format!("+{controller}"))
    }
}

impl Enforcer for V2Enforcer {
    fn kind(&self) -> BackendKind {
        BackendKind::V2
    }

    fn create(&self, name: &str, limits: &TaskLimits) -> Result<Box<dyn TaskCgroup>, HostError> {
        let dir = self.base.join(task_dir_name(name)?);
        if limits.memory_max.is_some() || limits.memory_high.is_some() {
            self.enable("memory")?;
        }
        if limits.cpu_millis.is_some() {
            self.enable("cpu")?;
        }
        fsops::mkdir(&dir)?;
        let task = V2Task { name: name.to_owned(), dir, removed: false };
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
    removed: bool,
}

impl V2Task {
    fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn controller_file(&self, controller: &'static str, name: &str) -> Result<PathBuf, HostError> {
        let path = self.file(name);
        if path.exists() {
            Ok(path)
        } else {
            Err(HostError::MissingController { controller, path: self.dir.clone() })
        }
    }

    fn teardown(&mut self) -> Result<(), HostError> {
        if self.removed {
            return Ok(());
        }
        let killed = kill(&self.dir);
        let removed = fsops::rmdir(&self.dir);
        self.removed = true;
        killed.and(removed)
    }
}

fn kill(dir: &Path) -> Result<(), HostError> {
    let cgroup_kill = dir.join("cgroup.kill");
    if cgroup_kill.exists() {
        fsops::write(&cgroup_kill, "1")?;
    }
    fsops::kill_procs(dir)
}

impl TaskCgroup for V2Task {
    fn name(&self) -> &str {
        &self.name
    }

    fn add_pid(&self, pid: u32) -> Result<(), HostError> {
        fsops::write(&self.file("cgroup.procs"), &pid.to_string())
    }

    fn procs_files(&self) -> Vec<PathBuf> {
        vec![self.file("cgroup.procs")]
    }

    fn set_memory_limit(&self, max: Option<u64>, high: Option<u64>) -> Result<(), HostError> {
        let value = |v: Option<u64>| v.map_or_else(|| "max".to_owned(), |b| b.to_string());
        fsops::write(&self.controller_file("memory", "memory.max")?, &value(max))?;
        fsops::write(&self.controller_file("memory", "memory.high")?, &value(high))
    }

    fn set_cpu_quota(&self, millis: Option<u32>) -> Result<(), HostError> {
        let quota = millis.map_or_else(
            || "max".to_owned(),
            |m| (u64::from(m) * CPU_PERIOD_US / 1000).max(1000).to_string(),
        );
        fsops::write(&self.controller_file("cpu", "cpu.max")?, &format!("{quota} {CPU_PERIOD_US}"))
    }

    fn memory_current(&self) -> Result<Option<u64>, HostError> {
        fsops::counter(&self.controller_file("memory", "memory.current")?).map(Some)
    }

    fn memory_peak(&self) -> Result<Option<u64>, HostError> {
        // memory.peak exists from Linux 5.19; older kernels have no peak.
        let path = self.file("memory.peak");
        if path.exists() { fsops::counter(&path).map(Some) } else { Ok(None) }
    }

    fn oom_killed(&self) -> Result<bool, HostError> {
        let path = self.controller_file("memory", "memory.events")?;
        fsops::parsed(&path, |t| parse_keyed(t, "oom_kill")).map(|n| n > 0)
    }

    fn kill_all(&self) -> Result<(), HostError> {
        kill(&self.dir)
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
