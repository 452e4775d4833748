//! A real REAPI client against the broker's cache: Bazel (Debian's
//! `bazel-bootstrap`, which `scripts/test.sh` installs) builds a genrule
//! with `--remote_cache` pointing at the cache services on loopback, then
//! builds it again from an empty output base and takes the result from the
//! cache — no agent, no local execution. Bazel speaks Capabilities,
//! ActionCache, ContentAddressableStorage and ByteStream here.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bazel_remote_apis::google::bytestream::byte_stream_server::ByteStreamServer;
use lardon_cluster::cache::reapi::action_cache_server::ActionCacheServer;
use lardon_cluster::cache::reapi::capabilities_server::CapabilitiesServer;
use lardon_cluster::cache::reapi::content_addressable_storage_server::ContentAddressableStorageServer;
use lardon_cluster::cache::service::CacheService;
use lardon_cluster::cache::store::{ActionCache, Cas};

fn bazel(workspace: &Path, output_root: &Path, cache: &str) -> std::process::Output {
    Command::new("bazel")
        .current_dir(workspace)
        .arg(format!("--output_user_root={}", output_root.display()))
        .args(["--batch", "build", "//:hello", "--remote_cache", cache, "--noshow_progress", "--color=no"])
        .env("HOME", output_root)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run bazel ({e}): scripts/test.sh installs Debian's bazel-bootstrap")
        })
}

#[test]
fn bazel_uses_the_broker_cache_and_hits_it_from_an_empty_output_base() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let actions = Arc::new(Mutex::new(ActionCache::new(64 << 20, Duration::from_secs(3600))));
    let service = CacheService::new(Arc::new(Cas::in_memory(64 << 20, 64 << 20)), Arc::clone(&actions));
    let addr = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(CapabilitiesServer::new(service.clone()))
                .add_service(ActionCacheServer::new(service.clone()))
                .add_service(ContentAddressableStorageServer::new(service.clone()))
                .add_service(ByteStreamServer::new(service))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        addr
    });
    let cache = format!("grpc://{addr}");

    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("WORKSPACE"), "").unwrap();
    std::fs::write(
        ws.join("BUILD"),
        "genrule(name = \"hello\", outs = [\"hello.txt\"], cmd = \"echo built by genrule > $@\")\n",
    )
    .unwrap();

    let first = bazel(&ws, &dir.path().join("root1"), &cache);
    let log1 = String::from_utf8_lossy(&first.stderr);
    assert!(first.status.success(), "first build: {log1}");
    assert!(!actions.lock().unwrap().is_empty(), "bazel stored its action result: {log1}");

    let second = bazel(&ws, &dir.path().join("root2"), &cache);
    let log2 = String::from_utf8_lossy(&second.stderr);
    assert!(second.status.success(), "second build: {log2}");
    assert!(log2.contains("1 remote cache hit"), "the rebuild came from the cache: {log2}");
}
