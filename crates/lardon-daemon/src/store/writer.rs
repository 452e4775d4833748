//! The store's one writer: a thread that owns the writing connection and
//! applies every change sent to it, with **group commit**.
//!
//! The thread blocks until a write arrives, then takes every write already
//! queued behind it, and those that arrive while the group is open (at
//! most [`MAX_GROUP`]), and applies them all inside one transaction: one
//! `COMMIT`, so one fsync, for the whole group. Writes that
//! arrive while a group is being committed (or its replies sent) wait in
//! the channel and form the next group. Each write runs in its own savepoint
//! ([`Store::atomically`]), so a refused write (an illegal transition, a
//! missing task) is rolled back whole and alone, and the rest of its group
//! still commits.
//!
//! A write is applied as soon as the writer takes it, so the times a write
//! stamps (a task's start or end) are when it arrived, not when its group
//! committed.
//!
//! A write sent with [`StoreWriter::send_background`] (the record of what
//! a task did: its decisions, start, run and end) is one nobody waits for:
//! a group made only of such writes waits up to [`LINGER`] for company
//! before it commits, so that at a thousand task ends a second the writer
//! commits 50–130 times a second instead of 300–700 (BENCHMARKS.md, "Fast
//! path V"). Any other write (an acknowledgement someone waits for: a submit,
//! a pause, [`StoreWriter::call`]) commits its group at once, with every
//! background write queued ahead of it.
//!
//! A write's continuation runs on the writer thread only **after** its
//! group committed (or failed to), so a reply sent from it never
//! acknowledges a change that a crash could still lose, and a reader that
//! hears of it sees the change (docs/DESIGN.md §10).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, TryRecvError, channel, sync_channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{Store, StoreError};

/// The most writes one group holds: bounds how long the first write of a
/// group waits for the others, and the transaction's size.
pub const MAX_GROUP: usize = 4096;

/// The longest a group of background writes waits for more writes before
/// it commits (docs/DESIGN.md §10: how long a task's end may stay
/// undurable after it happened).
pub const LINGER: Duration = Duration::from_millis(5);

/// What the writer calls once the group a write belonged to ended: `None`
/// when it committed, the commit's error otherwise.
type Then = Box<dyn FnOnce(Option<&StoreError>) + Send>;

/// One write: applied to the store inside the open group; returns what to
/// do once the group ended.
struct Job {
    apply: Box<dyn FnOnce(&mut Store) -> Then + Send>,
    /// Somebody waits for this write: its group commits without lingering.
    urgent: bool,
}

/// Counters of what the writer did (for metrics and tests).
#[derive(Debug, Default)]
struct Counters {
    /// Groups committed.
    groups: AtomicU64,
    /// Writes applied (refused ones included).
    writes: AtomicU64,
}

/// A handle on the writer thread. Sending never blocks; [`StoreWriter::call`]
/// blocks until the write is durable.
#[derive(Debug)]
pub struct StoreWriter {
    jobs: Mutex<Option<Sender<Job>>>,
    linger: Duration,
    thread: Mutex<Option<JoinHandle<()>>>,
    counters: Arc<Counters>,
}

impl StoreWriter {
    /// Starts the writer thread, which owns `store` from now on.
    ///
    /// # Errors
    /// The thread could not be started.
    pub fn spawn(store: Store) -> std::io::Result<StoreWriter> {
        StoreWriter::spawn_with_linger(store, LINGER)
    }

    /// [`StoreWriter::spawn`] with background writes waiting up to `linger`
    /// for company (tests use an hour to see who does not wait).
    ///
    /// # Errors
    /// The thread could not be started.
    pub fn spawn_with_linger(store: Store, linger: Duration) -> std::io::Result<StoreWriter> {
        let (tx, rx) = channel::<Job>();
        let counters = Arc::new(Counters::default());
        let seen = Arc::clone(&counters);
        let thread = std::thread::Builder::new()
            .name("lardon-store".into())
            .spawn(move || run(store, &rx, &seen, linger))?;
        Ok(StoreWriter { jobs: Mutex::new(Some(tx)), linger, thread: Mutex::new(Some(thread)), counters })
    }

    /// How long a group of background writes may wait for company.
    pub fn linger(&self) -> Duration {
        self.linger
    }

    /// Queues `write` for the next group; `then` gets its result once that
    /// group committed (a commit failure replaces an `Ok`), on the writer
    /// thread: keep it short (send a reply, emit an event).
    ///
    /// If the writer has stopped, nothing is written and `then` is never
    /// called (dropped unrun); [`StoreWriter::call`] turns that into
    /// [`StoreError::WriterStopped`].
    pub fn send<T: Send + 'static>(
        &self,
        write: impl FnOnce(&mut Store) -> Result<T, StoreError> + Send + 'static,
        then: impl FnOnce(Result<T, StoreError>) + Send + 'static,
    ) {
        self.queue(write, then, true);
    }

    /// [`StoreWriter::send`] for a write nobody waits for: its group may
    /// wait up to [`LINGER`] for more writes before it commits (one commit,
    /// so one fsync, for more of them). `then` still runs only after the
    /// commit.
    pub fn send_background<T: Send + 'static>(
        &self,
        write: impl FnOnce(&mut Store) -> Result<T, StoreError> + Send + 'static,
        then: impl FnOnce(Result<T, StoreError>) + Send + 'static,
    ) {
        self.queue(write, then, false);
    }

    fn queue<T: Send + 'static>(
        &self,
        write: impl FnOnce(&mut Store) -> Result<T, StoreError> + Send + 'static,
        then: impl FnOnce(Result<T, StoreError>) + Send + 'static,
        urgent: bool,
    ) {
        let apply = Box::new(move |store: &mut Store| -> Then {
            let result = store.atomically(write);
            Box::new(move |commit: Option<&StoreError>| {
                then(match (result, commit) {
                    (Ok(_), Some(e)) => Err(StoreError::CommitFailed(e.to_string())),
                    (result, _) => result,
                });
            })
        });
        let sender = self.jobs.lock().unwrap_or_else(PoisonError::into_inner).clone();
        if let Some(sender) = sender {
            // An error means the thread is gone: the job is dropped unrun.
            let _ = sender.send(Job { apply, urgent });
        }
    }

    /// Applies `write` in the next group and returns its result once the
    /// group is durable.
    ///
    /// # Errors
    /// The write's own error, [`StoreError::CommitFailed`] if its group
    /// could not be committed, [`StoreError::WriterStopped`] if the writer
    /// has stopped.
    pub fn call<T: Send + 'static>(
        &self,
        write: impl FnOnce(&mut Store) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (tx, rx) = sync_channel(1);
        self.send(write, move |result| {
            // The caller may have given up waiting: nothing to tell.
            let _ = tx.send(result);
        });
        // A dropped job (writer stopped) drops `tx` unsent.
        rx.recv().unwrap_or(Err(StoreError::WriterStopped))
    }

    /// Groups committed so far.
    pub fn groups(&self) -> u64 {
        self.counters.groups.load(Ordering::Relaxed)
    }

    /// Writes applied so far (refused ones included).
    pub fn writes(&self) -> u64 {
        self.counters.writes.load(Ordering::Relaxed)
    }

    /// Stops taking writes, lets the thread apply and commit every write
    /// already queued, and waits for it. Later writes get
    /// [`StoreError::WriterStopped`].
    pub fn close(&self) {
        drop(self.jobs.lock().unwrap_or_else(PoisonError::into_inner).take());
        if let Some(thread) = self.thread.lock().unwrap_or_else(PoisonError::into_inner).take() {
            let _ = thread.join();
        }
    }
}

impl Drop for StoreWriter {
    fn drop(&mut self) {
        self.close();
    }
}

/// The writer thread: one group per wake-up until every sender is gone.
/// Each write is applied as it arrives (its timestamps are its arrival's,
/// not the commit's), and the group commits once nothing more is queued
/// and either a write in it is urgent or `linger` has passed since its
/// first write was taken.
fn run(mut store: Store, jobs: &Receiver<Job>, counters: &Counters, linger: Duration) {
    while let Ok(first) = jobs.recv() {
        if let Err(e) = store.begin_group() {
            tracing::error!("store writer: {e}");
            // Dropping the job drops its reply: its caller gets WriterStopped.
            drop(first);
            continue;
        }
        let deadline = Instant::now() + linger;
        let mut urgent = first.urgent;
        let mut thens: Vec<Then> = vec![(first.apply)(&mut store)];
        while thens.len() < MAX_GROUP {
            let next = match jobs.try_recv() {
                Ok(job) => job,
                Err(TryRecvError::Disconnected) => break,
                Err(TryRecvError::Empty) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if urgent || left.is_zero() {
                        break;
                    }
                    // A closed channel ends the wait at once.
                    match jobs.recv_timeout(left) {
                        Ok(job) => job,
                        Err(_) => break,
                    }
                }
            };
            urgent |= next.urgent;
            thens.push((next.apply)(&mut store));
        }
        counters.writes.fetch_add(thens.len() as u64, Ordering::Relaxed);
        let committed = store.commit_group();
        if let Err(e) = &committed {
            tracing::error!("store writer: {e}");
        } else {
            counters.groups.fetch_add(1, Ordering::Relaxed);
        }
        for then in thens {
            then(committed.as_ref().err());
        }
    }
}
