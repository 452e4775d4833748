//! [`HostRoot`]: where `/proc` and `/sys` are, so everything runs on fixtures.

use std::path::{Path, PathBuf};

use crate::error::HostError;

/// The roots of `/proc` and `/sys`. [`HostRoot::default`] is the real host;
/// tests point both at fixture trees. Absolute mount points read from
/// mountinfo under `/sys` are rebased onto [`HostRoot::sys`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRoot {
    /// Stands for `/proc`.
    pub proc: PathBuf,
    /// Stands for `/sys`.
    pub sys: PathBuf,
}

impl Default for HostRoot {
    fn default() -> Self {
        HostRoot { proc: PathBuf::from("/proc"), sys: PathBuf::from("/sys") }
    }
}

impl HostRoot {
    /// A fixture tree holding `proc/` and `sys/` under `dir`.
    pub fn under(dir: impl AsRef<Path>) -> Self {
        let dir = dir.as_ref();
        HostRoot { proc: dir.join("proc"), sys: dir.join("sys") }
    }

    /// `proc/<rel>`.
    pub fn proc_path(&self, rel: &str) -> PathBuf {
        self.proc.join(rel)
    }

    /// `sys/<rel>`.
    pub fn sys_path(&self, rel: &str) -> PathBuf {
        self.sys.join(rel)
    }
}

/// Reads a whole file, naming it in the error.
pub(crate) fn read(path: &Path) -> Result<String, HostError> {
    crate::read_pseudo(path).map_err(|e| HostError::io("read", path, e))
}
