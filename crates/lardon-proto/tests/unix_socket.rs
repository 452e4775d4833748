//! A trivial in-test server on a real Unix socket: the client helper
//! round-trips unary and server-streaming calls through it.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::pin::Pin;

use lardon_proto::pb::{self, TaskState};
use lardon_proto::{Lardon, LardonServer, connect};
use tokio::net::UnixListener;
use tokio_stream::Stream;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status};

type Stream_<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

#[derive(Debug, Default)]
struct Fake;

/// Emits the impl with the hand-written RPCs plus an `unimplemented` body
/// for each listed one (expanded before `async_trait` sees the impl).
macro_rules! fake_impl {
    ({ $($hand:tt)* } $($name:ident($req:ty) -> $resp:ty;)*) => {
        #[tonic::async_trait]
        impl Lardon for Fake {
            $($hand)*
            $(async fn $name(&self, _: Request<$req>) -> Result<Response<$resp>, Status> {
                Err(Status::unimplemented(stringify!($name)))
            })*
        }
    };
}

fake_impl! {
{
    type WaitStream = Stream_<pb::WaitEvent>;
    type LogStream = Stream_<pb::LogChunk>;
    type WatchStream = Stream_<pb::WatchEvent>;

    async fn hello(&self, _: Request<pb::HelloRequest>) -> Result<Response<pb::HelloResponse>, Status> {
        Ok(Response::new(pb::HelloResponse {
            version: "test".into(),
            host: "h1".into(),
            pid: std::process::id(),
            ..Default::default()
        }))
    }

    async fn submit(&self, req: Request<pb::SubmitRequest>) -> Result<Response<pb::SubmitResponse>, Status> {
        let spec = req.into_inner().spec.ok_or_else(|| Status::invalid_argument("spec: missing"))?;
        if spec.argv.is_empty() {
            return Err(Status::invalid_argument("argv: empty"));
        }
        let task = pb::Task {
            id: "h1-1".into(),
            state: TaskState::Pending.into(),
            spec: Some(spec),
            ..Default::default()
        };
        Ok(Response::new(pb::SubmitResponse { id: task.id.clone(), task: Some(task) }))
    }

    async fn log(&self, req: Request<pb::LogRequest>) -> Result<Response<Self::LogStream>, Status> {
        let id = req.into_inner().id;
        let chunks = [b"hello ".to_vec(), id.into_bytes()];
        let mut offset = 0;
        let items: Vec<_> = chunks
            .into_iter()
            .map(|data| {
                let chunk = pb::LogChunk { stream: pb::LogStream::Stdout.into(), offset, data };
                offset += chunk.data.len() as u64;
                Ok(chunk)
            })
            .collect();
        Ok(Response::new(Box::pin(tokio_stream::iter(items))))
    }

    async fn wait(&self, _: Request<pb::WaitRequest>) -> Result<Response<Self::WaitStream>, Status> {
        Err(Status::unimplemented("wait"))
    }
    async fn watch(&self, _: Request<pb::WatchRequest>) -> Result<Response<Self::WatchStream>, Status> {
        Err(Status::unimplemented("watch"))
    }

}
        submit_many(pb::SubmitManyRequest) -> pb::SubmitManyResponse;
        list(pb::ListRequest) -> pb::ListResponse;
        get(pb::GetRequest) -> pb::GetResponse;
        explain(pb::ExplainRequest) -> pb::ExplainResponse;
        cancel(pb::CancelRequest) -> pb::TaskActionResponse;
        pause(pb::PauseRequest) -> pb::TaskActionResponse;
        resume(pb::ResumeRequest) -> pb::TaskActionResponse;
        restart(pb::RestartRequest) -> pb::TaskActionResponse;
        remove(pb::RemoveRequest) -> pb::TaskActionResponse;
        clean(pb::CleanRequest) -> pb::CleanResponse;
        resources(pb::ResourcesRequest) -> pb::ResourcesResponse;
        get_policy(pb::GetPolicyRequest) -> pb::PolicyResponse;
        set_policy(pb::SetPolicyRequest) -> pb::PolicyResponse;
        progress(pb::ProgressRequest) -> pb::ProgressResponse;
        scratch_add(pb::ScratchAddRequest) -> pb::ScratchVolume;
        scratch_drain(pb::ScratchDrainRequest) -> pb::ScratchVolume;
        scratch_cancel_drain(pb::ScratchCancelDrainRequest) -> pb::ScratchVolume;
        scratch_remove(pb::ScratchRemoveRequest) -> pb::ScratchRemoveResponse;
        scratch_status(pb::ScratchStatusRequest) -> pb::ScratchStatusResponse;
        group_set(pb::GroupSetRequest) -> pb::GroupInfo;
        group_list(pb::GroupListRequest) -> pb::GroupListResponse;
        group_remove(pb::GroupRemoveRequest) -> pb::GroupRemoveResponse;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trip_over_a_unix_socket() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("lardon.sock");
    let listener = UnixListener::bind(&sock).unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(LardonServer::new(Fake))
            .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async {
                let _ = stop_rx.await;
            }),
    );

    let mut client = connect(&sock).await.unwrap();

    let hello = client.hello(pb::HelloRequest {}).await.unwrap().into_inner();
    assert_eq!(hello.host, "h1");
    assert_eq!(hello.pid, std::process::id());

    let spec = pb::TaskSpec {
        name: "echo".into(),
        argv: vec!["echo".into(), "hi".into()],
        env: vec![pb::EnvVar { key: "K".into(), value: "V".into() }],
        estimate: Some(pb::Estimate {
            memory_fixed: 2 << 30,
            memory_per_item: 50 << 20,
            batch_min: Some(1),
            batch_max: Some(32),
            cpu_millis: Some(250),
            class: "features.extract".into(),
            ..Default::default()
        }),
        items: Some(1000),
        retry_on_interrupt: Some(false),
        ..Default::default()
    };
    let resp = client
        .submit(pb::SubmitRequest { spec: Some(spec.clone()), paused: false, id_only: false })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(resp.id, "h1-1");
    let task = resp.task.unwrap();
    assert_eq!(task.state(), TaskState::Pending);
    assert_eq!(task.spec, Some(spec), "the spec survives the wire exactly");

    let bad = client.submit(pb::SubmitRequest::default()).await.unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);

    let mut log =
        client.log(pb::LogRequest { id: "h1-1".into(), ..Default::default() }).await.unwrap().into_inner();
    let mut text = Vec::new();
    while let Some(chunk) = log.message().await.unwrap() {
        assert_eq!(chunk.offset, text.len() as u64);
        text.extend_from_slice(&chunk.data);
    }
    assert_eq!(text, b"hello h1-1");

    let err = client.list(pb::ListRequest::default()).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unimplemented);

    stop_tx.send(()).unwrap();
    server.await.unwrap().unwrap();
}
