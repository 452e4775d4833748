//! `/proc/self/mountinfo` and `/proc/self/cgroup`: where the cgroup
//! hierarchies are mounted and where we sit in each.

use std::path::{Path, PathBuf};

use crate::parse::{ParseError, parse_u64};

/// One cgroup hierarchy mount from `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupMount {
    /// `true` for `cgroup2`, `false` for a v1 `cgroup` mount.
    pub v2: bool,
    /// Where it is mounted (e.g. `/sys/fs/cgroup/memory`).
    pub mount_point: PathBuf,
    /// The hierarchy path that is the mount's root (`/` unless the mount is
    /// a bind of a sub-cgroup, as in containers).
    pub root: String,
    /// v1 controllers (`memory`, `cpu`, `name=systemd` …); empty for v2.
    pub controllers: Vec<String>,
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match (bytes[i], octal) {
            (b'\\', Some(d)) => {
                let v = d.iter().fold(0u32, |acc, b| acc * 8 + u32::from(b - b'0'));
                out.push(u8::try_from(v).unwrap_or(b'?'));
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses `/proc/self/mountinfo` and returns its cgroup mounts (v1 and v2).
///
/// # Errors
/// [`ParseError`] when a line lacks the ` - ` separator or mandatory fields.
pub fn parse_mountinfo(text: &str) -> Result<Vec<CgroupMount>, ParseError> {
    let mut mounts = Vec::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        let (left, right) = line.split_once(" - ").ok_or_else(|| ParseError::Junk(line.to_owned()))?;
        let l: Vec<&str> = left.split(' ').collect();
        let r: Vec<&str> = right.split(' ').collect();
        if l.len() < 6 || r.len() < 3 {
            return Err(ParseError::Missing(format!("mountinfo fields in {line:?}")));
        }
        parse_u64("mount id", l[0])?;
        let fstype = r[0];
        if fstype != "cgroup" && fstype != "cgroup2" {
            continue;
        }
        let controllers = if fstype == "cgroup" {
            r[2].split(',')
                .filter(|o| !matches!(*o, "rw" | "ro") && !o.contains("xattr") && *o != "noprefix")
                .filter(|o| !o.starts_with("release_agent=") && !o.starts_with("clone_children"))
                .map(str::to_owned)
                .collect()
        } else {
            Vec::new()
        };
        mounts.push(CgroupMount {
            v2: fstype == "cgroup2",
            mount_point: PathBuf::from(unescape(l[4])),
            root: unescape(l[3]),
            controllers,
        });
    }
    Ok(mounts)
}

/// One line of `/proc/self/cgroup`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupMembership {
    /// Hierarchy id (0 for v2).
    pub id: u32,
    /// Controllers of a v1 hierarchy; empty for v2.
    pub controllers: Vec<String>,
    /// Our path in that hierarchy (starts with `/`).
    pub path: String,
}

/// Parses `/proc/self/cgroup` (`id:controllers:path` lines).
///
/// # Errors
/// [`ParseError`] on a malformed line.
pub fn parse_proc_cgroup(text: &str) -> Result<Vec<CgroupMembership>, ParseError> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(ctrl), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(ParseError::Junk(line.to_owned()));
        };
        let id = u32::try_from(parse_u64("hierarchy id", id)?)
            .map_err(|_| ParseError::Overflow("hierarchy id".to_owned()))?;
        if !path.starts_with('/') {
            return Err(ParseError::Invalid { field: "cgroup path".to_owned(), value: path.to_owned() });
        }
        let controllers = ctrl.split(',').filter(|c| !c.is_empty()).map(str::to_owned).collect();
        out.push(CgroupMembership { id, controllers, path: path.to_owned() });
    }
    Ok(out)
}

/// The directory of our own cgroup in `mount`, given our `path` in that
/// hierarchy; `None` when our cgroup is not visible through this mount.
pub fn own_dir(mount: &CgroupMount, path: &str) -> Option<PathBuf> {
    let rel = if mount.root == "/" {
        path
    } else {
        let rest = path.strip_prefix(mount.root.as_str())?;
        if !(rest.is_empty() || rest.starts_with('/')) {
            return None;
        }
        rest
    };
    let rel = rel.trim_start_matches('/');
    if rel.split('/').any(|c| c == "..") {
        return None;
    }
    Some(if rel.is_empty() { mount.mount_point.clone() } else { mount.mount_point.join(rel) })
}

/// Rebases an absolute path under `/sys` onto `sys` (for fixtures); other
/// paths are returned unchanged.
pub(crate) fn rebase(path: &Path, sys: &Path) -> PathBuf {
    match path.strip_prefix("/sys") {
        Ok(rest) if sys != Path::new("/sys") => sys.join(rest),
        _ => path.to_path_buf(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = include_str!("../tests/fixtures/proc/self/mountinfo");
    const CGROUP: &str = include_str!("../tests/fixtures/proc/self/cgroup");

    #[test]
    fn finds_hybrid_mounts() {
        let m = parse_mountinfo(HYBRID).unwrap();
        let v2: Vec<_> = m.iter().filter(|m| m.v2).collect();
        assert_eq!(v2.len(), 1);
        assert_eq!(v2[0].mount_point, Path::new("/sys/fs/cgroup/unified"));
        let memory = m.iter().find(|m| m.controllers.iter().any(|c| c == "memory")).unwrap();
        assert_eq!(memory.mount_point, Path::new("/sys/fs/cgroup/memory"));
        assert_eq!(memory.controllers, vec!["memory"]);
        let cpu = m.iter().find(|m| m.controllers.iter().any(|c| c == "cpu")).unwrap();
        assert_eq!(cpu.controllers, vec!["cpu"]);
    }

    #[test]
    fn parses_membership() {
        let c = parse_proc_cgroup(CGROUP).unwrap();
        assert_eq!(c.len(), 10);
        let memory = c.iter().find(|c| c.controllers == ["memory"]).unwrap();
        assert_eq!(memory.path, "/process_api/a90de98ae5bbdd41ed56a11cc58f966e");
        let v2 = c.iter().find(|c| c.id == 0).unwrap();
        assert_eq!((v2.path.as_str(), v2.controllers.len()), ("/", 0));
    }

    #[test]
    fn own_dir_honours_the_mount_root() {
        let mount = CgroupMount {
            v2: true,
            mount_point: PathBuf::from("/sys/fs/cgroup"),
            root: "/kubepods/pod1".to_owned(),
            controllers: vec![],
        };
        assert_eq!(own_dir(&mount, "/kubepods/pod1/c1"), Some(PathBuf::from("/sys/fs/cgroup/c1")));
        assert_eq!(own_dir(&mount, "/kubepods/pod1"), Some(PathBuf::from("/sys/fs/cgroup")));
        assert_eq!(own_dir(&mount, "/kubepods/pod10"), None);
        assert_eq!(own_dir(&mount, "/other"), None);
    }

    #[test]
    fn unescapes_and_rejects_malformed() {
        let line = "41 31 0:38 / /sys/fs/my\\040cg rw - cgroup2 cgroup2 rw\n";
        assert_eq!(parse_mountinfo(line).unwrap()[0].mount_point, Path::new("/sys/fs/my cg"));
        assert!(parse_mountinfo("41 31 0:38 / /x rw cgroup2 cgroup2 rw").is_err());
        assert!(parse_mountinfo("-1 31 0:38 / /x rw - cgroup2 cgroup2 rw").is_err());
        assert!(parse_proc_cgroup("4:memory").is_err());
        assert!(parse_proc_cgroup("-4:memory:/a").is_err());
        assert!(parse_proc_cgroup("4:memory:relative").is_err());
        assert!(parse_proc_cgroup("99999999999:memory:/").is_err());
    }

    #[test]
    fn rebases_sys_paths() {
        let sys = Path::new("/tmp/fx/sys");
        assert_eq!(rebase(Path::new("/sys/fs/cgroup/memory"), sys), sys.join("fs/cgroup/memory"));
        assert_eq!(rebase(Path::new("/sys/x"), Path::new("/sys")), Path::new("/sys/x"));
    }
}
