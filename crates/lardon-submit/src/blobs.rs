//! Files through the broker's content-addressed store (docs/DESIGN.md §14):
//! a REAPI client for the CAS the broker serves on its port, used by
//! submitters (upload inputs, download outputs) and agents (fetch inputs,
//! upload outputs).
//!
//! Uploads ask `FindMissingBlobs` first and send only what the store
//! lacks: small blobs in `BatchUpdateBlobs` requests of at most
//! [`BATCH_BYTES`], larger ones over `ByteStream.Write`. Downloads use
//! `BatchReadBlobs` the same way and `ByteStream.Read` for large blobs.
//! Every blob received is checked against its digest.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use bazel_remote_apis::google::bytestream::byte_stream_client::ByteStreamClient;
use bazel_remote_apis::google::bytestream::{ReadRequest, WriteRequest};
use lardon_proto::cluster as pb;
use thiserror::Error;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use crate::dial::{Dial, MaybeToken};
use reapi::content_addressable_storage_client::ContentAddressableStorageClient;
use sha2::{Digest as _, Sha256};

/// The REAPI v2 types (`Digest`, `Action`, `Command`, `ActionResult`, …).
pub use bazel_remote_apis::build::bazel::remote::execution::v2 as reapi;

/// The REAPI digest (lower-case hex sha256 and size) of `bytes`.
#[must_use]
pub fn digest_of(bytes: &[u8]) -> reapi::Digest {
    let hash = Sha256::digest(bytes);
    reapi::Digest {
        hash: hash.iter().map(|b| format!("{b:02x}")).collect(),
        size_bytes: i64::try_from(bytes.len()).unwrap_or(i64::MAX),
    }
}

/// Most bytes of blobs in one batch request or answer: under gRPC's
/// default 4 MiB message limit, with room for the framing.
pub const BATCH_BYTES: usize = 3 << 20;
/// Bytes per `ByteStream.Write` message.
const WRITE_CHUNK: usize = 64 << 10;

/// A transfer to or from the CAS failed.
#[derive(Debug, Error)]
pub enum TransferError {
    /// The broker could not be reached.
    #[error("cannot reach the broker's CAS at {broker}: {source}")]
    Connect {
        /// The address dialled.
        broker: String,
        /// What the transport said.
        #[source]
        source: tonic::transport::Error,
    },
    /// A call failed (the broker has no cache, refused the token, …).
    #[error("CAS: {}", .0.message())]
    Call(#[from] tonic::Status),
    /// The store refused one blob.
    #[error("CAS refused blob {hash}: {message}")]
    Refused {
        /// The blob's hash.
        hash: String,
        /// Why.
        message: String,
    },
    /// A blob asked for is not in the store (never uploaded, or evicted).
    #[error("CAS: blob {0} is missing")]
    Missing(String),
    /// A blob received does not hash to its digest.
    #[error("CAS: blob {0} does not match its digest")]
    Corrupt(String),
}

type Intercepted = InterceptedService<Channel, MaybeToken>;

/// A connected CAS client; cheap to clone.
#[derive(Debug, Clone)]
pub struct BlobClient {
    cas: ContentAddressableStorageClient<Intercepted>,
    stream: ByteStreamClient<Intercepted>,
}

/// The REAPI form of a wire digest.
#[must_use]
pub fn from_pb(d: &pb::BlobDigest) -> reapi::Digest {
    reapi::Digest { hash: d.hash.clone(), size_bytes: d.size_bytes }
}

/// The wire form of a REAPI digest.
#[must_use]
pub fn to_pb(d: &reapi::Digest) -> pb::BlobDigest {
    pb::BlobDigest { hash: d.hash.clone(), size_bytes: d.size_bytes }
}

fn size(d: &reapi::Digest) -> usize {
    usize::try_from(d.size_bytes).unwrap_or(usize::MAX)
}

/// A unique upload name part (REAPI asks for a UUID; any unique string
/// serves the broker).
fn upload_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{}-{nanos}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

impl BlobClient {
    /// Connects to the CAS on `broker`'s port with `dial`'s credentials.
    ///
    /// # Errors
    /// [`TransferError::Connect`].
    pub async fn connect(broker: &str, dial: &Dial) -> Result<Self, TransferError> {
        let channel = dial
            .channel(broker)
            .await
            .map_err(|source| TransferError::Connect { broker: broker.to_owned(), source })?;
        Ok(BlobClient {
            cas: ContentAddressableStorageClient::with_interceptor(channel.clone(), dial.interceptor()),
            stream: ByteStreamClient::with_interceptor(channel, dial.interceptor()),
        })
    }

    /// Which of `digests` the store lacks.
    ///
    /// # Errors
    /// [`TransferError::Call`].
    pub async fn missing(&mut self, digests: &[reapi::Digest]) -> Result<Vec<reapi::Digest>, TransferError> {
        let mut missing = Vec::new();
        // Bounded requests: a digest is about 80 bytes on the wire.
        for chunk in digests.chunks(20_000) {
            let req = reapi::FindMissingBlobsRequest { blob_digests: chunk.to_vec(), ..Default::default() };
            missing.extend(self.cas.find_missing_blobs(req).await?.into_inner().missing_blob_digests);
        }
        Ok(missing)
    }

    /// Stores `blobs` (each with its digest) that the store lacks.
    ///
    /// # Errors
    /// [`TransferError`]: a failed call or a refused blob.
    pub async fn upload(&mut self, blobs: &[(reapi::Digest, &[u8])]) -> Result<(), TransferError> {
        let digests: Vec<reapi::Digest> = blobs.iter().map(|(d, _)| d.clone()).collect();
        let missing: std::collections::HashSet<String> =
            self.missing(&digests).await?.into_iter().map(|d| d.hash).collect();
        let mut batch: Vec<reapi::batch_update_blobs_request::Request> = Vec::new();
        let mut batch_bytes = 0;
        let mut sent = std::collections::HashSet::new();
        for (digest, data) in blobs {
            if !missing.contains(&digest.hash) || !sent.insert(digest.hash.clone()) {
                continue;
            }
            if data.len() > BATCH_BYTES / 2 {
                self.write(digest, data).await?;
                continue;
            }
            if batch_bytes + data.len() > BATCH_BYTES {
                self.flush(std::mem::take(&mut batch)).await?;
                batch_bytes = 0;
            }
            batch_bytes += data.len();
            batch.push(reapi::batch_update_blobs_request::Request {
                digest: Some(digest.clone()),
                data: data.to_vec(),
                compressor: 0,
            });
        }
        self.flush(batch).await
    }

    async fn flush(
        &mut self,
        batch: Vec<reapi::batch_update_blobs_request::Request>,
    ) -> Result<(), TransferError> {
        if batch.is_empty() {
            return Ok(());
        }
        let req = reapi::BatchUpdateBlobsRequest { requests: batch, ..Default::default() };
        for r in self.cas.batch_update_blobs(req).await?.into_inner().responses {
            if let Some(status) = r.status.filter(|s| s.code != 0) {
                let hash = r.digest.map(|d| d.hash).unwrap_or_default();
                return Err(TransferError::Refused { hash, message: status.message });
            }
        }
        Ok(())
    }

    async fn write(&mut self, digest: &reapi::Digest, data: &[u8]) -> Result<(), TransferError> {
        let name = format!("uploads/{}/blobs/{}/{}", upload_id(), digest.hash, digest.size_bytes);
        let chunks: Vec<&[u8]> =
            if data.is_empty() { vec![data] } else { data.chunks(WRITE_CHUNK).collect() };
        let last = chunks.len() - 1;
        let mut offset = 0;
        let messages: Vec<WriteRequest> = chunks
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                let m = WriteRequest {
                    // REAPI: the name only in the first message.
                    resource_name: if i == 0 { name.clone() } else { String::new() },
                    write_offset: i64::try_from(offset).unwrap_or(i64::MAX),
                    finish_write: i == last,
                    data: c.to_vec(),
                };
                offset += c.len();
                m
            })
            .collect();
        let committed = self.stream.write(tokio_stream::iter(messages)).await?.into_inner().committed_size;
        if committed != digest.size_bytes {
            return Err(TransferError::Refused {
                hash: digest.hash.clone(),
                message: format!("committed {committed} of {} bytes", digest.size_bytes),
            });
        }
        Ok(())
    }

    /// Fetches `digests`, each checked against its digest, by hash.
    ///
    /// # Errors
    /// [`TransferError`]: a failed call, a missing or a corrupt blob.
    pub async fn download(
        &mut self,
        digests: &[reapi::Digest],
    ) -> Result<HashMap<String, Vec<u8>>, TransferError> {
        let mut got = HashMap::new();
        let mut batch = Vec::new();
        let mut batch_bytes = 0;
        for d in digests {
            if got.contains_key(&d.hash) || batch.iter().any(|b: &reapi::Digest| b.hash == d.hash) {
                continue;
            }
            if size(d) > BATCH_BYTES / 2 {
                let data = self.read(d).await?;
                got.insert(d.hash.clone(), data);
                continue;
            }
            if batch_bytes + size(d) > BATCH_BYTES {
                self.read_batch(std::mem::take(&mut batch), &mut got).await?;
                batch_bytes = 0;
            }
            batch_bytes += size(d);
            batch.push(d.clone());
        }
        self.read_batch(batch, &mut got).await?;
        Ok(got)
    }

    async fn read_batch(
        &mut self,
        digests: Vec<reapi::Digest>,
        got: &mut HashMap<String, Vec<u8>>,
    ) -> Result<(), TransferError> {
        if digests.is_empty() {
            return Ok(());
        }
        let req = reapi::BatchReadBlobsRequest { digests: digests.clone(), ..Default::default() };
        let answers = self.cas.batch_read_blobs(req).await?.into_inner().responses;
        for d in digests {
            let Some(r) = answers.iter().find(|r| r.digest.as_ref().is_some_and(|x| x.hash == d.hash)) else {
                return Err(TransferError::Missing(d.hash));
            };
            if r.status.as_ref().is_some_and(|s| s.code != 0) {
                return Err(TransferError::Missing(d.hash));
            }
            if digest_of(&r.data) != d {
                return Err(TransferError::Corrupt(d.hash));
            }
            got.insert(d.hash.clone(), r.data.clone());
        }
        Ok(())
    }

    async fn read(&mut self, d: &reapi::Digest) -> Result<Vec<u8>, TransferError> {
        let req = ReadRequest {
            resource_name: format!("blobs/{}/{}", d.hash, d.size_bytes),
            read_offset: 0,
            read_limit: 0,
        };
        let mut stream = match self.stream.read(req).await {
            Ok(r) => r.into_inner(),
            Err(s) if s.code() == tonic::Code::NotFound => {
                return Err(TransferError::Missing(d.hash.clone()));
            }
            Err(s) => return Err(s.into()),
        };
        let mut data = Vec::with_capacity(size(d).min(64 << 20));
        while let Some(chunk) = stream.message().await? {
            data.extend_from_slice(&chunk.data);
            if data.len() > size(d) {
                return Err(TransferError::Corrupt(d.hash.clone()));
            }
        }
        if digest_of(&data) != *d {
            return Err(TransferError::Corrupt(d.hash.clone()));
        }
        Ok(data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_is_sha256_of_the_bytes() {
        let d = digest_of(b"abc");
        assert_eq!(d.hash, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert_eq!(d.size_bytes, 3);
    }
}
