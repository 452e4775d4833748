//! The daemon's log output: one `tracing-subscriber` set up before the
//! daemon starts, so every `tracing` line of the engine, host crate and
//! daemon reaches a person.
//!
//! * **Level**: `--log-level` (a level such as `debug`, or full directives
//!   such as `lardon_daemon=debug,info`) wins over `RUST_LOG`; the default
//!   is `info`. A bad value is a usage error naming its source.
//! * **Where**: by default both standard error and `<state dir>/daemon.log`
//!   (appended), so `lardon daemon &` leaves a log behind; `--log-file PATH`
//!   writes that file instead, and `--log-file -` writes standard error only
//!   (what a systemd unit wants: journald keeps it).
//! * **Rotation**: the file is size-bounded ([`rotate`]): past
//!   `--log-max-size` (16 MiB) it becomes `daemon.log.1`, the older ones
//!   move up to `--log-keep` (4) and the oldest is removed.
//! * **Shape**: on a terminal, coloured human lines with local timestamps;
//!   under journald (`JOURNAL_STREAM` set) plain lines without a timestamp,
//!   since journald stamps each line itself; otherwise, and always in the
//!   file, plain lines with timestamps and no colour codes.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

mod rotate;

use rotate::RotatingFile;
pub(crate) use rotate::{DEFAULT_KEEP, Rotation};

/// The default level when neither `--log-level` nor `RUST_LOG` is set.
const DEFAULT_LEVEL: &str = "info";

/// The log file's name inside the state dir when `--log-file` is not given.
pub(crate) const DAEMON_LOG: &str = "daemon.log";

/// Where log lines go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LogSink {
    /// Standard error and this file (the default: `<state dir>/daemon.log`).
    StderrAndFile(PathBuf),
    /// Only this file (`--log-file PATH`).
    File(PathBuf),
    /// Only standard error (`--log-file -`).
    Stderr,
}

impl LogSink {
    /// The sink for `--log-file` (`None` when not given) and the state dir.
    pub(crate) fn choose(log_file: Option<&Path>, state_dir: &Path) -> LogSink {
        match log_file {
            None => LogSink::StderrAndFile(state_dir.join(DAEMON_LOG)),
            Some(p) if p.as_os_str() == "-" => LogSink::Stderr,
            Some(p) => LogSink::File(p.to_path_buf()),
        }
    }

    fn file(&self) -> Option<&Path> {
        match self {
            LogSink::StderrAndFile(p) | LogSink::File(p) => Some(p),
            LogSink::Stderr => None,
        }
    }

    fn stderr(&self) -> bool {
        !matches!(self, LogSink::File(_))
    }
}

/// The filter from `--log-level`, else `RUST_LOG`, else [`DEFAULT_LEVEL`].
///
/// # Errors
/// A usage error naming `--log-level` or `RUST_LOG` when the directives do
/// not parse.
pub(crate) fn filter(level: Option<&str>, rust_log: Option<&str>) -> Result<EnvFilter> {
    let (text, source) = match (level, rust_log) {
        (Some(l), _) => (l, "--log-level"),
        (None, Some(env)) if !env.trim().is_empty() => (env, "RUST_LOG"),
        _ => (DEFAULT_LEVEL, "the default level"),
    };
    let directives = lardon_directives(text);
    EnvFilter::builder().parse(&directives).map_err(|e| {
        crate::error::usage(format!(
            "{source}: `{text}` is not a log level or filter ({e}); try error, warn, info, debug or trace"
        ))
    })
}

/// Lardon's own crates, whose lines a bare level is about.
const OWN_CRATES: [&str; 7] = [
    "lardon",
    "lardon_host",
    "lardon_daemon",
    "lardon_cli",
    "lardon_cluster",
    "lardon_cluster_core",
    "lardon_submit",
];

/// A bare level (`debug`) applies to Lardon's own crates; the libraries
/// under them (gRPC, HTTP/2) stay at `warn` unless asked for by name, so
/// `--log-level debug` shows every decision, not every HTTP/2 frame. Full
/// directives (with `=` or `,`) are used as written.
fn lardon_directives(text: &str) -> String {
    let level = text.trim();
    let bare = ["trace", "debug", "info", "warn", "error", "off"];
    if !bare.iter().any(|b| level.eq_ignore_ascii_case(b)) {
        return text.to_owned();
    }
    let level = level.to_ascii_lowercase();
    let others = if matches!(level.as_str(), "error" | "off") { level.as_str() } else { "warn" };
    let own: Vec<String> = OWN_CRATES.iter().map(|c| format!("{c}={level}")).collect();
    format!("{others},{}", own.join(","))
}

/// Installs the global subscriber for the daemon. Call once, before the
/// daemon starts.
///
/// # Errors
/// A bad level (usage error) or a log file that cannot be opened (the
/// error names the path).
pub(crate) fn init_daemon(level: Option<&str>, sink: &LogSink, rotation: Rotation) -> Result<()> {
    let rust_log = std::env::var("RUST_LOG").ok();
    let filter = filter(level, rust_log.as_deref())?;
    let file = match sink.file() {
        Some(path) => {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("--log-file: cannot create {}", dir.display()))?;
            }
            let file = RotatingFile::open(path, rotation)
                .with_context(|| format!("--log-file: cannot open {}", path.display()))?;
            Some(file)
        }
        None => None,
    };
    let terminal = std::io::stderr().is_terminal();
    let journald = std::env::var_os("JOURNAL_STREAM").is_some();
    let stderr_layer = sink.stderr().then(|| {
        let layer = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(terminal);
        if journald && !terminal { layer.without_time().boxed() } else { layer.boxed() }
    });
    let file_layer = file.map(|f| tracing_subscriber::fmt::layer().with_writer(f).with_ansi(false));
    tracing_subscriber::registry()
        .with(filter)
        .with(stderr_layer)
        .with(file_layer)
        .try_init()
        .context("installing the log subscriber")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_wins_over_the_environment() {
        let f = filter(Some("lardon_daemon=debug"), Some("error")).map(|f| f.to_string());
        assert_eq!(f.ok().as_deref(), Some("lardon_daemon=debug"));
    }

    #[test]
    fn a_bare_level_is_about_lardon_and_libraries_stay_at_warn() {
        let f = lardon_directives("debug");
        assert!(f.starts_with("warn,"), "{f}");
        for c in OWN_CRATES {
            assert!(f.contains(&format!("{c}=debug")), "{f}");
        }
        assert!(lardon_directives("ERROR").starts_with("error,"));
        assert_eq!(lardon_directives("h2=trace,info"), "h2=trace,info");
    }

    #[test]
    fn the_environment_is_used_without_the_flag() {
        let f = filter(None, Some("lardon_daemon=trace")).map(|f| f.to_string());
        assert_eq!(f.ok().as_deref(), Some("lardon_daemon=trace"));
    }

    #[test]
    fn info_is_the_default() {
        let default = filter(None, None).map(|f| f.to_string()).unwrap_or_default();
        assert!(default.contains("lardon_daemon=info"), "{default}");
        let blank = filter(None, Some("  ")).map(|f| f.to_string()).unwrap_or_default();
        assert_eq!(blank, default);
    }

    #[test]
    fn a_bad_level_names_its_source() {
        let err =
            format!("{:#}", filter(Some("loud=="), None).err().map(|e| e.to_string()).unwrap_or_default());
        assert!(err.contains("--log-level"), "{err}");
        let err =
            format!("{:#}", filter(None, Some("x=y=z")).err().map(|e| e.to_string()).unwrap_or_default());
        assert!(err.contains("RUST_LOG"), "{err}");
    }

    #[test]
    fn the_sink_follows_the_flag() {
        let dir = Path::new("/state");
        assert_eq!(LogSink::choose(None, dir), LogSink::StderrAndFile(dir.join(DAEMON_LOG)));
        assert_eq!(LogSink::choose(Some(Path::new("-")), dir), LogSink::Stderr);
        assert_eq!(LogSink::choose(Some(Path::new("x.log")), dir), LogSink::File(PathBuf::from("x.log")));
    }
}
