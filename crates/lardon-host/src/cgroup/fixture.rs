//! A cgroupfs stand-in for tests: a temp dir whose writes follow the
//! kernel's rules that matter to the set-up — `mkdir` creates a cgroup's
//! interface files (a controller's files only where the parent enabled
//! it), `cgroup.subtree_control` refuses a controller the cgroup does not
//! offer and answers `EBUSY` while a non-root cgroup holds a process,
//! writing a pid to `cgroup.procs` moves it, and a file that does not exist
//! cannot be written (cgroupfs creates no files).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::fsops::CgroupFs;

/// The fixture filesystem rooted at a temp dir.
#[derive(Debug)]
pub(crate) struct FakeCgroupFs {
    /// The v2 mount (root cgroup) inside the temp dir.
    pub(crate) mount: PathBuf,
    /// Directories (and everything below) we may not write.
    pub(crate) readonly: Vec<PathBuf>,
    /// Files whose writes fail with this errno.
    pub(crate) refuse: Mutex<Vec<(PathBuf, i32)>>,
}

fn os(errno: i32) -> io::Error {
    io::Error::from_raw_os_error(errno)
}

fn write_file(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
}

/// Interface files of one controller in a child cgroup.
fn controller_files(controller: &str) -> &'static [(&'static str, &'static str)] {
    match controller {
        "memory" => &[
            ("memory.max", "max\n"),
            ("memory.high", "max\n"),
            ("memory.current", "0\n"),
            ("memory.peak", "0\n"),
            ("memory.events", "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n"),
        ],
        "cpu" => &[("cpu.max", "max 100000\n")],
        "pids" => &[("pids.max", "max\n")],
        _ => &[],
    }
}

/// Makes `dir` a cgroup offering `offered`, with `enabled` in its
/// `subtree_control` and `procs` in it; `root` omits `cgroup.type` (and
/// `cgroup.kill`, `cgroup.events`) as the kernel does for the root.
pub(crate) fn cgroup(dir: &Path, root: bool, offered: &str, enabled: &str, procs: &[u32]) {
    std::fs::create_dir_all(dir).unwrap();
    write_file(&dir.join("cgroup.controllers"), &format!("{offered}\n"));
    write_file(&dir.join("cgroup.subtree_control"), &format!("{enabled}\n"));
    write_file(&dir.join("cgroup.procs"), &procs.iter().map(|p| format!("{p}\n")).collect::<String>());
    if !root {
        write_file(&dir.join("cgroup.type"), "domain\n");
        write_file(&dir.join("cgroup.kill"), "");
        let populated = u8::from(!procs.is_empty());
        write_file(&dir.join("cgroup.events"), &format!("populated {populated}\nfrozen 0\n"));
        for c in offered.split_whitespace() {
            for (name, text) in controller_files(c) {
                write_file(&dir.join(name), text);
            }
        }
    }
}

fn words(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().split_whitespace().map(str::to_owned).collect()
}

fn remove_pid(dir: &Path, pid: &str) {
    let procs = dir.join("cgroup.procs");
    if procs.is_file() {
        let kept: String = std::fs::read_to_string(&procs)
            .unwrap()
            .lines()
            .filter(|l| *l != pid)
            .map(|l| format!("{l}\n"))
            .collect();
        write_file(&procs, &kept);
    }
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        if entry.path().is_dir() {
            remove_pid(&entry.path(), pid);
        }
    }
}

impl FakeCgroupFs {
    /// A fixture with its v2 root at `mount`.
    pub(crate) fn new(mount: PathBuf) -> Self {
        FakeCgroupFs { mount, readonly: Vec::new(), refuse: Mutex::new(Vec::new()) }
    }

    /// Makes writes to `path` fail with `errno`.
    pub(crate) fn refuse(&self, path: PathBuf, errno: i32) {
        self.refuse.lock().unwrap().push((path, errno));
    }
}

impl CgroupFs for FakeCgroupFs {
    fn read(&self, path: &Path) -> io::Result<String> {
        std::fs::read_to_string(path)
    }

    fn write(&self, path: &Path, value: &str) -> io::Result<()> {
        if let Some((_, errno)) = self.refuse.lock().unwrap().iter().find(|(p, _)| p == path) {
            return Err(os(*errno));
        }
        let dir = path.parent().ok_or_else(|| os(libc::EINVAL))?;
        if !self.writable(dir) {
            return Err(os(libc::EACCES));
        }
        if !path.is_file() {
            return Err(os(libc::ENOENT));
        }
        match path.file_name().and_then(|n| n.to_str()) {
            Some("cgroup.subtree_control") => {
                let offered = words(&dir.join("cgroup.controllers"));
                let mut enabled = words(path);
                for token in value.split_whitespace() {
                    let c = token.strip_prefix('+').ok_or_else(|| os(libc::EINVAL))?;
                    if !offered.iter().any(|o| o == c) {
                        return Err(os(libc::ENOENT));
                    }
                    let is_root = !dir.join("cgroup.type").exists();
                    if !is_root && !words(&dir.join("cgroup.procs")).is_empty() {
                        return Err(os(libc::EBUSY));
                    }
                    if !enabled.iter().any(|e| e == c) {
                        enabled.push(c.to_owned());
                    }
                }
                write_file(path, &format!("{}\n", enabled.join(" ")));
            }
            Some("cgroup.procs") => {
                let pid = value.trim();
                remove_pid(&self.mount, pid);
                let mut text = std::fs::read_to_string(path)?;
                text.push_str(&format!("{pid}\n"));
                write_file(path, &text);
            }
            _ => write_file(path, value),
        }
        Ok(())
    }

    fn create_dir(&self, path: &Path) -> io::Result<()> {
        let parent = path.parent().ok_or_else(|| os(libc::EINVAL))?;
        if !self.writable(parent) {
            return Err(os(libc::EACCES));
        }
        std::fs::create_dir(path)?;
        let enabled = words(&parent.join("cgroup.subtree_control")).join(" ");
        cgroup(path, false, &enabled, "", &[]);
        Ok(())
    }

    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        if !words(&path.join("cgroup.procs")).is_empty() {
            return Err(os(libc::EBUSY));
        }
        if std::fs::read_dir(path)?.flatten().any(|e| e.path().is_dir()) {
            return Err(os(libc::EBUSY));
        }
        std::fs::remove_dir_all(path)
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn writable(&self, dir: &Path) -> bool {
        !self.readonly.iter().any(|r| dir.starts_with(r))
    }
}
