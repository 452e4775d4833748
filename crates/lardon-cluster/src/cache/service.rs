//! REAPI's `ContentAddressableStorage` and `ActionCache` gRPC services
//! over the broker's bounded stores, so that the broker's cache is also a
//! standard remote cache. Only sha256 digests are accepted; every refusal
//! names the field. The tree, chunking and splicing calls are not offered
//! (`UNIMPLEMENTED`).

use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use bazel_remote_apis::google::rpc;
use tokio_stream::Stream;
use tonic::{Code, Request, Response, Status};

use super::reapi;
use super::reapi::action_cache_server::ActionCache as ActionCacheApi;
use super::reapi::content_addressable_storage_server::ContentAddressableStorage;
use super::store::{ActionCache, Cas, check_digest};

/// The stores a broker serves (shared with its [`super::hooks::CacheHook`]).
#[derive(Debug, Clone)]
pub struct CacheService {
    cas: Arc<Mutex<Cas>>,
    actions: Arc<Mutex<ActionCache>>,
}

impl CacheService {
    /// Serves `cas` and `actions`.
    #[must_use]
    pub fn new(cas: Arc<Mutex<Cas>>, actions: Arc<Mutex<ActionCache>>) -> Self {
        CacheService { cas, actions }
    }

    fn cas(&self) -> MutexGuard<'_, Cas> {
        self.cas.lock().unwrap_or_else(PoisonError::into_inner)
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
        let mut cas = self.cas();
        let responses = req
            .requests
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
            .collect();
        Ok(Response::new(reapi::BatchUpdateBlobsResponse { responses }))
    }

    async fn batch_read_blobs(
        &self,
        req: Request<reapi::BatchReadBlobsRequest>,
    ) -> Result<Response<reapi::BatchReadBlobsResponse>, Status> {
        let req = req.into_inner();
        check_function(req.digest_function)?;
        let mut cas = self.cas();
        let responses = req
            .digests
            .into_iter()
            .map(|d| {
                let (data, status) = match check_digest(&d).map(|()| cas.get(&d)) {
                    Err(e) => (Vec::new(), rpc_status(Code::InvalidArgument, e.to_string())),
                    Ok(None) => (Vec::new(), rpc_status(Code::NotFound, format!("no blob {}", d.hash))),
                    Ok(Some(data)) => (data, rpc_status(Code::Ok, "")),
                };
                reapi::batch_read_blobs_response::Response { digest: Some(d), data, compressor: 0, status }
            })
            .collect();
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
