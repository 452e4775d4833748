//! Where the daemon keeps its state and its socket (docs/DESIGN.md §10).
//!
//! * state dir: `--state-dir` if given, else `$LARDON_STATE_DIR`, else
//!   `$XDG_STATE_HOME/lardon/`, else `~/.local/state/lardon/`;
//! * socket: `$LARDON_SOCKET` if set; else, when the state dir was chosen
//!   explicitly (flag or `$LARDON_STATE_DIR`), `<state dir>/lardon.sock`
//!   so that daemons on different state dirs never share a socket; else
//!   `$XDG_RUNTIME_DIR/lardon/lardon.sock`; else `<state dir>/lardon.sock`.
//!
//! Resolution takes the environment as a function so that it is tested
//! without touching the process environment.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// File name of the daemon's socket.
pub const SOCKET_FILE: &str = "lardon.sock";
/// File name of the SQLite database inside the state dir.
pub const DB_FILE: &str = "lardon.db";
/// Sub-directory of `$XDG_RUNTIME_DIR` / `$XDG_STATE_HOME`.
pub const APP_DIR: &str = "lardon";

/// Environment variable overriding the state dir.
pub const ENV_STATE_DIR: &str = "LARDON_STATE_DIR";
/// Environment variable overriding the socket path.
pub const ENV_SOCKET: &str = "LARDON_SOCKET";

/// The resolved locations of one daemon instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    /// Directory holding the database, logs and (maybe) the socket.
    pub state_dir: PathBuf,
    /// The Unix socket the daemon serves on.
    pub socket: PathBuf,
}

/// Why the locations could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot find a state directory: set $XDG_STATE_HOME or $HOME, or pass --state-dir")]
pub struct NoStateDir;

impl Paths {
    /// Resolves from the process environment; `state_dir` is the
    /// `--state-dir` flag, if any.
    ///
    /// # Errors
    /// [`NoStateDir`] when neither a flag nor `$XDG_STATE_HOME`/`$HOME` give one.
    pub fn resolve(state_dir: Option<&Path>) -> Result<Paths, NoStateDir> {
        Self::resolve_with(state_dir, |key| std::env::var_os(key))
    }

    /// Resolves with `env` standing in for the environment.
    ///
    /// # Errors
    /// [`NoStateDir`] when neither a flag nor `$XDG_STATE_HOME`/`$HOME` give one.
    pub fn resolve_with(
        state_dir: Option<&Path>,
        env: impl Fn(&str) -> Option<OsString>,
    ) -> Result<Paths, NoStateDir> {
        // Empty or relative XDG values are invalid per the spec: ignore them.
        let abs = |key: &str| env(key).map(PathBuf::from).filter(|p| p.is_absolute());
        let explicit = state_dir
            .map(Path::to_path_buf)
            .or_else(|| env(ENV_STATE_DIR).filter(|v| !v.is_empty()).map(PathBuf::from));
        let state_dir = match &explicit {
            Some(dir) => dir.clone(),
            None => abs("XDG_STATE_HOME")
                .map(|d| d.join(APP_DIR))
                .or_else(|| abs("HOME").map(|h| h.join(".local").join("state").join(APP_DIR)))
                .ok_or(NoStateDir)?,
        };
        let socket = if let Some(sock) = env(ENV_SOCKET).filter(|v| !v.is_empty()) {
            PathBuf::from(sock)
        } else if explicit.is_some() {
            state_dir.join(SOCKET_FILE)
        } else if let Some(run) = abs("XDG_RUNTIME_DIR") {
            run.join(APP_DIR).join(SOCKET_FILE)
        } else {
            state_dir.join(SOCKET_FILE)
        };
        Ok(Paths { state_dir, socket })
    }

    /// The SQLite database of this instance.
    pub fn database(&self) -> PathBuf {
        self.state_dir.join(DB_FILE)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<OsString> + 'a {
        move |key| pairs.iter().find(|(k, _)| *k == key).map(|(_, v)| OsString::from(v))
    }

    #[test]
    fn runtime_dir_wins_for_the_socket() {
        let p = Paths::resolve_with(
            None,
            env(&[("XDG_RUNTIME_DIR", "/run/user/7"), ("XDG_STATE_HOME", "/s"), ("HOME", "/h")]),
        )
        .unwrap();
        assert_eq!(p.state_dir, PathBuf::from("/s/lardon"));
        assert_eq!(p.socket, PathBuf::from("/run/user/7/lardon/lardon.sock"));
        assert_eq!(p.database(), PathBuf::from("/s/lardon/lardon.db"));
    }

    #[test]
    fn home_fallback_and_socket_in_state_dir() {
        let p = Paths::resolve_with(None, env(&[("HOME", "/h")])).unwrap();
        assert_eq!(p.state_dir, PathBuf::from("/h/.local/state/lardon"));
        assert_eq!(p.socket, PathBuf::from("/h/.local/state/lardon/lardon.sock"));
    }

    #[test]
    fn explicit_state_dir_keeps_its_own_socket() {
        let e = [("XDG_RUNTIME_DIR", "/run/user/7"), ("HOME", "/h")];
        let p = Paths::resolve_with(Some(Path::new("/tmp/x")), env(&e)).unwrap();
        assert_eq!(p.socket, PathBuf::from("/tmp/x/lardon.sock"));
        let e = [("XDG_RUNTIME_DIR", "/run/user/7"), (ENV_STATE_DIR, "/tmp/y")];
        let p = Paths::resolve_with(None, env(&e)).unwrap();
        assert_eq!(p.socket, PathBuf::from("/tmp/y/lardon.sock"));
        let e = [(ENV_SOCKET, "/tmp/z.sock"), ("HOME", "/h")];
        assert_eq!(Paths::resolve_with(None, env(&e)).unwrap().socket, PathBuf::from("/tmp/z.sock"));
    }

    #[test]
    fn relative_xdg_is_ignored_and_nothing_is_an_error() {
        let p = Paths::resolve_with(None, env(&[("XDG_STATE_HOME", "rel"), ("HOME", "/h")])).unwrap();
        assert_eq!(p.state_dir, PathBuf::from("/h/.local/state/lardon"));
        assert_eq!(Paths::resolve_with(None, env(&[])), Err(NoStateDir));
    }
}
