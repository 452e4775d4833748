//! The submitter's environment (docs/DESIGN.md §10): what `lardon submit`
//! captured from its caller, kept with the task as one blob and the base a
//! run's environment is built on instead of the daemon's (`sbatch
//! --export=ALL`). Also resolves a program against that environment's
//! `PATH`, so that the run still starts with `posix_spawn` (see
//! [`resolve_program`]).

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use thiserror::Error;

/// The prefix of Lardon's own variables: never taken from a submitter's
/// environment (a submit from inside a task must not pass on its parent's
/// `LARDON_ITEM_OFFSET` or scratch directory); the daemon sets its own.
pub const LARDON_PREFIX: &[u8] = b"LARDON_";

/// A captured environment: `NAME=VALUE\0` per variable, in the caller's
/// order. Valid by construction (every entry has a non-empty name and an
/// `=`); cloning shares the bytes (the spec of every run holds one) and
/// the difference from the daemon's environment, worked out once
/// ([`SubmitEnv::delta`]) for every run that shares it (one `--each`).
#[derive(Debug, Clone)]
pub struct SubmitEnv {
    bytes: Arc<[u8]>,
    delta: Arc<OnceLock<EnvDelta>>,
}

impl PartialEq for SubmitEnv {
    fn eq(&self, other: &SubmitEnv) -> bool {
        self.bytes == other.bytes
    }
}

impl Eq for SubmitEnv {}

/// What a run changes in the daemon's own environment to get a
/// submitter's: applied to the daemon's environment, it gives exactly the
/// submitter's variables (Lardon's own removed; the daemon sets them per
/// run). The standard library starts a run with `posix_spawn` when only
/// this difference is applied and `PATH` is not in it; a cleared
/// environment (or a set `PATH`) makes it fork for a program it must look
/// up, and copying every variable costs the launch path per run.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct EnvDelta {
    /// Variables of the daemon's that the submitter lacks (and Lardon's
    /// own).
    pub remove: Vec<OsString>,
    /// Variables the submitter sets to another value, or only it sets.
    pub set: Vec<(OsString, OsString)>,
    /// Whether `PATH` is removed or set: the program is then looked up in
    /// the submitter's `PATH` ([`resolve_program`]).
    pub path_differs: bool,
}

impl EnvDelta {
    /// The difference that turns `daemon` into `env` (the last value of a
    /// name `env` sets twice wins, as when each is set in turn).
    pub fn between(env: &SubmitEnv, daemon: &[(OsString, OsString)]) -> EnvDelta {
        let mut theirs: BTreeMap<&OsStr, &OsStr> = env.vars().collect();
        let mut delta = EnvDelta::default();
        for (k, v) in daemon {
            let lardons = k.as_bytes().starts_with(LARDON_PREFIX);
            match theirs.remove(k.as_os_str()) {
                Some(mine) if mine == v.as_os_str() && !lardons => {}
                Some(mine) => delta.set.push((k.clone(), mine.to_os_string())),
                None => delta.remove.push(k.clone()),
            }
        }
        delta.set.extend(theirs.into_iter().map(|(k, v)| (k.to_os_string(), v.to_os_string())));
        delta.path_differs =
            delta.remove.iter().any(|k| k == "PATH") || delta.set.iter().any(|(k, _)| k == "PATH");
        delta
    }
}

/// The daemon's own environment, read once: the daemon never changes it
/// after start, so it is what every run's environment starts from.
fn daemon_env() -> &'static [(OsString, OsString)] {
    static ENV: OnceLock<Vec<(OsString, OsString)>> = OnceLock::new();
    ENV.get_or_init(|| std::env::vars_os().collect())
}

/// Why a captured environment was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SubmitEnvError {
    /// An entry without `=` or with an empty name.
    #[error("submit_env: entry {0} is not NAME=VALUE")]
    BadEntry(usize),
}

impl SubmitEnv {
    /// Decodes `NAME=VALUE\0…` (a final NUL optional; empty: an empty
    /// environment, `--env-clear`).
    ///
    /// # Errors
    /// [`SubmitEnvError::BadEntry`] naming the first entry that is not
    /// `NAME=VALUE`.
    pub fn from_blob(mut blob: Vec<u8>) -> Result<SubmitEnv, SubmitEnvError> {
        if !blob.is_empty() && blob.last() != Some(&0) {
            blob.push(0);
        }
        for (i, entry) in blob.split(|b| *b == 0).filter(|e| !e.is_empty()).enumerate() {
            if entry.iter().position(|b| *b == b'=').is_none_or(|p| p == 0) {
                return Err(SubmitEnvError::BadEntry(i));
            }
        }
        if blob.windows(2).any(|w| w == [0, 0]) || blob.first() == Some(&0) {
            return Err(SubmitEnvError::BadEntry(0));
        }
        Ok(SubmitEnv::new(blob))
    }

    fn new(bytes: Vec<u8>) -> SubmitEnv {
        SubmitEnv { bytes: bytes.into(), delta: Arc::default() }
    }

    /// What a run applies to the daemon's environment to get this one
    /// ([`EnvDelta::between`] the daemon's own), worked out on first use
    /// and shared by every clone.
    pub fn delta(&self) -> &EnvDelta {
        self.delta.get_or_init(|| EnvDelta::between(self, daemon_env()))
    }

    /// Encodes `vars` (a name holding `=` or either holding a NUL is
    /// dropped: no process could be given it).
    pub fn from_vars<K: AsRef<OsStr>, V: AsRef<OsStr>>(vars: impl IntoIterator<Item = (K, V)>) -> SubmitEnv {
        let mut blob = Vec::new();
        for (k, v) in vars {
            let (k, v) = (k.as_ref().as_bytes(), v.as_ref().as_bytes());
            if k.is_empty() || k.contains(&b'=') || k.contains(&0) || v.contains(&0) {
                continue;
            }
            blob.extend_from_slice(k);
            blob.push(b'=');
            blob.extend_from_slice(v);
            blob.push(0);
        }
        SubmitEnv::new(blob)
    }

    /// The stored form (what [`SubmitEnv::from_blob`] reads).
    pub fn blob(&self) -> &[u8] {
        &self.bytes
    }

    /// Every variable, in order, Lardon's own (`LARDON_*`) left out.
    pub fn vars(&self) -> impl Iterator<Item = (&OsStr, &OsStr)> {
        self.bytes.split(|b| *b == 0).filter(|e| !e.is_empty() && !e.starts_with(LARDON_PREFIX)).filter_map(
            |e| {
                let p = e.iter().position(|b| *b == b'=')?;
                Some((OsStr::from_bytes(&e[..p]), OsStr::from_bytes(&e[p + 1..])))
            },
        )
    }

    /// The last value of `name`, if set.
    pub fn get(&self, name: &str) -> Option<&OsStr> {
        self.vars().filter(|(k, _)| k.as_bytes() == name.as_bytes()).map(|(_, v)| v).last()
    }
}

/// The search path `execvp` uses when `PATH` is unset.
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// `program` as the path to start: a name without `/` looked up in `path`
/// (relative entries against `cwd`), as `execvp` would in the child;
/// anything else as given. The standard library's `Command` starts a
/// program it has to look up with `fork` instead of `posix_spawn` when the
/// child's `PATH` differs from the daemon's (twice the daemon's CPU per
/// run): handing it the absolute path keeps `posix_spawn`.
///
/// `None` when no entry holds an executable file of that name.
pub fn resolve_program(program: &str, path: Option<&OsStr>, cwd: Option<&Path>) -> Option<PathBuf> {
    if program.contains('/') {
        return Some(PathBuf::from(program));
    }
    let path = path.unwrap_or(OsStr::new(DEFAULT_PATH));
    for dir in path.as_bytes().split(|b| *b == b':') {
        // An empty entry is the working directory, as for `execvp`.
        let dir = if dir.is_empty() { Path::new(".") } else { Path::new(OsStr::from_bytes(dir)) };
        let full = match (dir.is_absolute(), cwd) {
            (false, Some(cwd)) => cwd.join(dir).join(program),
            _ => dir.join(program),
        };
        let Ok(meta) = std::fs::metadata(&full) else { continue };
        if meta.is_file() && meta.permissions().mode() & 0o111 != 0 {
            return Some(full);
        }
    }
    None
}

/// Names of the variables whose value in `env` differs from `base` (or
/// that only one of them sets), sorted; Lardon's own left out.
pub fn differing(
    env: &SubmitEnv,
    base: impl IntoIterator<Item = (OsString, OsString)>,
) -> Vec<(String, Option<String>)> {
    let mut ours: std::collections::BTreeMap<&OsStr, &OsStr> = env.vars().collect();
    let mut out = Vec::new();
    for (k, v) in base {
        if k.as_bytes().starts_with(LARDON_PREFIX) {
            continue;
        }
        match ours.remove(k.as_os_str()) {
            Some(mine) if mine == v => {}
            Some(mine) => {
                out.push((k.to_string_lossy().into_owned(), Some(mine.to_string_lossy().into_owned())))
            }
            None => out.push((k.to_string_lossy().into_owned(), None)),
        }
    }
    out.extend(
        ours.into_iter()
            .map(|(k, v)| (k.to_string_lossy().into_owned(), Some(v.to_string_lossy().into_owned()))),
    );
    out.sort();
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_blob_round_trips_and_lardon_variables_are_left_out() {
        let env = SubmitEnv::from_vars([("A", "1"), ("LARDON_TASK_ID", "7"), ("B", "x=y"), ("BAD=", "z")]);
        let back = SubmitEnv::from_blob(env.blob().to_vec()).unwrap();
        assert_eq!(back, env);
        let vars: Vec<_> = back.vars().collect();
        assert_eq!(vars, vec![(OsStr::new("A"), OsStr::new("1")), (OsStr::new("B"), OsStr::new("x=y"))]);
        assert_eq!(SubmitEnv::from_blob(Vec::new()).unwrap().vars().count(), 0);
        assert_eq!(SubmitEnv::from_blob(b"NOEQ\0".to_vec()), Err(SubmitEnvError::BadEntry(0)));
        assert_eq!(SubmitEnv::from_blob(b"A=1\0=x\0".to_vec()), Err(SubmitEnvError::BadEntry(1)));
    }

    #[test]
    fn the_delta_applied_to_the_daemons_environment_gives_the_submitters() {
        let os = |k: &str, v: &str| (OsString::from(k), OsString::from(v));
        let daemon =
            vec![os("HOME", "/root"), os("PATH", "/bin"), os("GONE", "1"), os("LARDON_STATE_DIR", "/s")];
        let env =
            SubmitEnv::from_vars([("HOME", "/root"), ("PATH", "/bin"), ("NEW", "2"), ("LARDON_X", "y")]);
        let d = EnvDelta::between(&env, &daemon);
        assert_eq!(d.remove, vec![OsString::from("GONE"), OsString::from("LARDON_STATE_DIR")]);
        assert_eq!(d.set, vec![os("NEW", "2")]);
        assert!(!d.path_differs, "PATH is the daemon's: no lookup here, posix_spawnp finds it");
        // Applied in turn, the delta gives exactly the submitter's variables.
        let mut applied: BTreeMap<OsString, OsString> = daemon.iter().cloned().collect();
        d.remove.iter().for_each(|k| drop(applied.remove(k)));
        applied.extend(d.set.iter().cloned());
        let want: BTreeMap<OsString, OsString> =
            env.vars().map(|(k, v)| (k.to_os_string(), v.to_os_string())).collect();
        assert_eq!(applied, want);
        let other = SubmitEnv::from_vars([("PATH", "/venv/bin:/bin"), ("A", "1"), ("A", "2")]);
        let d = EnvDelta::between(&other, &daemon);
        assert!(d.path_differs);
        assert!(d.set.contains(&os("A", "2")) && !d.set.contains(&os("A", "1")), "{d:?}");
        let cleared = SubmitEnv::from_blob(Vec::new()).unwrap();
        assert!(EnvDelta::between(&cleared, &daemon).path_differs, "a cleared PATH is a different PATH");
    }

    #[test]
    fn a_program_is_found_in_the_given_path_first() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("sh");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = format!("{}:/bin:/usr/bin", dir.path().display());
        assert_eq!(resolve_program("sh", Some(OsStr::new(&path)), None), Some(script));
        assert_eq!(resolve_program("./x", Some(OsStr::new(&path)), None), Some(PathBuf::from("./x")));
        assert_eq!(resolve_program("no-such-program-here", Some(OsStr::new("/bin")), None), None);
    }
}
