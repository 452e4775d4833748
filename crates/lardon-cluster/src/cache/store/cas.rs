//! The content-addressed blobs: bounded in bytes, least recently used
//! evicted first, in memory or in a directory that survives a restart.
//!
//! The lock covers only the index (which blobs are held, their sizes and
//! their order of use). Hashing an upload, writing it and reading a blob
//! back happen outside it, so one large blob never holds up the lookups
//! of others; async callers run [`Cas::put`] and [`Cas::get`] on a
//! blocking thread.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::lru::Lru;
use super::{BlobError, check_digest, valid_hash, valid_hash_part};
use crate::cache::key::digest_of;
use crate::cache::reapi;

/// Blobs, at most `max_bytes` in all and `max_blob` each.
#[derive(Debug)]
pub struct Cas {
    index: Mutex<Index>,
    dir: Option<PathBuf>,
    max_bytes: u64,
    max_blob: u64,
}

#[derive(Debug, Default)]
struct Index {
    sizes: HashMap<String, u64>,
    lru: Lru,
    bytes: u64,
    /// The data, when the store is in memory.
    memory: HashMap<String, Vec<u8>>,
}

impl Cas {
    /// An empty store in memory holding at most `max_bytes` in all and
    /// `max_blob` (at most `max_bytes`) per blob.
    #[must_use]
    pub fn in_memory(max_bytes: u64, max_blob: u64) -> Self {
        Cas { index: Mutex::default(), dir: None, max_bytes, max_blob: max_blob.min(max_bytes) }
    }

    /// The store kept in `dir` (made if absent): the blobs a previous
    /// broker left there are held again, the least recently used evicted
    /// if they exceed `max_bytes`; leftovers of unfinished uploads and
    /// files that are not blobs are removed.
    ///
    /// # Errors
    /// The directory cannot be made or read.
    pub fn open(dir: &Path, max_bytes: u64, max_blob: u64) -> std::io::Result<Self> {
        let tmp = dir.join("tmp");
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp)?;
        }
        std::fs::create_dir_all(&tmp)?;
        let mut found: Vec<(std::time::SystemTime, String, u64)> = Vec::new();
        for shard in std::fs::read_dir(dir)? {
            let shard = shard?;
            let name = shard.file_name();
            let Some(prefix) = name.to_str().filter(|n| n.len() == 2 && valid_hash_part(n)) else { continue };
            if !shard.file_type()?.is_dir() {
                continue;
            }
            for blob in std::fs::read_dir(shard.path())? {
                let blob = blob?;
                let meta = blob.metadata()?;
                match blob.file_name().to_str() {
                    Some(hash) if meta.is_file() && valid_hash(hash) && hash.starts_with(prefix) => {
                        let used = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
                        found.push((used, hash.to_owned(), meta.len()));
                    }
                    _ => std::fs::remove_file(blob.path())?,
                }
            }
        }
        found.sort();
        let cas = Cas {
            index: Mutex::default(),
            dir: Some(dir.to_owned()),
            max_bytes,
            max_blob: max_blob.min(max_bytes),
        };
        {
            let mut index = cas.index();
            for (_, hash, size) in found {
                index.bytes += size;
                index.sizes.insert(hash.clone(), size);
                index.lru.touch(&hash);
            }
            while index.bytes > max_bytes {
                let Some(old) = index.lru.oldest() else { break };
                cas.evict(&mut index, &old);
            }
        }
        Ok(cas)
    }

    fn index(&self) -> MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn path_of(dir: &Path, hash: &str) -> PathBuf {
        dir.join(&hash[..2]).join(hash)
    }

    /// Bytes held.
    #[must_use]
    pub fn bytes(&self) -> u64 {
        self.index().bytes
    }

    /// The largest blob it accepts.
    #[must_use]
    pub fn max_blob(&self) -> u64 {
        self.max_blob
    }

    /// Which of `digests` the store lacks (the empty blob is never lacking).
    #[must_use]
    pub fn missing(&self, digests: &[reapi::Digest]) -> Vec<reapi::Digest> {
        let index = self.index();
        digests.iter().filter(|d| d.size_bytes != 0 && !index.sizes.contains_key(&d.hash)).cloned().collect()
    }

    /// Whether a blob of digest `d` may be uploaded: a well-formed digest
    /// no larger than [`Cas::max_blob`]. Checked on an upload's first
    /// message, before any of its data is buffered.
    ///
    /// # Errors
    /// [`BlobError::BadDigest`] or [`BlobError::TooLarge`].
    pub fn check_upload(&self, d: &reapi::Digest) -> Result<(), BlobError> {
        check_digest(d)?;
        let size = u64::try_from(d.size_bytes).unwrap_or(u64::MAX);
        if size > self.max_blob {
            return Err(BlobError::TooLarge { size, max: self.max_blob });
        }
        Ok(())
    }

    /// Stores `data` under `digest` after checking it hashes to it,
    /// evicting the least recently used blobs to make room. Blocking: it
    /// hashes and, on disk, writes the blob (then renames it into place,
    /// so a crash never leaves a partial blob under its name).
    ///
    /// # Errors
    /// [`BlobError`] naming what is wrong (the store is unchanged), or
    /// [`BlobError::Io`] when the blob could not be written.
    pub fn put(&self, digest: &reapi::Digest, data: Vec<u8>) -> Result<(), BlobError> {
        self.check_upload(digest)?;
        if digest_of(&data) != *digest {
            return Err(BlobError::Mismatch(digest.hash.clone()));
        }
        let size = data.len() as u64;
        if digest.size_bytes == 0 {
            return Ok(());
        }
        let staged = match &self.dir {
            Some(dir) => Some(stage(dir, &data).map_err(|e| BlobError::Io(e.to_string()))?),
            None => None,
        };
        let mut index = self.index();
        if index.sizes.contains_key(&digest.hash) {
            if let Some(tmp) = staged {
                let _ = std::fs::remove_file(tmp);
            }
        } else {
            while index.bytes + size > self.max_bytes {
                let Some(old) = index.lru.oldest() else { break };
                self.evict(&mut index, &old);
            }
            match (&self.dir, staged) {
                (Some(dir), Some(tmp)) => {
                    let path = Self::path_of(dir, &digest.hash);
                    let placed = path
                        .parent()
                        .map_or(Ok(()), std::fs::create_dir_all)
                        .and_then(|()| std::fs::rename(&tmp, &path));
                    if let Err(e) = placed {
                        let _ = std::fs::remove_file(tmp);
                        return Err(BlobError::Io(e.to_string()));
                    }
                }
                _ => {
                    index.memory.insert(digest.hash.clone(), data);
                }
            }
            index.bytes += size;
            index.sizes.insert(digest.hash.clone(), size);
        }
        index.lru.touch(&digest.hash);
        debug_assert!(index.bytes <= self.max_bytes);
        Ok(())
    }

    /// The blob of `digest`, if held (a read counts as a use). Blocking on
    /// disk. A blob file that went missing or changed size is dropped from
    /// the index and reported as not held.
    pub fn get(&self, digest: &reapi::Digest) -> Option<Vec<u8>> {
        if digest.size_bytes == 0 && check_digest(digest).is_ok() {
            return Some(Vec::new());
        }
        let dir = {
            let mut index = self.index();
            index.sizes.get(&digest.hash)?;
            index.lru.touch(&digest.hash);
            match &self.dir {
                None => return index.memory.get(&digest.hash).cloned(),
                Some(dir) => dir.clone(),
            }
        };
        let path = Self::path_of(&dir, &digest.hash);
        let read =
            std::fs::read(&path).ok().filter(|d| i64::try_from(d.len()).ok() == Some(digest.size_bytes));
        match read {
            Some(data) => {
                // Its use survives a restart as the file's time.
                if let Ok(f) = std::fs::File::options().append(true).open(&path) {
                    let _ = f.set_modified(std::time::SystemTime::now());
                }
                Some(data)
            }
            None => {
                tracing::warn!("cache: blob {} is gone or damaged on disk; dropped", digest.hash);
                let mut index = self.index();
                self.evict(&mut index, &digest.hash);
                None
            }
        }
    }

    fn evict(&self, index: &mut Index, hash: &str) {
        if let Some(size) = index.sizes.remove(hash) {
            index.bytes -= size;
        }
        index.memory.remove(hash);
        index.lru.remove(hash);
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_file(Self::path_of(dir, hash));
        }
    }
}

/// Writes `data` to a fresh file under `dir/tmp` and syncs it.
fn stage(dir: &Path, data: &[u8]) -> std::io::Result<PathBuf> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let path = dir.join("tmp").join(format!("{}-{n}", std::process::id()));
    let mut f = std::fs::File::options().write(true).create_new(true).open(&path)?;
    f.write_all(data)?;
    f.sync_data()?;
    Ok(path)
}
