//! The broker's cache through REAPI, as a remote-cache client uses it:
//! generated `ContentAddressableStorage` and `ActionCache` clients over
//! real loopback gRPC. FindMissingBlobs then BatchUpdateBlobs, the action
//! result stored after its Action, and a cached success answered by the
//! pre-route chain with no agent anywhere.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bazel_remote_apis::google::bytestream::WriteRequest;
use bazel_remote_apis::google::bytestream::byte_stream_client::ByteStreamClient;
use bazel_remote_apis::google::bytestream::byte_stream_server::ByteStreamServer;
use lardon_cluster::Capability;
use lardon_cluster::cache::hooks::{CacheHook, HookChain, HookVerdict, PreRoute};
use lardon_cluster::cache::key::{ActionKey, digest_of};
use lardon_cluster::cache::reapi;
use lardon_cluster::cache::reapi::action_cache_client::ActionCacheClient;
use lardon_cluster::cache::reapi::action_cache_server::ActionCacheServer;
use lardon_cluster::cache::reapi::content_addressable_storage_client::ContentAddressableStorageClient;
use lardon_cluster::cache::reapi::content_addressable_storage_server::ContentAddressableStorageServer;
use lardon_cluster::cache::service::CacheService;
use lardon_cluster::cache::store::{ActionCache, Cas};
use prost::Message as _;
use tonic::transport::Channel;

struct Broker {
    actions: Arc<Mutex<ActionCache>>,
    cas: ContentAddressableStorageClient<Channel>,
    ac: ActionCacheClient<Channel>,
    stream: ByteStreamClient<Channel>,
    store: Arc<Cas>,
}

/// The per-blob limit of the test broker.
const MAX_BLOB: u64 = 64 << 10;

async fn broker() -> Broker {
    let cas = Arc::new(Cas::in_memory(1 << 20, MAX_BLOB));
    let store = Arc::clone(&cas);
    let actions = Arc::new(Mutex::new(ActionCache::new(1 << 20, Duration::from_secs(3600))));
    let service = CacheService::new(cas, Arc::clone(&actions));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(ContentAddressableStorageServer::new(service.clone()))
            .add_service(ActionCacheServer::new(service.clone()))
            .add_service(ByteStreamServer::new(service))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let channel = Channel::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();
    Broker {
        actions,
        cas: ContentAddressableStorageClient::new(channel.clone()),
        ac: ActionCacheClient::new(channel.clone()),
        stream: ByteStreamClient::new(channel),
        store,
    }
}

fn key() -> ActionKey {
    let argv = ["gcc", "-c", "x.c", "-o", "x.o"].map(String::from);
    ActionKey::new(&Capability::parse("gcc@13:x86_64-linux-gnu").unwrap(), &argv, &[], &[], None)
}

fn upload(blobs: &[Vec<u8>]) -> reapi::BatchUpdateBlobsRequest {
    reapi::BatchUpdateBlobsRequest {
        requests: blobs
            .iter()
            .map(|b| reapi::batch_update_blobs_request::Request {
                digest: Some(digest_of(b)),
                data: b.clone(),
                compressor: 0,
            })
            .collect(),
        ..Default::default()
    }
}

#[tokio::test]
async fn blobs_upload_after_find_missing_and_a_stored_result_is_served_and_intercepted() {
    let mut b = broker().await;
    let k = key();
    let (action, command) = (k.action.encode_to_vec(), k.command.encode_to_vec());
    let object = b"\x7fELF object".to_vec();

    let wanted = vec![digest_of(&action), digest_of(&command), digest_of(&object)];
    let missing = b
        .cas
        .find_missing_blobs(reapi::FindMissingBlobsRequest {
            blob_digests: wanted.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .missing_blob_digests;
    assert_eq!(missing, wanted, "an empty store lacks everything");

    // A result for an Action the CAS does not hold is refused.
    let result = reapi::ActionResult { exit_code: 0, stdout_raw: b"ok".to_vec(), ..Default::default() };
    let update = reapi::UpdateActionResultRequest {
        action_digest: Some(k.digest.clone()),
        action_result: Some(result.clone()),
        ..Default::default()
    };
    let e = b.ac.update_action_result(update.clone()).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");

    let up = b.cas.batch_update_blobs(upload(&[action, command, object.clone()])).await.unwrap().into_inner();
    assert!(up.responses.iter().all(|r| r.status.as_ref().is_some_and(|s| s.code == 0)), "{up:?}");
    let missing = b
        .cas
        .find_missing_blobs(reapi::FindMissingBlobsRequest { blob_digests: wanted, ..Default::default() })
        .await
        .unwrap()
        .into_inner()
        .missing_blob_digests;
    assert!(missing.is_empty());

    let get = reapi::GetActionResultRequest { action_digest: Some(k.digest.clone()), ..Default::default() };
    assert_eq!(b.ac.get_action_result(get.clone()).await.unwrap_err().code(), tonic::Code::NotFound);
    b.ac.update_action_result(update).await.unwrap();
    assert_eq!(b.ac.get_action_result(get).await.unwrap().into_inner(), result);

    let read = reapi::BatchReadBlobsRequest { digests: vec![digest_of(&object)], ..Default::default() };
    assert_eq!(b.cas.batch_read_blobs(read).await.unwrap().into_inner().responses[0].data, object);

    // The pre-route chain answers the same task from the cache: no agent
    // is connected anywhere in this test.
    let chain = HookChain::new().with(Box::new(CacheHook::new(Arc::clone(&b.actions))));
    let verdict = chain.check(&PreRoute { cacheable: Some(key()) }, Instant::now()).unwrap();
    assert_eq!(verdict, ("cache", HookVerdict::Intercept(Box::new(result))));
}

#[tokio::test]
async fn corrupt_or_malformed_input_is_refused_naming_the_field() {
    let mut b = broker().await;
    let mut bad = upload(&[b"data".to_vec()]);
    bad.requests[0].data = b"other".to_vec();
    let r = b.cas.batch_update_blobs(bad).await.unwrap().into_inner();
    let status = r.responses[0].status.clone().unwrap();
    assert_eq!(status.code, tonic::Code::InvalidArgument as i32);
    assert!(status.message.starts_with("data: does not match"), "{status:?}");

    let req = reapi::FindMissingBlobsRequest {
        blob_digests: vec![reapi::Digest { hash: "xyz".into(), size_bytes: 1 }],
        ..Default::default()
    };
    let e = b.cas.find_missing_blobs(req).await.unwrap_err();
    assert!(e.message().starts_with("blob_digests[0].digest: "), "{e:?}");

    let req = reapi::FindMissingBlobsRequest { digest_function: 2, ..Default::default() };
    assert!(b.cas.find_missing_blobs(req).await.unwrap_err().message().starts_with("digest_function: "));
    let e = b.ac.get_action_result(reapi::GetActionResultRequest::default()).await.unwrap_err();
    assert_eq!((e.code(), e.message()), (tonic::Code::InvalidArgument, "action_digest: missing"));
}

/// One ByteStream write of `messages` (resource name on the first).
async fn write(
    b: &mut Broker,
    name: &str,
    messages: Vec<(i64, Vec<u8>, bool)>,
) -> Result<i64, tonic::Status> {
    let first = name.to_owned();
    let reqs: Vec<WriteRequest> = messages
        .into_iter()
        .enumerate()
        .map(|(i, (write_offset, data, finish_write))| WriteRequest {
            resource_name: if i == 0 { first.clone() } else { String::new() },
            write_offset,
            finish_write,
            data,
        })
        .collect();
    b.stream.write(tokio_stream::iter(reqs)).await.map(|r| r.into_inner().committed_size)
}

#[tokio::test]
async fn a_hostile_upload_is_refused_before_its_data_is_kept() {
    let mut b = broker().await;
    // A declared size past the per-blob limit: refused on the first
    // message, whatever follows (the store never buffers toward 1 TiB).
    let hash = "ab".repeat(32);
    let huge = format!("uploads/u1/blobs/{hash}/{}", 1_u64 << 40);
    let e = write(&mut b, &huge, vec![(0, vec![0; 1024], false)]).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(e.message().starts_with("resource_name: data: 1099511627776 bytes exceed"), "{}", e.message());
    assert!(e.message().contains("--cache-max-blob"), "{}", e.message());
    // More data than the resource names, a wrong offset, a wrong hash.
    let data = vec![7_u8; 1000];
    let d = digest_of(&data);
    let name = format!("uploads/u2/blobs/{}/{}", d.hash, d.size_bytes);
    let e = write(&mut b, &name, vec![(0, data.clone(), false), (1000, vec![1], true)]).await.unwrap_err();
    assert!(e.message().starts_with("data: more than the 1000 bytes"), "{}", e.message());
    let e = write(&mut b, &name, vec![(0, data[..10].to_vec(), false), (5, data[10..].to_vec(), true)])
        .await
        .unwrap_err();
    assert!(e.message().starts_with("write_offset: 5 where 10 bytes"), "{}", e.message());
    let e = write(&mut b, &name, vec![(0, vec![8_u8; 1000], true)]).await.unwrap_err();
    assert!(e.message().contains("does not match digest"), "{}", e.message());
    let e = write(&mut b, "blobs/../../etc/passwd/3", vec![(0, vec![1, 2, 3], true)]).await.unwrap_err();
    assert!(e.message().starts_with("resource_name: "), "{}", e.message());
    assert_eq!(b.store.bytes(), 0, "nothing refused was kept");
    // The same store still takes an honest upload at the limit.
    let data = vec![9_u8; usize::try_from(MAX_BLOB).unwrap()];
    let d = digest_of(&data);
    let name = format!("uploads/u3/blobs/{}/{}", d.hash, d.size_bytes);
    let half = data.len() / 2;
    let sent = vec![(0, data[..half].to_vec(), false), (half as i64, data[half..].to_vec(), true)];
    assert_eq!(write(&mut b, &name, sent).await.unwrap(), d.size_bytes);
    assert_eq!(b.store.bytes(), MAX_BLOB);
}
