//! The action cache: results by action digest, bounded in bytes (their
//! encoded size) and in age, least recently used evicted first, in memory
//! or written through to a directory that survives a restart.
//!
//! Results are small and looked up on the broker's routing thread, so all
//! of them are kept in memory; the directory holds one file per result
//! (its storing time and the encoded `ActionResult`), written before the
//! entry counts as stored and read back when the cache is opened.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use prost::Message as _;

use super::lru::Lru;
use super::{BlobError, check_digest, valid_hash};
use crate::cache::reapi;

/// Action results by action digest, at most `max_bytes` of them (encoded)
/// in all, each for at most `ttl` after it was stored.
#[derive(Debug)]
pub struct ActionCache {
    entries: HashMap<String, Entry>,
    lru: Lru,
    bytes: u64,
    max_bytes: u64,
    ttl: Duration,
    dir: Option<PathBuf>,
}

#[derive(Debug)]
struct Entry {
    result: reapi::ActionResult,
    stored: Instant,
    size: u64,
}

impl ActionCache {
    /// An empty cache in memory.
    #[must_use]
    pub fn new(max_bytes: u64, ttl: Duration) -> Self {
        ActionCache { entries: HashMap::new(), lru: Lru::default(), bytes: 0, max_bytes, ttl, dir: None }
    }

    /// The cache kept in `dir` (made if absent), holding again what a
    /// previous broker stored there and has not expired by `now`; files
    /// that are not results, expired ones and those past `max_bytes`
    /// (oldest first) are removed.
    ///
    /// # Errors
    /// The directory cannot be made or read.
    pub fn open(dir: &Path, max_bytes: u64, ttl: Duration, now: Instant) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let wall = SystemTime::now();
        let mut found: Vec<(SystemTime, String, reapi::ActionResult)> = Vec::new();
        for file in std::fs::read_dir(dir)? {
            let file = file?;
            let decoded = file
                .file_name()
                .to_str()
                .filter(|h| valid_hash(h))
                .map(str::to_owned)
                .and_then(|hash| Some((hash, decode(&std::fs::read(file.path()).ok()?)?)));
            match decoded {
                Some((hash, (stored, result))) if wall.duration_since(stored).unwrap_or_default() < ttl => {
                    found.push((stored, hash, result));
                }
                _ => std::fs::remove_file(file.path())?,
            }
        }
        found.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
        let mut cache = ActionCache::new(max_bytes, ttl);
        cache.dir = Some(dir.to_owned());
        for (stored, hash, result) in found {
            let age = wall.duration_since(stored).unwrap_or_default();
            let at = now.checked_sub(age).unwrap_or(now);
            cache.insert(&hash, result, at);
        }
        Ok(cache)
    }

    /// Entries held (expired ones included until they are looked up).
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it holds nothing.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Encoded bytes held.
    #[must_use]
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The result stored for `action` and younger than the TTL at `now`;
    /// an expired one is dropped.
    pub fn get(&mut self, action: &reapi::Digest, now: Instant) -> Option<reapi::ActionResult> {
        let entry = self.entries.get(&action.hash)?;
        if now.saturating_duration_since(entry.stored) >= self.ttl {
            self.remove(&action.hash);
            return None;
        }
        let result = entry.result.clone();
        self.lru.touch(&action.hash);
        Some(result)
    }

    /// Stores `result` for `action` at `now` (on disk first, when the
    /// cache has a directory), evicting the least recently used entries to
    /// make room.
    ///
    /// # Errors
    /// [`BlobError::BadDigest`] for a malformed action digest,
    /// [`BlobError::TooLarge`] for a result larger than the whole cache,
    /// [`BlobError::Io`] when it could not be written.
    pub fn put(
        &mut self,
        action: &reapi::Digest,
        result: reapi::ActionResult,
        now: Instant,
    ) -> Result<(), BlobError> {
        check_digest(action)?;
        let size = result.encoded_len() as u64;
        if size > self.max_bytes {
            return Err(BlobError::TooLarge { size, max: self.max_bytes });
        }
        if let Some(dir) = &self.dir {
            write(dir, &action.hash, &result).map_err(|e| BlobError::Io(e.to_string()))?;
        }
        self.insert(&action.hash, result, now);
        Ok(())
    }

    fn insert(&mut self, hash: &str, result: reapi::ActionResult, stored: Instant) {
        let size = result.encoded_len() as u64;
        if let Some(old) = self.entries.remove(hash) {
            self.bytes -= old.size;
        }
        while self.bytes + size > self.max_bytes {
            let Some(old) = self.lru.oldest() else { break };
            self.remove(&old);
        }
        self.bytes += size;
        self.entries.insert(hash.to_owned(), Entry { result, stored, size });
        self.lru.touch(hash);
        debug_assert!(self.bytes <= self.max_bytes);
    }

    fn remove(&mut self, hash: &str) {
        if let Some(old) = self.entries.remove(hash) {
            self.bytes -= old.size;
        }
        self.lru.remove(hash);
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_file(dir.join(hash));
        }
    }
}

/// A result's file: its storing time (Unix milliseconds, 8 bytes little
/// endian) then the encoded `ActionResult`; written aside and renamed into
/// place, so a crash leaves the old file or the new one.
fn write(dir: &Path, hash: &str, result: &reapi::ActionResult) -> std::io::Result<()> {
    let ms = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_millis();
    let mut bytes = u64::try_from(ms).unwrap_or(u64::MAX).to_le_bytes().to_vec();
    bytes.extend(result.encode_to_vec());
    let tmp = dir.join(format!(".{hash}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&bytes)?;
    f.sync_data()?;
    std::fs::rename(tmp, dir.join(hash))
}

fn decode(bytes: &[u8]) -> Option<(SystemTime, reapi::ActionResult)> {
    let (ms, body) = bytes.split_first_chunk::<8>()?;
    let stored = UNIX_EPOCH + Duration::from_millis(u64::from_le_bytes(*ms));
    Some((stored, reapi::ActionResult::decode(body).ok()?))
}
