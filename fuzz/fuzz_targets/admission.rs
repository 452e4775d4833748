//! Arbitrary estimates (as a client may send) through the real admission
//! path: never a panic, never a grant beyond the budget, and an invalid
//! estimate is always a REJECT naming why.
#![no_main]

use std::sync::Arc;

use lardon::{DecisionKind, Estimate, FakeClock, FakeProbe, Governor, HostPolicy, HostProfile, MonoTime};
use libfuzzer_sys::fuzz_target;

const GIB: u64 = 1 << 30;

fuzz_target!(|input: ([u64; 8], [u32; 4], bool)| {
    let ([mem, per_item, gpu, gpu_per_item, bmin, bmax, scratch, avail], [cpus, gpu_slots, io, _], exact) =
        input;
    let profile = HostProfile::new(16 * GIB, 8).with_gpu(Some(8 * GIB), false);
    let clock = Arc::new(FakeClock::new(MonoTime(0)));
    let probe = FakeProbe::new(profile.clone());
    probe.update(|s| s.memory_available = avail % (32 * GIB));
    let gov = Governor::with_clock(HostPolicy::default_for(&profile), probe, clock).expect("valid policy");
    let mut b = Estimate::builder()
        .memory(mem)
        .memory_per_item(per_item)
        .gpu_memory(gpu)
        .gpu_memory_per_item(gpu_per_item)
        .batch(bmin, bmax)
        .cpu_millis(cpus)
        .gpu_slots(gpu_slots % 4)
        .io_slots(io % 4)
        .scratch(scratch % 2);
    if exact {
        b = b.cpus_exact();
    }
    let estimate = b.build();
    match gov.reserve_available(&estimate) {
        Ok(r) => {
            let c = r.contract();
            assert!(estimate.validate().is_ok());
            assert!(c.batch >= estimate.batch_min() && c.batch <= estimate.batch_max());
            assert!(c.memory <= 16 * GIB - 3 * GIB, "granted beyond the budget");
            assert!(c.cpu_millis <= 4000 && c.cpu_millis <= estimate.cpus());
        }
        Err(d) => {
            if estimate.validate().is_err() {
                assert_eq!(d.kind(), DecisionKind::Reject);
            }
            assert!(!d.message().is_empty());
        }
    }
    let av = gov.availability();
    assert_eq!((av.reservations, av.memory_reserved), (0, 0), "released exactly once");
});
