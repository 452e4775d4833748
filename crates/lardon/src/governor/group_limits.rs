//! # Implementation details
//!
//! Step 7b of the admission order, group limits (docs/DESIGN.md §4): what
//! a task's group leaves it, read from the ledger's book of the group;
//! the full order (`admission.rs`) and the fast path (`fast.rs`) both cap
//! their memory and CPUs by it.

use crate::decision::{Decision, ReasonCode};
use crate::estimate::Estimate;
use crate::learned::Learned;
use crate::units::{format_bytes, format_cpus};

use super::ledger::Ledger;

/// What a task's group leaves it (its limits minus what the group's
/// reservations hold); unlimited without a group or limits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GroupRoom {
    pub(crate) memory: u64,
    pub(crate) cpu_millis: u64,
}

impl GroupRoom {
    pub(crate) const UNLIMITED: GroupRoom = GroupRoom { memory: u64::MAX, cpu_millis: u64::MAX };
}

/// Step 7b, group limits (docs/DESIGN.md §4): a task of a group at its
/// running limit, or whose group lacks the memory for its `batch_min` or
/// the CPUs it needs at least, → WAIT `group_limit` with the figures;
/// otherwise the room the group leaves, which caps steps 8 and 10 so no
/// grant takes the group past a limit.
pub(crate) fn group_room(ledger: &Ledger, est: &Estimate, sizing: &Learned) -> Result<GroupRoom, Decision> {
    let Some((name, book)) = ledger.limited_group(est) else { return Ok(GroupRoom::UNLIMITED) };
    let limits = book.limits;
    if let Some(cap) = limits.max_running
        && book.running >= cap
    {
        return Err(Decision::wait(
            ReasonCode::GroupLimit,
            format!("group {name} holds {} of its {cap} running tasks", book.running),
        ));
    }
    let mut room = GroupRoom::UNLIMITED;
    if let Some(cap) = limits.memory {
        room.memory = cap.saturating_sub(book.memory);
        let need = sizing.memory_for(est.batch_min);
        if need > room.memory {
            return Err(Decision::wait(
                ReasonCode::GroupLimit,
                format!(
                    "group {name} holds {} of its {} memory; needs {} for {} item(s)",
                    format_bytes(book.memory),
                    format_bytes(cap),
                    format_bytes(need),
                    est.batch_min
                ),
            ));
        }
    }
    if let Some(cap) = limits.cpu_millis {
        room.cpu_millis = cap.saturating_sub(book.cpu_millis);
        let need = if est.cpus_reducible { u64::from(est.cpus.min(1000)) } else { u64::from(est.cpus) };
        if need > room.cpu_millis {
            return Err(Decision::wait(
                ReasonCode::GroupLimit,
                format!(
                    "group {name} holds {} of its {} CPUs; needs {}",
                    format_cpus(u32::try_from(book.cpu_millis).unwrap_or(u32::MAX)),
                    format_cpus(u32::try_from(cap).unwrap_or(u32::MAX)),
                    format_cpus(u32::try_from(need).unwrap_or(u32::MAX))
                ),
            ));
        }
    }
    Ok(room)
}
