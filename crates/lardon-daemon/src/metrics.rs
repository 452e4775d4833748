//! The opt-in Prometheus endpoint: a tiny HTTP/1.0 responder on the
//! address the user gave (no HTTP stack needed for one text page).

use std::fmt::Write as _;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::engine::Engine;

/// Serves until `stop` flips.
pub(crate) async fn serve(listener: TcpListener, engine: Arc<Engine>, mut stop: watch::Receiver<bool>) {
    loop {
        let (mut conn, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(c) => c,
                Err(_) => continue,
            },
            _ = stop.changed() => return,
        };
        let engine = Arc::clone(&engine);
        tokio::spawn(async move {
            // The request line is read and ignored: every path is /metrics.
            let mut buf = [0u8; 1024];
            let _ = tokio::time::timeout(std::time::Duration::from_secs(2), conn.read(&mut buf)).await;
            let body = tokio::task::spawn_blocking(move || render(&engine)).await.unwrap_or_default();
            let head = format!(
                "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\r\n",
                body.len()
            );
            let _ = conn.write_all(head.as_bytes()).await;
            let _ = conn.write_all(body.as_bytes()).await;
            let _ = conn.shutdown().await;
        });
    }
}

fn gauge(out: &mut String, name: &str, help: &str, value: impl std::fmt::Display) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}");
}

/// The Prometheus text page.
pub(crate) fn render(engine: &Engine) -> String {
    let gov = &engine.shared.governor;
    let av = gov.availability();
    let policy = gov.policy();
    let mut out = String::new();
    gauge(&mut out, "lardon_memory_total_bytes", "Host memory.", av.memory_total);
    gauge(&mut out, "lardon_memory_reserve_bytes", "Memory never handed out.", av.memory_reserve);
    gauge(&mut out, "lardon_memory_reserved_bytes", "Memory reserved by tasks.", av.memory_reserved);
    gauge(&mut out, "lardon_memory_available_bytes", "Memory available for admissions.", av.memory_available);
    gauge(&mut out, "lardon_cpu_pool_millis", "Compute pool in thousandths of a CPU.", av.cpu_pool_millis);
    gauge(&mut out, "lardon_cpu_reserved_millis", "CPUs reserved by tasks.", av.cpu_reserved_millis);
    gauge(&mut out, "lardon_cpu_available_millis", "CPUs available.", av.cpu_available_millis);
    gauge(&mut out, "lardon_cpu_reserve", "Logical CPUs kept for the host.", policy.cpu_reserve);
    gauge(&mut out, "lardon_io_slots", "IO slots.", av.io_slots);
    gauge(&mut out, "lardon_io_slots_used", "IO slots in use.", av.io_reserved);
    gauge(&mut out, "lardon_reservations", "Active reservations.", av.reservations);
    gauge(&mut out, "lardon_generation", "Governor generation.", av.generation);
    let _ = writeln!(
        out,
        "# HELP lardon_pressure_state Pressure state (1 for the current one).\n# TYPE lardon_pressure_state gauge"
    );
    for (level, name) in [
        (lardon::PressureLevel::Green, "green"),
        (lardon::PressureLevel::Yellow, "yellow"),
        (lardon::PressureLevel::Red, "red"),
    ] {
        let _ = writeln!(out, "lardon_pressure_state{{state=\"{name}\"}} {}", u8::from(av.pressure == level));
    }
    let _ = writeln!(
        out,
        "# HELP lardon_loop_wakeups_total Wake-ups of the daemon's event-driven loops (unchanged while idle).\n# TYPE lardon_loop_wakeups_total counter"
    );
    let wakeups = &engine.shared.wakeups;
    for (name, count) in [("event_pump", &wakeups.pump), ("log_follow", &wakeups.log_follow)] {
        let _ = writeln!(
            out,
            "lardon_loop_wakeups_total{{loop=\"{name}\"}} {}",
            count.load(std::sync::atomic::Ordering::Relaxed)
        );
    }
    // Writes per commit: how much group commit saves (one fsync a commit).
    let writer = &engine.shared.writer;
    let _ = writeln!(
        out,
        "# HELP lardon_store_writes_total Writes applied by the store writer.\n# TYPE lardon_store_writes_total counter\nlardon_store_writes_total {}",
        writer.writes()
    );
    let _ = writeln!(
        out,
        "# HELP lardon_store_commits_total Group commits (one fsync each).\n# TYPE lardon_store_commits_total counter\nlardon_store_commits_total {}",
        writer.groups()
    );
    let counts = engine.shared.reader().count_by_state().unwrap_or_default();
    let _ = writeln!(out, "# HELP lardon_tasks Tasks by state.\n# TYPE lardon_tasks gauge");
    for state in crate::spec::STATES {
        let n = counts.iter().find(|(s, _)| *s == state).map_or(0, |(_, n)| *n);
        let _ = writeln!(out, "lardon_tasks{{state=\"{state}\"}} {n}");
    }
    let _ = writeln!(
        out,
        "# HELP lardon_decisions_total Admission decisions by kind and reason (counted when a task's decision changes).\n# TYPE lardon_decisions_total counter"
    );
    let stats = engine.shared.stats.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    for ((kind, reason), n) in &stats.decisions {
        let _ = writeln!(out, "lardon_decisions_total{{kind=\"{kind}\",reason=\"{reason}\"}} {n}");
    }
    out
}
