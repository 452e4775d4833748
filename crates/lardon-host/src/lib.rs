//! Linux probes and enforcement for the Lardon Governor (docs/DESIGN.md §1, §3).
//!
//! * [`HostProbe`] implements [`lardon::Probe`] from `/proc`, PSI, our own
//!   cgroup and the GPUs (NVML loaded at run time, DRM sysfs).
//! * [`CpuLayout`], [`plan_cpu_pool`] and [`default_policy`] detect the CPU
//!   topology and carve the whole-core reserve out of the affinity mask;
//!   [`pin_current_thread`], [`pin_pid`] and [`spawn_in`] pin work to the
//!   compute pool.
//! * [`detect_enforcer`] picks the cgroup backend (v2, v1 or none) from
//!   `/proc/self/mountinfo` and `/proc/self/cgroup`, with the reason; every
//!   backend implements [`Enforcer`], whose [`TaskCgroup`] handles limit,
//!   measure and kill one task's processes.
//! * [`ProcessTree`] follows one task's processes through `/proc` and sums
//!   their resident memory (the none backend's and the cluster agent's
//!   soft watchdogs, which kill by the one rule of [`watchdog`]).
//! * [`process`] is the one process layer of the daemon's runner, the
//!   cluster agent and `lardon exec`: an argv spawned as its own process
//!   group ([`spawn_group`]) into a cgroup, its output to a log or
//!   captured ([`Output`]), its end on a pidfd ([`ExitWatch`]) and reaped
//!   with its peak ([`wait_child`], [`peak`]), the whole tree killed
//!   ([`ProcessGroup`], [`GroupGuard`]).
//!
//! Every path is rooted in a [`HostRoot`] so parsers and detection run on
//! fixtures; every parser is a pure `parse_*` function.
//!
//! ```no_run
//! use lardon::Probe;
//! use lardon_host::{HostProbe, TaskLimits, detect_enforcer, HostRoot, spawn_in, wait_child};
//!
//! let probe = HostProbe::new()?;
//! let snapshot = probe.snapshot()?;
//! let detection = detect_enforcer(&HostRoot::default());
//! println!("{} ({}), {} B available", detection.kind(), detection.reason, snapshot.memory_available);
//! let limits = TaskLimits { memory_max: Some(64 << 20), ..TaskLimits::default() };
//! let task = detection.enforcer.create("job-1", &limits)?;
//! let child = spawn_in(&mut std::process::Command::new("true"), Some(task.as_ref()), None)?;
//! let exit = wait_child(child)?;
//! task.record_exit(&exit);
//! println!("peak {:?}, oom {}", task.memory_peak()?, task.oom_killed()?);
//! task.remove()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![warn(missing_docs)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod cgroup;
mod cpulist;
mod error;
mod gpu;
mod loadavg;
mod meminfo;
mod mountinfo;
mod parse;
mod probe;
pub mod process;
mod proctree;
mod pseudo;
mod psi;
mod root;
mod scratch;
mod spawn;
mod topology;
mod vmstat;
pub mod watchdog;

pub use cgroup::{
    BackendKind, CgroupLayout, Detection, Enforcer, NoneEnforcer, TaskCgroup, TaskLimits, V1Enforcer,
    V2Enforcer, detect_enforcer,
};
pub use cpulist::parse_cpu_list;
pub use error::HostError;
pub use gpu::{DrmCard, Gpus, parse_vendor, scan_drm};
pub use loadavg::parse_loadavg;
pub use meminfo::{MemInfo, parse_meminfo};
pub use mountinfo::{CgroupMembership, CgroupMount, own_dir, parse_mountinfo, parse_proc_cgroup};
pub use parse::ParseError;
pub use probe::HostProbe;
pub use process::{GroupGuard, Output, ProcessGroup, peak, spawn_group};
pub use proctree::{ProcessTree, TreeRss};
pub use pseudo::read_pseudo;
pub use psi::parse_psi_some_avg10;
pub use root::HostRoot;
pub use scratch::DirVolume;
pub use spawn::{ChildExit, ExitWatch, spawn_in, wait_child};
pub use topology::{CpuLayout, CpuMask, CpuPlan, default_policy, pin_current_thread, pin_pid, plan_cpu_pool};
pub use vmstat::parse_vmstat_swap;
