//! `lardon exercise`: a synthetic task that really allocates and touches
//! memory (every page written), holds it while reporting progress, and with
//! `--items` processes the batch the daemon granted
//! (`LARDON_ITEM_OFFSET`, `LARDON_BATCH_SIZE`), so batching is visible.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::cli::ExerciseArgs;

const PAGE: usize = 4096;
const TICK: Duration = Duration::from_millis(100);

fn env_u64(key: &str) -> Result<Option<u64>> {
    match std::env::var(key) {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse::<u64>()
            .map(Some)
            .map_err(|_| crate::error::usage(format!("${key}: `{v}` is not a whole number"))),
        _ => Ok(None),
    }
}

/// Where progress goes: the daemon when inside a task, else stderr.
struct Reporter {
    task_id: Option<String>,
    rt: Option<tokio::runtime::Runtime>,
}

impl Reporter {
    fn new() -> Reporter {
        let task_id = std::env::var("LARDON_TASK_ID").ok().filter(|s| !s.is_empty());
        let rt = task_id
            .as_ref()
            .and_then(|_| tokio::runtime::Builder::new_current_thread().enable_all().build().ok());
        Reporter { task_id, rt }
    }

    fn report(&mut self, done: u64, total: u64, message: &str) {
        if let (Some(id), Some(rt)) = (&self.task_id, &self.rt) {
            let sent = rt.block_on(async {
                tokio::time::timeout(
                    Duration::from_secs(2),
                    crate::commands::progress::send(id, done, total, message),
                )
                .await
            });
            if matches!(sent, Ok(Ok(()))) {
                return;
            }
            // The daemon is not answering: keep working, report locally.
            self.task_id = None;
        }
        eprintln!("progress {done}/{total} {message}");
    }
}

pub(crate) fn run(args: &ExerciseArgs) -> Result<u8> {
    let (offset, batch, total) = match args.items {
        Some(items) => {
            let offset = env_u64("LARDON_ITEM_OFFSET")?.unwrap_or(0).min(items);
            let batch = env_u64("LARDON_BATCH_SIZE")?.unwrap_or(items - offset).min(items - offset);
            (offset, batch, items)
        }
        None => (0, 0, 0),
    };
    let bytes = args
        .mem
        .checked_add(args.mem_per_item.checked_mul(batch).context("--mem-per-item × batch overflows")?)
        .context("memory overflows")?;
    let len = usize::try_from(bytes).context("--mem does not fit in this address space")?;
    let mut reporter = Reporter::new();
    // Ask first (an error, not an abort, when the address space says no),
    // then take zeroed pages, which the kernel hands out lazily.
    let mut probe: Vec<u8> = Vec::new();
    probe
        .try_reserve_exact(len)
        .map_err(|_| anyhow::anyhow!("cannot allocate {}", lardon::format_bytes(bytes)))?;
    drop(probe);
    let mut block = vec![0u8; len];
    // Write every page so it is really resident (zeroed allocations may be lazy).
    for (i, page) in block.chunks_mut(PAGE).enumerate() {
        page[0] = (i % 251) as u8 | 1;
    }
    let what = if total > 0 {
        format!("items {}..{} of {total}, {} held", offset, offset + batch, lardon::format_bytes(bytes))
    } else {
        format!("{} held", lardon::format_bytes(bytes))
    };
    let started = Instant::now();
    let hold = Duration::from_secs_f64(args.secs);
    let (units, base) = if total > 0 { (batch, offset) } else { (100, 0) };
    let report_total = if total > 0 { total } else { 100 };
    let mut last = u64::MAX;
    loop {
        let elapsed = started.elapsed();
        let frac = if hold.is_zero() { 1.0 } else { (elapsed.as_secs_f64() / hold.as_secs_f64()).min(1.0) };
        let done = base + (frac * units as f64).floor() as u64;
        // Inside a task every change is sent; on a terminal, every tenth.
        let step = if reporter.task_id.is_some() { 1 } else { (units / 10).max(1) };
        if last == u64::MAX || done >= last.saturating_add(step) || (elapsed >= hold && done != last) {
            reporter.report(done, report_total, &what);
            last = done;
        }
        if elapsed >= hold {
            break;
        }
        // Touch the memory again now and then, as real work would.
        let stride = PAGE * 64;
        let mut sum = 0u64;
        for i in (0..block.len()).step_by(stride) {
            sum = sum.wrapping_add(u64::from(block[i]));
        }
        std::hint::black_box(sum);
        std::thread::sleep(TICK.min(hold.saturating_sub(elapsed)));
    }
    std::hint::black_box(&block);
    if total > 0 {
        crate::say!(
            "exercise: items {offset}..{} of {total} (batch {batch}) with {} in {:.1}s",
            offset + batch,
            lardon::format_bytes(bytes),
            started.elapsed().as_secs_f64()
        );
    } else {
        crate::say!(
            "exercise: held {} for {:.1}s",
            lardon::format_bytes(bytes),
            started.elapsed().as_secs_f64()
        );
    }
    Ok(args.exit_code)
}
