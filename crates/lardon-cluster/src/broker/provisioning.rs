//! The broker's side of the provisioning loop (docs/DESIGN.md §14): what
//! the core hands the loop at each tick, and the loop itself, which runs
//! the Provisioner's tick on a blocking thread.

use std::sync::Arc;

use tokio::sync::mpsc;

use super::ProvisionLoop;
use super::core;

/// What the provisioning loop reads from the core at each tick.
#[derive(Debug, Default)]
pub(crate) struct ProvisionView {
    pub(crate) queued: std::collections::BTreeMap<crate::Capability, (u64, crate::Need)>,
    pub(crate) agents: Vec<String>,
    /// The longest learned (else declared) wall time of each capability's
    /// queued tasks, by capability key.
    pub(crate) durations: std::collections::BTreeMap<String, std::time::Duration>,
}

/// The provisioning loop: at every tick, the core's queued demand and
/// agents, then one [`Provisioner::tick`](crate::provision::Provisioner::tick)
/// on a blocking thread (providers run commands such as `sbatch`).
pub(super) fn spawn(tx: &mpsc::Sender<core::Input>, p: ProvisionLoop) {
    let weak = tx.downgrade();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(p.every);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let Some(tx) = weak.upgrade() else { break };
            let (reply, rx) = tokio::sync::oneshot::channel();
            if tx.send(core::Input::ProvisionView { reply }).await.is_err() {
                break;
            }
            drop(tx);
            let Ok(view) = rx.await else { break };
            let demand: Vec<crate::provision::Demand> = view
                .queued
                .into_iter()
                .map(|(capability, (tasks, need))| crate::provision::Demand {
                    duration: view.durations.get(&capability.key()).copied().unwrap_or(p.task_duration),
                    capability,
                    tasks,
                    memory: need.memory,
                    cpu_millis: need.cpu_millis,
                })
                .collect();
            let shared = Arc::clone(&p.provisioner);
            let agents = view.agents;
            let ticked = tokio::task::spawn_blocking(move || {
                shared.lock().unwrap_or_else(std::sync::PoisonError::into_inner).tick(
                    &demand,
                    &agents,
                    std::time::Instant::now(),
                );
            })
            .await;
            if let Err(e) = ticked {
                tracing::error!("the provisioning tick failed: {e}");
            }
        }
    });
}
