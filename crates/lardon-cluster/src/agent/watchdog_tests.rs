//! The soft memory watchdog (its decision is the host crate's, tested
//! there): its pace on a paused clock with
//! scripted samples, and the executor killing a real process on its word.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use lardon_proto::cluster as pb;
use tokio::sync::oneshot;

use lardon_host::HostError;

use super::*;
use crate::agent::{Executor, WatchedExecutor};

const MIB: u64 = 1 << 20;

/// Scripted samples; then the last one again. Records each call.
#[derive(Debug)]
struct Script {
    samples: VecDeque<Result<u64, String>>,
    log: Arc<Mutex<Vec<String>>>,
}

impl RssSampler for Script {
    fn sample(&mut self) -> Result<u64, HostError> {
        self.log.lock().unwrap_or_else(PoisonError::into_inner).push("sample".into());
        let next =
            if self.samples.len() > 1 { self.samples.pop_front() } else { self.samples.front().cloned() };
        next.unwrap_or(Ok(0)).map_err(HostError::Unsupported)
    }
    fn kill_strays(&mut self) {
        self.log.lock().unwrap_or_else(PoisonError::into_inner).push("kill strays".into());
    }
}

fn script(samples: &[Result<u64, String>]) -> (Script, Arc<Mutex<Vec<String>>>) {
    let log = Arc::new(Mutex::new(Vec::new()));
    (Script { samples: samples.iter().cloned().collect(), log: Arc::clone(&log) }, log)
}

/// Ticks at once, counting them; after `limit` ticks it never ticks again.
struct Ticks {
    count: u32,
    limit: u32,
}

impl Pace for Ticks {
    async fn next(&mut self) {
        if self.count == self.limit {
            std::future::pending::<()>().await;
        }
        self.count += 1;
    }
}

/// Runs `watch_paced` until it fires or the pace runs out.
async fn watched(s: &mut Script, declared: u64, limit: u32) -> (Option<u64>, u32) {
    let mut ticks = Ticks { count: 0, limit };
    let fired = {
        let watch = watch_paced(s, declared, "t", &mut ticks);
        // The pace ends in a pending tick: polling it once more is enough.
        futures_poll(watch).await
    };
    (fired, ticks.count)
}

/// Polls `f` until it is ready or returns pending without progress.
async fn futures_poll<F: std::future::Future>(f: F) -> Option<F::Output> {
    let mut f = std::pin::pin!(f);
    std::future::poll_fn(|cx| match f.as_mut().poll(cx) {
        std::task::Poll::Ready(v) => std::task::Poll::Ready(Some(v)),
        // Every tick of the scripted pace resolves at once, so pending
        // means the pace ran out (or the watch stopped).
        std::task::Poll::Pending => std::task::Poll::Ready(None),
    })
    .await
}

#[tokio::test]
async fn it_fires_at_the_first_sample_over_the_limit() {
    let (mut s, log) = script(&[Ok(10 * MIB), Ok(70 * MIB), Ok(200 * MIB), Ok(10 * MIB)]);
    let (fired, ticks) = watched(&mut s, 64 * MIB, 100).await;
    assert_eq!(fired, Some(200 * MIB), "70 MiB is within 64 MiB's tolerance; 200 MiB is not");
    assert_eq!(ticks, 3, "one sample per tick, the third over");
    assert_eq!(log.lock().unwrap_or_else(PoisonError::into_inner).len(), 3);
}

#[tokio::test]
async fn an_honest_task_or_an_unreadable_one_is_never_killed() {
    let (mut honest, log) = script(&[Ok(60 * MIB)]);
    assert_eq!(watched(&mut honest, 64 * MIB, 1000).await, (None, 1000), "sampled at every tick");
    assert_eq!(log.lock().unwrap_or_else(PoisonError::into_inner).len(), 1000);
    let (mut broken, log) = script(&[Err("gone".into()), Ok(u64::MAX)]);
    assert_eq!(watched(&mut broken, 64 * MIB, 1000).await, (None, 1));
    assert_eq!(log.lock().unwrap_or_else(PoisonError::into_inner).len(), 1, "stops at the failure");
}

/// Hands out one scripted sampler per task, recording the pids watched.
#[derive(Debug)]
struct Source {
    samples: Vec<Result<u64, String>>,
    log: Arc<Mutex<Vec<String>>>,
}

impl RssSource for Source {
    fn watch(&self, pid: u32) -> Result<Box<dyn RssSampler>, HostError> {
        self.log.lock().unwrap_or_else(PoisonError::into_inner).push(format!("watch {}", pid > 0));
        Ok(Box::new(Script { samples: self.samples.iter().cloned().collect(), log: Arc::clone(&self.log) }))
    }
}

fn spec(argv: &[&str], memory: u64) -> pb::TaskSpec {
    pb::TaskSpec {
        task_id: "t".into(),
        argv: argv.iter().map(|s| (*s).to_owned()).collect(),
        need: Some(pb::Need { memory, cpu_millis: 1000 }),
        ..Default::default()
    }
}

#[tokio::test]
async fn the_executor_kills_a_liar_and_names_the_watchdog() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let source = Source { samples: vec![Ok(MIB), Ok(100 * MIB)], log: Arc::clone(&log) };
    let executor = WatchedExecutor::new(Arc::new(source)).every(Duration::from_millis(10));
    let (_keep, cancel) = oneshot::channel();
    let ended = executor.run(spec(&["sleep", "600"], 50 * MIB), cancel).await;
    assert!(!ended.success, "{ended:?}");
    assert_eq!(ended.exit_code, None, "killed by a signal");
    assert_eq!(
        ended.reason,
        "killed by the soft memory watchdog: it used 104857600 bytes, more than the 52428800 it declared"
    );
    let seen = log.lock().unwrap_or_else(PoisonError::into_inner).clone();
    assert_eq!(seen, ["watch true", "sample", "sample", "kill strays"]);

    // Within its declaration it runs to its end; nothing declared is not
    // watched at all.
    log.lock().unwrap_or_else(PoisonError::into_inner).clear();
    let honest = Source { samples: vec![Ok(MIB)], log: Arc::clone(&log) };
    let executor = WatchedExecutor::new(Arc::new(honest)).every(Duration::from_millis(10));
    let (_keep, cancel) = oneshot::channel();
    let ended = executor.run(spec(&["sh", "-c", "echo ok"], 50 * MIB), cancel).await;
    assert!(ended.success, "{ended:?}");
    let (_keep, cancel) = oneshot::channel();
    let ended = executor.run(spec(&["true"], 0), cancel).await;
    assert!(ended.success, "{ended:?}");
    let watched =
        log.lock().unwrap_or_else(PoisonError::into_inner).iter().filter(|l| l.starts_with("watch")).count();
    assert_eq!(watched, 1, "the task that declared nothing is not watched");
}
