//! Server streams: Wait, Log (with follow) and Watch. Each runs as a task
//! feeding a bounded channel; a client that goes away only ends its own
//! stream (the send fails), and shutdown ends them all.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use lardon_proto::pb;
use tokio::sync::{broadcast, mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Response, Status};

use super::convert::{decision_to_pb, id_arg};
use super::logread::{LogCursor, Start};
use super::logwatch::LogWatch;
use super::{BoxStream, store_status, views};
use crate::engine::Engine;
use crate::kernel::DaemonEvent;
use crate::spec::{TaskId, TaskState};

const CHANNEL: usize = 64;
const LOG_CHUNK: usize = 64 * 1024;
/// How often a followed log is re-read when inotify is unavailable (the
/// per-user instance limit reached): the one fallback to `tail -f`'s poll.
const LOG_POLL_FALLBACK: Duration = Duration::from_millis(100);
/// Availability updates on a Watch are coalesced to at most one a second.
const AVAILABILITY_EVERY: Duration = Duration::from_secs(1);

fn stream<T: Send + 'static>(rx: mpsc::Receiver<Result<T, Status>>) -> Response<BoxStream<T>> {
    Response::new(Box::pin(ReceiverStream::new(rx)))
}

async fn blocking<T: Send + 'static>(
    engine: &Arc<Engine>,
    f: impl FnOnce(&Engine) -> Result<T, Status> + Send + 'static,
) -> Result<T, Status> {
    let engine = Arc::clone(engine);
    tokio::task::spawn_blocking(move || f(&engine)).await.map_err(|e| Status::internal(e.to_string()))?
}

pub(crate) async fn wait(
    engine: Arc<Engine>,
    mut stop: watch::Receiver<bool>,
    req: pb::WaitRequest,
) -> Result<Response<BoxStream<pb::WaitEvent>>, Status> {
    // Subscribe before reading states: no end can slip between the two.
    let mut events = engine.shared.events.subscribe();
    let ids: Vec<TaskId> =
        req.ids.iter().enumerate().map(|(i, s)| id_arg(&format!("ids[{i}]"), s)).collect::<Result<_, _>>()?;
    let group = super::convert::group_arg("group", &req.group)?;
    let except = if req.except.is_empty() { None } else { Some(id_arg("except", &req.except)?) };
    let mut remaining: BTreeSet<TaskId> = blocking(&engine, move |engine| {
        let store = engine.shared.reader();
        if let Some(group) = group {
            // Every task of the group, ended ones too (a failure among them
            // is a failure of the group), but the caller's own task: a task
            // waiting for its group must not wait for itself.
            let filter = crate::store::TaskFilter { group: Some(group.to_string()), ..Default::default() };
            let mut all: BTreeSet<TaskId> =
                store.list_tasks(&filter).map_err(store_status)?.into_iter().map(|r| r.id).collect();
            for id in &ids {
                if store.get_task(*id).map_err(store_status)?.is_none() {
                    return Err(Status::not_found(format!("no task {id}")));
                }
                all.insert(*id);
            }
            if let Some(me) = except {
                all.remove(&me);
            }
            return Ok(all);
        }
        if ids.is_empty() {
            let all = store.load_all().map_err(store_status)?;
            return Ok(all.into_iter().filter(|r| !r.state.is_terminal()).map(|r| r.id).collect());
        }
        for id in &ids {
            if store.get_task(*id).map_err(store_status)?.is_none() {
                return Err(Status::not_found(format!("no task {id}")));
            }
        }
        Ok(ids.into_iter().collect())
    })
    .await?;
    let (tx, rx) = mpsc::channel(CHANNEL);
    tokio::spawn(async move {
        let mut summary = pb::WaitSummary::default();
        let mut check: Vec<TaskId> = remaining.iter().copied().collect();
        loop {
            // One store read for every end heard since the last one: a burst
            // of ends costs one blocking hop, not one per task.
            let ids = std::mem::take(&mut check);
            let found = if ids.is_empty() {
                Ok(Vec::new())
            } else {
                blocking(&engine, move |e| {
                    let mut ended = Vec::with_capacity(ids.len());
                    for id in ids {
                        let rec = e.task(id).map_err(store_status)?;
                        if let Some(r) = rec.filter(|r| r.state.is_terminal()) {
                            ended.push((id, r.state, views::task_pb(e, &r)));
                        }
                    }
                    Ok(ended)
                })
                .await
            };
            let ended = match found {
                Ok(ended) => ended,
                Err(s) => {
                    let _ = tx.send(Err(s)).await;
                    return;
                }
            };
            for (id, state, task) in ended {
                remaining.remove(&id);
                match state {
                    TaskState::Completed => summary.completed += 1,
                    TaskState::Failed => summary.failed += 1,
                    _ => summary.cancelled += 1,
                }
                let event = pb::WaitEvent { event: Some(pb::wait_event::Event::Finished(task)) };
                if tx.send(Ok(event)).await.is_err() {
                    return;
                }
            }
            if remaining.is_empty() {
                let _ =
                    tx.send(Ok(pb::WaitEvent { event: Some(pb::wait_event::Event::Summary(summary)) })).await;
                return;
            }
            let first = tokio::select! {
                ev = events.recv() => ev,
                _ = stop.changed() => return,
                () = tx.closed() => return,
            };
            // Everything already heard joins the same read.
            let mut next = Some(first);
            while let Some(ev) = next.take() {
                match ev {
                    Ok(DaemonEvent::TaskFinished(id)) if remaining.contains(&id) => check.push(id),
                    // A removed task ended before; forget it.
                    Ok(DaemonEvent::TaskRemoved(id)) => {
                        remaining.remove(&id);
                    }
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        check = remaining.iter().copied().collect()
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
                next = match events.try_recv() {
                    Ok(ev) => Some(Ok(ev)),
                    Err(broadcast::error::TryRecvError::Lagged(n)) => {
                        Some(Err(broadcast::error::RecvError::Lagged(n)))
                    }
                    Err(broadcast::error::TryRecvError::Empty) => None,
                    Err(broadcast::error::TryRecvError::Closed) => {
                        Some(Err(broadcast::error::RecvError::Closed))
                    }
                };
            }
            check.sort_unstable();
            check.dedup();
        }
    });
    Ok(stream(rx))
}

pub(crate) async fn log(
    engine: Arc<Engine>,
    mut stop: watch::Receiver<bool>,
    req: pb::LogRequest,
) -> Result<Response<BoxStream<pb::LogChunk>>, Status> {
    let id = id_arg("id", &req.id)?;
    if pb::LogStream::try_from(req.stream).is_err() {
        return Err(Status::invalid_argument(format!("stream: {} is not a log stream", req.stream)));
    }
    let exists = blocking(&engine, move |e| e.task(id).map_err(store_status)).await?;
    if exists.is_none() {
        return Err(Status::not_found(format!("no task {id}")));
    }
    let path = engine.shared.log_path(id);
    // Registered before the file is opened and held until the stream ends:
    // meanwhile no empty log is given back for reuse by another run.
    let reading = engine.shared.logs.reader();
    let (tx, rx) = mpsc::channel(CHANNEL);
    let follow = req.follow;
    let start = match (req.tail_lines, req.tail_bytes) {
        (Some(_), Some(_)) => {
            return Err(Status::invalid_argument("tail_lines and tail_bytes: give one, not both"));
        }
        (Some(n), None) => Start::TailLines(n),
        (None, Some(n)) => Start::TailBytes(n),
        (None, None) => Start::Beginning,
    };
    let head = req.head_lines;
    if head.is_some() && !matches!(start, Start::Beginning) {
        return Err(Status::invalid_argument("head_lines: not with a tail"));
    }
    // Subscribed and watching before the first read: neither the task's
    // end nor a write after that read can slip by unnoticed.
    let mut events = engine.shared.events.subscribe();
    let mut changes = if follow {
        LogWatch::new(&path)
            .map_err(|e| {
                tracing::warn!(
                    "log {}: no change notifications ({e}); re-reading every 100 ms",
                    path.display()
                )
            })
            .ok()
    } else {
        None
    };
    tokio::spawn(async move {
        let _reading = reading;
        // Read on a blocking thread: holes are skipped and lines counted
        // with plain system calls (logread).
        let mut cursor: Option<LogCursor> = None;
        loop {
            if follow {
                engine.shared.wakeups.log_follow.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            // Whether the task has ended, read before draining the file so
            // the last bytes written before the end are always sent.
            let ended = blocking(&engine, move |e| {
                Ok(e.task(id).ok().flatten().is_none_or(|r| r.state.is_terminal()))
            })
            .await
            .unwrap_or(true);
            // Drained to its current end, a few chunks per hop (a slow
            // client holds back only these).
            loop {
                let p = path.clone();
                let read = tokio::task::spawn_blocking(move || {
                    let mut cursor = match cursor {
                        Some(c) => c,
                        None => match LogCursor::open(&p, start, head)? {
                            Some(c) => c,
                            None => return Ok((None, Vec::new(), false)),
                        },
                    };
                    let mut chunks = Vec::new();
                    let mut size = 0;
                    while size < 4 * LOG_CHUNK {
                        let Some(chunk) = cursor.next(LOG_CHUNK)? else {
                            return Ok((Some(cursor), chunks, false));
                        };
                        size += chunk.1.len();
                        chunks.push(chunk);
                    }
                    Ok::<_, std::io::Error>((Some(cursor), chunks, true))
                })
                .await
                .map_err(std::io::Error::other)
                .and_then(|r| r);
                let (back, chunks, more) = match read {
                    Ok(r) => r,
                    Err(e) => {
                        let _ = tx.send(Err(Status::internal(format!("reading the log: {e}")))).await;
                        return;
                    }
                };
                cursor = back;
                for (offset, data) in chunks {
                    let chunk = pb::LogChunk { stream: pb::LogStream::Unspecified as i32, offset, data };
                    if tx.send(Ok(chunk)).await.is_err() {
                        return;
                    }
                }
                if cursor.as_ref().is_some_and(LogCursor::done) {
                    return;
                }
                if !more {
                    break;
                }
            }
            if !follow || ended {
                return;
            }
            // Sleep until the file changes or this task ends (or is
            // removed); other tasks' events are let by without a re-read.
            loop {
                tokio::select! {
                    changed = log_changed(&mut changes) => {
                        if let Err(e) = changed {
                            tracing::warn!("log {}: change notifications failed ({e}); re-reading every 100 ms", path.display());
                            changes = None;
                        }
                        break;
                    }
                    ev = events.recv() => match ev {
                        Ok(DaemonEvent::TaskFinished(t) | DaemonEvent::TaskRemoved(t)) if t == id => break,
                        Ok(_) => {}
                        Err(broadcast::error::RecvError::Lagged(_)) => break,
                        Err(broadcast::error::RecvError::Closed) => return,
                    },
                    _ = stop.changed() => return,
                    () = tx.closed() => return,
                }
            }
        }
    });
    Ok(stream(rx))
}

/// Resolves when the followed file changed; without notifications, after
/// the fallback period.
async fn log_changed(changes: &mut Option<LogWatch>) -> std::io::Result<()> {
    match changes {
        Some(watch) => watch.changed().await,
        None => {
            tokio::time::sleep(LOG_POLL_FALLBACK).await;
            Ok(())
        }
    }
}

fn event(seq: &mut u64, e: pb::watch_event::Event) -> pb::WatchEvent {
    *seq += 1;
    pb::WatchEvent { seq: *seq, at_unix_ms: crate::now_ms(), event: Some(e) }
}

fn snapshot(engine: &Engine) -> Result<pb::WatchSnapshot, Status> {
    let recs = engine.shared.reader().load_all().map_err(store_status)?;
    let recent = engine
        .shared
        .stats
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .recent
        .iter()
        .map(|(id, d)| pb::DecisionMade {
            task_id: crate::ids::format_id(*id),
            decision: Some(decision_to_pb(d)),
        })
        .collect();
    Ok(pb::WatchSnapshot {
        tasks: recs.iter().map(|r| views::task_pb(engine, r)).collect(),
        availability: Some(views::availability_pb(engine).map_err(store_status)?),
        recent_decisions: recent,
        scratch: super::scratch::list(engine)?,
    })
}

pub(crate) async fn watch(
    engine: Arc<Engine>,
    mut stop: watch::Receiver<bool>,
    req: pb::WatchRequest,
) -> Result<Response<BoxStream<pb::WatchEvent>>, Status> {
    use pb::watch_event::Event;
    let mut events = engine.shared.events.subscribe();
    let first = if req.skip_snapshot { None } else { Some(blocking(&engine, snapshot).await?) };
    let (tx, rx) = mpsc::channel(CHANNEL);
    tokio::spawn(async move {
        let mut seq = 0u64;
        let mut sent_generation = engine.shared.governor.generation();
        let mut sent_scratch = engine.shared.governor.volumes();
        if let Some(snap) = first
            && tx.send(Ok(event(&mut seq, Event::Snapshot(snap)))).await.is_err()
        {
            return;
        }
        let mut tick = tokio::time::interval(AVAILABILITY_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let out = tokio::select! {
                ev = events.recv() => match ev {
                    Ok(DaemonEvent::TaskChanged(id)) => {
                        let task = blocking(&engine, move |e| {
                            Ok(e.task(id).ok().flatten().map(|r| views::task_pb(e, &r)))
                        }).await.ok().flatten();
                        task.map(|t| Ok(event(&mut seq, Event::TaskChanged(t))))
                    }
                    Ok(DaemonEvent::TaskFinished(_)) => None,
                    Ok(DaemonEvent::TaskRemoved(id)) => Some(Ok(event(
                        &mut seq,
                        Event::TaskRemoved(pb::TaskRemoved { id: crate::ids::format_id(id) }),
                    ))),
                    Ok(DaemonEvent::Decision(id, d)) => Some(Ok(event(
                        &mut seq,
                        Event::Decision(pb::DecisionMade {
                            task_id: crate::ids::format_id(id),
                            decision: Some(decision_to_pb(&d)),
                        }),
                    ))),
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        let note = event(&mut seq, Event::Lagged(format!("{n} events dropped; a new snapshot follows")));
                        if tx.send(Ok(note)).await.is_err() {
                            return;
                        }
                        match blocking(&engine, snapshot).await {
                            Ok(s) => Some(Ok(event(&mut seq, Event::Snapshot(s)))),
                            Err(s) => Some(Err(s)),
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                _ = tick.tick() => {
                    let generation = engine.shared.governor.generation();
                    if generation == sent_generation {
                        None
                    } else {
                        sent_generation = generation;
                        // Scratch volumes that changed since the last tick.
                        let now = engine.shared.governor.volumes();
                        let changed: Vec<String> = now
                            .iter()
                            .filter(|v| !sent_scratch.contains(v))
                            .map(|v| v.name.clone())
                            .collect();
                        sent_scratch = now;
                        if !changed.is_empty()
                            && let Ok(list) = blocking(&engine, super::scratch::list).await
                        {
                            for v in list.into_iter().filter(|v| changed.contains(&v.name)) {
                                if tx.send(Ok(event(&mut seq, Event::ScratchChanged(v)))).await.is_err() {
                                    return;
                                }
                            }
                        }
                        blocking(&engine, |e| views::availability_pb(e).map_err(store_status))
                            .await
                            .ok()
                            .map(|a| Ok(event(&mut seq, Event::Availability(a))))
                    }
                }
                _ = stop.changed() => return,
                () = tx.closed() => return,
            };
            if let Some(out) = out
                && tx.send(out).await.is_err()
            {
                return;
            }
        }
    });
    Ok(stream(rx))
}
