//! File-change notifications for `lardon log --follow`: a task's log is
//! written by the task's own processes (their stdout and stderr are the
//! file), so the daemon never sees the bytes go by. inotify tells it when
//! the file appears or grows, so a follower re-reads only then
//! (docs/DESIGN.md §8, §10: no polling).

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::path::{Path, PathBuf};

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use tokio::io::unix::AsyncFd;

/// `AsyncFd` wants `AsRawFd`; nix's `Inotify` only offers `AsFd`. The
/// field is private and never replaced, so the descriptor stays open and
/// the same for the value's whole life.
struct Fd(Inotify);

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// Wakes when one log file is created or written.
pub(crate) struct LogWatch {
    fd: AsyncFd<Fd>,
    path: PathBuf,
    name: OsString,
    /// Whether the file itself is watched (it is created when the task
    /// first starts; until then only its directory is).
    watching_file: bool,
}

impl std::fmt::Debug for LogWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogWatch")
            .field("path", &self.path)
            .field("watching_file", &self.watching_file)
            .finish()
    }
}

impl LogWatch {
    /// Watches `path` (and its directory, for its creation). Set up before
    /// the first read, so that no write after that read goes unnoticed.
    ///
    /// # Errors
    /// When inotify is unavailable (e.g. the per-user instance limit is
    /// reached) or the directory cannot be watched.
    pub(crate) fn new(path: &Path) -> io::Result<Self> {
        let name = path.file_name().map(ToOwned::to_owned).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, format!("{} names no file", path.display()))
        })?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
        // The directory first: a file created after this line is reported.
        inotify.add_watch(dir, AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO)?;
        // SAFETY: `AsyncFd::register` needs the descriptor to stay open and
        // the same until the `AsyncFd` is dropped. `Fd` owns the inotify
        // descriptor (an `OwnedFd` inside `Inotify`), is moved into the
        // `AsyncFd` and never taken out or replaced, so it is closed only
        // when the `AsyncFd` drops it.
        #[allow(unsafe_code)]
        let fd = unsafe { AsyncFd::register(Fd(inotify)) }?;
        let mut watch = LogWatch { fd, path: path.to_owned(), name, watching_file: false };
        watch.watch_file();
        Ok(watch)
    }

    fn watch_file(&mut self) {
        if !self.watching_file {
            let flags = AddWatchFlags::IN_MODIFY | AddWatchFlags::IN_CLOSE_WRITE;
            self.watching_file = self.fd.get_ref().0.add_watch(&self.path, flags).is_ok();
        }
    }

    /// Returns once the file was created or written since the last call
    /// (at once if that already happened).
    ///
    /// # Errors
    /// When reading the notifications fails.
    pub(crate) async fn changed(&mut self) -> io::Result<()> {
        loop {
            let mut ready = self.fd.readable().await?;
            let read = ready.try_io(|fd| fd.get_ref().0.read_events().map_err(io::Error::from));
            let events = match read {
                Ok(events) => events?,
                // Spurious readiness: wait again.
                Err(_would_block) => continue,
            };
            let mut relevant = false;
            for event in events {
                match event.name {
                    // A directory event: only this file's creation counts.
                    Some(name) if name == self.name => relevant = true,
                    Some(_) => {}
                    // An event on the file itself.
                    None => relevant = true,
                }
            }
            if relevant {
                self.watch_file();
                return Ok(());
            }
        }
    }
}
