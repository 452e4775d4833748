//! `lardon cluster status --watch`: follows the broker's `Watch` stream
//! (docs/DESIGN.md §14) and prints the status after every change — a table
//! per change, or one JSON line per event with `--json` — until
//! interrupted. A broker that stops answering (its stream breaks, or it
//! sends nothing for three of its heartbeats) ends it with exit code 3, so
//! a script can tell and subscribe again.

use std::time::Duration;

use anyhow::Result;
use lardon_submit::client;

use crate::error::{Failure, usage};

/// What `--min-interval` may be, milliseconds (the broker's range).
const MIN_INTERVAL_MS: std::ops::RangeInclusive<u32> = 10..=60_000;

/// How long to wait for an event when the last one did not say the
/// broker's heartbeat.
const DEFAULT_SILENCE: Duration = Duration::from_secs(15);

pub(crate) async fn watch(
    broker: &str,
    json: bool,
    min_interval_ms: u64,
    dial: &lardon_submit::dial::Dial,
) -> Result<u8> {
    let interval =
        u32::try_from(min_interval_ms).ok().filter(|ms| MIN_INTERVAL_MS.contains(ms)).ok_or_else(|| {
            usage(format!("--min-interval: {min_interval_ms}ms is out of range: give 10ms ..= 60s"))
        })?;
    let mut events = client::watch(broker, dial, interval)
        .await
        .map_err(|e| super::cluster::unreachable(e, broker, dial))?;
    let mut silence = DEFAULT_SILENCE;
    loop {
        let lost = |why: String| Failure::Unreachable(format!("the broker at {broker} {why}"));
        let event = match tokio::time::timeout(silence, events.message()).await {
            Ok(Ok(Some(event))) => event,
            Ok(Ok(None)) => return Err(lost("ended the stream".into()).into()),
            Ok(Err(status)) => return Err(lost(format!("stopped answering: {}", status.message())).into()),
            Err(_) => return Err(lost(format!("sent nothing for {} s", silence.as_secs())).into()),
        };
        silence = match event.heartbeat_ms {
            0 => DEFAULT_SILENCE,
            ms => Duration::from_millis(ms.saturating_mul(3)).saturating_add(Duration::from_secs(1)),
        };
        let status = event.status.unwrap_or_default();
        if json {
            let mut v = super::cluster::status_json(&status);
            v["sequence"] = event.sequence.into();
            v["heartbeat"] = event.heartbeat.into();
            super::out(&format!("{v}\n"))?;
        } else if !event.heartbeat {
            super::out(&format!("-- change {}\n{}", event.sequence, super::cluster::status_text(&status)))?;
        }
    }
}
