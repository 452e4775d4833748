//! `lardon log ID [--follow]`.

use std::io::Write;

use anyhow::Result;
use lardon_proto::pb;

use crate::cli::Cli;
use crate::error::from_status;

pub(crate) async fn run(
    cli: &Cli,
    id: &str,
    follow: bool,
    only: (bool, bool),
    tail: Option<u64>,
) -> Result<u8> {
    let mut client = crate::client::connect(cli).await?;
    let stream = match only {
        (true, _) => pb::LogStream::Stdout,
        (_, true) => pb::LogStream::Stderr,
        _ => pb::LogStream::Unspecified,
    };
    let mut chunks = client
        .log(pb::LogRequest { id: id.to_owned(), follow, stream: stream as i32, tail_bytes: tail })
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
