//! Bounded stores: the content-addressed blobs (by total bytes) and the
//! action cache (by entries and age). Both evict the least recently used
//! first; both check what they are given (a blob must hash to its
//! digest). Time is passed in, so expiry is tested on a fake clock.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use super::key::digest_of;
use super::reapi;

/// Why a blob was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BlobError {
    /// The digest is not a lower-case sha256 hex string with a size ≥ 0.
    #[error("digest: `{hash}`/{size} is not a sha256 digest (64 lower-case hex digits and a size)")]
    BadDigest {
        /// The hash given.
        hash: String,
        /// The size given.
        size: i64,
    },
    /// The data does not hash to the digest.
    #[error("data: does not match digest {0}")]
    Mismatch(String),
    /// The blob is larger than the whole store.
    #[error("data: {size} bytes exceed the store's {max} bytes")]
    TooLarge {
        /// Its size.
        size: u64,
        /// The store's bound.
        max: u64,
    },
}

/// Checks that `d` is a well-formed sha256 digest.
///
/// # Errors
/// [`BlobError::BadDigest`].
pub fn check_digest(d: &reapi::Digest) -> Result<(), BlobError> {
    let ok = d.hash.len() == 64
        && d.hash.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        && d.size_bytes >= 0;
    if ok { Ok(()) } else { Err(BlobError::BadDigest { hash: d.hash.clone(), size: d.size_bytes }) }
}

/// Least-recently-used order over keys: a use moves a key to the back.
#[derive(Debug, Default)]
struct Lru {
    next: u64,
    by_use: BTreeMap<u64, String>,
    use_of: HashMap<String, u64>,
}

impl Lru {
    fn touch(&mut self, key: &str) {
        if let Some(old) = self.use_of.remove(key) {
            self.by_use.remove(&old);
        }
        self.next += 1;
        self.by_use.insert(self.next, key.to_owned());
        self.use_of.insert(key.to_owned(), self.next);
    }

    fn remove(&mut self, key: &str) {
        if let Some(old) = self.use_of.remove(key) {
            self.by_use.remove(&old);
        }
    }

    fn oldest(&self) -> Option<String> {
        self.by_use.values().next().cloned()
    }
}

/// Content-addressed blobs, at most `max_bytes` in all.
#[derive(Debug)]
pub struct Cas {
    blobs: HashMap<String, Vec<u8>>,
    lru: Lru,
    bytes: u64,
    max_bytes: u64,
}

impl Cas {
    /// An empty store holding at most `max_bytes`.
    #[must_use]
    pub fn new(max_bytes: u64) -> Self {
        Cas { blobs: HashMap::new(), lru: Lru::default(), bytes: 0, max_bytes }
    }

    /// Bytes held.
    #[must_use]
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Which of `digests` the store lacks (the empty blob is never lacking).
    #[must_use]
    pub fn missing(&self, digests: &[reapi::Digest]) -> Vec<reapi::Digest> {
        digests.iter().filter(|d| d.size_bytes != 0 && !self.blobs.contains_key(&d.hash)).cloned().collect()
    }

    /// Stores `data` under `digest` after checking it hashes to it,
    /// evicting the least recently used blobs to make room.
    ///
    /// # Errors
    /// [`BlobError`] naming what is wrong; the store is unchanged.
    pub fn put(&mut self, digest: &reapi::Digest, data: Vec<u8>) -> Result<(), BlobError> {
        check_digest(digest)?;
        if digest_of(&data) != *digest {
            return Err(BlobError::Mismatch(digest.hash.clone()));
        }
        let size = data.len() as u64;
        if size > self.max_bytes {
            return Err(BlobError::TooLarge { size, max: self.max_bytes });
        }
        if !self.blobs.contains_key(&digest.hash) {
            while self.bytes + size > self.max_bytes {
                let Some(old) = self.lru.oldest() else { break };
                self.evict(&old);
            }
            self.bytes += size;
            self.blobs.insert(digest.hash.clone(), data);
        }
        self.lru.touch(&digest.hash);
        debug_assert!(self.bytes <= self.max_bytes);
        Ok(())
    }

    /// The blob of `digest`, if held (a read counts as a use).
    pub fn get(&mut self, digest: &reapi::Digest) -> Option<Vec<u8>> {
        if digest.size_bytes == 0 && check_digest(digest).is_ok() {
            return Some(Vec::new());
        }
        let data = self.blobs.get(&digest.hash)?.clone();
        self.lru.touch(&digest.hash);
        Some(data)
    }

    fn evict(&mut self, hash: &str) {
        if let Some(data) = self.blobs.remove(hash) {
            self.bytes -= data.len() as u64;
        }
        self.lru.remove(hash);
    }
}

/// Action results by action digest, at most `max_entries`, each for at
/// most `ttl` after it was stored.
#[derive(Debug)]
pub struct ActionCache {
    entries: HashMap<String, (reapi::ActionResult, Instant)>,
    lru: Lru,
    max_entries: usize,
    ttl: Duration,
}

impl ActionCache {
    /// An empty cache.
    #[must_use]
    pub fn new(max_entries: usize, ttl: Duration) -> Self {
        ActionCache { entries: HashMap::new(), lru: Lru::default(), max_entries: max_entries.max(1), ttl }
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

    /// The result stored for `action` and younger than the TTL at `now`;
    /// an expired one is dropped.
    pub fn get(&mut self, action: &reapi::Digest, now: Instant) -> Option<reapi::ActionResult> {
        let (result, at) = self.entries.get(&action.hash)?;
        if now.saturating_duration_since(*at) >= self.ttl {
            self.entries.remove(&action.hash);
            self.lru.remove(&action.hash);
            return None;
        }
        let result = result.clone();
        self.lru.touch(&action.hash);
        Some(result)
    }

    /// Stores `result` for `action` at `now`, evicting the least recently
    /// used entry when full.
    ///
    /// # Errors
    /// [`BlobError::BadDigest`] for a malformed action digest.
    pub fn put(
        &mut self,
        action: &reapi::Digest,
        result: reapi::ActionResult,
        now: Instant,
    ) -> Result<(), BlobError> {
        check_digest(action)?;
        if !self.entries.contains_key(&action.hash)
            && self.entries.len() >= self.max_entries
            && let Some(old) = self.lru.oldest()
        {
            self.entries.remove(&old);
            self.lru.remove(&old);
        }
        self.entries.insert(action.hash.clone(), (result, now));
        self.lru.touch(&action.hash);
        debug_assert!(self.entries.len() <= self.max_entries);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn blob(text: &str) -> (reapi::Digest, Vec<u8>) {
        (digest_of(text.as_bytes()), text.as_bytes().to_vec())
    }

    #[test]
    fn blobs_are_checked_and_the_least_recently_used_go_first() {
        let mut cas = Cas::new(10);
        let (a, da) = blob("aaaa");
        let (b, db) = blob("bbbb");
        let (c, dc) = blob("cccc");
        cas.put(&a, da).unwrap();
        cas.put(&b, db).unwrap();
        assert!(cas.get(&a).is_some(), "a is now the most recently used");
        cas.put(&c, dc).unwrap();
        let all = [a.clone(), b.clone(), c];
        assert_eq!(cas.missing(&all), [b], "b was the oldest use");
        assert_eq!(cas.bytes(), 8);
        assert_eq!(cas.put(&a, b"zzzz".to_vec()), Err(BlobError::Mismatch(a.hash.clone())));
        let (big, dbig) = blob("0123456789a");
        assert!(matches!(cas.put(&big, dbig), Err(BlobError::TooLarge { .. })));
        let bad = reapi::Digest { hash: "../etc".into(), size_bytes: 3 };
        assert!(matches!(cas.put(&bad, vec![]), Err(BlobError::BadDigest { .. })));
        assert_eq!(cas.get(&digest_of(b"")), Some(Vec::new()), "the empty blob is always there");
    }

    #[test]
    fn results_expire_after_the_ttl_and_the_cache_is_bounded() {
        let t0 = Instant::now();
        let mut ac = ActionCache::new(2, Duration::from_secs(60));
        let r = |code| reapi::ActionResult { exit_code: code, ..Default::default() };
        let (k1, k2, k3) = (digest_of(b"1"), digest_of(b"2"), digest_of(b"3"));
        ac.put(&k1, r(1), t0).unwrap();
        ac.put(&k2, r(2), t0).unwrap();
        assert_eq!(ac.get(&k1, t0).map(|r| r.exit_code), Some(1));
        ac.put(&k3, r(3), t0).unwrap();
        assert_eq!(ac.len(), 2);
        assert!(ac.get(&k2, t0).is_none(), "k2 was least recently used");
        assert!(ac.get(&k1, t0 + Duration::from_secs(59)).is_some());
        assert!(ac.get(&k1, t0 + Duration::from_secs(60)).is_none(), "expired");
        assert_eq!(ac.len(), 1);
    }
}
