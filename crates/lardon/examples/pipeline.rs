//! A batched pipeline through the engine alone: tasks that process items
//! in sequences, learn from measured peaks, and show why they wait.
//!
//! Run: `cargo run -p lardon --example pipeline`
//!
//! The host is scripted (`FakeProbe`: 16 GiB, 8 CPUs) so the output is the
//! same on every machine; a real program uses `lardon_host::HostProbe`.

use std::sync::Arc;
use std::time::Instant;

use lardon::{
    Estimate, FakeProbe, Governor, HostPolicy, HostProfile, QueueEvent, Task, TaskError, TaskQueue,
    format_bytes,
};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let profile = HostProfile::new(16 * GIB, 8);
    let probe = Arc::new(FakeProbe::new(profile.clone()));
    let governor = Governor::new(HostPolicy::default_for(&profile), ForeverFresh(probe))?;
    let queue = TaskQueue::new(governor.clone());
    let events = queue.subscribe();

    // A "liar": declares 100 MiB per item but really needs 250 MiB. The
    // Governor learns it from the recorded peaks and shrinks later batches.
    let liar =
        Estimate::builder().memory(256 * MIB).memory_per_item(100 * MIB).batch(1, 64).class("decode").build();
    queue.submit(Task::new("decode 300 frames", liar, |ctx| {
        let total = 300;
        let mut done = 0;
        while done < total {
            let batch = ctx.contract().batch.min(total - done);
            let started = Instant::now();
            // ... decode `batch` frames ...
            let peak = 256 * MIB + batch * 250 * MIB;
            ctx.record_batch(batch, started.elapsed(), Some(peak));
            done += batch;
            ctx.set_progress(done, total).map_err(TaskError::failed)?;
            if done < total {
                ctx.sequence_break()?;
            }
        }
        Ok(())
    }))?;

    // An impossible task is rejected with a reason, never run.
    queue.submit(Task::new("impossible", Estimate::builder().memory(20 * GIB).build(), |_| Ok(())))?;

    queue.wait_idle();
    while let Ok(event) = events.try_recv() {
        match event {
            QueueEvent::Decision { id, kind, reason, message } => {
                println!("task {id}: {kind} ({reason}) {message}");
            }
            QueueEvent::Sequence { id, contract } | QueueEvent::Started { id, contract } => {
                println!("task {id}: batch {} with {}", contract.batch, format_bytes(contract.memory));
            }
            QueueEvent::Finished { id, state, message } => {
                println!("task {id}: {state} {}", message.unwrap_or_default());
            }
            _ => {}
        }
    }
    queue.close();
    Ok(())
}

/// The scripted host, stamped with the real clock so its snapshots are
/// always fresh.
#[derive(Debug)]
struct ForeverFresh(Arc<FakeProbe>);

impl lardon::Probe for ForeverFresh {
    fn profile(&self) -> HostProfile {
        self.0.profile()
    }
    fn snapshot(&self) -> Result<lardon::Snapshot, lardon::ProbeError> {
        let mut s = self.0.snapshot()?;
        s.captured_at = lardon::Clock::now(&lardon::SystemClock);
        Ok(s)
    }
}
