//! The `lardon agent` command line every provider's allocations run: the
//! same flags whether Slurm, a local child process or a pod starts it, so
//! an allocation's agent always dials back the same way.

use std::path::PathBuf;
use std::time::Duration;

use lardon_cluster_core::Capability;

/// How an allocation starts its agent (less its id, which the provider
/// derives from the allocation: see [`super::Provider::agent_prefix`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentLaunch {
    /// The `lardon` binary (the broker's own by default: same host or a
    /// shared file system).
    pub program: PathBuf,
    /// The address agents dial back to (`HOST:PORT`), as seen from where
    /// the allocation runs.
    pub broker: String,
    /// `--join-token-file` for the agent.
    pub join_token_file: Option<PathBuf>,
    /// `--tls-dir` for the agent.
    pub tls_dir: Option<PathBuf>,
    /// `--tls-name` for the agent.
    pub tls_name: Option<String>,
    /// `--idle-exit`: the agent ends (and with it the allocation) after
    /// this long with nothing to run.
    pub idle_exit: Duration,
    /// `--heartbeat` for the agent (`None`: its default).
    pub heartbeat: Option<Duration>,
}

impl AgentLaunch {
    /// The agent's argv (program first) declaring `capabilities`, without
    /// `--id`; with `--allocation` (it owns the allocation: no host
    /// reserves, no host load gate).
    #[must_use]
    pub fn argv(&self, capabilities: &[Capability]) -> Vec<String> {
        let mut argv = vec![
            self.program.to_string_lossy().into_owned(),
            "agent".to_owned(),
            "--allocation".to_owned(),
            "--broker".to_owned(),
            self.broker.clone(),
        ];
        if let Some(f) = &self.join_token_file {
            argv.extend(["--join-token-file".to_owned(), f.to_string_lossy().into_owned()]);
        }
        if let Some(d) = &self.tls_dir {
            argv.extend(["--tls-dir".to_owned(), d.to_string_lossy().into_owned()]);
        }
        if let Some(n) = &self.tls_name {
            argv.extend(["--tls-name".to_owned(), n.clone()]);
        }
        argv.extend(["--idle-exit".to_owned(), format!("{}ms", self.idle_exit.as_millis())]);
        if let Some(h) = self.heartbeat {
            argv.extend(["--heartbeat".to_owned(), format!("{}ms", h.as_millis())]);
        }
        for c in capabilities {
            argv.extend(["--capability".to_owned(), flag(c)]);
        }
        argv
    }
}

/// `c` as `--capability` takes it: `NAME[@VERSION][:TARGET]`, leaving out
/// the parts any value matches (the key's `*` is not a value the flag
/// accepts).
fn flag(c: &Capability) -> String {
    let mut text = c.name().to_owned();
    if let Some(v) = c.version() {
        text.push('@');
        text.push_str(v);
    }
    if let Some(t) = c.target() {
        text.push(':');
        text.push_str(t);
    }
    text
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn every_capability_round_trips_through_the_agents_flag() {
        for text in ["sh", "sh@1", "gcc@13:x86_64-linux-gnu", "clang:aarch64"] {
            let c = Capability::parse(text).unwrap();
            assert_eq!(flag(&c), text);
            assert_eq!(Capability::parse(&flag(&c)).unwrap(), c);
        }
    }
}
