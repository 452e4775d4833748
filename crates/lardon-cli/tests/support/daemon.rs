//! A real `lardon daemon` process on a temp state dir (simulated host, so
//! admission does not depend on this machine's load), and the `lardon`
//! command lines the tests run against it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use super::wait::wait_until;

pub(crate) fn bin() -> &'static Path {
    Path::new(assert_cmd::cargo::cargo_bin!("lardon"))
}

/// `lardon --state-dir DIR ARGS…` (environment cleaned of LARDON_*).
pub(crate) fn lardon(dir: &Path, args: &[&str]) -> Output {
    lardon_env(dir, &[], args)
}

/// [`lardon`] with `env` set on the child (a test never changes its own
/// process's environment: the binary's tests run in parallel).
pub(crate) fn lardon_env(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    Command::new(bin())
        .envs(env.iter().copied())
        .env_remove("LARDON_SOCKET")
        .env_remove("LARDON_STATE_DIR")
        .env_remove("LARDON_TASK_ID")
        .arg("--state-dir")
        .arg(dir)
        .args(args)
        .output()
        .expect("run lardon")
}

pub(crate) fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub(crate) fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A daemon process; killed (SIGKILL) on drop.
pub(crate) struct Daemon {
    pub(crate) child: Child,
    pub(crate) dir: PathBuf,
}

impl Daemon {
    /// Starts `lardon daemon` on `dir` governing a simulated host of
    /// `host` ("MEMORY,CPUS") and waits until it answers.
    pub(crate) fn start(dir: &Path, host: &str) -> Daemon {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("daemon.out")).unwrap();
        let child = Command::new(bin())
            .env_remove("LARDON_SOCKET")
            .env_remove("LARDON_STATE_DIR")
            .args(["daemon", "--simulate-host", host, "--state-dir"])
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn daemon");
        let mut d = Daemon { child, dir: dir.to_path_buf() };
        d.wait_ready();
        d
    }

    fn wait_ready(&mut self) {
        let dir = self.dir.clone();
        wait_until("the daemon to answer", Duration::from_secs(30), || {
            if let Ok(Some(status)) = self.child.try_wait() {
                let log = std::fs::read_to_string(dir.join("daemon.out")).unwrap_or_default();
                panic!("daemon exited early ({status}): {log}");
            }
            lardon(&dir, &["status"]).status.success()
        });
    }

    /// kill -9, then reap.
    pub(crate) fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM and wait for a clean exit; its exit status.
    pub(crate) fn stop(mut self) -> std::process::ExitStatus {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        self.child.wait().expect("wait for the daemon")
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The JSON of `lardon status ID --json`.
pub(crate) fn task_json(dir: &Path, id: &str) -> serde_json::Value {
    let o = lardon(dir, &["status", id, "--json"]);
    assert!(o.status.success(), "status {id}: {}", stderr(&o));
    serde_json::from_slice(&o.stdout).expect("status --json parses")
}

pub(crate) fn state(dir: &Path, id: &str) -> String {
    task_json(dir, id)["state"].as_str().unwrap_or_default().to_owned()
}

/// Submits and returns the id.
pub(crate) fn submit(dir: &Path, args: &[&str]) -> String {
    let o = lardon(dir, &[&["submit"], args].concat());
    assert!(o.status.success(), "submit {args:?}: {}", stderr(&o));
    stdout(&o).trim().to_owned()
}

/// The repository's root (where README.md and docs/ live).
pub(crate) fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// [`lardon`] with `input` on its standard input (`submit --each`).
pub(crate) fn lardon_stdin(dir: &Path, args: &[&str], input: &[u8]) -> Output {
    use std::io::Write as _;
    let mut child = Command::new(bin())
        .env_remove("LARDON_SOCKET")
        .env_remove("LARDON_STATE_DIR")
        .env_remove("LARDON_TASK_ID")
        .arg("--state-dir")
        .arg(dir)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run lardon");
    child.stdin.take().expect("stdin").write_all(input).expect("write stdin");
    child.wait_with_output().expect("wait for lardon")
}
