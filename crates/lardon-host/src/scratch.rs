//! A scratch volume on a real directory: [`DirVolume`], the Linux
//! implementation of [`lardon::VolumeController`] (statvfs, mkdir,
//! syncfs, a user hook with a timeout).

use std::fs;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lardon::{VolumeController, VolumeIdentity};
use nix::sys::statvfs::statvfs;

/// Prefix of lease directories (the Governor names them `lardon-lease-N`).
const LEASE_PREFIX: &str = "lardon-lease-";

/// A scratch volume rooted at a directory, with an optional hook (argv,
/// run without a shell) to make it safe to unplug (`umount`, `swapoff`…).
#[derive(Debug, Clone)]
pub struct DirVolume {
    root: PathBuf,
    hook: Option<Vec<String>>,
    hook_timeout: Duration,
}

impl DirVolume {
    /// A volume at `root` with no hook.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        DirVolume { root: root.into(), hook: None, hook_timeout: Duration::from_secs(30) }
    }

    /// Runs `argv` as the drain hook, killed after `timeout`.
    #[must_use]
    pub fn with_hook(mut self, argv: Vec<String>, timeout: Duration) -> Self {
        self.hook = if argv.is_empty() { None } else { Some(argv) };
        self.hook_timeout = timeout;
        self
    }

    /// The volume's directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn lease_dirs(&self) -> Result<Vec<PathBuf>, String> {
        let entries = fs::read_dir(&self.root).map_err(|e| format!("{}: {e}", self.root.display()))?;
        Ok(entries
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with(LEASE_PREFIX))
            .map(|e| e.path())
            .collect())
    }
}

impl VolumeController for DirVolume {
    fn identify(&self) -> Result<Option<VolumeIdentity>, String> {
        if !self.root.is_dir() {
            return Ok(None);
        }
        let stat = statvfs(&self.root).map_err(|e| format!("statvfs {}: {e}", self.root.display()))?;
        #[allow(clippy::useless_conversion)] // f_fsid's width differs between targets
        let fs_id = u64::from(stat.filesystem_id());
        Ok(Some(VolumeIdentity { fs_id, path: self.root.clone() }))
    }

    fn free_bytes(&self) -> Result<u64, String> {
        let stat = statvfs(&self.root).map_err(|e| format!("statvfs {}: {e}", self.root.display()))?;
        #[allow(clippy::useless_conversion)]
        let (avail, frsize) = (u64::from(stat.blocks_available()), stat.fragment_size());
        Ok(avail.saturating_mul(frsize))
    }

    fn create_lease_dir(&self, name: &str) -> Result<PathBuf, String> {
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err(format!("invalid lease name {name:?}"));
        }
        let path = self.root.join(name);
        // A leftover from a crash is emptied: a lease starts clean.
        if path.exists() {
            fs::remove_dir_all(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        fs::create_dir(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(path)
    }

    fn remove_lease_dir(&self, path: &Path) -> Result<(), String> {
        if !path.starts_with(&self.root) {
            return Err(format!("{} is not inside {}", path.display(), self.root.display()));
        }
        match fs::remove_dir_all(path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }

    fn sync(&self) -> Result<(), String> {
        let dir = fs::File::open(&self.root).map_err(|e| format!("{}: {e}", self.root.display()))?;
        nix::unistd::syncfs(dir.as_fd()).map_err(|e| format!("syncfs {}: {e}", self.root.display()))
    }

    fn run_hook(&self) -> Result<(), String> {
        let Some(argv) = &self.hook else { return Ok(()) };
        let Some((program, args)) = argv.split_first() else { return Ok(()) };
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run {program}: {e}"))?;
        let deadline = Instant::now() + self.hook_timeout;
        loop {
            match child.try_wait() {
                Ok(Some(status)) if status.success() => return Ok(()),
                Ok(Some(status)) => {
                    let mut stderr = String::new();
                    if let Some(mut pipe) = child.stderr.take() {
                        let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
                    }
                    return Err(format!("{program} exited with {status}: {}", stderr.trim()));
                }
                Ok(None) if Instant::now() >= deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!("{program} timed out after {:?}", self.hook_timeout));
                }
                // A hook runs once per drain; a short sleep while it runs is
                // cheaper than a reaper thread.
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(e) => return Err(format!("waiting for {program}: {e}")),
            }
        }
    }

    fn verify(&self) -> Result<(), String> {
        // After an unmount hook the directory is the bare mount point: no
        // lease can remain there either way.
        if !self.root.is_dir() {
            return Ok(());
        }
        let left = self.lease_dirs()?;
        if left.is_empty() { Ok(()) } else { Err(format!("{} lease directories remain", left.len())) }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_real_directory_is_identified_measured_and_leased() {
        let dir = tempfile::tempdir().unwrap();
        let vol = DirVolume::new(dir.path());
        let id = vol.identify().unwrap().unwrap();
        assert_eq!(id.path, dir.path());
        assert!(vol.free_bytes().unwrap() > 0);
        let lease = vol.create_lease_dir("lardon-lease-1").unwrap();
        fs::write(lease.join("data"), b"x").unwrap();
        assert!(vol.verify().is_err(), "a lease remains");
        vol.remove_lease_dir(&lease).unwrap();
        assert!(!lease.exists());
        vol.sync().unwrap();
        vol.verify().unwrap();
        assert!(vol.create_lease_dir("../escape").is_err());
        assert!(vol.remove_lease_dir(Path::new("/etc")).is_err());
    }

    #[test]
    fn a_missing_directory_is_absent() {
        let vol = DirVolume::new("/nonexistent/lardon-scratch");
        assert_eq!(vol.identify().unwrap(), None);
    }

    #[test]
    fn hooks_report_failure_and_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let ok = DirVolume::new(dir.path()).with_hook(vec!["true".into()], Duration::from_secs(5));
        ok.run_hook().unwrap();
        let fail = DirVolume::new(dir.path()).with_hook(
            vec!["sh".into(), "-c".into(), "echo busy >&2; exit 3".into()],
            Duration::from_secs(5),
        );
        let err = fail.run_hook().unwrap_err();
        assert!(err.contains("busy"), "{err}");
        let slow =
            DirVolume::new(dir.path()).with_hook(vec!["sleep".into(), "5".into()], Duration::from_millis(50));
        assert!(slow.run_hook().unwrap_err().contains("timed out"));
    }

    #[test]
    fn the_governor_leases_a_real_directory() {
        use std::sync::Arc;
        let dir = tempfile::tempdir().unwrap();
        let profile = lardon::HostProfile::new(16 << 30, 8);
        let gov =
            lardon::Governor::new(lardon::HostPolicy::default_for(&profile), lardon::FakeProbe::new(profile))
                .unwrap();
        let _ = gov.sample();
        gov.add_volume("tmp", Arc::new(DirVolume::new(dir.path())), None).unwrap();
        // The FakeProbe's snapshot is stamped at time 0; a real clock is past
        // it, so reserve against a fresh healthy snapshot.
        let snap = lardon::Snapshot::healthy(gov.now(), 16 << 30);
        let e = lardon::Estimate::builder().memory(1 << 20).scratch(10 << 20).build();
        let r = gov.reserve(&e, &snap).unwrap();
        let path = r.contract().scratch.clone().unwrap().path;
        assert!(path.is_dir(), "the lease directory exists during the reservation");
        fs::write(path.join("out"), b"data").unwrap();
        drop(r);
        assert!(!path.exists(), "and is gone afterwards");
        assert_eq!(gov.drain("tmp").unwrap().state, lardon::VolumeState::SafeToUnplug);
    }
}
