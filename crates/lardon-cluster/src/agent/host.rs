//! The agent's host adapters, next to the agent as the daemon keeps its
//! own next to its runner: the real [`Confiner`] ([`Cgroups`], a task
//! cgroup from the host crate's enforcement backend) and the real
//! [`RssSource`] ([`HostRss`], the task's process tree under `/proc`).
//! The CLI only chooses between them (`--enforcement`); the CPU counters'
//! adapter is [`CpuSource`](super::CpuSource).

use std::sync::Arc;

use lardon_host::cgroup::{Enforcer, TaskLimits};
use lardon_host::{HostError, HostRoot, ProcessTree, TaskCgroup};

use super::exec::{Confinement, Confiner};
use super::watchdog::{RssSampler, RssSource};

/// The soft watchdog's sampler source: each task's process tree under a
/// [`HostRoot`]'s `/proc` (the leader, every descendant, kept once seen).
#[derive(Debug, Clone)]
pub struct HostRss(HostRoot);

impl HostRss {
    /// Follows processes under `root` (the real host: `HostRoot::default()`).
    #[must_use]
    pub fn new(root: HostRoot) -> Self {
        HostRss(root)
    }
}

impl RssSource for HostRss {
    fn watch(&self, pid: u32) -> Result<Box<dyn RssSampler>, HostError> {
        let mut tree = ProcessTree::new(&self.0);
        tree.watch(pid)?;
        Ok(Box::new(tree))
    }
}

impl RssSampler for ProcessTree {
    fn sample(&mut self) -> Result<u64, HostError> {
        Ok(ProcessTree::sample(self).rss)
    }

    fn kill_strays(&mut self) {
        self.kill_running();
    }
}

/// Task cgroups from the host's enforcement backend, each limited to the
/// memory its task declared.
#[derive(Debug, Clone)]
pub struct Cgroups(Arc<dyn Enforcer>);

impl Cgroups {
    /// Makes task cgroups with `enforcer` (one whose limits apply).
    #[must_use]
    pub fn new(enforcer: Arc<dyn Enforcer>) -> Self {
        Cgroups(enforcer)
    }
}

/// One task's cgroup; dropping it kills what is left and removes it.
#[derive(Debug)]
struct CgroupConfinement(Box<dyn TaskCgroup>);

impl Confiner for Cgroups {
    fn confine(&self, name: &str, memory: u64) -> Result<Box<dyn Confinement>, HostError> {
        let limits = TaskLimits { memory_max: Some(memory), ..TaskLimits::default() };
        Ok(Box::new(CgroupConfinement(self.0.create(name, &limits)?)))
    }
}

impl Confinement for CgroupConfinement {
    fn cgroup(&self) -> Option<&dyn TaskCgroup> {
        Some(self.0.as_ref())
    }

    fn adopt(&self, pid: u32) -> Result<(), HostError> {
        self.0.add_pid(pid)
    }

    fn oom_killed(&self) -> bool {
        self.0.oom_killed().unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use lardon_proto::cluster as pb;
    use tokio::sync::oneshot;

    use super::*;
    use crate::agent::{ConfinedExecutor, Executor};

    const MIB: u64 = 1 << 20;

    fn spec(script: &str, memory: u64) -> pb::TaskSpec {
        pb::TaskSpec {
            task_id: "t".into(),
            argv: vec!["sh".into(), "-c".into(), script.into()],
            need: Some(pb::Need { memory, cpu_millis: 1000 }),
            ..Default::default()
        }
    }

    /// Python that fills `mib` MiB (every page resident) and holds it a
    /// moment.
    fn hog(mib: u64) -> String {
        format!("python3 -c 'import time; b = b\"x\" * ({mib} << 20); time.sleep(0.3)'")
    }

    /// The real composition: the host's backend (it must enforce a kernel
    /// limit; a machine that cannot fails here with the reason). A liar is
    /// killed at its declaration, and an honest task of two processes has
    /// the cgroup's peak — their sum — not its leader's `ru_maxrss`.
    #[tokio::test]
    async fn a_task_in_a_real_cgroup_is_held_to_its_declaration_and_measured_whole() {
        let detection = lardon_host::detect_enforcer(&HostRoot::default());
        assert!(detection.limits_apply(), "this machine cannot enforce a memory limit: {}", detection.reason);
        let executor = ConfinedExecutor::new(Arc::new(Cgroups::new(Arc::clone(&detection.enforcer))));
        let (_keep, cancel) = oneshot::channel();
        let liar = executor.run(spec(&hog(200), 48 * MIB), cancel).await;
        assert!(!liar.success, "{liar:?}");
        assert!(liar.reason.contains("killed at its memory limit"), "{liar:?}");
        let (_keep, cancel) = oneshot::channel();
        let two = format!("{} & {}; wait", hog(40), hog(40));
        let honest = executor.run(spec(&two, 512 * MIB), cancel).await;
        assert!(honest.success, "{honest:?}");
        assert!(honest.peak_memory >= 80 * MIB, "peak {} MiB is the tree's", honest.peak_memory / MIB);
    }

    #[test]
    fn the_host_sampler_follows_a_real_process_and_a_gone_one_is_refused() {
        let mut child =
            std::process::Command::new("sleep").arg("30").spawn().unwrap_or_else(|e| panic!("{e}"));
        let mut sampler =
            HostRss::new(HostRoot::default()).watch(child.id()).unwrap_or_else(|e| panic!("{e}"));
        assert!(sampler.sample().is_ok_and(|rss| rss > 0));
        sampler.kill_strays();
        let _ = child.wait();
        assert!(HostRss::new(HostRoot::default()).watch(u32::MAX).is_err());
    }
}
