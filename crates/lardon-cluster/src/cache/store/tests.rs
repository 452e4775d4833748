#![allow(clippy::unwrap_used)]
use std::time::{Duration, Instant};

use super::*;
use crate::cache::key::digest_of;
use prost::Message as _;

fn blob(text: &str) -> (reapi::Digest, Vec<u8>) {
    (digest_of(text.as_bytes()), text.as_bytes().to_vec())
}

/// The same rules in memory and on disk.
fn both(max_bytes: u64, max_blob: u64) -> Vec<(Cas, Option<tempfile::TempDir>)> {
    let dir = tempfile::tempdir().unwrap();
    let disk = Cas::open(dir.path(), max_bytes, max_blob).unwrap();
    vec![(Cas::in_memory(max_bytes, max_blob), None), (disk, Some(dir))]
}

#[test]
fn blobs_are_checked_and_the_least_recently_used_go_first() {
    for (cas, _dir) in both(10, 10) {
        let (a, da) = blob("aaaa");
        let (b, db) = blob("bbbb");
        let (c, dc) = blob("cccc");
        cas.put(&a, da.clone()).unwrap();
        cas.put(&b, db).unwrap();
        assert_eq!(cas.get(&a), Some(da), "a is now the most recently used");
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
}

#[test]
fn the_per_blob_limit_is_checked_on_the_digest_alone() {
    for (cas, _dir) in both(100, 8) {
        let (small, data) = blob("12345678");
        assert_eq!(cas.check_upload(&small), Ok(()));
        cas.put(&small, data).unwrap();
        let declared = reapi::Digest { hash: small.hash.clone(), size_bytes: 1 << 40 };
        assert_eq!(cas.check_upload(&declared), Err(BlobError::TooLarge { size: 1 << 40, max: 8 }));
        let (nine, data) = blob("123456789");
        assert_eq!(cas.put(&nine, data), Err(BlobError::TooLarge { size: 9, max: 8 }));
        assert_eq!(cas.max_blob(), 8);
    }
}

#[test]
fn blobs_on_disk_survive_a_reopen_in_their_order_of_use_and_within_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let (a, da) = blob("aaaa");
    let (b, db) = blob("bbbb");
    let (c, dc) = blob("cccc");
    {
        let cas = Cas::open(dir.path(), 12, 12).unwrap();
        cas.put(&a, da.clone()).unwrap();
        cas.put(&b, db).unwrap();
        cas.put(&c, dc).unwrap();
        // Old file times (b before c before a), then a read of a: a read
        // is a use, kept as the file's time.
        let at = |d: &reapi::Digest, secs| {
            let f = std::fs::File::options().append(true).open(dir.path().join(&d.hash[..2]).join(&d.hash));
            f.unwrap().set_modified(std::time::UNIX_EPOCH + Duration::from_secs(secs)).unwrap();
        };
        at(&b, 1_000);
        at(&c, 2_000);
        at(&a, 500);
        assert!(cas.get(&a).is_some(), "a used last");
    }
    // Junk and a half-written upload are cleared; the blobs are back.
    std::fs::write(dir.path().join("tmp").join("1-0"), b"partial").unwrap();
    std::fs::create_dir_all(dir.path().join("zz")).unwrap();
    let cas = Cas::open(dir.path(), 12, 12).unwrap();
    assert_eq!(cas.bytes(), 12);
    assert_eq!(cas.get(&a), Some(da));
    assert!(std::fs::read_dir(dir.path().join("tmp")).unwrap().next().is_none());
    drop(cas);
    // Reopened with a smaller bound: the least recently used (b) goes.
    let cas = Cas::open(dir.path(), 8, 8).unwrap();
    assert_eq!(cas.missing(&[a.clone(), b.clone(), c.clone()]), [b]);
    // A blob file damaged behind the store's back is dropped, not served.
    std::fs::write(dir.path().join(&c.hash[..2]).join(&c.hash), b"cc").unwrap();
    assert_eq!(cas.get(&c), None);
    assert_eq!(cas.missing(std::slice::from_ref(&c)), [c]);
}

#[test]
fn results_expire_after_the_ttl_and_the_cache_is_bounded_in_bytes() {
    let t0 = Instant::now();
    let r = |code| reapi::ActionResult { exit_code: code, ..Default::default() };
    let one = r(1).encoded_len() as u64;
    let mut ac = ActionCache::new(2 * one, Duration::from_secs(60));
    let (k1, k2, k3) = (digest_of(b"1"), digest_of(b"2"), digest_of(b"3"));
    ac.put(&k1, r(1), t0).unwrap();
    ac.put(&k2, r(2), t0).unwrap();
    assert_eq!(ac.get(&k1, t0).map(|r| r.exit_code), Some(1));
    ac.put(&k3, r(3), t0).unwrap();
    assert_eq!((ac.len(), ac.bytes()), (2, 2 * one));
    assert!(ac.get(&k2, t0).is_none(), "k2 was least recently used");
    assert!(ac.get(&k1, t0 + Duration::from_secs(59)).is_some());
    assert!(ac.get(&k1, t0 + Duration::from_secs(60)).is_none(), "expired");
    assert_eq!(ac.len(), 1);
    let big = reapi::ActionResult { stdout_raw: vec![b'x'; 100], ..Default::default() };
    assert!(matches!(ac.put(&k2, big, t0), Err(BlobError::TooLarge { .. })));
}

#[test]
fn results_on_disk_survive_a_reopen_and_expired_ones_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = Instant::now();
    let ok = reapi::ActionResult { exit_code: 0, stdout_raw: b"built".to_vec(), ..Default::default() };
    let (k1, k2) = (digest_of(b"1"), digest_of(b"2"));
    {
        let mut ac = ActionCache::open(dir.path(), 1 << 20, Duration::from_secs(3600), t0).unwrap();
        ac.put(&k1, ok.clone(), t0).unwrap();
        ac.put(&k2, ok.clone(), t0).unwrap();
    }
    std::fs::write(dir.path().join("not-a-result"), b"junk").unwrap();
    let mut ac = ActionCache::open(dir.path(), 1 << 20, Duration::from_secs(3600), Instant::now()).unwrap();
    assert_eq!(ac.len(), 2);
    assert_eq!(ac.get(&k1, Instant::now()), Some(ok));
    assert!(!dir.path().join("not-a-result").exists());
    drop(ac);
    // A TTL shorter than their age: gone at open, files removed.
    let ac = ActionCache::open(dir.path(), 1 << 20, Duration::ZERO, Instant::now()).unwrap();
    assert!(ac.is_empty());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
