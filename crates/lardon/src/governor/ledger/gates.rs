//! The gates of docs/DESIGN.md §4 step 7 as the ledger reads them: the
//! foreign load against `max_load_ratio × compute pool` and the PSI
//! thresholds. A child module of the ledger, so it reads the private
//! fields and never writes them.

use crate::snapshot::Snapshot;

use super::super::load::LoadFigures;
use super::Ledger;

impl Ledger {
    /// CPUs granted to active reservations, as a load figure.
    #[inline]
    pub(super) fn granted_cpus(&self) -> f64 {
        self.totals.cpu_millis as f64 / 1000.0
    }

    /// The load gate's figures for `snap` (docs/DESIGN.md §4 step 7): foreign
    /// load against `max_load_ratio × compute pool`.
    #[inline]
    pub(crate) fn load_figures(&self, snap: &Snapshot) -> LoadFigures {
        let own = self.own_load.share(self.granted_cpus());
        let load = snap.load.one;
        LoadFigures {
            load,
            own,
            foreign: (load - own).max(0.0),
            threshold: self
                .policy
                .max_load_ratio
                .map(|r| r * f64::from(self.policy.compute_cpus(&self.profile))),
        }
    }

    /// PSI and load gates of `snap` under the policy: (load, cpu, memory, io).
    #[inline]
    pub(crate) fn gates(&self, snap: &Snapshot) -> [bool; 4] {
        let p = &self.policy;
        let reached =
            |value: Option<f64>, threshold: f64| threshold > 0.0 && value.is_some_and(|v| v >= threshold);
        [
            self.load_figures(snap).reached(),
            reached(snap.pressure.cpu, p.psi_cpu),
            reached(snap.pressure.memory, p.psi_memory),
            reached(snap.pressure.io, p.psi_io),
        ]
    }

    /// Whether any gate of `snap` is reached for a request, IO PSI counting
    /// only when `io_work` (the request wants IO slots): exactly
    /// `load || cpu || memory || (io && io_work)` of [`Ledger::gates`],
    /// folded for the fast path. The PSI compares come first and the load
    /// gate's figures are computed only when the host's whole load could
    /// reach its threshold (the foreign load is never above it).
    #[inline]
    pub(crate) fn any_gate(&self, snap: &Snapshot, io_work: bool) -> bool {
        let p = &self.policy;
        let reached =
            |value: Option<f64>, threshold: f64| threshold > 0.0 && value.is_some_and(|v| v >= threshold);
        if reached(snap.pressure.cpu, p.psi_cpu)
            || reached(snap.pressure.memory, p.psi_memory)
            || (io_work && reached(snap.pressure.io, p.psi_io))
        {
            return true;
        }
        match p.max_load_ratio {
            None => false,
            // `foreign = max(load − own, 0)` with `own ≥ 0`: below a
            // positive threshold when the load itself is.
            Some(ratio) => {
                let threshold = ratio * f64::from(p.compute_cpus(&self.profile));
                !(threshold > 0.0 && snap.load.one < threshold) && self.load_figures(snap).reached()
            }
        }
    }
}
