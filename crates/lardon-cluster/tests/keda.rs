//! The KEDA external scaler through its gRPC interface, as KEDA calls it:
//! a generated `ExternalScaler` client over real loopback TCP against the
//! broker's scaler, driven by the demand the broker publishes.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use lardon_cluster::Capability;
use lardon_cluster::keda::{DemandBoard, Scaler};
use lardon_proto::keda::external_scaler_client::ExternalScalerClient;
use lardon_proto::keda::external_scaler_server::ExternalScalerServer;
use lardon_proto::keda::{GetMetricsRequest, ScaledObjectRef};
use tonic::transport::Channel;

/// No sleeps for ordering: a stream read waits at most this long, and only
/// a broken implementation ever reaches it.
const LIMIT: Duration = Duration::from_secs(20);

fn cap(text: &str) -> Capability {
    Capability::parse(text).unwrap()
}

fn trigger(metadata: &[(&str, &str)]) -> ScaledObjectRef {
    ScaledObjectRef {
        name: "agents-gcc".into(),
        namespace: "lardon".into(),
        scaler_metadata: metadata
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect::<HashMap<_, _>>(),
    }
}

fn gcc() -> ScaledObjectRef {
    trigger(&[("capability", "gcc@13:x86_64-linux-gnu"), ("tasksPerReplica", "4")])
}

async fn serve(board: DemandBoard) -> ExternalScalerClient<Channel> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(ExternalScalerServer::new(Scaler::new(board)))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let channel = Channel::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();
    ExternalScalerClient::new(channel)
}

#[tokio::test]
async fn demand_drives_activity_metric_spec_and_value() {
    let board = DemandBoard::new();
    let mut c = serve(board.clone()).await;
    assert!(!c.is_active(gcc()).await.unwrap().into_inner().result, "no demand: scaled to zero");

    let spec = c.get_metric_spec(gcc()).await.unwrap().into_inner();
    assert_eq!(spec.metric_specs.len(), 1);
    let metric = spec.metric_specs[0].metric_name.clone();
    assert_eq!(metric, "lardon-tasks-gcc-13-x86-64-linux-gnu");
    assert_eq!(spec.metric_specs[0].target_size, 4, "tasksPerReplica");

    board.publish(BTreeMap::from([
        (cap("gcc@13:x86_64-linux-gnu"), 10),
        (cap("clang@17:x86_64-linux-gnu"), 3),
    ]));
    assert!(c.is_active(gcc()).await.unwrap().into_inner().result);
    let req = GetMetricsRequest { scaled_object_ref: Some(gcc()), metric_name: metric.clone() };
    let values = c.get_metrics(req).await.unwrap().into_inner().metric_values;
    assert_eq!((values[0].metric_name.as_str(), values[0].metric_value), (metric.as_str(), 10));

    // Another capability's demand is not this trigger's.
    let python = trigger(&[("capability", "python@3.11")]);
    assert!(!c.is_active(python).await.unwrap().into_inner().result);
}

#[tokio::test]
async fn the_push_stream_reports_each_change_of_activity_once() {
    let board = DemandBoard::new();
    let mut c = serve(board.clone()).await;
    let mut stream = c.stream_is_active(gcc()).await.unwrap().into_inner();
    let mut next =
        async || tokio::time::timeout(LIMIT, stream.message()).await.unwrap().unwrap().unwrap().result;
    assert!(!next().await, "the current state first");
    let gcc13 = cap("gcc@13:x86_64-linux-gnu");
    board.publish(BTreeMap::from([(gcc13.clone(), 1)]));
    assert!(next().await);
    // More demand is still active: no message; then back to none.
    board.publish(BTreeMap::from([(gcc13.clone(), 5)]));
    board.publish(BTreeMap::from([(cap("clang@17"), 5)]));
    assert!(!next().await, "the next message is the change to inactive, not a repeat");
}

#[tokio::test]
async fn bad_trigger_metadata_is_refused_naming_the_field() {
    let mut c = serve(DemandBoard::new()).await;
    let refused = |s: tonic::Status| (s.code(), s.message().to_owned());
    let (code, msg) = refused(c.is_active(trigger(&[])).await.unwrap_err());
    assert_eq!(code, tonic::Code::InvalidArgument);
    assert!(msg.starts_with("scalerMetadata.capability: missing"), "{msg}");
    let (_, msg) = refused(c.is_active(trigger(&[("capability", "/usr/bin/gcc")])).await.unwrap_err());
    assert!(msg.starts_with("scalerMetadata.capability: "), "{msg}");
    let bad = trigger(&[("capability", "gcc"), ("tasksPerReplica", "0")]);
    let (_, msg) = refused(c.get_metric_spec(bad).await.unwrap_err());
    assert!(msg.starts_with("scalerMetadata.tasksPerReplica: `0`"), "{msg}");
    let req = GetMetricsRequest { scaled_object_ref: Some(gcc()), metric_name: "other".into() };
    let (_, msg) = refused(c.get_metrics(req).await.unwrap_err());
    assert!(msg.starts_with("metricName: `other`"), "{msg}");
    let (_, msg) = refused(c.get_metrics(GetMetricsRequest::default()).await.unwrap_err());
    assert!(msg.starts_with("scaledObjectRef: missing"), "{msg}");
}
