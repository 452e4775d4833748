//! Deterministic scoped parallel map for use inside a task (docs/DESIGN.md §8).
//!
//! [`par_map`] and [`try_par_map`] fan the items of a slice out to at most
//! `threads` participants, the **calling thread counting as one** (so at most
//! `threads − 1` helper threads are spawned), and publish the results in
//! input order: the thread count never changes the output. Every helper is
//! joined before the function returns, so nothing outlives the call (a task
//! may release its reservation right after).
//!
//! Work is handed out one index at a time from a shared atomic counter, in
//! increasing index order. That makes the distribution dynamic (a slow item
//! does not hold back a whole chunk) and gives [`try_par_map`] its
//! guarantee: when item `i` fails, every item before `i` has already been
//! claimed and is run to completion, so the lowest failing index is always
//! found and the contiguous prefix before it is complete.
//!
//! ```
//! use lardon::parallel::par_map;
//!
//! let squares = par_map(&[1_u64, 2, 3, 4, 5], 3, |_, x| x * x);
//! assert_eq!(squares, vec![1, 4, 9, 16, 25]);
//! ```

use std::any::Any;
use std::convert::Infallible;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;

use thiserror::Error;

/// The failure of [`try_par_map`]: the error of the lowest failing index and
/// the results of every item before it.
///
/// Results computed for items after `index` are dropped, never published,
/// whether they succeeded or not.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("parallel map failed at item {index}: {error}")]
pub struct ParMapError<R, E> {
    /// The lowest index whose call returned `Err`.
    pub index: usize,
    /// That call's error.
    pub error: E,
    /// The results of items `0..index`, in input order (the contiguous
    /// prefix that may safely be published or checkpointed).
    pub prefix: Vec<R>,
}

/// Maps `f(index, &item)` over `items` on at most `threads` threads (the
/// caller's included) and returns the results in input order.
///
/// - `threads == 0` is treated as 1; no more participants than items are
///   used, and with one participant nothing is spawned: every call runs on
///   the calling thread.
/// - If the operating system refuses to create a helper thread, the map
///   goes on with the participants it has; the output is the same.
/// - **Panics:** if `f` panics, no new item is started, every helper is
///   joined, and then the panic is resumed on the calling thread with its
///   original payload (the caller's own if it panicked, otherwise that of
///   the first panicking helper in spawn order).
///
/// ```
/// use lardon::parallel::par_map;
///
/// let words = ["alpha", "beta", "gamma"];
/// let tagged = par_map(&words, 8, |i, w| format!("{i}:{w}"));
/// assert_eq!(tagged, ["0:alpha", "1:beta", "2:gamma"]);
/// ```
pub fn par_map<T, R, F>(items: &[T], threads: usize, f: F) -> Vec<R>
where
    T: Sync,
    R: Send,
    F: Fn(usize, &T) -> R + Sync,
{
    match try_par_map(items, threads, |i, item| Ok::<R, Infallible>(f(i, item))) {
        Ok(results) => results,
        Err(failure) => match failure.error {},
    }
}

/// Like [`par_map`] for a fallible `f`: all results in input order, or the
/// error of the **lowest** failing index together with the results before
/// it ([`ParMapError`]).
///
/// Once any call fails, no new item is started; items already running
/// finish (each one before the lowest failure must, to be sure it is the
/// lowest). The outcome does not depend on the thread count: the same
/// index, error and prefix are returned for any `threads`, provided `f` is
/// deterministic. Panics and `threads == 0` are handled as in [`par_map`].
///
/// ```
/// use lardon::parallel::try_par_map;
///
/// let items = [4_u32, 2, 0, 5, 0];
/// let failure = try_par_map(&items, 4, |i, &d| 100_u32.checked_div(d).ok_or(i)).unwrap_err();
/// assert_eq!(failure.index, 2);
/// assert_eq!(failure.error, 2);
/// assert_eq!(failure.prefix, vec![25, 50]);
/// ```
pub fn try_par_map<T, R, E, F>(items: &[T], threads: usize, f: F) -> Result<Vec<R>, ParMapError<R, E>>
where
    T: Sync,
    R: Send,
    E: Send,
    F: Fn(usize, &T) -> Result<R, E> + Sync,
{
    let participants = threads.max(1).min(items.len());
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let work = || run_worker(items, &next, &stop, &f);

    let (own, helpers) = thread::scope(|scope| {
        let handles: Vec<_> = (1..participants)
            .filter_map(|n| {
                thread::Builder::new().name(format!("lardon-par-{n}")).spawn_scoped(scope, work).ok()
            })
            .collect();
        let own = panic::catch_unwind(AssertUnwindSafe(&work));
        let helpers: Vec<thread::Result<_>> = handles.into_iter().map(|h| h.join()).collect();
        (own, helpers)
    });

    let mut slots: Vec<Option<Result<R, E>>> = std::iter::repeat_with(|| None).take(items.len()).collect();
    let mut first_panic: Option<Box<dyn Any + Send>> = None;
    for outcome in std::iter::once(own).chain(helpers) {
        match outcome {
            Ok(done) => {
                for (i, result) in done {
                    if let Some(slot) = slots.get_mut(i) {
                        *slot = Some(result);
                    }
                }
            }
            Err(payload) => {
                first_panic.get_or_insert(payload);
            }
        }
    }
    if let Some(payload) = first_panic {
        panic::resume_unwind(payload);
    }
    publish(slots)
}

/// One participant: claims indices in increasing order until the items run
/// out or a call failed (or panicked) somewhere.
fn run_worker<T, R, E, F>(
    items: &[T],
    next: &AtomicUsize,
    stop: &AtomicBool,
    f: &F,
) -> Vec<(usize, Result<R, E>)>
where
    F: Fn(usize, &T) -> Result<R, E>,
{
    let _stop_on_panic = StopOnPanic(stop);
    let mut done = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(item) = items.get(i) else { break };
        let result = f(i, item);
        if result.is_err() {
            stop.store(true, Ordering::Relaxed);
        }
        done.push((i, result));
    }
    done
}

/// Raises the stop flag when a worker unwinds, so the others stop claiming.
struct StopOnPanic<'a>(&'a AtomicBool);

impl Drop for StopOnPanic<'_> {
    fn drop(&mut self) {
        if thread::panicking() {
            self.0.store(true, Ordering::Relaxed);
        }
    }
}

/// Walks the slots in input order: every result up to the first error (or
/// the end) is published; the first error ends the walk. Claims are made in
/// increasing order and each claimed item is run, so no slot before the
/// first error is empty.
fn publish<R, E>(slots: Vec<Option<Result<R, E>>>) -> Result<Vec<R>, ParMapError<R, E>> {
    let mut prefix = Vec::with_capacity(slots.len());
    for (index, slot) in slots.into_iter().enumerate() {
        match slot {
            Some(Ok(result)) => prefix.push(result),
            Some(Err(error)) => return Err(ParMapError { index, error, prefix }),
            // Only after an error was seen, which ends the walk first.
            None => break,
        }
    }
    Ok(prefix)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::{Barrier, Mutex};
    use std::time::Duration;

    /// A deliberately uneven, non-trivial function of the index and item.
    fn mix(i: usize, x: &u64) -> u64 {
        let mut h = x.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ i as u64;
        for _ in 0..(x % 97) * 50 {
            h = h.rotate_left(7).wrapping_mul(31).wrapping_add(i as u64);
        }
        h
    }

    #[test]
    fn output_is_identical_for_every_thread_count() {
        let items: Vec<u64> = (0..500).map(|x| x * 7919 % 1000).collect();
        let expected: Vec<u64> = items.iter().enumerate().map(|(i, x)| mix(i, x)).collect();
        for threads in 0..=8 {
            assert_eq!(par_map(&items, threads, mix), expected, "threads = {threads}");
        }
    }

    #[test]
    fn never_more_concurrent_calls_than_threads() {
        for threads in 1..=6 {
            let active = AtomicUsize::new(0);
            let max = AtomicUsize::new(0);
            let items: Vec<u32> = (0..200).collect();
            par_map(&items, threads, |_, _| {
                let now = active.fetch_add(1, Ordering::SeqCst) + 1;
                max.fetch_max(now, Ordering::SeqCst);
                thread::sleep(Duration::from_micros(200));
                active.fetch_sub(1, Ordering::SeqCst);
            });
            let max = max.load(Ordering::SeqCst);
            assert!((1..=threads).contains(&max), "threads = {threads}, max concurrent = {max}");
        }
    }

    #[test]
    fn all_threads_take_part_the_caller_included() {
        // The first `threads` items each wait on a barrier of `threads`: it
        // only opens if that many calls run at once, on distinct threads.
        let threads = 4;
        let barrier = Barrier::new(threads);
        let ids = Mutex::new(HashSet::new());
        let items: Vec<usize> = (0..64).collect();
        par_map(&items, threads, |i, _| {
            ids.lock().unwrap().insert(thread::current().id());
            if i < threads {
                barrier.wait();
            }
        });
        let ids = ids.into_inner().unwrap();
        assert_eq!(ids.len(), threads);
        assert!(ids.contains(&thread::current().id()));
    }

    #[test]
    fn one_thread_runs_everything_on_the_caller() {
        let me = thread::current().id();
        for threads in [0, 1] {
            let ran_on: Vec<_> = par_map(&[1, 2, 3, 4], threads, |_, _| thread::current().id());
            assert!(ran_on.iter().all(|id| *id == me), "threads = {threads}");
        }
    }

    #[test]
    fn no_more_participants_than_items() {
        let me = thread::current().id();
        let ran_on = par_map(&["only"], 8, |_, _| thread::current().id());
        assert_eq!(ran_on, vec![me]);
    }

    #[test]
    fn empty_input_gives_empty_output() {
        let items: [u8; 0] = [];
        assert!(par_map(&items, 4, |_, x| *x).is_empty());
        assert_eq!(try_par_map(&items, 4, |_, x| Ok::<u8, ()>(*x)), Ok(vec![]));
    }

    #[test]
    fn try_variant_returns_everything_on_success() {
        let items: Vec<u32> = (0..100).collect();
        let out = try_par_map(&items, 5, |i, x| Ok::<_, String>(x + i as u32));
        assert_eq!(out, Ok((0..100).map(|x| 2 * x).collect()));
    }

    #[test]
    fn try_variant_reports_the_lowest_failing_index_and_its_prefix() {
        let items: Vec<u64> = (0..300).collect();
        for threads in 1..=8 {
            for _ in 0..20 {
                let failure = try_par_map(&items, threads, |i, x| {
                    // Later failures are cheap, the lowest one is slow: a
                    // higher index usually fails first in time.
                    match i {
                        37 => {
                            thread::sleep(Duration::from_micros(300));
                            Err(format!("bad {i}"))
                        }
                        150 | 151 | 299 => Err(format!("bad {i}")),
                        _ => Ok(mix(i, x)),
                    }
                })
                .unwrap_err();
                assert_eq!(failure.index, 37);
                assert_eq!(failure.error, "bad 37");
                let expected: Vec<u64> = items[..37].iter().enumerate().map(|(i, x)| mix(i, x)).collect();
                assert_eq!(failure.prefix, expected);
            }
        }
    }

    #[test]
    fn failure_stops_claiming_new_items() {
        let calls = AtomicUsize::new(0);
        let items: Vec<u32> = (0..10_000).collect();
        let failure = try_par_map(&items, 1, |i, _| {
            calls.fetch_add(1, Ordering::SeqCst);
            if i == 10 { Err(()) } else { Ok(()) }
        })
        .unwrap_err();
        assert_eq!(failure.index, 10);
        assert_eq!(calls.load(Ordering::SeqCst), 11);
    }

    /// A gate the caller's own item opens when it ends (or unwinds), and
    /// the helpers' items wait on: a helper can only finish *after* the
    /// caller's share of the work is done, i.e. after the moment an
    /// implementation that did not join would return.
    #[derive(Default)]
    struct CallerDone {
        done: Mutex<bool>,
        cv: std::sync::Condvar,
    }

    impl CallerDone {
        fn open(&self) {
            *self.done.lock().unwrap() = true;
            self.cv.notify_all();
        }
        fn wait(&self) {
            let mut done = self.done.lock().unwrap();
            while !*done {
                done = self.cv.wait(done).unwrap();
            }
        }
    }

    /// Opens the gate when dropped, also while unwinding.
    struct OpenOnDrop<'a>(&'a CallerDone);
    impl Drop for OpenOnDrop<'_> {
        fn drop(&mut self) {
            self.0.open();
        }
    }

    /// Counts a helper's item as finished when dropped (its last act).
    struct Finished<'a>(&'a AtomicUsize);
    impl Drop for Finished<'_> {
        fn drop(&mut self) {
            // A little more work after the gate, so an unjoined helper is
            // still busy when the call returns.
            for _ in 0..1000 {
                thread::yield_now();
            }
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// One item per participant (a barrier keeps each thread to one): the
    /// caller's item ends first, optionally by panicking; each helper's
    /// item waits for that, then finishes. Returns the helpers' finished
    /// count read right when `par_map` returned (or unwound), and the
    /// payload if it panicked.
    fn run_with_late_helpers(threads: usize, caller_panics: bool) -> (usize, Option<String>) {
        let caller = thread::current().id();
        let barrier = Barrier::new(threads);
        let gate = CallerDone::default();
        let finished = AtomicUsize::new(0);
        let items: Vec<usize> = (0..threads).collect();
        let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
            par_map(&items, threads, |_, _| {
                barrier.wait();
                if thread::current().id() == caller {
                    let _open = OpenOnDrop(&gate);
                    assert!(!caller_panics, "boom on the caller");
                } else {
                    let _finished = Finished(&finished);
                    gate.wait();
                }
            })
        }));
        let seen = finished.load(Ordering::SeqCst);
        let payload = outcome.err().map(|p| {
            p.downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_default()
        });
        (seen, payload)
    }

    /// Every helper is joined before `par_map` returns: each helper's
    /// finish is counted the moment the call returns, though no helper can
    /// finish before the caller's own share is done.
    ///
    /// To see it fail, let the helpers outlive the call: in
    /// `try_par_map`, replace `thread::scope` by detached
    /// `std::thread::spawn`s of a boxed job (`Box<dyn FnOnce() + Send>`
    /// whose lifetime is erased with `#[allow(unsafe_code)]` and
    /// `mem::transmute`) that send their results on a channel, and take
    /// only what `rx.try_iter()` has when the caller's share is done: the
    /// count is then read while the helpers still run (0 of 1 with 2
    /// threads).
    #[test]
    fn helpers_are_joined_before_the_call_returns() {
        for threads in [2, 4, 8] {
            let (seen, payload) = run_with_late_helpers(threads, false);
            assert_eq!(payload, None);
            assert_eq!(seen, threads - 1, "threads = {threads}: helpers finished when the call returned");
        }
    }

    /// A panic on the caller's item propagates with its payload, and only
    /// after every helper was joined (same proof as above).
    #[test]
    fn a_panic_propagates_with_its_payload_after_joining() {
        for threads in [2, 4, 8] {
            let (seen, payload) = run_with_late_helpers(threads, true);
            assert_eq!(payload.as_deref(), Some("boom on the caller"), "threads = {threads}");
            assert_eq!(seen, threads - 1, "threads = {threads}: helpers finished before the panic resumed");
        }
        // A panicking helper's payload is resumed on the caller too.
        let items: Vec<u32> = (0..64).collect();
        let caught = panic::catch_unwind(AssertUnwindSafe(|| {
            par_map(&items, 4, |i, _| {
                if i == 5 {
                    panic!("boom at 5");
                }
            })
        }));
        assert_eq!(caught.unwrap_err().downcast_ref::<&str>(), Some(&"boom at 5"));
    }

    #[test]
    fn error_display_names_the_index() {
        let failure: ParMapError<u8, &str> = ParMapError { index: 3, error: "nope", prefix: vec![1, 2, 3] };
        assert_eq!(failure.to_string(), "parallel map failed at item 3: nope");
    }
}
