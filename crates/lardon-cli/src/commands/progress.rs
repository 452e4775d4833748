//! `lardon progress DONE/TOTAL [MSG]`, run inside a task.

use anyhow::Result;
use lardon_proto::pb;

use crate::error::{from_status, usage};

/// Sends one progress report for `$LARDON_TASK_ID` over `$LARDON_SOCKET`.
pub(crate) async fn send(task_id: &str, done: u64, total: u64, message: &str) -> Result<()> {
    let socket = crate::client::socket_path(None, None)?;
    let mut client = crate::client::connect_to(&socket, None).await?;
    client
        .progress(pb::ProgressRequest {
            task_id: task_id.to_owned(),
            done,
            total,
            message: message.to_owned(),
        })
        .await
        .map_err(|s| from_status("progress", s))?;
    Ok(())
}

pub(crate) async fn run((done, total): (u64, u64), message: Option<&str>) -> Result<u8> {
    let id = match std::env::var("LARDON_TASK_ID") {
        Ok(id) if !id.is_empty() => id,
        _ => {
            return Err(usage(
                "LARDON_TASK_ID is not set: `lardon progress` reports from inside a running task",
            ));
        }
    };
    send(&id, done, total, message.unwrap_or_default()).await?;
    Ok(0)
}
