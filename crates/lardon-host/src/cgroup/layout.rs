//! Where our own cgroups are, found from mountinfo and `/proc/self/cgroup`.

use std::path::PathBuf;

use crate::error::HostError;
use crate::mountinfo::{CgroupMount, own_dir, parse_mountinfo, parse_proc_cgroup, rebase};
use crate::root::{HostRoot, read};

/// Our own cgroup directories, per hierarchy; `None` where absent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupLayout {
    /// The cgroup2 mount point.
    pub v2_mount: Option<PathBuf>,
    /// Our cgroup in the v2 hierarchy.
    pub v2: Option<PathBuf>,
    /// Our cgroup in the v1 `memory` hierarchy.
    pub v1_memory: Option<PathBuf>,
    /// Our cgroup in the v1 `cpu` hierarchy.
    pub v1_cpu: Option<PathBuf>,
    /// Our cgroup in the v1 `cpuset` hierarchy.
    pub v1_cpuset: Option<PathBuf>,
}

impl CgroupLayout {
    /// Reads `<proc>/self/mountinfo` and `<proc>/self/cgroup`.
    ///
    /// # Errors
    /// [`HostError`] when either file is unreadable or malformed.
    pub fn detect(root: &HostRoot) -> Result<Self, HostError> {
        let mi_path = root.proc_path("self/mountinfo");
        let cg_path = root.proc_path("self/cgroup");
        let mounts =
            parse_mountinfo(&read(&mi_path)?).map_err(|source| HostError::Parse { path: mi_path, source })?;
        let members = parse_proc_cgroup(&read(&cg_path)?)
            .map_err(|source| HostError::Parse { path: cg_path, source })?;
        let find = |v2: bool, ctrl: &str| -> Option<PathBuf> {
            let member = members.iter().find(|m| {
                if v2 {
                    m.id == 0 && m.controllers.is_empty()
                } else {
                    m.controllers.iter().any(|c| c == ctrl)
                }
            })?;
            let mount: &CgroupMount = mounts
                .iter()
                .find(|m| if v2 { m.v2 } else { !m.v2 && m.controllers.iter().any(|c| c == ctrl) })?;
            Some(rebase(&own_dir(mount, &member.path)?, &root.sys))
        };
        Ok(CgroupLayout {
            v2_mount: mounts.iter().find(|m| m.v2).map(|m| rebase(&m.mount_point, &root.sys)),
            v2: find(true, ""),
            v1_memory: find(false, "memory"),
            v1_cpu: find(false, "cpu"),
            v1_cpuset: find(false, "cpuset"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn hybrid_fixture() {
        let fx = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        let root = HostRoot { proc: fx.join("proc"), sys: PathBuf::from("/sys") };
        let l = CgroupLayout::detect(&root).unwrap();
        assert_eq!(l.v2_mount.as_deref(), Some(Path::new("/sys/fs/cgroup/unified")));
        assert_eq!(l.v2.as_deref(), Some(Path::new("/sys/fs/cgroup/unified")));
        assert_eq!(
            l.v1_memory.as_deref(),
            Some(Path::new("/sys/fs/cgroup/memory/process_api/a90de98ae5bbdd41ed56a11cc58f966e"))
        );
        assert_eq!(l.v1_cpu.as_deref(), Some(Path::new("/sys/fs/cgroup/cpu")));
        assert_eq!(l.v1_cpuset.as_deref(), Some(Path::new("/sys/fs/cgroup/cpuset")));
    }

    #[test]
    fn pure_v2_fixture() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("proc/self")).unwrap();
        std::fs::write(
            dir.path().join("proc/self/mountinfo"),
            "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("proc/self/cgroup"), "0::/user.slice/app.service\n").unwrap();
        let root = HostRoot::under(dir.path());
        let l = CgroupLayout::detect(&root).unwrap();
        assert_eq!(l.v2, Some(dir.path().join("sys/fs/cgroup/user.slice/app.service")));
        assert_eq!((l.v1_memory, l.v1_cpu), (None, None));
    }
}
