//! The daemon's native-mode engine: tasks submitted with `engine = slurm`
//! wait here (PENDING) until fewer than `slurm_max_jobs` jobs are out,
//! then each becomes one `sbatch` job (the task is RUNNING from then on,
//! whether Slurm has started it or not). One thread does everything: it
//! submits, looks up every outstanding job with one `squeue` per
//! `slurm_poll_ms` — only while jobs are out; with none it sleeps until a
//! task arrives — and judges each ended job ([`super::outcome`]): the class
//! learns from `lardon exec`'s report (Governor and store, so learning
//! survives restarts), the task ends, or after OUT_OF_MEMORY it is
//! submitted once more at the learned size.
//!
//! Bypassing the local queue is the point: the local Governor's admission
//! sizes this host, and a Slurm task's memory is Slurm's to place. What
//! the local Governor still owns is the learning ([`lardon::Governor::learned`]
//! sizes every `--mem`).

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use lardon::format_cpus;

use super::exec::ExecReport;
use super::outcome::{Next, Seen, Submitted, judge};
use super::sbatch::{JobRequest, cpus_request, memory_request};
use crate::handle::{RunHandle, SlurmJob};
use crate::ids::format_id;
use crate::kernel::{Shared, Write};
use crate::spec::{TaskId, TaskSpec, TaskState};
use crate::store::Outcome;

/// `scancel JOB` ([`lardon_slurm::scancel`]); failures are logged (the
/// job may already be gone).
pub(crate) fn scancel(job: u64) {
    if let Err(e) = lardon_slurm::scancel(job) {
        tracing::warn!("scancel {job}: {e}");
    }
}

/// A task waiting for room under `slurm_max_jobs`.
#[derive(Debug)]
struct Waiting {
    id: TaskId,
    spec: Arc<TaskSpec>,
    /// Its one resubmission after OUT_OF_MEMORY.
    resubmit: bool,
}

/// A job out to Slurm.
#[derive(Debug)]
struct Job {
    id: TaskId,
    spec: Arc<TaskSpec>,
    submitted: Submitted,
    report: PathBuf,
}

#[derive(Debug, Default)]
struct State {
    waiting: VecDeque<Waiting>,
    jobs: BTreeMap<u64, Job>,
    /// The task being submitted right now (its `sbatch` runs unlocked),
    /// and whether it was cancelled meanwhile: its job is then cancelled
    /// as soon as it has an id.
    launching: Option<(TaskId, bool)>,
    stopping: bool,
    /// Submissions so far: numbers report files uniquely.
    submissions: u64,
}

#[derive(Debug)]
struct Inner {
    shared: Arc<Shared>,
    state: Mutex<State>,
    wake: Condvar,
    /// Reports of `lardon exec`: `<state dir>/slurm/`.
    dir: PathBuf,
    /// The `lardon` binary the jobs run (this daemon's own).
    exe: PathBuf,
}

/// See the module docs.
#[derive(Debug)]
pub(crate) struct SlurmEngine {
    inner: Arc<Inner>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SlurmEngine {
    /// Starts the engine's thread (idle until a task arrives).
    ///
    /// # Errors
    /// The I/O error when the reports dir or the thread cannot be made.
    pub(crate) fn start(shared: Arc<Shared>) -> std::io::Result<SlurmEngine> {
        let dir = shared.info.state_dir.join("slurm");
        std::fs::create_dir_all(&dir)?;
        let exe = std::env::current_exe()?;
        let inner = Arc::new(Inner { shared, state: Mutex::default(), wake: Condvar::new(), dir, exe });
        let worker = Arc::clone(&inner);
        let thread = std::thread::Builder::new().name("lardon-slurm".into()).spawn(move || worker.run())?;
        Ok(SlurmEngine { inner, thread: Mutex::new(Some(thread)) })
    }

    /// Queues a stored, PENDING task for submission.
    pub(crate) fn submit(&self, id: TaskId, spec: &TaskSpec) {
        self.inner.shared.placements.to_slurm(id);
        lock(&self.inner.state).waiting.push_back(Waiting {
            id,
            spec: Arc::new(spec.clone()),
            resubmit: false,
        });
        self.inner.wake.notify_all();
    }

    /// Takes back a job a previous daemon submitted for task `id` (its run
    /// handle survived the restart, and recovery put the task back to
    /// PENDING): the task is RUNNING again and the job is tracked as if
    /// this daemon had submitted it, so a job that ran on, or even ended,
    /// while no daemon watched is judged once and never run twice.
    /// `resubmitted`: the task already used its one resubmission. A handle
    /// this daemon cannot read has its job cancelled and the task submitted
    /// afresh.
    pub(crate) fn adopt(&self, id: TaskId, spec: &TaskSpec, handle: SlurmJob, resubmitted: bool) {
        let SlurmJob { job, report: Some(report) } = &handle else {
            scancel(handle.job);
            self.submit(id, spec);
            return;
        };
        let (job, report) = (*job, report.clone());
        self.inner.shared.placements.to_slurm(id);
        let launched = Write::Launched { id, handle: RunHandle::Slurm(handle), new_attempt: true };
        if let Err(e) = self.inner.shared.record(launched) {
            tracing::warn!("task {id}: slurm job {job} adopted but not recorded: {e}");
        }
        tracing::info!("task {id}: tracking slurm job {job} again after a restart");
        let submitted = Submitted { job, memory: None, oom_retry: spec.oom_retry, resubmitted };
        let adopted =
            Job { id, spec: Arc::new(spec.clone()), submitted, report: self.inner.dir.join(report) };
        lock(&self.inner.state).jobs.insert(job, adopted);
        self.inner.wake.notify_all();
    }

    /// Cancels a task of this engine: a waiting one is dropped, a job is
    /// `scancel`ed; either way the task ends CANCELLED now. `None` when the
    /// task is not this engine's.
    pub(crate) fn cancel(&self, id: TaskId) -> Option<TaskState> {
        let job = {
            let mut st = lock(&self.inner.state);
            let before = st.waiting.len();
            st.waiting.retain(|w| w.id != id);
            let job = st.jobs.iter().find(|(_, j)| j.id == id).map(|(k, _)| *k);
            if let Some(k) = job {
                st.jobs.remove(&k);
            } else if let Some((launching, cancelled)) = &mut st.launching
                && *launching == id
            {
                *cancelled = true;
            } else if st.waiting.len() == before {
                return None;
            }
            job
        };
        if let Some(job) = job {
            scancel(job);
        }
        let reason = job.map(|j| format!("cancelled by user (scancel {j})"));
        self.inner.finish(id, &Outcome { state: TaskState::Cancelled, exit_code: None, reason });
        Some(TaskState::Cancelled)
    }

    /// Stops the thread. Jobs out to Slurm keep running and their tasks
    /// stay RUNNING with their [`RunHandle::Slurm`] handle: the next start cancels
    /// those jobs and submits the tasks again (as interrupted runs).
    pub(crate) fn stop(&self) {
        lock(&self.inner.state).stopping = true;
        self.inner.wake.notify_all();
        if let Some(t) = lock(&self.thread).take() {
            let _ = t.join();
        }
    }
}

impl Inner {
    fn run(&self) {
        let mut next_poll = Instant::now();
        let mut st = lock(&self.state);
        loop {
            if st.stopping {
                return;
            }
            let settings = self.shared.settings().slurm;
            if st.jobs.len() < settings.max_jobs as usize
                && let Some(w) = st.waiting.pop_front()
            {
                st.submissions += 1;
                st.launching = Some((w.id, false));
                let n = st.submissions;
                drop(st);
                let job = self.launch(&w, n);
                st = lock(&self.state);
                let cancelled = st.launching.take().is_some_and(|(_, c)| c);
                match job {
                    // Cancelled while sbatch ran: the task already ended.
                    Some((job_id, job)) if cancelled => {
                        drop(st);
                        scancel(job_id);
                        let _ = std::fs::remove_file(&job.report);
                        st = lock(&self.state);
                    }
                    Some((job_id, job)) => {
                        st.jobs.insert(job_id, job);
                    }
                    None => {}
                }
                continue;
            }
            if st.jobs.is_empty() {
                // Nothing out: no lookups until a task arrives.
                st = self.wake.wait(st).unwrap_or_else(PoisonError::into_inner);
                next_poll = Instant::now() + Duration::from_millis(u64::from(settings.poll_ms));
                continue;
            }
            let now = Instant::now();
            if now < next_poll {
                st = self.wake.wait_timeout(st, next_poll - now).unwrap_or_else(PoisonError::into_inner).0;
                continue;
            }
            next_poll = now + Duration::from_millis(u64::from(settings.poll_ms));
            let ids: Vec<u64> = st.jobs.keys().copied().collect();
            drop(st);
            let seen = lookup(&ids);
            st = lock(&self.state);
            let Some(seen) = seen else { continue };
            for job_id in ids {
                let status = seen.iter().find(|s| s.id == job_id);
                let ended = match status {
                    Some(s) if !s.state.is_terminal() => continue,
                    Some(s) => Seen::Ended(s.state.clone()),
                    None => Seen::Vanished,
                };
                // Cancelled meanwhile: already ended by `cancel`.
                let Some(job) = st.jobs.remove(&job_id) else { continue };
                drop(st);
                if let Some(again) = self.ended(job, &ended) {
                    lock(&self.state).waiting.push_front(again);
                }
                st = lock(&self.state);
            }
        }
    }

    /// Submits one job; on failure the task ends FAILED with sbatch's
    /// words.
    fn launch(&self, w: &Waiting, n: u64) -> Option<(u64, Job)> {
        let spec = &w.spec;
        let settings = self.shared.settings().slurm;
        let estimate = spec.to_estimate();
        let learned = self.shared.governor.learned(&estimate).and_then(|l| l.learned_fixed).map(|f| f.bytes);
        let memory =
            memory_request(spec.estimate.memory_fixed, learned, settings.mem_slack_percent, settings.max_mem);
        // Unique across daemons: a job of a previous daemon may still write
        // its report.
        let report_name = format!("t{}-{}-s{n}.json", w.id.0, self.shared.info.instance);
        let report = self.dir.join(&report_name);
        let _ = std::fs::remove_file(&report);
        let task = format_id(w.id);
        let cpus = cpus_request(spec.estimate.cpu_millis);
        let mut env: Vec<(String, String)> = vec![
            ("LARDON_TASK_ID".into(), task.clone()),
            ("LARDON_CPUS".into(), format_cpus(cpus * lardon::MILLIS_PER_CPU)),
            ("LARDON_MEM_BYTES".into(), memory.unwrap_or(0).to_string()),
        ];
        for var in ["OMP_NUM_THREADS", "MKL_NUM_THREADS", "RAYON_NUM_THREADS"] {
            if !spec.env.iter().any(|e| e.key == var) {
                env.push((var.into(), cpus.to_string()));
            }
        }
        env.extend(spec.env.iter().map(|e| (e.key.clone(), e.value.clone())));
        let req = JobRequest::new(&task, spec, memory, &self.exe, &report, &self.shared.log_path(w.id), &env);
        let job_id = match sbatch(&req) {
            Ok(j) => j,
            Err(e) => {
                tracing::warn!("task {}: {e}", w.id);
                self.finish(w.id, &Outcome { state: TaskState::Failed, exit_code: None, reason: Some(e) });
                return None;
            }
        };
        let mem = memory.map_or_else(|| "the site's default".to_owned(), |m| format!("{}M", m >> 20));
        tracing::info!("task {}: slurm job {job_id} (--mem {mem}, {cpus} CPUs)", w.id);
        let handle = RunHandle::Slurm(SlurmJob { job: job_id, report: Some(report_name) });
        // A resubmission after OUT_OF_MEMORY is the same attempt.
        let launched = Write::Launched { id: w.id, handle, new_attempt: !w.resubmit };
        if let Err(e) = self.shared.record(launched) {
            tracing::warn!("task {}: slurm job {job_id} not recorded: {e}", w.id);
        }
        let submitted = Submitted { job: job_id, memory, oom_retry: spec.oom_retry, resubmitted: w.resubmit };
        Some((job_id, Job { id: w.id, spec: Arc::clone(spec), submitted, report }))
    }

    /// Learns from an ended job and ends its task, or returns it to be
    /// submitted again.
    fn ended(&self, job: Job, seen: &Seen) -> Option<Waiting> {
        let report = ExecReport::read(&job.report);
        let verdict = judge(job.submitted, seen, report.as_ref());
        let class = job.spec.learning_class();
        if let Some(record) = verdict.record {
            self.shared.governor.record_run(&class, record);
            let class_name = class.as_str().to_owned();
            // Its usage too (`lardon report`): the job's `--mem` was its
            // grant; under the site's default (unknown) no waste is claimed.
            let peak = match record.outcome {
                lardon::RunOutcome::Completed { peak } => peak,
                lardon::RunOutcome::KilledAtLimit { .. } => None,
            };
            let (id, reserved) = (job.id, job.submitted.memory.or(peak).unwrap_or(0));
            let persist = move |s: &mut crate::store::Store| {
                s.record_run(&class_name, &record)?;
                s.add_run_usage(id, &record, reserved)
            };
            if let Err(e) = self.shared.writer.call(persist) {
                tracing::warn!("task {}: run sample not persisted: {e}", job.id);
            }
        }
        let _ = std::fs::remove_file(&job.report);
        match verdict.next {
            Next::Finish(outcome) => {
                self.finish(job.id, &outcome);
                None
            }
            Next::Resubmit(note) => {
                tracing::warn!("task {}: {note}", job.id);
                if let Err(e) = self.shared.record(Write::MemoryRetry(job.id, note.clone())) {
                    tracing::warn!("task {}: retry not recorded: {e}", job.id);
                }
                Some(Waiting { id: job.id, spec: job.spec, resubmit: true })
            }
        }
    }

    fn finish(&self, id: TaskId, outcome: &Outcome) {
        self.shared.placements.off_slurm(id);
        if let Err(e) = self.shared.record(Write::Finished(id, outcome.clone())) {
            tracing::error!("task {id}: cannot record its end: {e}");
        }
    }
}

/// Runs `sbatch` ([`lardon_slurm::sbatch`]) with the script on its
/// standard input; the job id, or one line saying why not.
fn sbatch(req: &JobRequest) -> Result<u64, String> {
    use lardon_slurm::{SlurmError, tool::CommandError};
    lardon_slurm::sbatch(&req.args(), &req.script).map_err(|e| match e {
        SlurmError::Command(CommandError::Failed { stderr, .. }) => {
            let line = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no message");
            format!("sbatch refused the job: {}", line.trim())
        }
        SlurmError::Command(spawn @ CommandError::Spawn { .. }) => {
            format!("{spawn} (is Slurm installed and SLURM_CONF set?)")
        }
        other => other.to_string(),
    })
}

/// One `squeue` for every outstanding job ([`lardon_slurm::squeue()`]);
/// `None` when Slurm could not answer (tried again at the next refresh).
fn lookup(jobs: &[u64]) -> Option<Vec<lardon_slurm::JobStatus>> {
    lardon_slurm::squeue(jobs).inspect_err(|e| tracing::warn!("{e}")).ok()
}
