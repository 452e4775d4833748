//! The daemon side: a thread with its own small tokio runtime that keeps
//! a Watch stream open (re-dialling after a loss, re-opening it for a
//! fresh snapshot on request) and makes the RPCs the user asks for. It
//! talks to the UI only through channels, so the UI never awaits.

use std::path::PathBuf;
use std::sync::mpsc as std_mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use lardon_proto::LardonClient;
use lardon_proto::pb::{self, watch_event::Event};
use tokio::sync::mpsc;
use tonic::transport::Channel;

use crate::TopError;
use crate::state::Link;
use crate::update::Request;

/// Wait before re-dialling a lost daemon.
const RETRY: Duration = Duration::from_secs(1);

/// What the client thread tells the UI.
#[derive(Debug)]
pub(crate) enum Incoming {
    /// One event of the Watch stream.
    Watch(Box<pb::WatchEvent>),
    /// The connection changed.
    Link(Link),
    /// The outcome of a requested RPC: a notice, or an error message.
    Rpc(Result<String, String>),
}

/// Handle on the client thread; dropping it stops and joins the thread.
#[derive(Debug)]
pub(crate) struct Client {
    requests: Option<mpsc::UnboundedSender<Request>>,
    thread: Option<JoinHandle<()>>,
}

impl Client {
    /// Starts the thread and waits for the first connection, so that an
    /// absent daemon is reported before the terminal is taken over.
    pub(crate) fn start(socket: PathBuf, out: std_mpsc::Sender<Incoming>) -> Result<Self, TopError> {
        let (req_tx, req_rx) = mpsc::unbounded_channel();
        let (ready_tx, ready_rx) = std_mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("lardon-top-watch".into())
            .spawn(move || match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(rt) => rt.block_on(session(socket, req_rx, out, ready_tx)),
                Err(e) => drop(ready_tx.send(Err(TopError::Runtime(e)))),
            })
            .map_err(TopError::Runtime)?;
        let mut client = Self { requests: Some(req_tx), thread: Some(thread) };
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(client),
            Ok(Err(e)) => Err(e),
            Err(_) => {
                client.requests = None;
                Err(TopError::Runtime(std::io::Error::other("the watch thread ended early")))
            }
        }
    }

    /// Queues a request (ignored once the thread has ended).
    pub(crate) fn send(&self, request: Request) {
        if let Some(tx) = &self.requests {
            let _ = tx.send(request);
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.requests = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// How one Watch stream ended.
enum Ended {
    Quit,
    Resync,
    Lost(String),
}

async fn session(
    socket: PathBuf,
    mut requests: mpsc::UnboundedReceiver<Request>,
    out: std_mpsc::Sender<Incoming>,
    ready: std_mpsc::Sender<Result<(), TopError>>,
) {
    let mut ready = Some(ready);
    loop {
        let client = match lardon_proto::connect(&socket).await {
            Ok(client) => client,
            Err(e) => {
                if let Some(ready) = ready.take() {
                    let _ = ready.send(Err(TopError::Connect(e)));
                    return;
                }
                if out.send(Incoming::Link(Link::Lost("daemon unreachable".into()))).is_err()
                    || !pause(&mut requests, &out).await
                {
                    return;
                }
                continue;
            }
        };
        if let Some(ready) = ready.take() {
            let _ = ready.send(Ok(()));
        }
        match watch(client, &mut requests, &out).await {
            Ended::Quit => return,
            Ended::Resync => {}
            Ended::Lost(why) => {
                if out.send(Incoming::Link(Link::Lost(why))).is_err() || !pause(&mut requests, &out).await {
                    return;
                }
            }
        }
    }
}

/// Waits [`RETRY`] while answering requests with "not connected"; false
/// when the UI has gone.
async fn pause(requests: &mut mpsc::UnboundedReceiver<Request>, out: &std_mpsc::Sender<Incoming>) -> bool {
    let sleep = tokio::time::sleep(RETRY);
    tokio::pin!(sleep);
    loop {
        tokio::select! {
            () = &mut sleep => return true,
            req = requests.recv() => match req {
                None => return false,
                Some(Request::Resync) => {}
                Some(_) => {
                    let _ = out.send(Incoming::Rpc(Err("not connected to the daemon".into())));
                }
            },
        }
    }
}

async fn watch(
    client: LardonClient<Channel>,
    requests: &mut mpsc::UnboundedReceiver<Request>,
    out: &std_mpsc::Sender<Incoming>,
) -> Ended {
    let mut stream = match client.clone().watch(pb::WatchRequest { skip_snapshot: false }).await {
        Ok(response) => response.into_inner(),
        Err(status) => return Ended::Lost(status.message().to_owned()),
    };
    loop {
        tokio::select! {
            req = requests.recv() => match req {
                None => return Ended::Quit,
                Some(Request::Resync) => return Ended::Resync,
                Some(req) => {
                    let (client, out) = (client.clone(), out.clone());
                    tokio::spawn(async move {
                        let result = call(client, req, &out).await;
                        let _ = out.send(Incoming::Rpc(result));
                    });
                }
            },
            msg = stream.message() => match msg {
                Ok(Some(event)) => {
                    if out.send(Incoming::Watch(Box::new(event))).is_err() {
                        return Ended::Quit;
                    }
                }
                Ok(None) => return Ended::Lost("the daemon closed the stream".into()),
                Err(status) => return Ended::Lost(status.message().to_owned()),
            },
        }
    }
}

/// Makes one RPC; `Ok(notice)` or `Err(message)` for the footer.
async fn call(
    mut client: LardonClient<Channel>,
    request: Request,
    out: &std_mpsc::Sender<Incoming>,
) -> Result<String, String> {
    let task_result =
        |verb: &str, id: &str, r: Result<tonic::Response<pb::TaskActionResponse>, tonic::Status>| {
            let response = r.map_err(|s| format!("{verb} #{id}: {}", s.message()))?.into_inner();
            match response.results.into_iter().find(|x| x.id == id).or(None) {
                Some(x) if !x.ok => Err(format!("{verb} #{id}: {}", x.error)),
                _ => Ok(format!("{verb} #{id}: done")),
            }
        };
    let volume = |verb: &str, name: &str, r: Result<tonic::Response<pb::ScratchVolume>, tonic::Status>| {
        let volume = r.map_err(|s| format!("{verb} {name}: {}", s.message()))?.into_inner();
        let (word, _) = crate::format::scratch_state(volume.state());
        let notice = format!("{verb} {name}: now {word}");
        let event = pb::WatchEvent { seq: 0, at_unix_ms: 0, event: Some(Event::ScratchChanged(volume)) };
        let _ = out.send(Incoming::Watch(Box::new(event)));
        Ok(notice)
    };
    match request {
        Request::Pause(id) => {
            let r = client.pause(pb::PauseRequest { ids: vec![id.clone()], ..Default::default() }).await;
            task_result("pause", &id, r)
        }
        Request::Resume(id) => {
            let r = client.resume(pb::ResumeRequest { ids: vec![id.clone()], ..Default::default() }).await;
            task_result("resume", &id, r)
        }
        Request::Cancel(id) => {
            let r = client.cancel(pb::CancelRequest { ids: vec![id.clone()], ..Default::default() }).await;
            task_result("cancel", &id, r)
        }
        Request::Drain(name) => {
            let r = client.scratch_drain(pb::ScratchDrainRequest { name: name.clone() }).await;
            volume("drain", &name, r)
        }
        Request::CancelDrain(name) => {
            let r = client.scratch_cancel_drain(pb::ScratchCancelDrainRequest { name: name.clone() }).await;
            volume("cancel drain", &name, r)
        }
        Request::Resync => Ok(String::new()),
    }
}
