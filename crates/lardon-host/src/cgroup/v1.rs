//! cgroup v1 backend: a task cgroup under our own v1 memory cgroup (and
//! one under our v1 cpu cgroup when that hierarchy is writable).

use std::path::PathBuf;

use super::files::parse_keyed;
use super::fsops;
use super::{BackendKind, Enforcer, TaskCgroup, TaskLimits, task_dir_name};
use crate::error::HostError;

/// Period written to `cpu.cfs_period_us` (100 ms, the kernel default).
const CFS_PERIOD_US: u64 = 100_000;

/// The cgroup v1 backend.
#[derive(Debug, Clone)]
pub struct V1Enforcer {
    memory_base: PathBuf,
    cpu_base: Option<PathBuf>,
}

impl V1Enforcer {
    /// Task cgroups go under `memory_base` (our own v1 memory cgroup, e.g.
    /// `/sys/fs/cgroup/memory/process_api/<id>`) and, for CPU quotas, under
    /// `cpu_base`.
    pub fn new(memory_base: PathBuf, cpu_base: Option<PathBuf>) -> Self {
        V1Enforcer { memory_base, cpu_base }
    }
}

impl Enforcer for V1Enforcer {
    fn kind(&self) -> BackendKind {
        BackendKind::V1
    }

    fn task_parents(&self) -> Vec<PathBuf> {
        std::iter::once(self.memory_base.clone()).chain(self.cpu_base.clone()).collect()
    }

    fn create(&self, name: &str, limits: &TaskLimits) -> Result<Box<dyn TaskCgroup>, HostError> {
        let dir = task_dir_name(name)?;
        let memory = self.memory_base.join(&dir);
        fsops::mkdir(&memory)?;
        let mut task = V1Task { name: name.to_owned(), memory, cpu: None, removed: false };
        // The cpu hierarchy only when a quota is asked for: a task cgroup
        // there without one limits nothing, and would cost every run a
        // second mkdir, attach (the new process's write to its
        // `cgroup.procs`, the costly part of a v1 migration) and rmdir.
        // The memory cgroup alone already holds every process of the run.
        if limits.cpu_millis.is_some()
            && let Some(base) = &self.cpu_base
        {
            let cpu = base.join(&dir);
            fsops::mkdir(&cpu)?;
            task.cpu = Some(cpu);
        }
        // On error `task` drops here and removes what was created. A new
        // v1 memory cgroup starts unlimited: only a limit that is set is
        // written (two writes saved per run without one).
        if let Some(max) = limits.memory_max {
            fsops::write(&task.memory.join("memory.limit_in_bytes"), &max.to_string())?;
        }
        if let Some(high) = limits.memory_high {
            fsops::write(&task.memory.join("memory.soft_limit_in_bytes"), &high.to_string())?;
        }
        if limits.cpu_millis.is_some() {
            task.set_cpu_quota(limits.cpu_millis)?;
        }
        Ok(Box::new(task))
    }
}

#[derive(Debug)]
struct V1Task {
    name: String,
    memory: PathBuf,
    cpu: Option<PathBuf>,
    removed: bool,
}

impl V1Task {
    fn dirs(&self) -> impl Iterator<Item = &PathBuf> {
        std::iter::once(&self.memory).chain(self.cpu.iter())
    }

    fn teardown(&mut self) -> Result<(), HostError> {
        if self.removed {
            return Ok(());
        }
        // An empty group — the common end of a run, whose process group
        // the runner has already reaped — is removed by the first rmdir,
        // with no read of its process list; `EBUSY` means a process is
        // left, and only then is the list read and killed.
        if fsops::rmdir_if_empty(&self.memory)? {
            self.removed = true;
            return self.cpu.iter().try_for_each(|dir| fsops::rmdir(dir));
        }
        let killed = fsops::kill_procs(&self.memory);
        let mut result = killed;
        for dir in std::iter::once(&self.memory).chain(self.cpu.iter()) {
            let r = fsops::rmdir(dir);
            if result.is_ok() {
                result = r;
            }
        }
        self.removed = true;
        result
    }
}

impl TaskCgroup for V1Task {
    fn name(&self) -> &str {
        &self.name
    }

    fn add_pid(&self, pid: u32) -> Result<(), HostError> {
        self.dirs().try_for_each(|d| fsops::write(&d.join("cgroup.procs"), &pid.to_string()))
    }

    fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs().map(|d| d.join("cgroup.procs")).collect()
    }

    /// Each task dir's `tasks` with its parent's: the base the enforcer
    /// was given is the daemon's own cgroup in that hierarchy.
    fn thread_moves(&self) -> Option<Vec<(PathBuf, PathBuf)>> {
        self.dirs().map(|d| Some((d.join("tasks"), d.parent()?.join("tasks")))).collect()
    }

    fn set_memory_limit(&self, max: Option<u64>, high: Option<u64>) -> Result<(), HostError> {
        let value = |v: Option<u64>| v.map_or_else(|| "-1".to_owned(), |b| b.to_string());
        fsops::write(&self.memory.join("memory.limit_in_bytes"), &value(max))?;
        fsops::write(&self.memory.join("memory.soft_limit_in_bytes"), &value(high))
    }

    fn set_cpu_quota(&self, millis: Option<u32>) -> Result<(), HostError> {
        let Some(cpu) = &self.cpu else {
            return Err(HostError::MissingController { controller: "cpu", path: self.memory.clone() });
        };
        let quota = millis.map_or_else(
            || "-1".to_owned(),
            // At least 1 ms of quota: the kernel refuses less.
            |m| (u64::from(m) * CFS_PERIOD_US / 1000).max(1000).to_string(),
        );
        fsops::write(&cpu.join("cpu.cfs_period_us"), &CFS_PERIOD_US.to_string())?;
        fsops::write(&cpu.join("cpu.cfs_quota_us"), &quota)
    }

    fn memory_current(&self) -> Result<Option<u64>, HostError> {
        fsops::counter(&self.memory.join("memory.usage_in_bytes")).map(Some)
    }

    fn memory_peak(&self) -> Result<Option<u64>, HostError> {
        fsops::counter(&self.memory.join("memory.max_usage_in_bytes")).map(Some)
    }

    fn oom_killed(&self) -> Result<bool, HostError> {
        let path = self.memory.join("memory.oom_control");
        fsops::parsed(&path, |t| parse_keyed(t, "oom_kill")).map(|n| n > 0)
    }

    fn kill_all(&self) -> Result<(), HostError> {
        fsops::kill_procs(&self.memory)?;
        match &self.cpu {
            Some(cpu) => fsops::kill_procs(cpu),
            None => Ok(()),
        }
    }

    fn remove(mut self: Box<Self>) -> Result<(), HostError> {
        self.teardown()
    }
}

impl Drop for V1Task {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

/// The limit currently set on a v1 cgroup (`None` = unlimited); used by tests.
#[cfg(test)]
pub(crate) fn read_limit(dir: &std::path::Path) -> Result<Option<u64>, HostError> {
    fsops::parsed(&dir.join("memory.limit_in_bytes"), super::files::parse_v1_limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_dirs_on_a_fake_tree_are_created_and_removed() {
        // A plain directory stands in for cgroupfs: files are written as-is.
        let d = tempfile::tempdir().unwrap();
        let e = V1Enforcer::new(d.path().join("mem"), None);
        std::fs::create_dir(d.path().join("mem")).unwrap();
        let limits = TaskLimits { memory_max: Some(64 << 20), ..TaskLimits::default() };
        let t = e.create("fake", &limits).unwrap();
        let dir = d.path().join("mem/lardon-fake");
        assert_eq!(read_limit(&dir).unwrap(), Some(64 << 20));
        assert_eq!(t.procs_files(), vec![dir.join("cgroup.procs")]);
        assert!(matches!(t.set_cpu_quota(Some(500)), Err(HostError::MissingController { .. })));
        // rmdir of a non-empty plain directory fails: clean it like cgroupfs would.
        for f in std::fs::read_dir(&dir).unwrap() {
            std::fs::remove_file(f.unwrap().path()).unwrap();
        }
        std::fs::write(dir.join("cgroup.procs"), "").unwrap();
        std::fs::remove_file(dir.join("cgroup.procs")).unwrap();
        drop(t);
        assert!(!dir.exists());
    }

    /// A run without a CPU quota gets no cpu cgroup (no mkdir, no attach,
    /// no rmdir there); one with a quota gets it with the quota written.
    #[test]
    fn the_cpu_cgroup_only_with_a_quota() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("mem")).unwrap();
        std::fs::create_dir(d.path().join("cpu")).unwrap();
        let e = V1Enforcer::new(d.path().join("mem"), Some(d.path().join("cpu")));
        let plain = e.create("plain", &TaskLimits::default()).unwrap();
        assert!(!d.path().join("cpu/lardon-plain").exists(), "a cpu cgroup without a quota");
        for file in ["memory.limit_in_bytes", "memory.soft_limit_in_bytes"] {
            assert!(!d.path().join("mem/lardon-plain").join(file).exists(), "{file} written without a limit");
        }
        assert_eq!(plain.procs_files(), vec![d.path().join("mem/lardon-plain/cgroup.procs")]);
        assert!(matches!(plain.set_cpu_quota(Some(500)), Err(HostError::MissingController { .. })));
        let capped =
            e.create("capped", &TaskLimits { cpu_millis: Some(500), ..TaskLimits::default() }).unwrap();
        let quota = std::fs::read_to_string(d.path().join("cpu/lardon-capped/cpu.cfs_quota_us")).unwrap();
        assert_eq!(quota, "50000");
        assert_eq!(capped.procs_files().len(), 2);
    }
}
