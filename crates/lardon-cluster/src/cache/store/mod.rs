//! The cache's stores: the content-addressed blobs ([`Cas`], bounded in
//! bytes in all and per blob) and the action cache ([`ActionCache`],
//! bounded in bytes and age). Both evict the least recently used first;
//! both check what they are given (a blob must hash to its digest); both
//! live in memory, or under the broker's `--state` where they survive a
//! restart. Time is passed in, so expiry is tested on a fake clock.

mod actions;
mod cas;
mod lru;

pub use actions::ActionCache;
pub use cas::Cas;

use super::reapi;

/// What the broker's cache may hold (`lardon broker --cache-size`,
/// `--cache-max-blob`, `--cache-results-size`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheLimits {
    /// Bytes of blobs in all (the CAS).
    pub blob_bytes: u64,
    /// Bytes of one blob (at most `blob_bytes`): a larger upload is
    /// refused on its first message, before any of it is kept.
    pub max_blob: u64,
    /// Bytes of action results (encoded) in all.
    pub result_bytes: u64,
}

impl CacheLimits {
    /// `blob_bytes` of blobs, at most 256 MiB each, and 64 MiB of results.
    #[must_use]
    pub fn new(blob_bytes: u64) -> Self {
        CacheLimits { blob_bytes, max_blob: blob_bytes.min(256 << 20), result_bytes: 64 << 20 }
    }
}

/// Why a blob or a result was refused.
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
    /// The blob is larger than the store takes.
    #[error(
        "data: {size} bytes exceed the cache's limit of {max} bytes per blob (the broker's --cache-max-blob)"
    )]
    TooLarge {
        /// Its size.
        size: u64,
        /// The bound.
        max: u64,
    },
    /// It could not be written to the store's directory.
    #[error("cache: cannot write to the cache's directory: {0}")]
    Io(String),
}

/// Whether `hash` is 64 lower-case hex digits.
fn valid_hash(hash: &str) -> bool {
    hash.len() == 64 && valid_hash_part(hash)
}

/// Whether `text` is lower-case hex digits only.
fn valid_hash_part(text: &str) -> bool {
    text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Checks that `d` is a well-formed sha256 digest.
///
/// # Errors
/// [`BlobError::BadDigest`].
pub fn check_digest(d: &reapi::Digest) -> Result<(), BlobError> {
    if valid_hash(&d.hash) && d.size_bytes >= 0 {
        Ok(())
    } else {
        Err(BlobError::BadDigest { hash: d.hash.clone(), size: d.size_bytes })
    }
}

#[cfg(test)]
mod tests;
