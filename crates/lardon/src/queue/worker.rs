//! # Implementation details
//!
//! A pool of worker threads that run task callbacks. Threads are started
//! on demand (one per concurrently running task at most) and retire after
//! a minute idle, so a burst does not leave threads behind forever.

use std::collections::VecDeque;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

// Through the loom switch, so the loom models run callbacks on this pool.
use crate::sync::{Condvar, Mutex, thread};

type Job = Box<dyn FnOnce() + Send + 'static>;

const IDLE_RETIRE: Duration = Duration::from_secs(60);

#[derive(Default)]
struct PoolState {
    jobs: VecDeque<Job>,
    idle: usize,
    shutdown: bool,
}

pub(crate) struct Pool {
    state: Mutex<PoolState>,
    cv: Condvar,
    on_start: Option<Arc<dyn Fn() + Send + Sync>>,
}

impl Pool {
    pub(crate) fn new(on_start: Option<Arc<dyn Fn() + Send + Sync>>) -> Arc<Self> {
        Arc::new(Pool { state: Mutex::new(PoolState::default()), cv: Condvar::new(), on_start })
    }

    /// Runs `job` on an idle worker, or a new one.
    ///
    /// # Errors
    /// The job back when no thread could be started and none is idle.
    pub(crate) fn execute(self: &Arc<Self>, job: Job) -> Result<(), Job> {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if st.idle > st.jobs.len() {
            st.jobs.push_back(job);
            self.cv.notify_one();
            return Ok(());
        }
        drop(st);
        let pool = Arc::clone(self);
        let slot = Arc::new(Mutex::new(Some(job)));
        let taken = Arc::clone(&slot);
        let spawned = thread::Builder::new().name("lardon-worker".into()).spawn(move || {
            if let Some(hook) = &pool.on_start {
                hook();
            }
            let first = taken.lock().unwrap_or_else(PoisonError::into_inner).take();
            if let Some(job) = first {
                job();
            }
            pool.work();
        });
        match spawned {
            Ok(_) => Ok(()),
            Err(_) => match slot.lock().unwrap_or_else(PoisonError::into_inner).take() {
                Some(job) => Err(job),
                None => Ok(()),
            },
        }
    }

    fn work(&self) {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(job) = st.jobs.pop_front() {
                drop(st);
                job();
                st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            if st.shutdown {
                return;
            }
            st.idle += 1;
            let (guard, timeout) =
                self.cv.wait_timeout(st, IDLE_RETIRE).unwrap_or_else(PoisonError::into_inner);
            st = guard;
            st.idle -= 1;
            if timeout.timed_out() && st.jobs.is_empty() {
                return;
            }
        }
    }

    pub(crate) fn shutdown(&self) {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).shutdown = true;
        self.cv.notify_all();
    }
}
