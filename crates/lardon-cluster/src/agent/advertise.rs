//! What an agent tells the broker it could take (its availability, the
//! broker's mirror of it): what its Governor would admit, and nothing while
//! a host gate is closed, pushed whenever it changes (see the module docs
//! of `agent`).

use lardon::Estimate;
use lardon_proto::cluster as pb;
use tokio::sync::mpsc;
use tracing::info;

use super::{Agent, send};

impl Agent {
    /// The availability to advertise: the Governor's free memory and
    /// CPUs, with no CPU while a host gate is closed.
    pub(super) fn availability(&self) -> pb::Availability {
        let a = self.governor.availability();
        // A closed gate admits nothing: no CPU to offer (the broker's
        // mirror then admits no task, whatever it declares).
        let cpu = if self.closed.is_some() { 0 } else { a.cpu_available_millis };
        pb::Availability { memory: a.memory_available, cpu_millis: u32::try_from(cpu).unwrap_or(u32::MAX) }
    }

    /// Takes a host sample and judges from it whether a host gate is
    /// closed: the smallest task (1 thousandth of a CPU, no memory) told
    /// WAIT for the host's sake (foreign load, pressure, the probe), not
    /// for its budgets — those the availability carries already, and a
    /// task's end frees them without waiting for a sample.
    pub(super) fn sample(&mut self) {
        use lardon::ReasonCode as R;
        let smallest = Estimate::builder().cpu_millis(1).build();
        let closed = match self.governor.sample() {
            Ok(snapshot) => {
                let decision = self.governor.decide(&smallest, &snapshot);
                let host = matches!(
                    decision.reason(),
                    R::CpuLoad
                        | R::CpuPressure
                        | R::MemoryPressure
                        | R::PressureRed
                        | R::StaleSnapshot
                        | R::InvalidSnapshot
                        | R::ProbeFailed
                );
                (decision.kind() == lardon::DecisionKind::Wait && host).then(|| decision.to_string())
            }
            Err(e) => Some(format!("cannot observe the host: {e}")),
        };
        if closed != self.closed {
            match &closed {
                Some(why) => info!("admitting nothing for now: {why}"),
                None => info!("admitting again"),
            }
        }
        self.closed = closed;
    }

    /// Sends the availability when the Governor's generation moved or it
    /// differs from the last one sent (a gate opened or closed).
    pub(super) fn push_availability(&mut self, out: &mpsc::UnboundedSender<pb::AgentMessage>) {
        let generation = self.governor.generation();
        let now = self.availability();
        if generation != self.generation || self.pushed != Some(now) {
            self.generation = generation;
            self.pushed = Some(now);
            send(out, pb::agent_message::Kind::Update(now));
        }
    }
}
