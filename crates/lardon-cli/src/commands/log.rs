//! `lardon log ID [--follow] [--tail N | --head N | --tail-bytes SIZE]`.

use std::io::Write;

use anyhow::Result;
use lardon_proto::pb;

use crate::cli::Cli;
use crate::error::from_status;

/// Which part of the log: the last or first lines, or the last bytes.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Lines {
    pub(crate) tail: Option<u64>,
    pub(crate) head: Option<u64>,
    pub(crate) tail_bytes: Option<u64>,
}

pub(crate) async fn run(cli: &Cli, id: &str, follow: bool, only: (bool, bool), part: Lines) -> Result<u8> {
    let mut client = crate::client::connect(cli).await?;
    let stream = match only {
        (true, _) => pb::LogStream::Stdout,
        (_, true) => pb::LogStream::Stderr,
        _ => pb::LogStream::Unspecified,
    };
    let mut chunks = client
        .log(pb::LogRequest {
            id: id.to_owned(),
            follow,
            stream: stream as i32,
            tail_bytes: part.tail_bytes,
            tail_lines: part.tail,
            head_lines: part.head,
        })
        .await
        .map_err(|s| from_status(&format!("task {id}"), s))?
        .into_inner();
    while let Some(chunk) = chunks.message().await.map_err(|s| from_status("log", s))? {
        let mut out = std::io::stdout().lock();
        out.write_all(&chunk.data)?;
        out.flush()?;
    }
    Ok(0)
}
