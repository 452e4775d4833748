//! What a program writes to a pseudo-terminal, gathered by a thread of
//! its own, for the dashboard tests.

use std::io::Read;
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The bytes read so far from a pty's master side.
pub(crate) struct Screen {
    bytes: Arc<Mutex<Vec<u8>>>,
    ended: Receiver<()>,
}

impl Screen {
    /// Starts reading `reader` (a clone of the master) until its end.
    pub(crate) fn read(mut reader: Box<dyn Read + Send>) -> Screen {
        let bytes = Arc::new(Mutex::new(Vec::new()));
        let (tx, ended) = channel();
        let sink = Arc::clone(&bytes);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
            let _ = tx.send(());
        });
        Screen { bytes, ended }
    }

    /// Everything read so far, as text.
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes.lock().unwrap()).into_owned()
    }

    /// Whether `needle` was written.
    pub(crate) fn seen(&self, needle: &str) -> bool {
        self.text().contains(needle)
    }

    /// Everything the program wrote, once the terminal's output has ended
    /// (the program exited and the slave side is closed): its last bytes
    /// may still be in flight when its exit is seen. Fails after `timeout`.
    pub(crate) fn all(&self, timeout: Duration) -> String {
        self.ended.recv_timeout(timeout).unwrap_or_else(|e| {
            panic!("the terminal's output did not end within {timeout:?} ({e}): {:?}", self.text())
        });
        self.text()
    }
}
