//! [`plan`]: what to ask the engine for now, and why not more.

use std::time::{Duration, Instant};

use super::{AllocState, Allocation, Demand, Health, Limits, Shape, format_minutes};
use lardon_cluster_core::Capability;

/// Something the broker should do with its provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Check that `shape` would be accepted, before the first real
    /// submission.
    DryRun {
        /// The shape's name.
        shape: String,
    },
    /// Ask for `count` allocations of `shape`, for work of `capability`.
    Submit {
        /// The shape's name.
        shape: String,
        /// How many.
        count: u32,
        /// The demand they serve.
        capability: Capability,
    },
}

/// Why the Provisioner is not asking for (more) capacity — each one a
/// line of `lardon cluster explain`.
#[derive(Debug, Clone, PartialEq)]
pub enum Hold {
    /// A person must resume the provider.
    Paused(String),
    /// After failed submissions, the next one waits.
    BackingOff {
        /// How long is left.
        remaining: Duration,
    },
    /// No shape offers this capability.
    NoShapeOffers(Capability),
    /// No shape offering it is big enough for one task.
    NoShapeFits {
        /// The capability.
        capability: Capability,
        /// One task's (learned) memory, bytes.
        memory: u64,
        /// One task's CPUs, thousandths.
        cpu_millis: u32,
        /// The most memory of a node of any shape offering it, bytes.
        largest_memory: u64,
        /// The most CPUs of a node of any shape offering it, thousandths.
        largest_cpu_millis: u32,
    },
    /// A task would outlive every shape that fits it.
    WalltimeTooShort {
        /// The capability.
        capability: Capability,
        /// One task's learned duration.
        learned: Duration,
        /// The longest walltime among the shapes that fit it.
        walltime: Duration,
    },
    /// The allocations already asked for cover the demand.
    Covered(Capability),
    /// The waiting work would fill too little of one more allocation.
    Underused {
        /// The capability.
        capability: Capability,
        /// The share of the allocation's slots it would fill (0–1).
        utilization: f64,
        /// The limit.
        min_utilization: f64,
    },
    /// `max_allocations` allocations are alive.
    MaxAllocations(u32),
    /// `backlog` allocations already wait in the engine's queue.
    BacklogFull(u32),
}

impl std::fmt::Display for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Hold::Paused(why) => write!(f, "paused: {why}"),
            Hold::BackingOff { remaining } => {
                write!(f, "backing off after failed submissions: next try in {}", format_minutes(*remaining))
            }
            Hold::NoShapeOffers(c) => write!(f, "{c}: no allocation shape offers it"),
            Hold::NoShapeFits { capability, memory, cpu_millis, largest_memory, largest_cpu_millis } => {
                write!(
                    f,
                    "{capability}: no shape fits {} and {} CPUs (largest: {} and {} CPUs)",
                    crate::provision::format_bytes(*memory),
                    f64::from(*cpu_millis) / 1000.0,
                    crate::provision::format_bytes(*largest_memory),
                    f64::from(*largest_cpu_millis) / 1000.0
                )
            }
            Hold::WalltimeTooShort { capability, learned, walltime } => write!(
                f,
                "{capability}: learned duration {} exceeds walltime {}",
                format_minutes(*learned),
                format_minutes(*walltime)
            ),
            Hold::Covered(c) => write!(f, "{c}: the allocations asked for cover the queued work"),
            Hold::Underused { capability, utilization, min_utilization } => write!(
                f,
                "{capability}: the queued work would use {:.0} % of another allocation; min_utilization is {:.0} %",
                utilization * 100.0,
                min_utilization * 100.0
            ),
            Hold::MaxAllocations(n) => write!(f, "{n} allocations alive: max_allocations reached"),
            Hold::BacklogFull(n) => write!(f, "{n} allocations already queued: backlog reached"),
        }
    }
}

/// [`plan`]'s answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// What to do, in order.
    pub actions: Vec<Action>,
    /// Why not more, one per demand or provider-wide.
    pub holds: Vec<Hold>,
}

/// The smallest shape that offers `d`'s capability, fits one task and
/// outlives it; otherwise why none does.
fn choose<'s>(d: &Demand, shapes: &'s [Shape]) -> Result<&'s Shape, Hold> {
    let offering: Vec<&Shape> = shapes.iter().filter(|s| s.capabilities.contains(&d.capability)).collect();
    if offering.is_empty() {
        return Err(Hold::NoShapeOffers(d.capability.clone()));
    }
    let largest_memory = offering.iter().map(|s| s.memory).max().unwrap_or(0);
    let largest_cpu_millis = offering.iter().map(|s| s.cpu_millis).max().unwrap_or(0);
    let fitting: Vec<&Shape> = offering.into_iter().filter(|s| s.slots(d) >= 1).collect();
    if fitting.is_empty() {
        return Err(Hold::NoShapeFits {
            capability: d.capability.clone(),
            memory: d.memory,
            cpu_millis: d.cpu_millis,
            largest_memory,
            largest_cpu_millis,
        });
    }
    let longest = fitting.iter().map(|s| s.walltime).max().unwrap_or_default();
    fitting
        .into_iter()
        .filter(|s| s.walltime >= d.duration)
        .min_by_key(|s| (s.memory, s.cpu_millis, s.walltime))
        .ok_or_else(|| Hold::WalltimeTooShort {
            capability: d.capability.clone(),
            learned: d.duration,
            walltime: longest,
        })
}

/// Why no allocation of `shapes` could ever run one task of `task` (its
/// `tasks` count is ignored): some shape offers its capability, but none
/// is big enough for its memory and CPUs ([`Hold::NoShapeFits`]) or none
/// that is outlives its duration ([`Hold::WalltimeTooShort`]). `None` when
/// a shape can run it, or when no shape offers the capability at all (not
/// provisionable: the router's "no executor" already answers that). The
/// same words as [`plan`]'s, since it is the same decision for one task.
#[must_use]
pub fn never_fits(task: &Demand, shapes: &[Shape]) -> Option<Hold> {
    match choose(task, shapes) {
        Err(hold @ (Hold::NoShapeFits { .. } | Hold::WalltimeTooShort { .. })) => Some(hold),
        Ok(_) | Err(_) => None,
    }
}

/// Decides what to ask `shapes`' provider for at `now`.
///
/// Rules, in order: nothing while the provider is paused or backing off;
/// per demand, the smallest shape that offers its capability, fits one
/// task (its learned memory and CPUs) and outlives it (its learned
/// duration) — else a [`Hold`] saying which of those failed; the work the
/// alive allocations of fitting shapes can do is subtracted first; enough
/// allocations for the rest, less a last one that `min_utilization` finds
/// too empty, capped by `max_allocations` (alive) and `backlog` (queued);
/// before the first submission of a shape on a provider that has not
/// passed its dry run, a [`Action::DryRun`] instead.
#[must_use]
pub fn plan(
    demand: &[Demand],
    shapes: &[Shape],
    allocations: &[Allocation],
    limits: Limits,
    health: &Health,
    now: Instant,
) -> Plan {
    let mut out = Plan::default();
    if let Some(why) = health.paused() {
        out.holds.push(Hold::Paused(why.to_owned()));
        return out;
    }
    if let Some(until) = health.backing_off(now) {
        out.holds.push(Hold::BackingOff { remaining: until - now });
        return out;
    }
    let alive_list: Vec<&Allocation> = allocations.iter().filter(|a| a.state != AllocState::Ended).collect();
    let mut alive = u32::try_from(alive_list.len()).unwrap_or(u32::MAX);
    let mut queued = u32::try_from(alive_list.iter().filter(|a| a.state == AllocState::Queued).count())
        .unwrap_or(u32::MAX);
    for d in demand.iter().filter(|d| d.tasks > 0) {
        let shape = match choose(d, shapes) {
            Ok(s) => s,
            Err(hold) => {
                out.holds.push(hold);
                continue;
            }
        };
        let covered: u64 = alive_list
            .iter()
            .filter_map(|a| shapes.iter().find(|s| s.name == a.shape))
            .filter(|s| s.capabilities.contains(&d.capability) && s.walltime >= d.duration)
            .map(|s| s.work(d))
            .fold(0, u64::saturating_add);
        let uncovered = d.tasks.saturating_sub(covered);
        if uncovered == 0 {
            out.holds.push(Hold::Covered(d.capability.clone()));
            continue;
        }
        let (per, slots) = (shape.work(d).max(1), shape.slots(d).max(1));
        let mut count = uncovered.div_ceil(per);
        let last = uncovered - (count - 1) * per;
        let utilization = last.min(slots) as f64 / slots as f64;
        if utilization < limits.min_utilization {
            count -= 1;
            out.holds.push(Hold::Underused {
                capability: d.capability.clone(),
                utilization,
                min_utilization: limits.min_utilization,
            });
        }
        let count = u32::try_from(count).unwrap_or(u32::MAX);
        let room_alive = limits.max_allocations.saturating_sub(alive);
        let room_queue = limits.backlog.saturating_sub(queued);
        let n = count.min(room_alive).min(room_queue);
        if n < count {
            out.holds.push(if room_alive <= room_queue {
                Hold::MaxAllocations(alive)
            } else {
                Hold::BacklogFull(queued)
            });
        }
        if n == 0 {
            continue;
        }
        if !health.dry_run_passed() {
            let dry = Action::DryRun { shape: shape.name.clone() };
            if !out.actions.contains(&dry) {
                out.actions.push(dry);
            }
            continue;
        }
        out.actions.push(Action::Submit {
            shape: shape.name.clone(),
            count: n,
            capability: d.capability.clone(),
        });
        alive = alive.saturating_add(n);
        queued = queued.saturating_add(n);
    }
    out
}
