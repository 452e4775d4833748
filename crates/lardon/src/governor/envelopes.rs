//! # Implementation details
//!
//! Admission of a capability envelope: alternatives in order, each at its
//! ramp's current rungs; under pressure a ramped alternative is granted at
//! its minimums and its ramp reset.

use crate::clock::MonoTime;
use crate::decision::{Decision, DecisionKind, Reason, ReasonCode};
use crate::envelope::{Envelope, Ramp, RampTicket};
use crate::pressure::PressureLevel;
use crate::snapshot::Snapshot;

use super::admission::{Hold, evaluate as evaluate_estimate};
use super::ledger::Ledger;

pub(crate) fn evaluate(
    ledger: &mut Ledger,
    envelope: &Envelope,
    snap: &Snapshot,
    now: MonoTime,
    running: usize,
    hold: Option<&Hold>,
) -> Decision {
    let mut waits: Vec<String> = Vec::new();
    let mut last_reject: Option<Decision> = None;
    for (index, alt) in envelope.alternatives().iter().enumerate() {
        let ramped = Ramp::ramps(alt);
        let key = (alt.estimate.class.clone(), index);
        let pool = ledger.policy.compute_cpus(&ledger.profile);
        // Borrowed unless a ramp rewrites it: every queued task is an
        // envelope, evaluated on every scan that reaches it.
        let estimate = if ramped {
            std::borrow::Cow::Owned(ledger.ramp_for(&key, || Ramp::new(alt, pool)).operational_estimate(alt))
        } else {
            std::borrow::Cow::Borrowed(&alt.estimate)
        };
        let mut decision = evaluate_estimate(ledger, &estimate, snap, now, running, hold);
        match decision.kind() {
            DecisionKind::Wait => {
                // Stale snapshots and RED pressure stop every alternative
                // alike, and a lone alternative's reason is the reason (so
                // its message is not copied into a combined one nobody
                // reads).
                let single = envelope.alternatives().len() == 1;
                if single
                    || matches!(
                        decision.reason(),
                        ReasonCode::StaleSnapshot | ReasonCode::InvalidSnapshot | ReasonCode::PressureRed
                    )
                {
                    return decision;
                }
                waits.push(format!("{}: {}", alt.name, decision.message()));
                continue;
            }
            DecisionKind::Reject => {
                last_reject = Some(decision);
                continue;
            }
            DecisionKind::Admit | DecisionKind::ReduceBatch => {}
        }
        let pressured = ledger.pressure.level() != PressureLevel::Green;
        if ramped && pressured {
            let ramp = ledger.ramp_for(&key, || Ramp::new(alt, pool));
            ramp.reset();
            let minimum = ramp.operational_estimate(alt);
            let retry = evaluate_estimate(ledger, &minimum, snap, now, running, hold);
            if !retry.is_granted() {
                waits.push(format!("{}: {}", alt.name, retry.message()));
                continue;
            }
            let why = format!("host pressure: started at minimum ({})", retry.message());
            decision = match retry {
                Decision::Admit(contract) | Decision::ReduceBatch(contract, _) => {
                    Decision::ReduceBatch(contract, Reason::new(ReasonCode::PressureDecrease, why))
                }
                refused @ (Decision::Wait(_) | Decision::Reject(_)) => refused,
            };
        }
        let (epoch, inflight, limits) = match ledger.ramps.get(&key) {
            Some(r) if ramped => (r.epoch(), r.limits().inflight, Some(r.limits())),
            _ => (0, u64::from(alt.inflight.1), None),
        };
        if let Some(contract) = decision.contract_mut() {
            contract.alternative = Some(index);
            contract.inflight = u32::try_from(inflight).unwrap_or(u32::MAX);
            if let Some(l) = limits {
                let cpus_ok = !alt.ramp_cpus || u64::from(contract.cpu_millis) >= l.cpus * 1000;
                let batch_ok = !alt.ramp_batch || contract.batch >= l.batch;
                contract.ramp_ticket =
                    Some(Box::new(RampTicket { key, epoch, exercised: cpus_ok && batch_ok && !pressured }));
            }
        }
        return decision;
    }
    if waits.is_empty() {
        last_reject.unwrap_or_else(|| Decision::reject(ReasonCode::InvalidEstimate, "empty envelope"))
    } else {
        Decision::wait(
            ReasonCode::AllAlternativesWait,
            format!("every alternative waits: {}", waits.join("; ")),
        )
    }
}
