//! Scratch volumes (docs/DESIGN.md §7) with a fake volume controller.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use crate::{
    DecisionKind, Estimate, FakeProbe, FakeVolume, Governor, HostPolicy, HostProfile, ReasonCode,
    ScratchError, VolumeIdentity, VolumeState,
};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

fn governor() -> Governor {
    let profile = HostProfile::new(16 * GIB, 8);
    let clock = Arc::new(crate::FakeClock::new(crate::MonoTime(0)));
    Governor::with_clock(HostPolicy::default_for(&profile), FakeProbe::new(profile), clock).unwrap()
}

fn scratch(bytes: u64) -> Estimate {
    Estimate::builder().memory(MIB).scratch(bytes).cpu_millis(10).build()
}

fn volume(free: u64) -> Arc<FakeVolume> {
    Arc::new(FakeVolume::new("/mnt/fast", 42, free))
}

#[test]
fn leases_up_to_free_space_then_wait_with_a_scratch_reason() {
    let gov = governor();
    let vol = volume(100 * MIB);
    gov.add_volume("fast", vol.clone(), None).unwrap();
    let a = gov.reserve_available(&scratch(60 * MIB)).unwrap();
    let grant = a.contract().scratch.clone().unwrap();
    assert_eq!((grant.volume.as_str(), grant.bytes), ("fast", 60 * MIB));
    assert_eq!(vol.lease_dirs(), vec![grant.path.clone()], "the lease directory exists");
    assert_eq!(gov.volume("fast").unwrap().state, VolumeState::InUse);
    let d = gov.reserve_available(&scratch(50 * MIB)).unwrap_err();
    assert_eq!((d.kind(), d.reason()), (DecisionKind::Wait, ReasonCode::Scratch));
    let b = gov.reserve_available(&scratch(40 * MIB)).unwrap();
    assert_ne!(a.contract().scratch.as_ref().unwrap().path, b.contract().scratch.as_ref().unwrap().path);
    drop(a);
    drop(b);
    assert!(vol.lease_dirs().is_empty(), "lease directories are removed when leases end");
    assert_eq!(gov.volume("fast").unwrap().state, VolumeState::Available);
}

#[test]
fn capacity_caps_leases() {
    let gov = governor();
    gov.add_volume("fast", volume(100 * GIB), Some(10 * MIB)).unwrap();
    assert_eq!(gov.reserve_available(&scratch(11 * MIB)).unwrap_err().reason(), ReasonCode::Scratch);
    assert!(gov.reserve_available(&scratch(10 * MIB)).is_ok());
}

#[test]
fn drain_refuses_new_leases_waits_for_current_ones_and_finishes_by_itself() {
    let gov = governor();
    let vol = volume(GIB);
    gov.add_volume("fast", vol.clone(), None).unwrap();
    let a = gov.reserve_available(&scratch(MIB)).unwrap();
    let g = gov.generation();
    let view = gov.drain("fast").unwrap();
    assert_eq!(view.state, VolumeState::Draining);
    assert!(view.reason.unwrap().contains("1 lease"));
    assert!(gov.generation() > g, "every state change bumps the generation");
    assert_eq!(gov.reserve_available(&scratch(MIB)).unwrap_err().reason(), ReasonCode::Scratch);
    assert_eq!(vol.calls(), (0, 0), "nothing synced while a lease is held");
    drop(a);
    assert_eq!(vol.calls(), (1, 1), "sync and hook ran once the last lease ended");
    let view = gov.volume("fast").unwrap();
    assert_eq!(view.state, VolumeState::SafeToUnplug);
    assert!(view.can_cancel_drain && !view.can_drain);
}

#[test]
fn drain_without_leases_completes_at_once_and_cancel_drain_returns_to_service() {
    let gov = governor();
    let vol = volume(GIB);
    gov.add_volume("fast", vol.clone(), None).unwrap();
    assert_eq!(gov.drain("fast").unwrap().state, VolumeState::SafeToUnplug);
    assert!(matches!(gov.drain("fast"), Err(ScratchError::WrongState { .. })));
    assert_eq!(gov.cancel_drain("fast").unwrap().state, VolumeState::Available);
    assert!(gov.reserve_available(&scratch(MIB)).is_ok());
    assert!(matches!(gov.cancel_drain("fast"), Err(ScratchError::WrongState { .. })));
}

#[test]
fn hook_failure_leaves_error_with_the_hooks_message() {
    let gov = governor();
    let vol = volume(GIB);
    vol.fail_hook(Some("umount: target is busy"));
    gov.add_volume("fast", vol.clone(), None).unwrap();
    let view = gov.drain("fast").unwrap();
    assert_eq!(view.state, VolumeState::Error);
    assert!(view.reason.unwrap().contains("umount: target is busy"));
    assert_eq!(gov.reserve_available(&scratch(MIB)).unwrap_err().reason(), ReasonCode::Scratch);
    vol.fail_hook(None);
    assert_eq!(gov.cancel_drain("fast").unwrap().state, VolumeState::Available);
}

#[test]
fn vanishing_while_leased_latches_error_until_the_same_volume_returns_and_is_drained() {
    let gov = governor();
    let vol = volume(GIB);
    gov.add_volume("fast", vol.clone(), None).unwrap();
    let a = gov.reserve_available(&scratch(MIB)).unwrap();
    vol.set_identity(None);
    gov.refresh_volumes();
    let view = gov.volume("fast").unwrap();
    assert_eq!(view.state, VolumeState::Error);
    assert!(view.reason.unwrap().contains("vanished"));
    drop(a);
    assert_eq!(gov.volume("fast").unwrap().state, VolumeState::Error, "latched after the lease ended");
    // Another filesystem at the same path is not the same volume.
    vol.set_identity(Some(VolumeIdentity { fs_id: 7, path: "/mnt/fast".into() }));
    gov.refresh_volumes();
    assert_eq!(gov.volume("fast").unwrap().state, VolumeState::Error);
    assert!(matches!(gov.drain("fast"), Err(ScratchError::WrongState { .. })));
    // The same volume returns: still ERROR until drained.
    vol.set_identity(Some(VolumeIdentity { fs_id: 42, path: "/mnt/fast".into() }));
    gov.refresh_volumes();
    let view = gov.volume("fast").unwrap();
    assert_eq!(view.state, VolumeState::Error);
    assert!(view.can_drain);
    assert_eq!(gov.drain("fast").unwrap().state, VolumeState::SafeToUnplug);
    assert_eq!(gov.cancel_drain("fast").unwrap().state, VolumeState::Available);
}

#[test]
fn remove_is_refused_while_leased() {
    let gov = governor();
    gov.add_volume("fast", volume(GIB), None).unwrap();
    assert_eq!(gov.add_volume("fast", volume(GIB), None), Err(ScratchError::Duplicate("fast".into())));
    let a = gov.reserve_available(&scratch(MIB)).unwrap();
    assert_eq!(gov.remove_volume("fast"), Err(ScratchError::Leased("fast".into(), 1)));
    drop(a);
    gov.remove_volume("fast").unwrap();
    assert!(gov.volumes().is_empty());
    assert_eq!(gov.remove_volume("fast"), Err(ScratchError::NotFound("fast".into())));
}

#[test]
fn ram_availability_is_identical_with_a_100_gib_volume() {
    let gov = governor();
    gov.sample().unwrap();
    let before = gov.availability();
    gov.add_volume("huge", volume(100 * GIB), None).unwrap();
    let mut after = gov.availability();
    after.generation = before.generation;
    assert_eq!(before, after);
}

#[test]
fn lease_accounting_is_exact_under_8_threads() {
    let gov = governor();
    let vol = volume(64 * MIB);
    gov.add_volume("fast", vol.clone(), None).unwrap();
    std::thread::scope(|s| {
        for _ in 0..8 {
            let gov = gov.clone();
            s.spawn(move || {
                let mut granted = 0;
                while granted < 250 {
                    if let Ok(r) = gov.reserve_available(&scratch(8 * MIB)) {
                        let view = gov.volume("fast").unwrap();
                        assert!(view.leased <= 64 * MIB, "never over the volume");
                        drop(r);
                        granted += 1;
                    }
                }
            });
        }
    });
    let view = gov.volume("fast").unwrap();
    assert_eq!((view.leases, view.leased, view.state), (0, 0, VolumeState::Available));
    assert!(vol.lease_dirs().is_empty());
    assert_eq!(gov.availability().reservations, 0);
}

#[test]
fn an_unleased_volume_unplugged_is_absent_and_a_bare_mount_point_is_not_the_volume() {
    let gov = governor();
    let vol = volume(GIB);
    gov.add_volume("fast", vol.clone(), None).unwrap();
    vol.set_identity(None);
    gov.refresh_volumes();
    assert_eq!(gov.volume("fast").unwrap().state, VolumeState::Absent);
    // The bare mount point (the root filesystem's id) is not the volume.
    vol.set_identity(Some(VolumeIdentity { fs_id: 1, path: "/mnt/fast".into() }));
    gov.refresh_volumes();
    assert_eq!(gov.volume("fast").unwrap().state, VolumeState::Absent);
    assert_eq!(gov.reserve_available(&scratch(MIB)).unwrap_err().reason(), ReasonCode::Scratch);
    vol.set_identity(Some(VolumeIdentity { fs_id: 42, path: "/mnt/fast".into() }));
    gov.refresh_volumes();
    assert_eq!(gov.volume("fast").unwrap().state, VolumeState::Available);
    assert!(gov.reserve_available(&scratch(MIB)).is_ok());
}
