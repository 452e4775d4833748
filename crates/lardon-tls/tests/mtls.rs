//! Mutual TLS and join tokens over real loopback TCP: a gRPC server with
//! the broker's configuration accepts a client holding a certificate from
//! the cluster CA and the right token, and refuses everyone else.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::net::SocketAddr;
use std::path::Path;

use lardon_tls::{Identity, JoinToken, Role, TlsError, TokenAttach, TokenCheck, init_ca, issue};
use tonic::transport::{Channel, ClientTlsConfig, Endpoint, Server};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

/// A CA in `dir/ca`, the broker's identity in `dir/broker` and an agent's
/// in `dir/agent`.
fn cluster(dir: &Path) {
    init_ca(&dir.join("ca")).unwrap();
    issue(
        &dir.join("ca"),
        "broker",
        Role::Server,
        &["127.0.0.1".into(), "localhost".into()],
        30,
        &dir.join("broker"),
    )
    .unwrap();
    issue(&dir.join("ca"), "agent-1", Role::Client, &[], 30, &dir.join("agent")).unwrap();
}

/// Serves the health service with the broker's TLS (and a token check
/// when given) on an ephemeral loopback port.
async fn serve(dir: &Path, token: Option<JoinToken>) -> SocketAddr {
    let id = Identity::load(&dir.join("broker"), "broker").unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (_reporter, health) = tonic_health::server::health_reporter();
    let mut builder = Server::builder().tls_config(id.server_config()).unwrap();
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    tokio::spawn(async move {
        let router = match token {
            Some(t) => builder.add_service(tonic::service::interceptor::InterceptedService::new(
                health,
                TokenCheck::new(t),
            )),
            None => builder.add_service(health),
        };
        router.serve_with_incoming(incoming).await.unwrap();
    });
    addr
}

async fn channel(addr: SocketAddr, tls: ClientTlsConfig) -> Result<Channel, tonic::transport::Error> {
    Endpoint::from_shared(format!("https://{addr}")).unwrap().tls_config(tls).unwrap().connect().await
}

/// A health check over `tls`, with `token` attached when given.
async fn check(addr: SocketAddr, tls: ClientTlsConfig, token: Option<JoinToken>) -> Result<(), String> {
    let channel = channel(addr, tls).await.map_err(|e| format!("connect: {e:?}"))?;
    let req = HealthCheckRequest { service: String::new() };
    let result = match token {
        Some(t) => HealthClient::with_interceptor(channel, TokenAttach::new(t)).check(req).await,
        None => HealthClient::new(channel).check(req).await,
    };
    result.map(drop).map_err(|s| format!("{:?}: {}", s.code(), s.message()))
}

#[tokio::test]
async fn a_client_with_a_certificate_from_the_cluster_ca_is_served() {
    let dir = tempfile::tempdir().unwrap();
    cluster(dir.path());
    let addr = serve(dir.path(), None).await;
    let agent = Identity::load(&dir.path().join("agent"), "agent-1").unwrap();
    check(addr, agent.client_config("127.0.0.1"), None).await.unwrap();
}

#[tokio::test]
async fn a_client_without_a_certificate_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    cluster(dir.path());
    let addr = serve(dir.path(), None).await;
    let ca = std::fs::read_to_string(dir.path().join("agent/ca.pem")).unwrap();
    let anonymous = ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(ca))
        .domain_name("127.0.0.1");
    let e = check(addr, anonymous, None).await.unwrap_err();
    assert!(!e.is_empty(), "refused: {e}");
}

#[tokio::test]
async fn a_client_certificate_from_another_ca_is_refused_and_so_is_another_broker() {
    let dir = tempfile::tempdir().unwrap();
    cluster(dir.path());
    let other = dir.path().join("other");
    init_ca(&other.join("ca")).unwrap();
    issue(&other.join("ca"), "intruder", Role::Client, &[], 30, &other.join("intruder")).unwrap();
    let addr = serve(dir.path(), None).await;
    let intruder = Identity::load(&other.join("intruder"), "intruder").unwrap();
    let e = check(addr, intruder.client_config("127.0.0.1"), None).await.unwrap_err();
    assert!(!e.is_empty(), "refused: {e}");

    // The other way round: our agent does not trust a broker of another CA.
    issue(&other.join("ca"), "broker", Role::Server, &["127.0.0.1".into()], 30, &other.join("broker"))
        .unwrap();
    let rogue = serve(&other, None).await;
    let agent = Identity::load(&dir.path().join("agent"), "agent-1").unwrap();
    assert!(check(rogue, agent.client_config("127.0.0.1"), None).await.is_err());
}

#[tokio::test]
async fn a_missing_or_wrong_join_token_is_refused_as_unauthenticated() {
    let dir = tempfile::tempdir().unwrap();
    cluster(dir.path());
    let token = JoinToken::generate().unwrap();
    let addr = serve(dir.path(), Some(token.clone())).await;
    let agent = Identity::load(&dir.path().join("agent"), "agent-1").unwrap();
    let tls = || agent.client_config("127.0.0.1");
    check(addr, tls(), Some(token)).await.unwrap();
    let e = check(addr, tls(), None).await.unwrap_err();
    assert!(e.starts_with("Unauthenticated: no join token"), "{e}");
    let e = check(addr, tls(), Some(JoinToken::generate().unwrap())).await.unwrap_err();
    assert!(e.starts_with("Unauthenticated: wrong join token"), "{e}");
}

#[test]
fn bad_arguments_name_their_field_and_nothing_is_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca");
    assert!(matches!(issue(&ca, "x", Role::Client, &[], 30, dir.path()), Err(TlsError::Missing { .. })));
    init_ca(&ca).unwrap();
    assert!(matches!(init_ca(&ca), Err(TlsError::Exists(_))), "a CA is never replaced");
    let err = |r: Result<std::path::PathBuf, TlsError>| r.unwrap_err().to_string();
    assert!(err(issue(&ca, "../evil", Role::Client, &[], 30, dir.path())).starts_with("name: "));
    assert!(err(issue(&ca, "ca", Role::Client, &[], 30, dir.path())).starts_with("name: "));
    assert!(err(issue(&ca, "b", Role::Server, &[], 30, dir.path())).starts_with("hosts: "));
    assert!(err(issue(&ca, "b", Role::Server, &["bad host!".into()], 30, dir.path())).starts_with("hosts: "));
    assert!(err(issue(&ca, "b", Role::Client, &[], 0, dir.path())).starts_with("days: "));
    let out = dir.path().join("agent");
    issue(&ca, "a", Role::Client, &[], 30, &out).unwrap();
    assert!(matches!(issue(&ca, "a", Role::Client, &[], 30, &out), Err(TlsError::Exists(_))));
    for key in [ca.join("ca.key"), out.join("a.key")] {
        let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&key).unwrap().permissions());
        assert_eq!(mode & 0o777, 0o600, "{}", key.display());
    }
}
