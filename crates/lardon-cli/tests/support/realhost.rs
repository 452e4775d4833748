//! A real `lardon daemon` on the real host (no `--simulate-host`), started
//! inside a cgroup of its own with a known memory limit, so that the
//! daemon's budget, its task cgroups and its measured peaks are all real
//! and yet bounded.
//!
//! The cgroup is made under the test process's own memory cgroup: on a
//! hybrid or v1 host a v1 memory cgroup (`memory.limit_in_bytes`), on a
//! pure-v2 host a v2 cgroup (`memory.max`, with `+memory` enabled in our
//! own `cgroup.subtree_control`). The daemon's shell writes its own pid to
//! `cgroup.procs` before it execs, so the daemon never runs outside it.
//!
//! Where the machine cannot host this (no cgroup hierarchy with a memory
//! controller we can write), [`RealHost::start`] returns the reason; tests
//! fail with it — they never skip.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use lardon_host::{CgroupLayout, HostRoot};

/// A cgroup with a memory limit that the harness made and removes.
#[derive(Debug)]
pub(crate) struct LimitedCgroup {
    path: PathBuf,
    /// The limit written, bytes.
    pub(crate) limit: u64,
    v2: bool,
}

impl LimitedCgroup {
    /// Makes a fresh cgroup under our own memory cgroup, limited to
    /// `limit` bytes.
    ///
    /// # Errors
    /// Why the machine cannot host it.
    pub(crate) fn create(limit: u64) -> Result<LimitedCgroup, String> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let layout = CgroupLayout::detect(&HostRoot::default())
            .map_err(|e| format!("cannot read our cgroups (mountinfo, /proc/self/cgroup): {e}"))?;
        let name = format!("lardon-realhost-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        if let Some(own) = layout.v1_memory {
            let path = own.join(&name);
            std::fs::create_dir(&path)
                .map_err(|e| format!("cannot create a v1 memory cgroup {}: {e}", path.display()))?;
            let cg = LimitedCgroup { path, limit, v2: false };
            cg.write("memory.limit_in_bytes", &limit.to_string())?;
            return Ok(cg);
        }
        let own =
            layout.v2.ok_or("no v1 memory hierarchy and no cgroup2 mount: no memory controller to limit")?;
        let controllers = std::fs::read_to_string(own.join("cgroup.controllers")).unwrap_or_default();
        if !controllers.split_whitespace().any(|c| c == "memory") {
            return Err(format!(
                "the v2 cgroup {} has no memory controller ({controllers:?})",
                own.display()
            ));
        }
        std::fs::write(own.join("cgroup.subtree_control"), "+memory")
            .map_err(|e| format!("cannot enable +memory in {}/cgroup.subtree_control: {e}", own.display()))?;
        let path = own.join(&name);
        std::fs::create_dir(&path)
            .map_err(|e| format!("cannot create a v2 cgroup {}: {e}", path.display()))?;
        let cg = LimitedCgroup { path, limit, v2: true };
        cg.write("memory.max", &limit.to_string())?;
        Ok(cg)
    }

    fn write(&self, file: &str, value: &str) -> Result<(), String> {
        let p = self.path.join(file);
        std::fs::write(&p, value).map_err(|e| format!("cannot write {value} to {}: {e}", p.display()))
    }

    /// Its directory.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Every pid in it and in its descendants.
    fn pids(dir: &Path) -> Vec<i32> {
        let mut out: Vec<i32> = std::fs::read_to_string(dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        for sub in Self::children(dir) {
            out.extend(Self::pids(&sub));
        }
        out
    }

    fn children(dir: &Path) -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .map(|rd| rd.flatten().filter(|e| e.path().is_dir()).map(|e| e.path()).collect())
            .unwrap_or_default()
    }

    fn remove_tree(dir: &Path) {
        for sub in Self::children(dir) {
            Self::remove_tree(&sub);
        }
        let _ = std::fs::remove_dir(dir);
    }
}

impl Drop for LimitedCgroup {
    fn drop(&mut self) {
        // Whatever is left (a daemon killed with -9 leaves its tasks and
        // their cgroups): kill it, wait until the cgroups are empty, remove.
        let start = Instant::now();
        loop {
            let pids = Self::pids(&self.path);
            if pids.is_empty() || start.elapsed() > Duration::from_secs(10) {
                break;
            }
            for pid in pids {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Self::remove_tree(&self.path);
    }
}

/// A real daemon process inside a [`LimitedCgroup`]; killed on drop.
#[derive(Debug)]
pub(crate) struct RealHost {
    child: Option<Child>,
    /// The state dir.
    pub(crate) dir: PathBuf,
    args: Vec<String>,
    /// Dropped after the daemon is killed.
    pub(crate) cgroup: LimitedCgroup,
    /// Declared last: the next real-host test starts once this one's
    /// daemon and cgroup are gone.
    _alone: MutexGuard<'static, ()>,
}

/// Held by every [`RealHost`]: the real-host tests share one binary and
/// must never run at once (each measures the machine, its load or its
/// memory, and a neighbour's daemon would be in its figures). A test that
/// panicked poisons nothing the next one needs.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static ALONE: Mutex<()> = Mutex::new(());
    ALONE.lock().unwrap_or_else(PoisonError::into_inner)
}

impl RealHost {
    /// Starts `lardon daemon --state-dir DIR ARGS…` on the real host inside
    /// a fresh cgroup limited to `limit` bytes, and waits until it answers.
    ///
    /// # Errors
    /// Why the machine cannot host it (no writable cgroup with a memory
    /// controller), or why the daemon did not come up.
    /// Waits until no other real-host test of this process holds one.
    pub(crate) fn start(dir: &Path, limit: u64, args: &[&str]) -> Result<RealHost, String> {
        let alone = one_at_a_time();
        let cgroup = LimitedCgroup::create(limit)?;
        let mut host = RealHost {
            child: None,
            dir: dir.to_path_buf(),
            args: args.iter().map(|s| (*s).to_owned()).collect(),
            cgroup,
            _alone: alone,
        };
        host.spawn()?;
        Ok(host)
    }

    fn spawn(&mut self) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("daemon.out"))
            .map_err(|e| format!("daemon log: {e}"))?;
        let err = log.try_clone().map_err(|e| format!("daemon log: {e}"))?;
        // The shell joins the cgroup, then becomes the daemon: no instant
        // of the daemon's life is spent outside it.
        let child = Command::new("sh")
            .arg("-c")
            .arg(r#"echo $$ > "$1/cgroup.procs" || exit 97; shift; exec "$@""#)
            .arg("sh")
            .arg(self.cgroup.path())
            .arg(super::daemon::bin())
            .arg("--state-dir")
            .arg(&self.dir)
            .arg("daemon")
            .args(&self.args)
            .env_remove("LARDON_SOCKET")
            .env_remove("LARDON_STATE_DIR")
            .env_remove("LARDON_TASK_ID")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("cannot spawn the daemon: {e}"))?;
        self.child = Some(child);
        self.wait_ready()
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let start = Instant::now();
        loop {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                let log = std::fs::read_to_string(self.dir.join("daemon.out")).unwrap_or_default();
                return Err(format!("the daemon exited early ({status}): {log}"));
            }
            if super::daemon::lardon(&self.dir, &["status"]).status.success() {
                return Ok(());
            }
            if start.elapsed() > Duration::from_secs(30) {
                return Err("the daemon did not answer within 30 s".to_owned());
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// SIGTERM, wait for the daemon to exit, start it again (same cgroup,
    /// same state dir, same arguments).
    ///
    /// # Errors
    /// Why it did not come back.
    pub(crate) fn restart(&mut self) -> Result<(), String> {
        if let Some(mut child) = self.child.take() {
            let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            child.wait().map_err(|e| format!("waiting for the daemon: {e}"))?;
        }
        self.spawn()
    }

    /// Lifts the load and PSI gates (docs/DESIGN.md §5): these tests are
    /// about memory and CPUs, and a machine busy with other builds would
    /// otherwise hold admission for as long as its load lasts.
    /// The memory floor is lifted too: the gates under test are the
    /// budget and the per-task limits.
    pub(crate) fn relax_host_gates(&self) {
        // PSI thresholds of 0 disable those gates, as does an emergency
        // floor of 0 (the default floor is sized for the whole machine, not
        // for a daemon in a 2 GiB cgroup); the load gate is turned off where
        // the policy knows `off`, else set to its widest.
        let o = self.lardon(&[
            "policy",
            "--set",
            "psi_cpu=0",
            "--set",
            "psi_memory=0",
            "--set",
            "psi_io=0",
            "--set",
            "emergency_floor=0",
        ]);
        assert!(o.status.success(), "policy: {}", String::from_utf8_lossy(&o.stderr));
        if !self.lardon(&["policy", "--set", "max_load_ratio=off"]).status.success() {
            let o = self.lardon(&["policy", "--set", "max_load_ratio=1"]);
            assert!(o.status.success(), "policy: {}", String::from_utf8_lossy(&o.stderr));
        }
    }

    /// `lardon status ID --json`.
    pub(crate) fn task(&self, id: &str) -> serde_json::Value {
        let o = self.lardon(&["status", id, "--json"]);
        assert!(o.status.success(), "status {id}: {}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).expect("status --json parses")
    }

    /// Polls until every task in `ids` has ended, and returns their final
    /// views; after `timeout` it fails naming the unfinished tasks and what
    /// they last waited on (a busy machine's load gate, say).
    pub(crate) fn wait_all(&self, ids: &[String], timeout: Duration) -> Vec<serde_json::Value> {
        let start = Instant::now();
        loop {
            let views: Vec<serde_json::Value> = ids.iter().map(|id| self.task(id)).collect();
            let open: Vec<&serde_json::Value> = views
                .iter()
                .filter(|t| !matches!(t["state"].as_str(), Some("completed" | "failed" | "cancelled")))
                .collect();
            if open.is_empty() {
                return views;
            }
            if start.elapsed() > timeout {
                let why: Vec<String> = open
                    .iter()
                    .map(|t| format!("task {} {}: {}", t["id"], t["state"], t["last_decision"]["message"]))
                    .collect();
                panic!("timed out after {timeout:?}: {}", why.join("; "));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `lardon --state-dir DIR ARGS…`.
    pub(crate) fn lardon(&self, args: &[&str]) -> std::process::Output {
        super::daemon::lardon(&self.dir, args)
    }
}

impl Drop for RealHost {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
