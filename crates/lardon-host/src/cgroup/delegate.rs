//! Setting up a delegated cgroup v2 subtree for task cgroups.
//!
//! cgroup v2's "no internal processes" rule: a non-root cgroup that holds
//! processes cannot enable controllers for its children (`EBUSY`). So the
//! daemon moves itself into a leaf of its own cgroup (`<own>/lardon-daemon`),
//! enables the controllers in `<own>/cgroup.subtree_control`, and creates
//! each task's cgroup as a sibling of that leaf. This is what a systemd unit
//! with `Delegate=yes` (or `systemd-run --scope -p Delegate=yes`) hands us:
//! a cgroup we own, holding only our process.

use std::io;
use std::path::{Path, PathBuf};

use thiserror::Error;

use super::fsops::CgroupFs;

/// The name of the daemon's own leaf cgroup under its delegated cgroup.
pub const DAEMON_LEAF: &str = "lardon-daemon";

/// The controllers enabled for task cgroups. `memory` is required (it is
/// what makes a limit hard); `cpu` and `pids` are enabled where offered.
pub const CONTROLLERS: [&str; 3] = ["memory", "cpu", "pids"];

/// A delegated v2 subtree ready for task cgroups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delegation {
    /// Where task cgroups are created: our delegated cgroup, parent of the
    /// daemon's leaf. Its `subtree_control` has `memory` enabled.
    pub base: PathBuf,
    /// The daemon's leaf, `None` when `base` is the hierarchy's root (the
    /// rule does not apply there, so the daemon stays where it is).
    pub leaf: Option<PathBuf>,
    /// Controllers enabled in `base/cgroup.subtree_control` (always
    /// includes `memory`).
    pub enabled: Vec<String>,
    /// Wanted controllers that could not be enabled, with why.
    pub missing: Vec<String>,
}

impl Delegation {
    /// One line for `lardon resources` and the start-up log.
    pub fn describe(&self) -> String {
        let mut s = match &self.leaf {
            Some(leaf) => format!(
                "cgroup v2: daemon in {}, task cgroups beside it under {}",
                leaf.display(),
                self.base.display()
            ),
            None => format!("cgroup v2: task cgroups under the root {}", self.base.display()),
        };
        s.push_str(&format!(", controllers [{}] enabled", self.enabled.join(" ")));
        if !self.missing.is_empty() {
            s.push_str(&format!(" (not enabled: {})", self.missing.join("; ")));
        }
        s
    }
}

/// Why no delegated v2 subtree could be set up: each says what is wrong
/// and where, in one line, for `enforcement none: <why>`.
#[derive(Debug, Error)]
pub enum DelegationError {
    /// A file of the hierarchy could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// Our cgroup does not offer the memory controller.
    #[error("cgroup v2 at {} offers no memory controller (cgroup.controllers: [{offered}])", path.display())]
    NoMemoryController {
        /// Our cgroup.
        path: PathBuf,
        /// What `cgroup.controllers` lists.
        offered: String,
    },
    /// Our cgroup is not ours to write: it was not delegated.
    #[error(
        "cgroup v2 at {} is not writable (not delegated: run under a systemd unit with Delegate=yes \
         or `systemd-run --user --scope -p Delegate=yes`)",
        path.display()
    )]
    NotWritable {
        /// Our cgroup.
        path: PathBuf,
    },
    /// The daemon could not move itself into its leaf.
    #[error("cannot move the daemon into its leaf cgroup {}: {source}", path.display())]
    LeafMove {
        /// The leaf.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The kernel refused to enable the memory controller.
    #[error(
        "cannot enable the memory controller in {}: {source}{}",
        path.display(),
        busy_hint(source, others)
    )]
    Enable {
        /// The `cgroup.subtree_control` file.
        path: PathBuf,
        /// The error (`EBUSY` when processes live in the cgroup itself).
        #[source]
        source: io::Error,
        /// Processes other than ours found in the cgroup itself.
        others: Vec<u32>,
    },
}

fn busy_hint(source: &io::Error, others: &[u32]) -> String {
    if source.raw_os_error() != Some(libc::EBUSY) {
        return String::new();
    }
    if others.is_empty() {
        " (processes live in that cgroup itself)".to_owned()
    } else {
        let shown: Vec<String> = others.iter().take(8).map(u32::to_string).collect();
        format!(
            " (other processes live in that cgroup itself: pid {}{}; give the daemon a cgroup of its own)",
            shown.join(", "),
            if others.len() > 8 { ", …" } else { "" }
        )
    }
}

fn words(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_owned).collect()
}

/// Sets up task cgroups in the v2 cgroup `own` for process `pid` (the
/// daemon): moves `pid` into `own/lardon-daemon` unless `own` is the root
/// or already that leaf (a second start in the same process), then enables
/// [`CONTROLLERS`] in the parent's `cgroup.subtree_control`. Idempotent.
///
/// # Errors
/// [`DelegationError`] when the memory controller is not offered, the
/// cgroup is not writable, the move fails, or enabling `memory` fails
/// (`EBUSY` when other processes share the cgroup). `cpu` or `pids` that
/// cannot be enabled are listed in [`Delegation::missing`] instead.
pub fn delegate_v2(own: &Path, pid: u32, fs: &dyn CgroupFs) -> Result<Delegation, DelegationError> {
    let read = |path: PathBuf| fs.read(&path).map_err(|source| DelegationError::Read { path, source });
    let in_leaf = own.file_name().is_some_and(|n| n == DAEMON_LEAF);
    let base = match own.parent() {
        Some(parent) if in_leaf => parent.to_path_buf(),
        _ => own.to_path_buf(),
    };
    let offered = words(&read(base.join("cgroup.controllers"))?);
    if !offered.iter().any(|c| c == "memory") {
        return Err(DelegationError::NoMemoryController { path: base, offered: offered.join(" ") });
    }
    if !fs.writable(&base) {
        return Err(DelegationError::NotWritable { path: base });
    }
    // Only the root cgroup lacks `cgroup.type`; the rule exempts it.
    let is_root = !fs.exists(&base.join("cgroup.type"));
    let leaf = if is_root {
        None
    } else {
        let leaf = base.join(DAEMON_LEAF);
        if !in_leaf {
            let moved = match fs.create_dir(&leaf) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
                Err(e) => Err(e),
            }
            .and_then(|()| fs.write(&leaf.join("cgroup.procs"), &pid.to_string()));
            moved.map_err(|source| DelegationError::LeafMove { path: leaf.clone(), source })?;
        }
        Some(leaf)
    };
    let control = base.join("cgroup.subtree_control");
    let already = words(&read(control.clone())?);
    let (mut enabled, mut missing) = (Vec::new(), Vec::new());
    for controller in CONTROLLERS {
        if already.iter().any(|c| c == controller) {
            enabled.push(controller.to_owned());
        } else if !offered.iter().any(|c| c == controller) {
            missing.push(format!("{controller} not offered"));
        } else {
            match fs.write(&control, &format!("+{controller}")) {
                Ok(()) => enabled.push(controller.to_owned()),
                Err(source) if controller == "memory" => {
                    let others = fs
                        .read(&base.join("cgroup.procs"))
                        .map(|t| {
                            t.lines().filter_map(|l| l.trim().parse().ok()).filter(|p| *p != pid).collect()
                        })
                        .unwrap_or_default();
                    return Err(DelegationError::Enable { path: control, source, others });
                }
                Err(e) => missing.push(format!("{controller}: {e}")),
            }
        }
    }
    Ok(Delegation { base, leaf, enabled, missing })
}
