//! The `local` provider: each allocation is `lardon agent` child processes
//! of the broker on this host (one per node of the shape), admitting
//! against a simulated host of the shape's size. For demos and tests that
//! need the whole provisioning loop without an engine, the way Ray's fake
//! multi-node provider is used.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::{AgentLaunch, AllocState, AllocationId, Provider, ProviderError, Shape};

/// The `local` [`Provider`]. Its children are killed when it is dropped;
/// a broker killed outright leaves them to their `--idle-exit`.
#[derive(Debug)]
pub struct LocalProvider {
    shapes: Vec<Shape>,
    launch: AgentLaunch,
    output_dir: Option<PathBuf>,
    children: BTreeMap<AllocationId, Vec<Child>>,
    next: u64,
}

impl LocalProvider {
    /// A provider granting `shapes` as child processes running `launch`;
    /// each agent's output goes to `output_dir/ID.log` (`None`: the
    /// broker's standard error).
    #[must_use]
    pub fn new(shapes: Vec<Shape>, launch: AgentLaunch, output_dir: Option<PathBuf>) -> Self {
        LocalProvider { shapes, launch, output_dir, children: BTreeMap::new(), next: 0 }
    }

    fn err(message: String) -> ProviderError {
        ProviderError { provider: "local".into(), message }
    }

    fn spawn(&self, shape: &Shape, id: &str) -> Result<Child, ProviderError> {
        let argv = self.launch.argv(&shape.capabilities);
        let cpus = shape.cpu_millis.div_ceil(1000).max(1);
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .args(["--id", id, "--simulate-host", &format!("{},{cpus}", shape.memory)])
            .stdin(Stdio::null());
        if let Some(dir) = &self.output_dir {
            let log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.join(format!("{id}.log")))
                .map_err(|e| Self::err(format!("{}: {e}", dir.display())))?;
            let copy = log.try_clone().map_err(|e| Self::err(e.to_string()))?;
            cmd.stdout(copy).stderr(log);
        }
        cmd.spawn().map_err(|e| Self::err(format!("cannot start {}: {e}", argv[0])))
    }
}

impl Provider for LocalProvider {
    fn name(&self) -> &str {
        "local"
    }

    fn shapes(&self) -> Vec<Shape> {
        self.shapes.clone()
    }

    /// The agent's program must be an executable file.
    fn dry_run(&mut self, _: &Shape) -> Result<(), ProviderError> {
        use std::os::unix::fs::PermissionsExt as _;
        match std::fs::metadata(&self.launch.program) {
            Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => Ok(()),
            Ok(_) => Err(Self::err(format!("{} is not an executable file", self.launch.program.display()))),
            Err(e) => Err(Self::err(format!("{}: {e}", self.launch.program.display()))),
        }
    }

    fn submit(&mut self, shape: &Shape, count: u32) -> Result<Vec<AllocationId>, ProviderError> {
        let mut ids = Vec::new();
        for _ in 0..count {
            self.next += 1;
            let id = AllocationId(format!("local-{}-{}", std::process::id(), self.next));
            let mut children = Vec::new();
            for node in 0..shape.nodes.max(1) {
                let agent = if shape.nodes > 1 { format!("{id}-{node}") } else { id.0.clone() };
                match self.spawn(shape, &agent) {
                    Ok(c) => children.push(c),
                    Err(e) => {
                        for mut c in children {
                            let _ = c.kill();
                            let _ = c.wait();
                        }
                        if ids.is_empty() {
                            return Err(e);
                        }
                        tracing::warn!("local: {} of {count} allocations started; then: {e}", ids.len());
                        return Ok(ids);
                    }
                }
            }
            self.children.insert(id.clone(), children);
            ids.push(id);
        }
        Ok(ids)
    }

    /// Running while any of its agents runs; the ended ones are reaped.
    fn status(&mut self, ids: &[AllocationId]) -> Result<Vec<(AllocationId, AllocState)>, ProviderError> {
        let mut out = Vec::new();
        for id in ids {
            let state = match self.children.get_mut(id) {
                Some(children) => {
                    children.retain_mut(|c| matches!(c.try_wait(), Ok(None)));
                    if children.is_empty() {
                        self.children.remove(id);
                        AllocState::Ended
                    } else {
                        AllocState::Running
                    }
                }
                None => AllocState::Ended,
            };
            out.push((id.clone(), state));
        }
        Ok(out)
    }

    /// SIGTERM to each of its agents (they drain and exit).
    fn cancel(&mut self, id: &AllocationId) -> Result<(), ProviderError> {
        for c in self.children.get(id).into_iter().flatten() {
            if let Ok(pid) = i32::try_from(c.id()) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
            }
        }
        Ok(())
    }
}

impl Drop for LocalProvider {
    fn drop(&mut self) {
        for c in self.children.values_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
