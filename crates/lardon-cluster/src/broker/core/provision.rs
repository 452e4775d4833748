//! The core's side of provisioning (docs/DESIGN.md §14): the shapes it
//! knows, what the provisioning loop is shown at each tick, and handing
//! back provisionable tasks no shape can ever hold.

use std::collections::BTreeMap;

use tracing::info;

use super::{Core, ProvisionView};
use lardon_cluster_core::learned::class_of;
use lardon_cluster_core::wire;
use lardon_cluster_core::{Delivery, TaskPlace};
use lardon_proto::cluster as pb;

impl Core {
    /// Lets tasks of the capabilities `shapes` offer wait for an
    /// allocation (scale from zero), unless no shape can ever hold them,
    /// and tasks of the `scaled` capabilities (an outside scaler's, such
    /// as KEDA's) wait for an agent. A scaled capability no shape offers
    /// is never handed back: its agents' size is the scaler's business.
    pub(crate) fn set_shapes(&mut self, shapes: Vec<crate::provision::Shape>, scaled: &[crate::Capability]) {
        let mut capabilities: Vec<crate::Capability> = shapes
            .iter()
            .flat_map(|s| s.capabilities.iter().cloned())
            .chain(scaled.iter().cloned())
            .collect();
        capabilities.sort_by_key(crate::Capability::key);
        capabilities.dedup_by_key(|c| c.key());
        self.router.set_provisionable(&capabilities);
        self.shapes = shapes;
    }

    /// Why a task of `capability` (its `spec`, its duration as routed) can
    /// never run here: its capability is provisionable, no connected agent
    /// could take it, and no shape can hold its memory (declared, raised to
    /// its class's learned peak) and CPUs or outlive its duration — the
    /// Provisioner's words ([`crate::provision::never_fits`]). `None` when
    /// it may yet run.
    pub(super) fn unfit(
        &self,
        capability: &crate::Capability,
        spec: &pb::TaskSpec,
        duration_ms: Option<u64>,
    ) -> Option<String> {
        let key = capability.key();
        if self.shapes.is_empty()
            || !self.router.is_provisionable(&key)
            || self.router.could_run(&key, duration_ms)
        {
            return None;
        }
        let learned = self.learned.estimate(&class_of(capability, spec));
        let need = spec.need.unwrap_or_default();
        let task = crate::provision::Demand {
            capability: capability.clone(),
            tasks: 1,
            memory: need.memory.max(learned.map_or(0, |l| l.peak)),
            cpu_millis: need.cpu_millis,
            duration: std::time::Duration::from_millis(duration_ms.unwrap_or(0)),
        };
        crate::provision::never_fits(&task, &self.shapes).map(|hold| hold.to_string())
    }

    /// Hands back every queued task [`Core::unfit`] finds no place for
    /// (its class learned a larger peak, or the agent that could run it
    /// left, since it was queued). Run at each provisioning tick.
    pub(super) fn hand_back_unfit(&mut self) {
        let mut unfit = Vec::new();
        for (task, (_, spec)) in &self.specs {
            if !matches!(self.router.place(task), Some(TaskPlace::Queued { .. })) {
                continue;
            }
            let Ok(capability) = wire::capability("capability", spec.capability.as_ref()) else { continue };
            let learned =
                self.learned.estimate(&class_of(&capability, spec)).filter(|e| !e.duration.is_zero());
            let declared = (spec.expected_duration_ms > 0).then_some(spec.expected_duration_ms);
            let duration_ms =
                learned.map(|l| u64::try_from(l.duration.as_millis()).unwrap_or(u64::MAX)).or(declared);
            if let Some(reason) = self.unfit(&capability, spec, duration_ms) {
                unfit.push((task.clone(), reason));
            }
        }
        for (task, reason) in unfit {
            info!("task {task}: handed back: {reason}");
            let events = self.router.hand_back_queued(&task, Delivery::NoShapeFits(reason));
            self.apply(events, std::slice::from_ref(&task), None);
        }
    }

    /// What the provisioning loop sizes allocations with: per capability,
    /// its queued tasks, the largest need among them — each raised to what
    /// its class measured (docs/DESIGN.md §14: learned peaks and wall
    /// times, kept in the store) — and the longest learned or declared
    /// duration; and the agents connected.
    pub(super) fn provision_view(&self) -> ProvisionView {
        let mut queued = self.router.queued_demand();
        let mut durations: BTreeMap<String, std::time::Duration> = BTreeMap::new();
        for (task, (_, spec)) in &self.specs {
            if !matches!(self.router.place(task), Some(TaskPlace::Queued { .. })) {
                continue;
            }
            let Ok(capability) = wire::capability("capability", spec.capability.as_ref()) else { continue };
            let learned = self.learned.estimate(&class_of(&capability, spec));
            let declared = std::time::Duration::from_millis(spec.expected_duration_ms);
            let duration = learned.map_or(declared, |l| l.duration.max(declared));
            if !duration.is_zero() {
                let longest = durations.entry(capability.key()).or_default();
                *longest = (*longest).max(duration);
            }
            if let (Some(l), Some((_, need))) = (learned, queued.get_mut(&capability)) {
                need.memory = need.memory.max(l.peak);
            }
        }
        ProvisionView { queued, agents: self.agents.keys().map(ToString::to_string).collect(), durations }
    }
}
