//! The hub's three routes, one of each ([`Routes`]), and the dispatch
//! rule: a task's placement (or, before it has one, its spec; after a
//! restart, its run handle) names exactly one route, and every action
//! calls that route through [`Route`]. No route is asked in turn; a
//! route that let a task go ([`Answer::LetGo`]) leaves it to the local
//! route, which owns every task off the other two.

use crate::handle::RunHandle;
use crate::kernel::{Placed, Refusal, Route, RouteKind, requested};
use crate::local::LocalRoute;
use crate::offload::OffloadRoute;
use crate::slurm::SlurmRoute;
use crate::spec::{RunEngine, TaskSpec};

/// One of each route (see the module docs). Borrowed per call: no
/// allocation on the local hot path.
#[derive(Debug)]
pub(crate) struct Routes {
    /// Run here.
    pub(crate) local: LocalRoute,
    /// Shipped through the broker (run here without one).
    pub(crate) offload: OffloadRoute,
    /// Native Slurm mode.
    pub(crate) slurm: SlurmRoute,
}

impl Routes {
    /// The route of kind `kind`.
    pub(crate) fn get(&self, kind: RouteKind) -> &dyn Route {
        match kind {
            RouteKind::Local => &self.local,
            RouteKind::Offload => &self.offload,
            RouteKind::Slurm => &self.slurm,
        }
    }

    /// The route a task's placement names. A Slurm task stored but not yet
    /// handed to Slurm (no placement yet) is Slurm's.
    pub(crate) fn for_placement(&self, placed: &Placed, spec: &TaskSpec) -> &dyn Route {
        self.get(placement_kind(placed, spec))
    }

    /// The route a stored task starts on: the one its spec asks for.
    pub(crate) fn for_spec(&self, spec: &TaskSpec) -> &dyn Route {
        self.get(requested(spec))
    }

    /// The route a previous daemon's run handle belongs to.
    pub(crate) fn for_handle(&self, handle: &RunHandle) -> &dyn Route {
        self.get(handle_kind(handle))
    }

    /// What the routes a spec asks for refuse of it: Slurm's for
    /// `engine slurm`, offload's for a capability (both, in that order,
    /// for a spec that asks for both); `paused`: whether they take a
    /// paused task.
    ///
    /// # Errors
    /// The first refusal, naming its route and field.
    pub(crate) fn check(&self, spec: &TaskSpec) -> Result<(), Refusal> {
        for route in self.asked(spec) {
            route.check(spec)?;
        }
        Ok(())
    }

    /// Whether the routes `spec` asks for take it paused.
    ///
    /// # Errors
    /// The first route that refuses a paused task.
    pub(crate) fn check_paused(&self, spec: &TaskSpec) -> Result<(), Refusal> {
        for route in self.asked(spec) {
            route.check_paused()?;
        }
        Ok(())
    }

    /// The routes other than the local one that `spec` asks for.
    fn asked(&self, spec: &TaskSpec) -> impl Iterator<Item = &dyn Route> {
        let slurm = (spec.engine == RunEngine::Slurm).then_some(&self.slurm as &dyn Route);
        let offload = spec.offload.is_some().then_some(&self.offload as &dyn Route);
        slurm.into_iter().chain(offload)
    }
}

/// The kind of route a placement names (see [`Routes::for_placement`]).
fn placement_kind(placed: &Placed, spec: &TaskSpec) -> RouteKind {
    match placed {
        Placed::Local(_) if spec.engine == RunEngine::Slurm => RouteKind::Slurm,
        Placed::Local(_) => RouteKind::Local,
        Placed::Offload => RouteKind::Offload,
        Placed::Slurm => RouteKind::Slurm,
    }
}

/// The kind of route a run handle belongs to.
fn handle_kind(handle: &RunHandle) -> RouteKind {
    match handle {
        RunHandle::Local(_) => RouteKind::Local,
        RunHandle::Slurm(_) => RouteKind::Slurm,
        RunHandle::Offload(_) => RouteKind::Offload,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::handle::SlurmJob;
    use crate::kernel::{Field, Slot};
    use crate::spec::Offload;

    fn shippable() -> TaskSpec {
        let mut spec = TaskSpec::command(["true"]);
        spec.offload = Some(Offload {
            capability: "cc".into(),
            deadline_unix_ms: None,
            inputs: Vec::new(),
            outputs: Vec::new(),
        });
        spec
    }

    #[test]
    fn each_placement_reaches_exactly_one_route() {
        let plain = TaskSpec::command(["true"]);
        let mut slurm = plain.clone();
        slurm.engine = RunEngine::Slurm;
        let running = Placed::Local(Some(Arc::new(Slot::default())));
        assert_eq!(placement_kind(&running, &plain), RouteKind::Local);
        assert_eq!(placement_kind(&Placed::Local(None), &plain), RouteKind::Local);
        assert_eq!(placement_kind(&Placed::Local(None), &slurm), RouteKind::Slurm, "not yet handed to Slurm");
        assert_eq!(placement_kind(&Placed::Offload, &shippable()), RouteKind::Offload);
        assert_eq!(placement_kind(&Placed::Slurm, &slurm), RouteKind::Slurm);
        assert_eq!(requested(&plain), RouteKind::Local);
        assert_eq!(requested(&shippable()), RouteKind::Offload);
        assert_eq!(requested(&slurm), RouteKind::Slurm);
        let job = RunHandle::Slurm(SlurmJob { job: 4, report: None });
        assert_eq!(handle_kind(&job), RouteKind::Slurm);
        assert_eq!(handle_kind(&RunHandle::Offload("h:t1:a1:r0".into())), RouteKind::Offload);
    }

    #[test]
    fn a_refusal_names_its_route_and_field() {
        let mut batched = shippable();
        batched.items = Some(2);
        let refusal = crate::offload::check(&batched).unwrap_err();
        assert_eq!((refusal.route, refusal.field), (RouteKind::Offload, Field::Items));
        assert_eq!(refusal.to_string(), "shippable: items: batched tasks run here only");
        assert_eq!(
            Refusal::new(RouteKind::Offload, Field::Engine).to_string(),
            "shippable: engine: a Slurm task is not shippable"
        );
        assert_eq!(
            Refusal::new(RouteKind::Offload, Field::Paused).to_string(),
            "capability: paused: a shippable task cannot be submitted paused"
        );
        batched.offload = None;
        batched.engine = RunEngine::Slurm;
        let refusal = crate::slurm::check(&batched).unwrap_err();
        assert_eq!((refusal.route, refusal.field), (RouteKind::Slurm, Field::Items));
        assert_eq!(refusal.to_string(), "engine slurm: items: batched tasks run locally only");
        assert_eq!(
            Refusal::new(RouteKind::Slurm, Field::Paused).to_string(),
            "engine slurm: paused: cannot submit paused"
        );
        let cannot =
            crate::kernel::ControlError::CannotPause { id: crate::spec::TaskId(3), route: RouteKind::Slurm };
        assert_eq!(cannot.to_string(), "task 3 runs in Slurm: it cannot be paused");
        let cannot = crate::kernel::ControlError::CannotPause {
            id: crate::spec::TaskId(4),
            route: RouteKind::Offload,
        };
        assert_eq!(cannot.to_string(), "task 4 runs at a cluster agent: it cannot be paused");
    }
}
