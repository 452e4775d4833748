//! KEDA's external scaler over the broker's demand (docs/DESIGN.md §14):
//! KEDA asks, per ScaledObject or ScaledJob, whether agents of a
//! capability should run at all and how many tasks wait for them; it then
//! scales an agent Deployment or creates agent Jobs. Lardon needs no
//! access to the Kubernetes API.
//!
//! The broker publishes its demand (tasks queued or in flight, per
//! capability) on a [`DemandBoard`]; [`Scaler`] answers KEDA from it. A
//! trigger's metadata names the capability and, optionally, how many
//! tasks one replica takes:
//!
//! ```yaml
//! triggers:
//!   - type: external-push
//!     metadata:
//!       scalerAddress: lardon-broker.lardon:7070
//!       capability: gcc@13:x86_64-linux-gnu
//!       tasksPerReplica: "4"
//! ```

use std::collections::BTreeMap;
use std::pin::Pin;

use lardon_proto::keda::external_scaler_server::ExternalScaler;
use lardon_proto::keda::{
    GetMetricSpecResponse, GetMetricsRequest, GetMetricsResponse, IsActiveResponse, MetricSpec, MetricValue,
    ScaledObjectRef,
};
use tokio::sync::{mpsc, watch};
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use lardon_cluster_core::Capability;

/// The broker's demand per capability, as KEDA sees it: tasks queued or
/// in flight. Cloning shares the board.
#[derive(Debug, Clone)]
pub struct DemandBoard {
    tx: watch::Sender<BTreeMap<Capability, u64>>,
}

impl Default for DemandBoard {
    fn default() -> Self {
        Self::new()
    }
}

impl DemandBoard {
    /// An empty board (no demand anywhere).
    #[must_use]
    pub fn new() -> Self {
        DemandBoard { tx: watch::Sender::new(BTreeMap::new()) }
    }

    /// Replaces the demand with `demand`; streams watching a capability
    /// whose activity changed are told at once.
    pub fn publish(&self, demand: BTreeMap<Capability, u64>) {
        self.tx.send_if_modified(|current| {
            let changed = *current != demand;
            *current = demand;
            changed
        });
    }

    fn get(&self, capability: &Capability) -> u64 {
        self.tx.borrow().get(capability).copied().unwrap_or(0)
    }
}

/// KEDA's external scaler, answering from a [`DemandBoard`].
#[derive(Debug, Clone)]
pub struct Scaler {
    board: DemandBoard,
}

impl Scaler {
    /// A scaler over `board`.
    #[must_use]
    pub fn new(board: DemandBoard) -> Self {
        Scaler { board }
    }
}

/// What one trigger's metadata asks about.
struct Trigger {
    capability: Capability,
    per_replica: i64,
    metric: String,
}

fn trigger(r: &ScaledObjectRef) -> Result<Trigger, Status> {
    let text = r.scaler_metadata.get("capability").ok_or_else(|| {
        Status::invalid_argument("scalerMetadata.capability: missing (e.g. gcc@13:x86_64-linux-gnu)")
    })?;
    let capability = Capability::parse(text)
        .map_err(|e| Status::invalid_argument(format!("scalerMetadata.capability: {e}")))?;
    let per_replica = match r.scaler_metadata.get("tasksPerReplica") {
        None => 1,
        Some(v) => v.trim().parse::<i64>().ok().filter(|n| (1..=1_000_000).contains(n)).ok_or_else(|| {
            Status::invalid_argument(format!(
                "scalerMetadata.tasksPerReplica: `{v}` is not a whole number within 1–1000000"
            ))
        })?,
    };
    // Metric names must be DNS-label-like: the key with anything else as `-`.
    let key: String = capability
        .key()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' })
        .collect();
    Ok(Trigger { capability, per_replica, metric: format!("lardon-tasks-{key}") })
}

/// The activity last pushed, so that a stream carries changes only (KEDA
/// acts on each message).
#[derive(Debug, Default)]
struct Edge(Option<bool>);

impl Edge {
    /// `Some(active)` when it differs from the last one pushed (or is the
    /// first), and remembers it.
    fn change(&mut self, active: bool) -> Option<bool> {
        if self.0 == Some(active) {
            return None;
        }
        self.0 = Some(active);
        Some(active)
    }
}

type ActiveStream = Pin<Box<dyn Stream<Item = Result<IsActiveResponse, Status>> + Send>>;

#[tonic::async_trait]
impl ExternalScaler for Scaler {
    async fn is_active(&self, req: Request<ScaledObjectRef>) -> Result<Response<IsActiveResponse>, Status> {
        let t = trigger(req.get_ref())?;
        Ok(Response::new(IsActiveResponse { result: self.board.get(&t.capability) > 0 }))
    }

    type StreamIsActiveStream = ActiveStream;

    async fn stream_is_active(
        &self,
        req: Request<ScaledObjectRef>,
    ) -> Result<Response<Self::StreamIsActiveStream>, Status> {
        let t = trigger(req.get_ref())?;
        let mut rx = self.board.tx.subscribe();
        let (out, stream) = mpsc::channel(4);
        tokio::spawn(async move {
            let mut edge = Edge::default();
            loop {
                let active = rx.borrow_and_update().get(&t.capability).copied().unwrap_or(0) > 0;
                if let Some(result) = edge.change(active)
                    && out.send(Ok(IsActiveResponse { result })).await.is_err()
                {
                    return; // KEDA hung up.
                }
                if rx.changed().await.is_err() {
                    return; // The broker is gone.
                }
            }
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(stream))))
    }

    async fn get_metric_spec(
        &self,
        req: Request<ScaledObjectRef>,
    ) -> Result<Response<GetMetricSpecResponse>, Status> {
        let t = trigger(req.get_ref())?;
        Ok(Response::new(GetMetricSpecResponse {
            metric_specs: vec![MetricSpec {
                metric_name: t.metric,
                target_size: t.per_replica,
                target_size_float: t.per_replica as f64,
            }],
        }))
    }

    async fn get_metrics(
        &self,
        req: Request<GetMetricsRequest>,
    ) -> Result<Response<GetMetricsResponse>, Status> {
        let req = req.into_inner();
        let r = req.scaled_object_ref.ok_or_else(|| Status::invalid_argument("scaledObjectRef: missing"))?;
        let t = trigger(&r)?;
        if req.metric_name != t.metric {
            return Err(Status::invalid_argument(format!(
                "metricName: `{}` is not this trigger's metric `{}`",
                req.metric_name, t.metric
            )));
        }
        let value = i64::try_from(self.board.get(&t.capability)).unwrap_or(i64::MAX);
        Ok(Response::new(GetMetricsResponse {
            metric_values: vec![MetricValue {
                metric_name: t.metric,
                metric_value: value,
                metric_value_float: value as f64,
            }],
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::Edge;

    #[test]
    fn only_changes_of_activity_are_pushed() {
        let mut e = Edge::default();
        let pushed: Vec<_> = [false, true, true, true, false, false, true].map(|a| e.change(a)).to_vec();
        assert_eq!(pushed, [Some(false), Some(true), None, None, Some(false), None, Some(true)]);
    }
}
