//! `lardon agent`: dials the broker and runs what it is assigned, admitted
//! by this host's own Governor (docs/DESIGN.md §14).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use lardon::{FakeClock, FakeProbe, Governor, HostProfile, MonoTime, Probe};
use lardon_cluster::agent::{Agent, AgentConfig, Backoff, ProcessExecutor, default_tokens};
use lardon_cluster::{AgentId, Capability};

use crate::cli::AgentArgs;
use crate::error::usage;
use crate::logging::{self, LogSink};

pub(crate) fn run(args: &AgentArgs) -> Result<u8> {
    logging::init_daemon(args.log_level.as_deref(), &LogSink::Stderr)?;
    let capabilities = args
        .capability
        .iter()
        .map(|c| Capability::parse(c).map_err(|e| usage(format!("--capability: {e}"))))
        .collect::<Result<Vec<_>>>()?;
    let id =
        args.id.clone().unwrap_or_else(|| format!("{}-{}", super::broker::host_id(), std::process::id()));
    let agent = AgentId::new(&id).map_err(|e| usage(format!("--id: {e}")))?;
    if args.heartbeat == 0 {
        return Err(usage("--heartbeat: must be more than 0"));
    }
    let (governor, tokens) = match args.simulate_host {
        Some((memory, cpus)) => {
            // A frozen clock keeps the scripted snapshots fresh.
            let clock = Arc::new(FakeClock::new(MonoTime(1)));
            let profile = HostProfile::new(memory, cpus);
            let probe = FakeProbe::new(profile.clone()).stamped_by(clock.clone());
            let governor = Governor::with_clock(lardon::HostPolicy::default_for(&profile), probe, clock)
                .context("--simulate-host")?;
            (governor, cpus)
        }
        None => {
            let probe = lardon_host::HostProbe::new().context("reading this host")?;
            let profile = probe.profile();
            let cgroup = probe.snapshot().ok().and_then(|s| s.cgroup);
            let tokens = default_tokens(cgroup.as_ref(), profile.allowed_cpus);
            let governor = Governor::new(probe.default_policy(), probe).context("this host's policy")?;
            (governor, tokens)
        }
    };
    let tokens = match args.tokens {
        Some(n) => u32::try_from(n).map_err(|_| usage(format!("--tokens: {n} is too many")))?,
        None => tokens,
    };
    let config = AgentConfig {
        broker: args.broker.clone(),
        agent,
        capabilities,
        tokens,
        heartbeat: Duration::from_millis(args.heartbeat),
        backoff: Backoff::default(),
        dial: args.security.dial("agent")?,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(async move {
        let mut agent =
            Agent::new(config, governor, Arc::new(ProcessExecutor)).map_err(|e| usage(e.to_string()))?;
        if let Some(dir) = &args.work_dir {
            agent = agent.with_work_dir(dir.clone());
        }
        tracing::info!("agent {id} with {tokens} token(s), dialling {}", args.broker);
        agent.run(super::broker::shutdown_signal()).await;
        anyhow::Ok(())
    })?;
    tracing::info!("the agent stopped");
    Ok(0)
}
