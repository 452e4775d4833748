//! The provisioning loop's state: one [`Provisioner`] per broker drives a
//! [`Provider`] with [`plan`] at every tick. The tick is synchronous and
//! takes the time it is given, so its rules are tested with a fake
//! provider and a fake clock; the broker calls it on a blocking thread.

use std::time::Instant;

use super::{Action, AllocState, Allocation, Demand, Health, Hold, Limits, Provider, Shape, plan};
use lardon_cluster_core::Capability;

/// An allocation asked for and not yet seen over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tracked {
    /// The allocation.
    pub allocation: Allocation,
    /// Whether one of its agents said hello (an allocation that ends
    /// without ever starting counts towards the provider's pause).
    pub started: bool,
}

/// The broker's Provisioner: a provider, its health, the allocations
/// alive and why the last tick did not ask for more.
pub struct Provisioner {
    provider: Box<dyn Provider>,
    shapes: Vec<Shape>,
    limits: Limits,
    health: Health,
    alive: Vec<Tracked>,
    holds: Vec<Hold>,
    /// The last `status` refusal, until a refresh succeeds.
    refresh_error: Option<String>,
}

impl std::fmt::Debug for Provisioner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Provisioner")
            .field("provider", &self.provider.name())
            .field("alive", &self.alive)
            .field("holds", &self.holds)
            .finish_non_exhaustive()
    }
}

impl Provisioner {
    /// A Provisioner over `provider` (which must pass a dry run before its
    /// first real submission).
    #[must_use]
    pub fn new(provider: Box<dyn Provider>, limits: Limits) -> Self {
        let shapes = provider.shapes();
        Provisioner {
            provider,
            shapes,
            limits,
            health: Health::new(),
            alive: Vec::new(),
            holds: Vec::new(),
            refresh_error: None,
        }
    }

    /// The provider's name.
    #[must_use]
    pub fn provider(&self) -> &str {
        self.provider.name()
    }

    /// Every capability some shape offers: tasks of these wait for an
    /// allocation instead of being answered "no executor".
    #[must_use]
    pub fn capabilities(&self) -> Vec<Capability> {
        let mut caps: Vec<Capability> = self.shapes.iter().flat_map(|s| s.capabilities.clone()).collect();
        caps.sort_by_key(Capability::key);
        caps.dedup_by_key(|c| c.key());
        caps
    }

    /// The shapes its provider offers.
    #[must_use]
    pub fn shapes(&self) -> &[Shape] {
        &self.shapes
    }

    /// The allocations alive after the last tick.
    #[must_use]
    pub fn allocations(&self) -> &[Tracked] {
        &self.alive
    }

    /// Why the last tick did not ask for (more) capacity, one line each;
    /// a failed refresh adds its own.
    #[must_use]
    pub fn explain(&self) -> Vec<String> {
        let mut lines: Vec<String> = self.holds.iter().map(ToString::to_string).collect();
        if let Some(e) = &self.refresh_error {
            lines.push(format!("allocation states unknown: {e}"));
        }
        lines
    }

    /// The provider's track record.
    #[must_use]
    pub fn health(&self) -> &Health {
        &self.health
    }

    /// A person resumes a paused provider.
    pub fn resume(&mut self) {
        self.health.resume();
    }

    /// One tick at `now`, given the queued `demand` and the ids of the
    /// agents connected: refresh the allocations' states with one
    /// `status` call (an ended one that never said hello counts towards
    /// the pause), mark those whose agent said hello as started, then
    /// [`plan`] and do what it says — a dry run first (then plan again, so
    /// the first submission does not wait a tick and a failure is
    /// explained at once), submissions recorded
    /// in the health's back-off ladder.
    pub fn tick(&mut self, demand: &[Demand], agents: &[String], now: Instant) {
        self.refresh(agents);
        for _ in 0..2 {
            let allocations: Vec<Allocation> = self.alive.iter().map(|t| t.allocation.clone()).collect();
            let p = plan(demand, &self.shapes, &allocations, self.limits, &self.health, now);
            self.holds = p.holds;
            let mut dry_ran = false;
            for action in p.actions {
                match action {
                    Action::DryRun { shape } => {
                        dry_ran = true;
                        let Some(s) = self.shapes.iter().find(|s| s.name == shape) else { continue };
                        let result = self.provider.dry_run(s).map_err(|e| e.to_string());
                        match &result {
                            Ok(()) => {
                                tracing::info!("{}: the dry run of shape {shape} passed", self.provider())
                            }
                            Err(e) => tracing::error!("{e}: the provider is paused"),
                        }
                        self.health.record_dry_run(result);
                    }
                    Action::Submit { shape, count, capability } => {
                        let Some(s) = self.shapes.iter().find(|s| s.name == shape) else { continue };
                        match self.provider.submit(s, count) {
                            Ok(ids) => {
                                tracing::info!(
                                    "{}: asked for {} allocation(s) of {shape} for {capability}: {}",
                                    self.provider(),
                                    ids.len(),
                                    ids.iter().map(ToString::to_string).collect::<Vec<_>>().join(" ")
                                );
                                self.health.record_submit(Ok(()), now);
                                self.alive.extend(ids.into_iter().map(|id| Tracked {
                                    allocation: Allocation {
                                        id,
                                        shape: shape.clone(),
                                        state: AllocState::Queued,
                                    },
                                    started: false,
                                }));
                            }
                            Err(e) => {
                                tracing::warn!("{e}");
                                self.health.record_submit(Err(e.to_string()), now);
                            }
                        }
                    }
                }
            }
            // After a dry run, plan again: submit at once when it passed,
            // say "paused" when it failed.
            if !dry_ran {
                break;
            }
        }
    }

    fn refresh(&mut self, agents: &[String]) {
        let ids: Vec<_> = self.alive.iter().map(|t| t.allocation.id.clone()).collect();
        if !ids.is_empty() {
            match self.provider.status(&ids) {
                Ok(states) => {
                    self.refresh_error = None;
                    for (id, state) in states {
                        if let Some(t) = self.alive.iter_mut().find(|t| t.allocation.id == id) {
                            t.allocation.state = state;
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!("{e}");
                    self.refresh_error = Some(e.to_string());
                }
            }
        }
        for t in &mut self.alive {
            let prefix = self.provider.agent_prefix(&t.allocation.id);
            let dashed = format!("{prefix}-");
            if agents.iter().any(|a| *a == prefix || a.starts_with(&dashed)) {
                t.started = true;
                if t.allocation.state == AllocState::Queued {
                    t.allocation.state = AllocState::Running;
                }
            }
        }
        let (ended, alive): (Vec<Tracked>, Vec<Tracked>) = std::mem::take(&mut self.alive)
            .into_iter()
            .partition(|t| t.allocation.state == AllocState::Ended);
        self.alive = alive;
        for t in ended {
            let a = &t.allocation;
            let detail = format!("allocation {} of shape {} ended", a.id, a.shape);
            tracing::info!(
                "{}: {detail}{}",
                self.provider(),
                if t.started { "" } else { " before its agent said hello" }
            );
            self.health.record_allocation_end(t.started, &detail);
        }
    }
}
