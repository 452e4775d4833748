//! REAPI's `ContentAddressableStorage`, `ActionCache` and `Capabilities`
//! gRPC services and the `google.bytestream.ByteStream` blob transfer over
//! the broker's bounded stores, so that the broker's cache is also a
//! standard remote cache (`bazel --remote_cache=grpc://…` works against
//! it). Only sha256 digests and uncompressed blobs are accepted; every
//! refusal names the field. The tree, chunking and splicing calls are not
//! offered (`UNIMPLEMENTED`).

use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use bazel_remote_apis::build::bazel::semver::SemVer;
use bazel_remote_apis::google::bytestream::byte_stream_server::ByteStream;
use bazel_remote_apis::google::bytestream::{
    QueryWriteStatusRequest, QueryWriteStatusResponse, ReadRequest, ReadResponse, WriteRequest, WriteResponse,
};
use bazel_remote_apis::google::rpc;
use tokio_stream::Stream;
use tonic::{Code, Request, Response, Status};

use super::reapi;
use super::reapi::action_cache_server::ActionCache as ActionCacheApi;
use super::reapi::capabilities_server::Capabilities;
use super::reapi::content_addressable_storage_server::ContentAddressableStorage;
use super::store::{ActionCache, Cas, check_digest};

/// The stores a broker serves (shared with its [`super::hooks::CacheHook`]).
#[derive(Debug, Clone)]
pub struct CacheService {
    cas: Arc<Cas>,
    actions: Arc<Mutex<ActionCache>>,
}

impl CacheService {
    /// Serves `cas` and `actions`.
    #[must_use]
    pub fn new(cas: Arc<Cas>, actions: Arc<Mutex<ActionCache>>) -> Self {
        CacheService { cas, actions }
    }

    fn cas(&self) -> &Cas {
        &self.cas
    }

    /// Runs `f` on the store on a blocking thread: hashing, writing and
    /// reading blobs never hold a worker of the runtime that serves the
    /// broker's streams.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Cas) -> T + Send + 'static,
    ) -> Result<T, Status> {
        let cas = Arc::clone(&self.cas);
        tokio::task::spawn_blocking(move || f(&cas))
            .await
            .map_err(|e| Status::internal(format!("cache: a blob task failed: {e}")))
    }

    fn actions(&self) -> MutexGuard<'_, ActionCache> {
        self.actions.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Only sha256 (or unspecified, which REAPI reads from the hash length).
fn check_function(f: i32) -> Result<(), Status> {
    let sha256 = reapi::digest_function::Value::Sha256 as i32;
    if f == 0 || f == sha256 {
        Ok(())
    } else {
        Err(Status::invalid_argument(format!("digest_function: {f} is not supported (only SHA256)")))
    }
}

fn digest(d: Option<&reapi::Digest>, field: &str) -> Result<reapi::Digest, Status> {
    let d = d.ok_or_else(|| Status::invalid_argument(format!("{field}: missing")))?;
    check_digest(d).map_err(|e| Status::invalid_argument(format!("{field}: {e}")))?;
    Ok(d.clone())
}

fn rpc_status(code: Code, message: impl Into<String>) -> Option<rpc::Status> {
    Some(rpc::Status { code: code as i32, message: message.into(), details: Vec::new() })
}

type Never<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl ContentAddressableStorage for CacheService {
    async fn find_missing_blobs(
        &self,
        req: Request<reapi::FindMissingBlobsRequest>,
    ) -> Result<Response<reapi::FindMissingBlobsResponse>, Status> {
        let req = req.into_inner();
        check_function(req.digest_function)?;
        for (i, d) in req.blob_digests.iter().enumerate() {
            check_digest(d).map_err(|e| Status::invalid_argument(format!("blob_digests[{i}].{e}")))?;
        }
        Ok(Response::new(reapi::FindMissingBlobsResponse {
            missing_blob_digests: self.cas().missing(&req.blob_digests),
        }))
    }

    async fn batch_update_blobs(
        &self,
        req: Request<reapi::BatchUpdateBlobsRequest>,
    ) -> Result<Response<reapi::BatchUpdateBlobsResponse>, Status> {
        let req = req.into_inner();
        check_function(req.digest_function)?;
        let responses = self
            .blocking(move |cas| {
                req.requests
                    .into_iter()
                    .map(|r| {
                        let status = if r.compressor != 0 {
                            rpc_status(Code::InvalidArgument, "compressor: only IDENTITY is supported")
                        } else {
                            match r.digest.as_ref() {
                                None => rpc_status(Code::InvalidArgument, "digest: missing"),
                                Some(d) => match cas.put(d, r.data) {
                                    Ok(()) => rpc_status(Code::Ok, ""),
                                    Err(e) => rpc_status(Code::InvalidArgument, e.to_string()),
                                },
                            }
                        };
                        reapi::batch_update_blobs_response::Response { digest: r.digest, status }
                    })
                    .collect()
            })
            .await?;
        Ok(Response::new(reapi::BatchUpdateBlobsResponse { responses }))
    }

    async fn batch_read_blobs(
        &self,
        req: Request<reapi::BatchReadBlobsRequest>,
    ) -> Result<Response<reapi::BatchReadBlobsResponse>, Status> {
        let req = req.into_inner();
        check_function(req.digest_function)?;
        let responses = self
            .blocking(move |cas| {
                req.digests
                    .into_iter()
                    .map(|d| {
                        let (data, status) = match check_digest(&d).map(|()| cas.get(&d)) {
                            Err(e) => (Vec::new(), rpc_status(Code::InvalidArgument, e.to_string())),
                            Ok(None) => {
                                (Vec::new(), rpc_status(Code::NotFound, format!("no blob {}", d.hash)))
                            }
                            Ok(Some(data)) => (data, rpc_status(Code::Ok, "")),
                        };
                        reapi::batch_read_blobs_response::Response {
                            digest: Some(d),
                            data,
                            compressor: 0,
                            status,
                        }
                    })
                    .collect()
            })
            .await?;
        Ok(Response::new(reapi::BatchReadBlobsResponse { responses }))
    }

    type GetTreeStream = Never<reapi::GetTreeResponse>;

    async fn get_tree(
        &self,
        _: Request<reapi::GetTreeRequest>,
    ) -> Result<Response<Self::GetTreeStream>, Status> {
        Err(Status::unimplemented("GetTree is not offered by the Lardon broker"))
    }

    async fn split_blob(
        &self,
        _: Request<reapi::SplitBlobRequest>,
    ) -> Result<Response<reapi::SplitBlobResponse>, Status> {
        Err(Status::unimplemented("SplitBlob is not offered by the Lardon broker"))
    }

    type GetChunkMappingStream = Never<reapi::GetChunkMappingResponse>;

    async fn get_chunk_mapping(
        &self,
        _: Request<reapi::GetChunkMappingRequest>,
    ) -> Result<Response<Self::GetChunkMappingStream>, Status> {
        Err(Status::unimplemented("GetChunkMapping is not offered by the Lardon broker"))
    }

    async fn splice_blob(
        &self,
        _: Request<reapi::SpliceBlobRequest>,
    ) -> Result<Response<reapi::SpliceBlobResponse>, Status> {
        Err(Status::unimplemented("SpliceBlob is not offered by the Lardon broker"))
    }

    async fn register_chunk_mapping(
        &self,
        _: Request<tonic::Streaming<reapi::RegisterChunkMappingRequest>>,
    ) -> Result<Response<reapi::RegisterChunkMappingResponse>, Status> {
        Err(Status::unimplemented("RegisterChunkMapping is not offered by the Lardon broker"))
    }
}

#[tonic::async_trait]
impl ActionCacheApi for CacheService {
    async fn get_action_result(
        &self,
        req: Request<reapi::GetActionResultRequest>,
    ) -> Result<Response<reapi::ActionResult>, Status> {
        let req = req.into_inner();
        check_function(req.digest_function)?;
        let key = digest(req.action_digest.as_ref(), "action_digest")?;
        self.actions()
            .get(&key, Instant::now())
            .map(Response::new)
            .ok_or_else(|| Status::not_found(format!("no result for action {}", key.hash)))
    }

    async fn update_action_result(
        &self,
        req: Request<reapi::UpdateActionResultRequest>,
    ) -> Result<Response<reapi::ActionResult>, Status> {
        let req = req.into_inner();
        check_function(req.digest_function)?;
        let key = digest(req.action_digest.as_ref(), "action_digest")?;
        let result = req.action_result.ok_or_else(|| Status::invalid_argument("action_result: missing"))?;
        // REAPI: the client uploads the Action first; a result for an
        // action nobody can inspect is refused.
        if !self.cas().missing(std::slice::from_ref(&key)).is_empty() {
            return Err(Status::failed_precondition(format!(
                "action_digest: the Action {} is not in the CAS; upload it first",
                key.hash
            )));
        }
        self.actions()
            .put(&key, result.clone(), Instant::now())
            .map_err(|e| Status::invalid_argument(format!("action_digest: {e}")))?;
        Ok(Response::new(result))
    }
}

/// The largest batch a client may send (gRPC's default message size).
const MAX_BATCH_BYTES: i64 = 4 << 20;
/// Bytes per message of a ByteStream read.
const READ_CHUNK: usize = 64 << 10;

#[tonic::async_trait]
impl Capabilities for CacheService {
    async fn get_capabilities(
        &self,
        _: Request<reapi::GetCapabilitiesRequest>,
    ) -> Result<Response<reapi::ServerCapabilities>, Status> {
        let version = |minor| Some(SemVer { major: 2, minor, patch: 0, prerelease: String::new() });
        Ok(Response::new(reapi::ServerCapabilities {
            cache_capabilities: Some(reapi::CacheCapabilities {
                digest_functions: vec![reapi::digest_function::Value::Sha256 as i32],
                action_cache_update_capabilities: Some(reapi::ActionCacheUpdateCapabilities {
                    update_enabled: true,
                }),
                max_batch_total_size_bytes: MAX_BATCH_BYTES,
                symlink_absolute_path_strategy: reapi::symlink_absolute_path_strategy::Value::Disallowed
                    as i32,
                ..Default::default()
            }),
            low_api_version: version(0),
            high_api_version: version(3),
            ..Default::default()
        }))
    }
}

/// The digest a ByteStream resource name ends with:
/// `[INSTANCE/]blobs/HASH/SIZE` (read) or
/// `[INSTANCE/]uploads/UUID/blobs/HASH/SIZE[/…]` (write).
fn resource_digest(name: &str) -> Result<reapi::Digest, Status> {
    let bad = || Status::invalid_argument(format!("resource_name: `{name}` does not name blobs/HASH/SIZE"));
    if name.split('/').any(|p| p == "compressed-blobs") {
        return Err(Status::invalid_argument("resource_name: compressed blobs are not supported"));
    }
    let mut parts = name.split('/').skip_while(|p| *p != "blobs").skip(1);
    let hash = parts.next().ok_or_else(bad)?;
    let size = parts.next().and_then(|s| s.parse::<i64>().ok()).ok_or_else(bad)?;
    let d = reapi::Digest { hash: hash.to_owned(), size_bytes: size };
    check_digest(&d).map_err(|e| Status::invalid_argument(format!("resource_name: {e}")))?;
    Ok(d)
}

#[tonic::async_trait]
impl ByteStream for CacheService {
    type ReadStream = Pin<Box<dyn Stream<Item = Result<ReadResponse, Status>> + Send>>;

    async fn read(&self, req: Request<ReadRequest>) -> Result<Response<Self::ReadStream>, Status> {
        let req = req.into_inner();
        let d = resource_digest(&req.resource_name)?;
        let wanted = d.clone();
        let data = self
            .blocking(move |cas| cas.get(&wanted))
            .await?
            .ok_or_else(|| Status::not_found(format!("no blob {}", d.hash)))?;
        let start = usize::try_from(req.read_offset).ok().filter(|o| *o <= data.len()).ok_or_else(|| {
            Status::out_of_range(format!(
                "read_offset: {} is beyond the blob's {} bytes",
                req.read_offset,
                data.len()
            ))
        })?;
        let end = match usize::try_from(req.read_limit) {
            Ok(0) | Err(_) => data.len(),
            Ok(limit) => start.saturating_add(limit).min(data.len()),
        };
        let chunks: Vec<Result<ReadResponse, Status>> =
            data[start..end].chunks(READ_CHUNK).map(|c| Ok(ReadResponse { data: c.to_vec() })).collect();
        // An empty blob still answers with one (empty) message.
        let chunks = if chunks.is_empty() { vec![Ok(ReadResponse { data: Vec::new() })] } else { chunks };
        Ok(Response::new(Box::pin(tokio_stream::iter(chunks))))
    }

    async fn write(
        &self,
        req: Request<tonic::Streaming<WriteRequest>>,
    ) -> Result<Response<WriteResponse>, Status> {
        let mut stream = req.into_inner();
        let mut digest: Option<reapi::Digest> = None;
        let mut data = Vec::new();
        while let Some(msg) = stream.message().await? {
            if digest.is_none() {
                let d = resource_digest(&msg.resource_name)?;
                // The declared size is checked before any data is kept:
                // what is buffered is bounded by the per-blob limit.
                self.cas()
                    .check_upload(&d)
                    .map_err(|e| Status::invalid_argument(format!("resource_name: {e}")))?;
                // Already held: REAPI lets the server end the upload early.
                if self.cas().missing(std::slice::from_ref(&d)).is_empty() {
                    return Ok(Response::new(WriteResponse { committed_size: d.size_bytes }));
                }
                digest = Some(d);
            }
            if msg.write_offset != i64::try_from(data.len()).unwrap_or(i64::MAX) {
                return Err(Status::invalid_argument(format!(
                    "write_offset: {} where {} bytes were received",
                    msg.write_offset,
                    data.len()
                )));
            }
            let expected = digest.as_ref().map_or(0, |d| d.size_bytes);
            if i64::try_from(data.len() + msg.data.len()).unwrap_or(i64::MAX) > expected {
                return Err(Status::invalid_argument(format!(
                    "data: more than the {expected} bytes the resource names"
                )));
            }
            data.extend_from_slice(&msg.data);
            if msg.finish_write {
                break;
            }
        }
        let d = digest.ok_or_else(|| Status::invalid_argument("resource_name: no message received"))?;
        let size = i64::try_from(data.len()).unwrap_or(i64::MAX);
        self.blocking(move |cas| cas.put(&d, data))
            .await?
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        Ok(Response::new(WriteResponse { committed_size: size }))
    }

    async fn query_write_status(
        &self,
        req: Request<QueryWriteStatusRequest>,
    ) -> Result<Response<QueryWriteStatusResponse>, Status> {
        let d = resource_digest(&req.into_inner().resource_name)?;
        let complete = self.cas().missing(std::slice::from_ref(&d)).is_empty();
        // Partial uploads are not kept: an incomplete write restarts at 0.
        Ok(Response::new(QueryWriteStatusResponse {
            committed_size: if complete { d.size_bytes } else { 0 },
            complete,
        }))
    }
}
