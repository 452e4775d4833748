//! Group limits (`lardon group add|list|remove`, docs/DESIGN.md §10
//! "Groups"): stored first, then handed to the Governor, which alone
//! enforces them (a sub-budget of its ledger, `group_limit` waits).

use super::Engine;
use super::actions::ActionError;
use crate::spec::TaskState;
use crate::store::GroupRow;

/// One group as `lardon group list` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct GroupView {
    /// Its name.
    pub(crate) name: String,
    /// Its stored limits (`None`: it has none, only tasks that name it).
    pub(crate) limits: Option<lardon::GroupLimits>,
    /// Its tasks by state.
    pub(crate) counts: Vec<(TaskState, u64)>,
    /// What its reservations hold now (the Governor's figures).
    pub(crate) held: lardon::GroupUsage,
}

impl Engine {
    /// Stores `name`'s limits (replacing earlier ones), then applies them:
    /// durable before the Governor enforces them and before the reply.
    pub(crate) fn set_group(
        &self,
        name: &lardon::GroupName,
        limits: lardon::GroupLimits,
    ) -> Result<GroupView, ActionError> {
        if limits.max_running == Some(0) {
            return Err(ActionError::Invalid("max_running: must be at least 1".into()));
        }
        if limits.memory == Some(0) {
            return Err(ActionError::Invalid("mem: must be more than 0".into()));
        }
        if limits.cpu_millis == Some(0) {
            return Err(ActionError::Invalid("cpus: must be more than 0".into()));
        }
        let row = GroupRow {
            name: name.to_string(),
            max_running: limits.max_running,
            memory: limits.memory,
            cpu_millis: limits.cpu_millis,
        };
        self.shared.writer.call(move |s| s.set_group(&row))?;
        self.shared.governor.set_group_limits(name, limits);
        // The Governor's generation moved (its waiters wake); a rescan also
        // re-evaluates the tasks the old limits held.
        self.queue.resources_changed();
        self.groups()?
            .into_iter()
            .find(|g| g.name == name.as_str())
            .ok_or_else(|| ActionError::Internal(format!("group {name}: not found after it was stored")))
    }

    /// Drops `name`'s limits (its tasks keep their group); false when it
    /// had none.
    pub(crate) fn remove_group(&self, name: &lardon::GroupName) -> Result<bool, ActionError> {
        let owned = name.to_string();
        let removed = self.shared.writer.call(move |s| s.remove_group(&owned))?;
        self.shared.governor.set_group_limits(name, lardon::GroupLimits::default());
        self.queue.resources_changed();
        Ok(removed)
    }

    /// Every group that has limits or tasks, by name.
    pub(crate) fn groups(&self) -> Result<Vec<GroupView>, ActionError> {
        let reader = self.shared.reader();
        let rows = reader.groups()?;
        let counts = reader.group_counts()?;
        let held = self.shared.governor.group_usage();
        let mut names: Vec<String> = rows.iter().map(|r| r.name.clone()).collect();
        names.extend(counts.iter().map(|(g, _, _)| g.clone()));
        names.sort();
        names.dedup();
        Ok(names
            .into_iter()
            .map(|name| GroupView {
                limits: rows.iter().find(|r| r.name == name).map(GroupRow::limits),
                counts: counts.iter().filter(|(g, _, _)| *g == name).map(|(_, s, n)| (*s, *n)).collect(),
                held: held
                    .iter()
                    .find(|u| u.name.as_ref().is_some_and(|n| n.as_str() == name))
                    .cloned()
                    .unwrap_or_default(),
                name,
            })
            .collect())
    }
}

/// Hands every stored group's limits to `governor` (at daemon start).
pub(super) fn apply_stored(
    store: &crate::store::Store,
    governor: &lardon::Governor,
) -> Result<(), crate::store::StoreError> {
    for row in store.groups()? {
        match lardon::GroupName::new(&row.name) {
            Ok(name) => governor.set_group_limits(&name, row.limits()),
            Err(e) => tracing::warn!("ignoring stored group limits: {e}"),
        }
    }
    Ok(())
}
