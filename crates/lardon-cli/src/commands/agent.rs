//! `lardon agent`: dials the broker and runs what it is assigned, admitted
//! by this host's own Governor (docs/DESIGN.md §14).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use lardon::{FakeClock, FakeProbe, Governor, HostProfile, MonoTime, Probe};
use lardon_cluster::agent::{
    Agent, AgentConfig, Cgroups, ConfinedExecutor, CpuSource, Declared, Executor, HostRss, Permit,
    ProcessExecutor, Programs, Tuning, WatchedExecutor, default_tokens,
};
use lardon_cluster::{AgentId, Capability};
use lardon_submit::Backoff;

use crate::cli::{AgentArgs, AgentEnforcement};
use crate::error::usage;
use crate::logging::{self, LogSink};

pub(crate) fn run(args: &AgentArgs) -> Result<u8> {
    logging::init_daemon(args.log_level.as_deref(), &LogSink::Stderr, logging::Rotation::default())?;
    let declared = args
        .capability
        .iter()
        .map(|c| Declared::parse(c).map_err(|e| usage(e.to_string())))
        .collect::<Result<Vec<_>>>()?;
    for d in &declared {
        if d.programs == Programs::Any {
            tracing::warn!(
                "capability {} runs any program its tasks name; list them to limit it: --capability {}=/usr/bin/PROGRAM[,…]",
                d.capability.key(),
                d.capability.key()
            );
        }
    }
    for name in &args.allow_env {
        if name.is_empty() || name.contains('=') {
            return Err(usage(format!("--allow-env: `{name}` is not a variable name")));
        }
    }
    let permit = Permit::new(&declared, &args.allow_env, std::env::var_os("PATH").as_deref());
    let capabilities: Vec<Capability> = declared.into_iter().map(|d| d.capability).collect();
    let id =
        args.id.clone().unwrap_or_else(|| format!("{}-{}", super::broker::host_id(), std::process::id()));
    let agent = AgentId::new(&id).map_err(|e| usage(format!("--id: {e}")))?;
    if args.heartbeat == 0 {
        return Err(usage("--heartbeat: must be more than 0"));
    }
    let ends_at_ms = ends_at_ms(args)?;
    let (governor, tokens) = match args.simulate_host {
        Some((memory, cpus)) => {
            // A frozen clock keeps the scripted snapshots fresh.
            let clock = Arc::new(FakeClock::new(MonoTime(1)));
            let profile = HostProfile::new(memory, cpus);
            let probe = FakeProbe::new(profile.clone()).stamped_by(clock.clone());
            let governor = Governor::with_clock(
                policy(lardon::HostPolicy::default_for(&profile), args.allocation),
                probe,
                clock,
            )
            .context("--simulate-host")?;
            (governor, cpus)
        }
        None => {
            let probe = lardon_host::HostProbe::new().context("reading this host")?;
            let profile = probe.profile();
            let cgroup = probe.snapshot().ok().and_then(|s| s.cgroup);
            let tokens = default_tokens(cgroup.as_ref(), profile.allowed_cpus);
            let governor = Governor::new(policy(probe.default_policy(), args.allocation), probe)
                .context("this host's policy")?;
            (governor, tokens)
        }
    };
    // The allocation's CPUs, for the optimizer's utilisation.
    let cpus = tokens;
    let tokens = match args.tokens {
        Some(n) => u32::try_from(n).map_err(|_| usage(format!("--tokens: {n} is too many")))?,
        None => tokens,
    };
    let tuning = if args.no_optimizer {
        None
    } else {
        match CpuSource::detect(&lardon_host::HostRoot::default()) {
            Ok(Some(source)) => Some(Tuning {
                source,
                cpus: f64::from(cpus.max(1)),
                every: Duration::from_millis(args.optimize_every),
            }),
            Ok(None) => {
                tracing::warn!(
                    "no cgroup CPU counters found: the optimizer is off, the token bound stays {tokens}"
                );
                None
            }
            Err(e) => {
                tracing::warn!("the optimizer is off: {e}");
                None
            }
        }
    };
    let config = AgentConfig {
        broker: args.broker.clone(),
        agent,
        capabilities,
        tokens,
        heartbeat: Duration::from_millis(args.heartbeat),
        backoff: Backoff::default(),
        dial: args.security.dial("agent")?,
        ends_at_ms,
        drain_grace: args.drain_grace.map(Duration::from_millis),
        tuning,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(async move {
        let executor = executor(args)?;
        let mut agent =
            Agent::new(config, governor, executor).map_err(|e| usage(e.to_string()))?.with_permit(permit);
        if let Some(ms) = args.idle_exit {
            if ms == 0 {
                return Err(usage("--idle-exit: must be more than 0"));
            }
            agent = agent.with_idle_exit(Duration::from_millis(ms));
        }
        if let Some(dir) = &args.work_dir {
            agent = agent.with_work_dir(dir.clone());
        }
        tracing::info!("agent {id} with {tokens} token(s), dialling {}", args.broker);
        // Each SIGTERM (or Ctrl-C) is a stop request: the first drains, the
        // second cancels what still runs (docs/DESIGN.md §14).
        let stops = stop_requests().context("listening for SIGTERM")?;
        agent.with_stop_requests(stops).run(std::future::pending()).await;
        anyhow::Ok(())
    })?;
    tracing::info!("the agent stopped");
    Ok(0)
}

/// `policy` for an agent that owns its allocation (`--allocation`): the
/// allocation's cgroup already is the budget (the probe reads the
/// smallest limit over its ancestors), so no CPUs are kept back for the
/// rest of the host, and neither the load average nor the CPU pressure —
/// both the whole node's, other jobs' work included, and the allocation's
/// cpuset or quota is what it gets whatever they say — gates anything.
/// The memory reserve and the memory and IO pressure gates stay: the agent
/// itself lives in the allocation, and a node short of memory or IO hurts
/// every job on it.
fn policy(mut policy: lardon::HostPolicy, allocation: bool) -> lardon::HostPolicy {
    if allocation {
        policy.cpu_reserve = 0;
        policy.max_load_ratio = None;
        policy.psi_cpu = 0.0; // 0 turns the gate off
    }
    policy
}
/// When the allocation ends, Unix milliseconds: `--ends-at`, else
/// `--walltime` from now, else `SLURM_JOB_END_TIME` (Slurm sets it in the
/// job's environment), else not known.
fn ends_at_ms(args: &AgentArgs) -> Result<Option<u64>> {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    if let Some(secs) = args.ends_at {
        return Ok(Some(secs.saturating_mul(1000)));
    }
    if let Some(ms) = args.walltime {
        return Ok(Some(now_ms.saturating_add(ms)));
    }
    match std::env::var("SLURM_JOB_END_TIME") {
        Ok(v) if !v.trim().is_empty() => {
            let secs: u64 = v
                .trim()
                .parse()
                .map_err(|_| usage(format!("SLURM_JOB_END_TIME: `{v}` is not Unix seconds")))?;
            // 0 (or a date already past at start) is no usable end.
            Ok((secs > 0).then(|| secs.saturating_mul(1000)))
        }
        _ => Ok(None),
    }
}

/// One item per SIGTERM or SIGINT, read from the signals themselves.
fn stop_requests() -> std::io::Result<lardon_cluster::agent::StopRequests> {
    use tokio::signal::unix::{SignalKind, signal};
    use tokio_stream::StreamExt as _;
    use tokio_stream::wrappers::SignalStream;
    let term = SignalStream::new(signal(SignalKind::terminate())?);
    let int = SignalStream::new(signal(SignalKind::interrupt())?);
    Ok(Box::pin(term.merge(int)))
}

/// How tasks are held to their declared memory (`--enforcement`), and
/// why, which the agent logs at start:
/// * `auto` inside an allocation (`--allocation`, on the real host): a
///   child cgroup per task where this process may make them, so a task
///   using more is killed there and not the whole allocation at the
///   engine's limit; else the soft watchdog. Elsewhere (no allocation, or
///   `--simulate-host`): nothing, as the host is not the agent's to police.
/// * `cgroup`: child cgroups, or an error naming why none can be made.
/// * `soft`: the soft memory watchdog ([`WatchedExecutor`]) on the task's
///   process tree, even where cgroups work (and in tests, which force it).
/// * `none`: plain process groups; the engine's limit, if any.
fn executor(args: &AgentArgs) -> Result<Arc<dyn Executor>> {
    let soft = |why: &str| -> Arc<dyn Executor> {
        tracing::info!(
            "enforcement: soft memory watchdog ({why}): each task's processes are sampled every {} ms \
             and killed past their declared memory + 5 % (at least 8 MiB); the engine's limit on the \
             allocation is the backstop",
            lardon_cluster::agent::watchdog::SOFT_EVERY.as_millis()
        );
        Arc::new(WatchedExecutor::new(Arc::new(HostRss::new(lardon_host::HostRoot::default()))))
    };
    let cgroups = || {
        let detection = lardon_host::cgroup::detect_enforcer(&lardon_host::HostRoot::default());
        detection.limits_apply().then_some(detection.enforcer.clone()).ok_or(detection.reason)
    };
    let confined = |enforcer, why: &str| -> Arc<dyn Executor> {
        tracing::info!("enforcement: a cgroup per task, limited to its declared memory ({why})");
        Arc::new(ConfinedExecutor::new(Arc::new(Cgroups::new(enforcer))))
    };
    Ok(match args.enforcement {
        AgentEnforcement::None => {
            tracing::info!("enforcement: none (--enforcement none): tasks run as plain process groups");
            Arc::new(ProcessExecutor)
        }
        AgentEnforcement::Soft => soft("--enforcement soft"),
        AgentEnforcement::Cgroup => match cgroups() {
            Ok(enforcer) => confined(enforcer, "--enforcement cgroup"),
            Err(why) => {
                return Err(usage(format!("--enforcement cgroup: this agent cannot make cgroups: {why}")));
            }
        },
        AgentEnforcement::Auto if !args.allocation || args.simulate_host.is_some() => {
            tracing::info!(
                "enforcement: none (not --allocation, or --simulate-host): tasks run as plain process groups"
            );
            Arc::new(ProcessExecutor)
        }
        AgentEnforcement::Auto => match cgroups() {
            Ok(enforcer) => confined(enforcer, "--allocation and cgroups are writable"),
            Err(why) => soft(&format!("--allocation and no writable cgroup: {why}")),
        },
    })
}
