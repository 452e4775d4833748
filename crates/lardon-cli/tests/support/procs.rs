//! Real `lardon` processes for the cluster tests: started with their output
//! in a log file, SIGKILLed on drop, and their logs gathered for a failure
//! message.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A child process, SIGKILLed on drop; its stdout and stderr go to `log`.
pub(crate) struct Proc {
    child: Child,
    pub(crate) log: PathBuf,
}

impl Proc {
    /// Starts `lardon ARGS…` with its log at `DIR/NAME.log` (appended to).
    pub(crate) fn start(dir: &Path, name: &str, args: &[&str]) -> Proc {
        Self::start_env(dir, name, args, &[])
    }

    /// [`Proc::start`] with `env` set over the test's environment (and
    /// the `LARDON_*` variables that would redirect a daemon removed).
    pub(crate) fn start_env(dir: &Path, name: &str, args: &[&str], env: &[(&str, &str)]) -> Proc {
        let mut command = Command::new(super::daemon::bin());
        command
            .env_remove("LARDON_SOCKET")
            .env_remove("LARDON_STATE_DIR")
            .env_remove("LARDON_TASK_ID")
            .envs(env.iter().copied())
            .args(args);
        Proc::start_command(dir, name, command)
    }

    /// Starts `command` (which must exec `lardon` in its own process, as
    /// `ip netns exec` does, so that the kill reaches it) with its log at
    /// `DIR/NAME.log`.
    pub(crate) fn start_command(dir: &Path, name: &str, mut command: Command) -> Proc {
        let log = dir.join(format!("{name}.log"));
        let file = std::fs::OpenOptions::new().create(true).append(true).open(&log).unwrap();
        let child =
            command.stdin(Stdio::null()).stdout(file.try_clone().unwrap()).stderr(file).spawn().unwrap();
        Proc { child, log }
    }

    /// Its process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (a `kill` name: `TERM`, `STOP`, `CONT` …).
    pub(crate) fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{signal} {}", self.child.id());
    }

    /// Its exit code once it exits, polling until `within` passes (then
    /// `None`: still running).
    pub(crate) fn wait_exit(&mut self, within: std::time::Duration) -> Option<Option<i32>> {
        let start = std::time::Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status.code());
            }
            if start.elapsed() > within {
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
    }

    /// SIGKILL, then reap.
    pub(crate) fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// The arguments of `lardon agent` joining the broker at `addr` as `id`,
/// with one `capability`, `tokens` tokens, a 1 s heartbeat and a simulated
/// 8 GiB / 8-CPU host (so the machine's own load does not make it wait);
/// a test appends its own flags.
pub(crate) fn agent_args<'a>(
    addr: &'a str,
    id: &'a str,
    capability: &'a str,
    tokens: &'a str,
) -> Vec<&'a str> {
    vec![
        "agent",
        "--broker",
        addr,
        "--id",
        id,
        "--capability",
        capability,
        "--tokens",
        tokens,
        "--heartbeat",
        "1s",
        "--simulate-host",
        "8GiB,8",
    ]
}

/// A loopback address with a port that was free a moment ago.
pub(crate) fn free_port() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

/// The logs of `procs`, for a failure message.
pub(crate) fn logs(procs: &[&Proc]) -> String {
    procs
        .iter()
        .map(|p| format!("--- {}\n{}", p.log.display(), std::fs::read_to_string(&p.log).unwrap_or_default()))
        .collect()
}
