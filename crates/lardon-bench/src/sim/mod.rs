//! A deterministic packing simulator (docs/DESIGN.md §12 "Packing").
//!
//! Virtual clock, no sleeping, seeded workloads ([`workload`]): the same
//! seed gives the same table on every run. Strategies:
//!
//! - **Lardon** — the real [`lardon::Governor`] with the queue's order
//!   rules re-implemented in virtual time ([`governed`] says exactly what
//!   is real and what is not);
//! - **strict FIFO** — the same Governor, but a WAITing head blocks
//!   everything behind it (no bypass);
//! - **fixed -P N** — `xargs -P N`: N at once, memory ignored ([`fixed`]).
//!
//! Metrics ([`Outcome`]): makespan ÷ lower bound ([`bounds`]), peak
//! reserved ÷ budget, peak real use ÷ budget, time over budget, OOM
//! events. The budget is `RAM − memory reserve` of the default policy.

pub mod bounds;
pub mod fixed;
pub mod governed;
pub mod oracle;
pub mod report;
pub mod rng;
pub mod tracker;
pub mod workload;

use std::fmt;

use governed::Options;
use workload::{SimTask, Workload};

const GIB: u64 = 1 << 30;

/// The simulated host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Host {
    /// Physical RAM, bytes.
    pub total_memory: u64,
    /// Logical CPUs (tasks ask for a tenth of one each, so memory binds).
    pub cpus: u32,
}

impl Default for Host {
    /// 64 GiB, 64 CPUs: a budget of 61 GiB under the default policy.
    fn default() -> Self {
        Host { total_memory: 64 * GIB, cpus: 64 }
    }
}

/// A scheduling strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// The real Governor with WAIT bypass.
    Lardon,
    /// The real Governor, no bypass.
    StrictFifo,
    /// Lardon without recording peaks (ablation: what learning does).
    LardonNoLearning,
    /// Lardon under hard enforcement (the daemon's default): a sequence
    /// over its grant plus slack is killed and re-admitted.
    LardonHard,
    /// [`Strategy::LardonHard`] without recording peaks (kills are still
    /// recorded, or a killed task would never finish).
    LardonHardNoLearning,
    /// N at once, memory ignored.
    Fixed(usize),
    /// Perfect knowledge of real sizes, items and times ([`oracle`]).
    Oracle,
}

/// A simulation that could not complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimError(pub String);

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "simulation failed: {}", self.0)
    }
}

impl std::error::Error for SimError {}

/// What one strategy did with one workload.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Workload name.
    pub workload: String,
    /// Strategy name.
    pub strategy: String,
    /// When the last task ended, ms.
    pub makespan_ms: u64,
    /// [`bounds::lower_bound`], ms.
    pub lower_bound_ms: f64,
    /// `RAM − reserve`, bytes.
    pub budget: u64,
    /// Largest total reserved (governed strategies only).
    pub peak_reserved: Option<u64>,
    /// Largest real use.
    pub peak_usage: u64,
    /// Virtual ms with real use above the budget.
    pub over_budget_ms: u64,
    /// Virtual ms with real use above physical RAM.
    pub over_physical_ms: u64,
    /// Sequence starts that took real use above physical RAM.
    pub oom_events: u64,
    /// Sequences run.
    pub sequences: u64,
    /// Tasks the Governor rejected.
    pub rejected: usize,
    /// Sequences killed at their memory limit (hard enforcement; `None`
    /// for strategies without enforcement).
    pub kills: Option<u64>,
    /// Virtual ms the Governor's pressure state was not GREEN (YELLOW
    /// halves batch targets and re-arms slow start; RED admits nothing).
    pub not_green_ms: Option<u64>,
}

impl Outcome {
    /// Makespan ÷ lower bound (∞ when the bound is 0 and work ran).
    pub fn makespan_ratio(&self) -> f64 {
        self.makespan_ms as f64 / self.lower_bound_ms
    }

    /// Peak reserved ÷ budget, for governed strategies.
    pub fn reserved_ratio(&self) -> Option<f64> {
        self.peak_reserved.map(|r| r as f64 / self.budget as f64)
    }

    /// Peak real use ÷ budget.
    pub fn usage_ratio(&self) -> f64 {
        self.peak_usage as f64 / self.budget as f64
    }
}

/// Runs one strategy on one workload.
///
/// # Errors
/// [`SimError`] from the governed strategies.
pub fn simulate(host: &Host, workload: &Workload, strategy: Strategy) -> Result<Outcome, SimError> {
    let tasks: &[SimTask] = &workload.tasks;
    let mut outcome = match strategy {
        Strategy::Lardon => governed::run(host, tasks, Options::lardon(true, true, false))?,
        Strategy::StrictFifo => governed::run(host, tasks, Options::lardon(false, true, false))?,
        Strategy::LardonNoLearning => governed::run(host, tasks, Options::lardon(true, false, false))?,
        Strategy::LardonHard => governed::run(host, tasks, Options::lardon(true, true, true))?,
        Strategy::LardonHardNoLearning => governed::run(host, tasks, Options::lardon(true, false, true))?,
        Strategy::Fixed(n) => fixed::run(host, tasks, n),
        Strategy::Oracle => oracle::run(host, tasks),
    };
    outcome.workload = workload.name.clone();
    outcome.lower_bound_ms = bounds::lower_bound(tasks, outcome.budget);
    Ok(outcome)
}

/// The fixed N with the least makespan among those whose real use never
/// went above the budget (`xargs -P N` at the best N a user could safely
/// have picked, knowing the workload), and its outcome. N from 1 to 64.
pub fn best_safe_fixed(host: &Host, workload: &Workload) -> (usize, Outcome) {
    let mut best: Option<(usize, Outcome)> = None;
    for n in 1..=64 {
        let mut o = fixed::run(host, &workload.tasks, n);
        if o.over_budget_ms > 0 {
            continue;
        }
        o.workload = workload.name.clone();
        o.lower_bound_ms = bounds::lower_bound(&workload.tasks, o.budget);
        o.strategy = format!("best safe fixed -P {n}");
        if best.as_ref().is_none_or(|(_, b)| o.makespan_ms < b.makespan_ms) {
            best = Some((n, o));
        }
    }
    best.unwrap_or_else(|| {
        let mut o = fixed::run(host, &workload.tasks, 1);
        o.workload = workload.name.clone();
        o.lower_bound_ms = bounds::lower_bound(&workload.tasks, o.budget);
        o.strategy = "fixed -P 1 (no N is safe)".into();
        (1, o)
    })
}

/// The strategies of the standard table.
pub fn standard_strategies() -> Vec<Strategy> {
    vec![
        Strategy::Lardon,
        Strategy::StrictFifo,
        Strategy::LardonNoLearning,
        Strategy::LardonHard,
        Strategy::LardonHardNoLearning,
        Strategy::Fixed(4),
        Strategy::Fixed(8),
        Strategy::Fixed(16),
        Strategy::Oracle,
    ]
}

#[cfg(test)]
mod tests;
