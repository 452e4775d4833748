//! A thousand random faults at the I/O level against a real broker: four
//! agents and two submitters reach it over real gRPC streams through a
//! fault-injecting TCP proxy each, which drops their connections and
//! stalls them (a stall past three heartbeats is a partition: both ends
//! give up on each other); agents are also killed and restarted with
//! nothing remembered. A random workload runs meanwhile. After the faults
//! stop and everything settles:
//!
//! * every task was answered exactly once, done answers come from a run
//!   that really ended at an agent, and the broker counted one answer per
//!   task (its metrics), so nothing was lost or completed twice;
//! * nothing is queued or in flight, every agent holds nothing, and the
//!   router's invariants hold (`Router::check`, plus: the core's live
//!   tasks are exactly the router's).
//!
//! The fault schedule and workload follow a seed (random, or
//! `LARDON_FAULT_SEED`), printed on failure.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lardon::{FakeClock, FakeProbe, Governor, HostPolicy, HostProfile};
use lardon_proto::cluster as pb;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

use super::{BrokerConfig, MetricsBoard};
use crate::agent::{Agent, AgentConfig, Executor, Running};
use crate::{AgentId, Capability, SubmitterId, TaskId};
use lardon_submit::Backoff;
use lardon_submit::client::{Answer, RemoteTask, Submitter, SubmitterConfig};

const FAULTS: usize = 1_000;
const AGENTS: usize = 4;
const HEARTBEAT: Duration = Duration::from_millis(100);
/// Longest the settling may take before the test fails.
const SETTLE: Duration = Duration::from_secs(60);

/// SplitMix64: the schedule's only source of randomness.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// A TCP proxy in front of the broker that can cut every connection
/// through it, or stall them all for a while (both directions, or only
/// what the peer sends).
struct Proxy {
    addr: String,
    cut: watch::Sender<u64>,
    stalled_until: Arc<Mutex<Option<Instant>>>,
    up_stalled_until: Arc<Mutex<Option<Instant>>>,
}

impl Proxy {
    async fn start(target: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (cut, _) = watch::channel(0u64);
        let stalled_until = Arc::new(Mutex::new(None));
        let up_stalled_until = Arc::new(Mutex::new(None));
        let (cuts, stall, up_stall) =
            (cut.clone(), Arc::clone(&stalled_until), Arc::clone(&up_stalled_until));
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let Ok(outbound) = tokio::net::TcpStream::connect(&target).await else { continue };
                let mut cut = cuts.subscribe();
                let stall = Arc::clone(&stall);
                let up_stall = Arc::clone(&up_stall);
                tokio::spawn(async move {
                    let (ir, iw) = inbound.into_split();
                    let (or, ow) = outbound.into_split();
                    // Either direction ending, or a cut, drops both sockets.
                    let (up, down) = ([&*stall, &*up_stall], [&*stall]);
                    tokio::select! {
                        _ = pump(ir, ow, &up) => {}
                        _ = pump(or, iw, &down) => {}
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        Proxy { addr, cut, stalled_until, up_stalled_until }
    }

    fn cut(&self) {
        self.cut.send_modify(|n| *n += 1);
    }

    fn stall(&self, d: Duration) {
        *self.stalled_until.lock().unwrap() = Some(Instant::now() + d);
    }

    /// Stalls only what the peer sends: the broker hears nothing, the
    /// peer still hears the broker.
    fn stall_up(&self, d: Duration) {
        *self.up_stalled_until.lock().unwrap() = Some(Instant::now() + d);
    }

    fn heal(&self) {
        *self.stalled_until.lock().unwrap() = None;
        *self.up_stalled_until.lock().unwrap() = None;
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    stalls: &[&Mutex<Option<Instant>>],
) -> std::io::Result<()> {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        loop {
            let until = stalls.iter().filter_map(|s| *s.lock().unwrap()).max();
            match until {
                Some(t) if t > Instant::now() => tokio::time::sleep_until(t).await,
                _ => break,
            }
        }
        to.write_all(&buf[..n]).await?;
    }
}

/// Runs take a few milliseconds; each ending is recorded as (task, run
/// tag), the tag being what the run prints.
#[derive(Debug)]
struct FakeExec {
    agent: String,
    runs: Arc<AtomicU64>,
    ended: Arc<Mutex<HashSet<(String, String)>>>,
}

impl Executor for FakeExec {
    fn run(&self, spec: pb::TaskSpec, cancel: oneshot::Receiver<()>) -> Running {
        let run = self.runs.fetch_add(1, Ordering::Relaxed);
        let tag = format!("{}#{run}", self.agent);
        let ended = Arc::clone(&self.ended);
        // Work of 0–19 ms, the same for the same run number.
        let work = Duration::from_millis(Rng(run).below(20));
        Box::pin(async move {
            tokio::select! {
                () = tokio::time::sleep(work) => {
                    ended.lock().unwrap().insert((spec.task_id.clone(), tag.clone()));
                    pb::TaskEnded { success: true, exit_code: Some(0), stdout: tag.into_bytes(), ..Default::default() }
                }
                Ok(()) = cancel => pb::TaskEnded { success: false, reason: "cancelled".into(), ..Default::default() },
            }
        })
    }
}

fn governor() -> Governor {
    let clock = Arc::new(FakeClock::new(lardon::MonoTime(1)));
    let profile = HostProfile::new(64 << 30, 16);
    let probe = FakeProbe::new(profile.clone()).stamped_by(clock.clone());
    Governor::with_clock(HostPolicy::default_for(&profile), probe, clock).unwrap()
}

fn backoff() -> Backoff {
    Backoff { initial: Duration::from_millis(10), max: Duration::from_millis(100) }
}

/// One agent behind its proxy, restartable.
struct Slot {
    id: String,
    capabilities: Vec<&'static str>,
    tokens: u32,
    proxy: Proxy,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Slot {
    fn start(&mut self, runs: &Arc<AtomicU64>, ended: &Arc<Mutex<HashSet<(String, String)>>>) {
        let config = AgentConfig {
            broker: self.proxy.addr.clone(),
            agent: AgentId::new(&self.id).unwrap(),
            capabilities: self.capabilities.iter().map(|c| Capability::parse(c).unwrap()).collect(),
            tokens: self.tokens,
            heartbeat: HEARTBEAT,
            backoff: backoff(),
            dial: Default::default(),
            ends_at_ms: None,
            drain_grace: None,
            tuning: None,
        };
        let exec = FakeExec { agent: self.id.clone(), runs: Arc::clone(runs), ended: Arc::clone(ended) };
        let agent = Agent::new(config, governor(), Arc::new(exec)).unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        self.stop = Some(stop);
        self.task = Some(tokio::spawn(agent.run(async move {
            let _ = stopped.await;
        })));
    }

    /// Kills the agent (it forgets what it ran) and starts a fresh one
    /// with the same id.
    async fn restart(&mut self, runs: &Arc<AtomicU64>, ended: &Arc<Mutex<HashSet<(String, String)>>>) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        self.start(runs, ended);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_random_faults_lose_nothing_and_complete_nothing_twice() {
    let seed = std::env::var("LARDON_FAULT_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
    });
    // Shown with the failure (cargo prints a failed test's output).
    eprintln!("fault schedule seed {seed}: replay with LARDON_FAULT_SEED={seed}");
    let mut rng = Rng(seed);

    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let broker_addr = listener.local_addr().unwrap().to_string();
    let board = MetricsBoard::new();
    let config =
        BrokerConfig { heartbeat: HEARTBEAT, metrics: Some(board.clone()), ..BrokerConfig::default() };
    tokio::spawn(super::serve(listener, config, std::future::pending()));

    let runs = Arc::new(AtomicU64::new(0));
    let ended = Arc::new(Mutex::new(HashSet::new()));
    // Every capability is served by three of the four agents.
    let caps: [&[&'static str]; AGENTS] = [&["a@1", "b@1"], &["a@1", "b@1"], &["a@1"], &["b@1"]];
    let mut slots = Vec::new();
    for (i, capabilities) in caps.iter().enumerate() {
        let mut slot = Slot {
            id: format!("agent-{i}"),
            capabilities: capabilities.to_vec(),
            tokens: 1 + u32::try_from(rng.below(3)).unwrap(),
            proxy: Proxy::start(broker_addr.clone()).await,
            stop: None,
            task: None,
        };
        slot.start(&runs, &ended);
        slots.push(slot);
    }
    let mut submitters = Vec::new();
    for name in ["s1", "s2"] {
        let proxy = Proxy::start(broker_addr.clone()).await;
        let submitter = Submitter::start(SubmitterConfig {
            broker: proxy.addr.clone(),
            submitter: SubmitterId::new(name).unwrap(),
            heartbeat: HEARTBEAT,
            backoff: backoff(),
            unreachable_after: None,
            dial: Default::default(),
        })
        .unwrap();
        submitters.push((proxy, submitter));
    }

    let mut tickets = Vec::new();
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    for step in 0..FAULTS {
        // The workload: about one task every other step.
        if rng.below(2) == 0 {
            let (_, s) = &submitters[usize::try_from(rng.below(2)).unwrap()];
            let cap = if rng.below(2) == 0 { "a@1" } else { "b@1" };
            let id = TaskId::new(&format!("t{step}")).unwrap();
            tickets.push(s.submit(&RemoteTask::new(
                id,
                Capability::parse(cap).unwrap(),
                vec!["work".into()],
            )));
        }
        let target = usize::try_from(rng.below(u64::try_from(AGENTS).unwrap())).unwrap();
        let kind = match rng.below(100) {
            0..=34 => {
                slots[target].proxy.cut();
                "cut an agent's connection"
            }
            35..=44 => {
                // Only the agent's side: the broker gives up on it while
                // the agent still hears the broker's heartbeats.
                slots[target].proxy.stall_up(Duration::from_millis(20 + rng.below(380)));
                "stall what an agent sends"
            }
            45..=59 => {
                // Up to 4 heartbeats: some are partitions (both ends give
                // up after 3), most are mere delays.
                slots[target].proxy.stall(Duration::from_millis(20 + rng.below(380)));
                "stall an agent's connection"
            }
            60..=74 => {
                slots[target].restart(&runs, &ended).await;
                "kill and restart an agent"
            }
            75..=84 => {
                submitters[target % 2].0.cut();
                "cut a submitter's connection"
            }
            85..=89 => {
                submitters[target % 2].0.stall(Duration::from_millis(20 + rng.below(380)));
                "stall a submitter's connection"
            }
            _ => "none",
        };
        *kinds.entry(kind).or_default() += 1;
        // Pacing between faults (not a wait for anything).
        tokio::time::sleep(Duration::from_millis(rng.below(25))).await;
    }
    for slot in &slots {
        slot.proxy.heal();
    }
    for (proxy, _) in &submitters {
        proxy.heal();
    }

    let fail = |what: String| -> ! { panic!("seed {seed}: {what}; faults {kinds:?}") };
    let total = tickets.len();
    let deadline = Instant::now() + SETTLE;
    let mut answers: BTreeMap<String, Answer> = BTreeMap::new();
    for ticket in tickets {
        let id = ticket.id().to_string();
        match tokio::time::timeout_at(deadline, ticket.answer()).await {
            Ok(Ok(answer)) => {
                if answers.insert(id.clone(), answer).is_some() {
                    fail(format!("{id} answered twice"));
                }
            }
            Ok(Err(_)) => fail(format!("{id}: the submitter stopped")),
            Err(_) => {
                let status = lardon_submit::client::status(&broker_addr, &Default::default()).await;
                let metrics = board.snapshot().await;
                fail(format!("{id} never answered (lost); broker status {status:?}, metrics {metrics:?}"))
            }
        }
    }
    let ended = ended.lock().unwrap().clone();
    let (mut done, mut durable, mut no_executor) = (0, 0, 0);
    for (id, answer) in &answers {
        match answer {
            Answer::Done(e) => {
                let tag = String::from_utf8_lossy(&e.stdout).into_owned();
                if !e.success || !ended.contains(&(id.clone(), tag.clone())) {
                    fail(format!("{id} answered done by `{tag}`, which is no run of it that ended: {e:?}"));
                }
                done += 1;
                durable += 1;
            }
            Answer::RunLocally(_) => durable += 1,
            Answer::NoExecutor(_) => no_executor += 1,
            other => fail(format!("{id}: unexpected answer {other:?}")),
        }
    }

    // Settled: nothing queued or held, every agent back and idle.
    loop {
        let status = lardon_submit::client::status(&broker_addr, &Default::default()).await;
        if let Ok(s) = &status
            && s.queued == 0
            && s.in_flight == 0
            && s.agents.len() == AGENTS
            && s.agents.iter().all(|a| a.in_flight == 0)
        {
            break;
        }
        if Instant::now() > deadline {
            fail(format!("the broker never settled: {status:?}"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if let Err(e) = board.check().await {
        fail(format!("invariant broken: {e}"));
    }
    let Some(m) = board.snapshot().await else { fail("no metrics".into()) };
    let c = m.counters;
    // Every answer but "no executor" is recorded and given once per task;
    // "no executor" is not recorded, so a submitter that lost it asks again
    // and may hear it again.
    let answered = c.done + c.failed + c.run_locally + c.cancelled + c.expired;
    if answered != durable || c.done != done || c.no_executor < no_executor {
        fail(format!(
            "the broker counted {answered} recorded answers ({c:?}) where the {total} tasks got {durable}, {done} done, {no_executor} no executor"
        ));
    }
    eprintln!("{total} tasks, {done} done, {no_executor} no executor; broker {c:?}; faults {kinds:?}");
    // The faults did bite: runs were lost and queued again.
    if c.requeued == 0 || done == 0 {
        fail(format!("the faults never re-queued a run or nothing ran: {c:?}"));
    }
}

/// A peer whose messages stop reaching the broker (while the broker's
/// still reach it) is dropped after three heartbeats, and told so: its
/// stream ends, it reconnects and works again. Were the broker's side left
/// open, its heartbeats would keep the peer on a stream nobody reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_the_broker_stopped_hearing_is_told_and_reconnects() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let broker_addr = listener.local_addr().unwrap().to_string();
    let config = BrokerConfig { heartbeat: HEARTBEAT, ..BrokerConfig::default() };
    tokio::spawn(super::serve(listener, config, std::future::pending()));
    let runs = Arc::new(AtomicU64::new(0));
    let ended = Arc::new(Mutex::new(HashSet::new()));
    let mut slot = Slot {
        id: "agent-0".into(),
        capabilities: vec!["a@1"],
        tokens: 1,
        proxy: Proxy::start(broker_addr.clone()).await,
        stop: None,
        task: None,
    };
    slot.start(&runs, &ended);
    let proxy = Proxy::start(broker_addr.clone()).await;
    let submitter = Submitter::start(SubmitterConfig {
        broker: proxy.addr.clone(),
        submitter: SubmitterId::new("s1").unwrap(),
        heartbeat: HEARTBEAT,
        backoff: backoff(),
        unreachable_after: None,
        dial: Default::default(),
    })
    .unwrap();
    let until = |what: &'static str, ok: fn(&pb::ClusterStatusResponse) -> bool| {
        let addr = broker_addr.clone();
        async move {
            let deadline = Instant::now() + SETTLE;
            loop {
                if let Ok(s) = lardon_submit::client::status(&addr, &Default::default()).await
                    && ok(&s)
                {
                    return;
                }
                assert!(Instant::now() < deadline, "timed out waiting for {what}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    until("both peers", |s| s.agents.len() == 1 && s.submitters == 1).await;
    // Ten heartbeats of silence from both peers, then the link is whole.
    slot.proxy.stall_up(HEARTBEAT * 10);
    proxy.stall_up(HEARTBEAT * 10);
    until("the broker to drop both", |s| s.agents.is_empty() && s.submitters == 0).await;
    until("both to reconnect", |s| s.agents.len() == 1 && s.submitters == 1).await;
    let task =
        RemoteTask::new(TaskId::new("after").unwrap(), Capability::parse("a@1").unwrap(), vec!["w".into()]);
    let answer = tokio::time::timeout(SETTLE, submitter.submit(&task).answer()).await;
    assert!(matches!(answer, Ok(Ok(Answer::Done(ref e))) if e.success), "{answer:?}");
}
