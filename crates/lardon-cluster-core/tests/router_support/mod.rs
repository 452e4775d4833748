//! What the router tests read out of the router's events (shared by
//! `router.rs` and `router_stale_runs.rs`).
#![allow(dead_code)]

use lardon_cluster_core::{Delivery, Event};

/// Every assignment, as (agent, task).
pub(crate) fn assigned(events: &[Event]) -> Vec<(String, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Assign { agent, task } => Some((agent.to_string(), task.to_string())),
            _ => None,
        })
        .collect()
}

/// Every cancel sent to an agent, as (agent, task).
pub(crate) fn cancelled(events: &[Event]) -> Vec<(String, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Cancel { agent, task } => Some((agent.to_string(), task.to_string())),
            _ => None,
        })
        .collect()
}

/// Every delivery to a submitter, as (task, delivery).
pub(crate) fn delivered(events: &[Event]) -> Vec<(String, Delivery)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Deliver { task, delivery, .. } => Some((task.to_string(), delivery.clone())),
            _ => None,
        })
        .collect()
}
