//! Prometheus metrics: the `metrics` facade with the
//! `metrics-exporter-prometheus` recorder, and a small HTTP responder that
//! serves `GET /metrics`.
//!
//! Request counts and latencies are recorded where they happen
//! ([`record_nbd_request`], called for the NBD server through its request
//! observer, see `service.rs`). Everything the volume
//! already counts in its [`Stats`] atomics (device I/O per tier, hits,
//! migrations, spills) and every gauge (capacity, use, reserve, connections)
//! is copied into the recorder by [`collect`] right before each scrape, so a
//! scrape always sees current values and nothing runs between scrapes.
//!
//! We build the recorder ourselves and serve it with a hand-written tokio
//! responder instead of the exporter's `http-listener` feature: that feature
//! pulls in hyper and, by default, rustls for the push gateway, while one
//! `GET` per scrape needs neither; and owning the responder lets the
//! collector run on each scrape. Metric names are listed in `docs/metrics.md`.

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use metrics::{
    counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Counter,
    Histogram,
};
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tracing::{debug, warn};

use super::live::Live;
use crate::listen::{self, Drain, LoopOptions};
use crate::units::REASONS;
use crate::volume::{Stats, Tier};

/// Histogram buckets of request latencies, in seconds (50 µs .. 10 s).
pub const LATENCY_BUCKETS: [f64; 16] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 10.0,
];

/// Why the recorder cannot be installed.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The exporter refused the configuration or another recorder is installed.
    #[error("installing the Prometheus recorder: {0}")]
    Build(#[from] BuildError),
}

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Install the process-wide Prometheus recorder (once; later calls return
/// the same handle).
pub fn install() -> Result<PrometheusHandle, MetricsError> {
    if let Some(h) = HANDLE.get() {
        return Ok(h.clone());
    }
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &LATENCY_BUCKETS)?
        .install_recorder()?;
    describe();
    Ok(HANDLE.get_or_init(|| handle).clone())
}

fn describe() {
    describe_counter!(
        "tierd_nbd_requests_total",
        "NBD requests completed, by command and result"
    );
    describe_counter!(
        "tierd_nbd_request_bytes_total",
        "Payload bytes of completed NBD read and write requests"
    );
    describe_histogram!(
        "tierd_nbd_request_duration_seconds",
        metrics::Unit::Seconds,
        "Time from dispatch to completion of an NBD request, by command"
    );
    describe_gauge!("tierd_nbd_connections", "Open NBD connections");
    describe_gauge!(
        "tierd_inflight_requests",
        "Foreground volume requests in progress"
    );
    describe_counter!("tierd_device_io_total", "Device operations by tier and op");
    describe_counter!(
        "tierd_device_io_bytes_total",
        "Device bytes transferred by tier and op"
    );
    describe_counter!("tierd_device_errors_total", "Device I/O errors by tier");
    describe_counter!(
        "tierd_read_hits_total",
        "Logical read pieces served by each tier"
    );
    describe_counter!(
        "tierd_read_unmapped_total",
        "Logical read pieces of unmapped space (zeros without device I/O)"
    );
    describe_gauge!(
        "tierd_ssd_hit_ratio",
        "Share of mapped read pieces served by the SSD since start"
    );
    describe_counter!("tierd_allocations_total", "New extents allocated per tier");
    describe_counter!(
        "tierd_spills_total",
        "New extents placed on the HDD because the SSD was full"
    );
    describe_counter!(
        "tierd_sequential_bypass_total",
        "Requests that earned no heat because they belonged to a sequential stream"
    );
    describe_counter!(
        "tierd_migrations_total",
        "Completed extent migrations by direction and reason"
    );
    describe_counter!(
        "tierd_migrated_bytes_total",
        "Bytes copied by migrations by direction"
    );
    describe_counter!(
        "tierd_migration_aborts_total",
        "Migrations abandoned because the extent kept changing"
    );
    describe_counter!("tierd_migration_errors_total", "Migrations that failed");
    describe_counter!("tierd_migration_rounds_total", "Migration planning rounds");
    describe_gauge!("tierd_migration_paused", "1 while migration is paused");
    describe_gauge!("tierd_volume_capacity_bytes", "Logical size of the volume");
    describe_gauge!("tierd_tier_capacity_bytes", "Data slots of a tier in bytes");
    describe_gauge!("tierd_tier_used_bytes", "Bytes of mapped extents on a tier");
    describe_gauge!("tierd_tier_free_bytes", "Bytes of free slots on a tier");
    describe_gauge!("tierd_extents", "Mapped extents per tier");
    describe_gauge!(
        "tierd_quarantined_extents",
        "Freed slots waiting for a metadata flush before reuse"
    );
    describe_gauge!(
        "tierd_reserve_target_bytes",
        "SSD bytes the migrator keeps free (live target)"
    );
    describe_gauge!(
        "tierd_reserve_format_bytes",
        "SSD reserve fixed when the volume was formatted"
    );
    describe_gauge!("tierd_pins", "Pin entries in force");
    describe_gauge!(
        "tierd_write_log_bytes",
        "SSD bytes lent to the write log (writes to HDD extents land there)"
    );
    describe_gauge!(
        "tierd_write_log_capacity_bytes",
        "Most SSD bytes the write log may take (the reserve)"
    );
    describe_gauge!(
        "tierd_write_log_dirty_bytes",
        "Bytes whose newest data is in the write log: the write-back backlog"
    );
    describe_counter!(
        "tierd_write_log_writes_total",
        "Writes to HDD extents that landed in the SSD write log"
    );
    describe_counter!(
        "tierd_write_log_full_total",
        "Writes to HDD extents that went to the HDD because the write log was full"
    );
    describe_counter!(
        "tierd_written_back_bytes_total",
        "Bytes written back from the write log to the HDD"
    );
    describe_gauge!(
        "tierd_shadow_bytes",
        "HDD copies kept by SSD extents: clean (demotion is free) or stale (written back on demotion)"
    );
    describe_counter!(
        "tierd_free_demotions_total",
        "Demotions that wrote no data: the extent's HDD shadow was clean"
    );
    describe_counter!(
        "tierd_shadows_dropped_total",
        "Shadows dropped because the HDD needed their slots"
    );
    describe_counter!(
        "tierd_precleaned_extents_total",
        "SSD extents given a clean HDD copy in idle time (pre-cleaning)"
    );
    describe_gauge!("tierd_up", "1 while the daemon serves");
}

/// The NBD commands the server reports ([`crate::nbd::RequestObserver`]).
const NBD_COMMANDS: [&str; 7] = [
    "read",
    "write",
    "flush",
    "trim",
    "cache",
    "write_zeroes",
    "block_status",
];

/// The series of one NBD command.
struct CommandSeries {
    command: &'static str,
    ok: Counter,
    error: Counter,
    bytes: Counter,
    duration: Histogram,
}

/// Handles of the per-request series, made once at the first request:
/// naming a series by name and labels allocates its key on every call,
/// which the data path should not pay per request.
static NBD_SERIES: OnceLock<Vec<CommandSeries>> = OnceLock::new();

/// `None` until [`install`] ran (handles made before would stay no-ops).
fn nbd_series() -> Option<&'static [CommandSeries]> {
    HANDLE.get()?;
    let series = NBD_SERIES.get_or_init(|| {
        NBD_COMMANDS
            .iter()
            .map(|&command| CommandSeries {
                command,
                ok: counter!("tierd_nbd_requests_total", "command" => command, "result" => "ok"),
                error: counter!("tierd_nbd_requests_total", "command" => command, "result" => "error"),
                bytes: counter!("tierd_nbd_request_bytes_total", "command" => command),
                duration: histogram!("tierd_nbd_request_duration_seconds", "command" => command),
            })
            .collect()
    });
    Some(series)
}

/// Record one completed NBD request: `command` is the lower-case command
/// name (`read`, `write`, ...), `bytes` its payload, `ok` whether it
/// succeeded. A no-op until [`install`] ran.
pub fn record_nbd_request(command: &'static str, bytes: u64, elapsed: Duration, ok: bool) {
    let known = nbd_series().and_then(|all| all.iter().find(|s| s.command == command));
    let Some(series) = known else {
        // Not installed, or a command this table does not know.
        let result = if ok { "ok" } else { "error" };
        counter!("tierd_nbd_requests_total", "command" => command, "result" => result).increment(1);
        if bytes > 0 {
            counter!("tierd_nbd_request_bytes_total", "command" => command).increment(bytes);
        }
        histogram!("tierd_nbd_request_duration_seconds", "command" => command)
            .record(elapsed.as_secs_f64());
        return;
    };
    if ok {
        series.ok.increment(1);
    } else {
        series.error.increment(1);
    }
    if bytes > 0 {
        series.bytes.increment(bytes);
    }
    series.duration.record(elapsed.as_secs_f64());
}

/// Copy the live state into the recorder (walks the extent map: call off
/// the async threads).
pub fn collect(live: &Live) {
    let vol = &live.volume;
    let s = vol.stats();
    let geo = *vol.geometry();
    let es = geo.extent_size;
    let usage = vol.usage();
    for t in Tier::ALL {
        let (i, tier) = (t.index(), t.name());
        for (op, n, b) in [
            ("read", &s.dev_reads[i], &s.dev_read_bytes[i]),
            ("write", &s.dev_writes[i], &s.dev_write_bytes[i]),
        ] {
            counter!("tierd_device_io_total", "tier" => tier, "op" => op).absolute(Stats::get(n));
            counter!("tierd_device_io_bytes_total", "tier" => tier, "op" => op)
                .absolute(Stats::get(b));
        }
        counter!("tierd_device_errors_total", "tier" => tier)
            .absolute(Stats::get(&s.dev_errors[i]));
        counter!("tierd_read_hits_total", "tier" => tier).absolute(Stats::get(&s.read_hits[i]));
        counter!("tierd_allocations_total", "tier" => tier).absolute(Stats::get(&s.allocations[i]));
        gauge!("tierd_tier_capacity_bytes", "tier" => tier)
            .set((u64::from(geo.slots(t)) * es) as f64);
        gauge!("tierd_tier_used_bytes", "tier" => tier).set((usage.mapped[i] * es) as f64);
        gauge!("tierd_tier_free_bytes", "tier" => tier).set((u64::from(usage.free[i]) * es) as f64);
        gauge!("tierd_extents", "tier" => tier).set(usage.mapped[i] as f64);
        let direction = match t {
            Tier::Ssd => "promote",
            Tier::Hdd => "demote",
        };
        for r in REASONS {
            counter!("tierd_migrations_total", "direction" => direction, "reason" => r.name())
                .absolute(s.migrations_to(t, r));
        }
        counter!("tierd_migrated_bytes_total", "direction" => direction)
            .absolute(Stats::get(&s.migrated_bytes[i]));
    }
    let hits = [Stats::get(&s.read_hits[0]), Stats::get(&s.read_hits[1])];
    if hits[0] + hits[1] > 0 {
        gauge!("tierd_ssd_hit_ratio").set(hits[0] as f64 / (hits[0] + hits[1]) as f64);
    }
    counter!("tierd_read_unmapped_total").absolute(Stats::get(&s.read_unmapped));
    counter!("tierd_spills_total").absolute(Stats::get(&s.spills));
    counter!("tierd_sequential_bypass_total").absolute(live.heat.bypassed());
    counter!("tierd_migration_aborts_total").absolute(Stats::get(&s.migration_aborts));
    counter!("tierd_migration_errors_total").absolute(Stats::get(&s.migration_errors));
    counter!("tierd_migration_rounds_total").absolute(live.migrator.rounds());
    gauge!("tierd_migration_paused").set(if live.migrator.paused() { 1.0 } else { 0.0 });
    gauge!("tierd_volume_capacity_bytes").set(vol.size() as f64);
    gauge!("tierd_quarantined_extents").set(f64::from(usage.quarantined));
    gauge!("tierd_reserve_target_bytes").set((live.migrator.reserve_extents() * es) as f64);
    gauge!("tierd_reserve_format_bytes").set((u64::from(geo.reserve_extents) * es) as f64);
    gauge!("tierd_pins").set(vol.pins().len() as f64);
    let blk = crate::volume::BLOCK_SIZE;
    gauge!("tierd_write_log_bytes").set((u64::from(usage.log.segments) * es) as f64);
    gauge!("tierd_write_log_capacity_bytes").set((u64::from(usage.log.cap) * es) as f64);
    gauge!("tierd_write_log_dirty_bytes").set((usage.logged_blocks * blk) as f64);
    counter!("tierd_write_log_writes_total").absolute(Stats::get(&s.log_writes));
    counter!("tierd_write_log_full_total").absolute(Stats::get(&s.log_full));
    counter!("tierd_written_back_bytes_total").absolute(Stats::get(&s.written_back_blocks) * blk);
    gauge!("tierd_shadow_bytes", "state" => "clean").set((usage.shadow_clean_blocks * blk) as f64);
    gauge!("tierd_shadow_bytes", "state" => "stale").set((usage.shadow_stale_blocks * blk) as f64);
    counter!("tierd_free_demotions_total").absolute(Stats::get(&s.free_demotions));
    counter!("tierd_shadows_dropped_total").absolute(Stats::get(&s.shadows_dropped));
    counter!("tierd_precleaned_extents_total").absolute(Stats::get(&s.precleaned));
    gauge!("tierd_nbd_connections").set(live.probe.count() as f64);
    gauge!("tierd_inflight_requests").set(vol.inflight() as f64);
    gauge!("tierd_up").set(1.0);
}

/// Collect and render the exposition text.
pub async fn scrape(handle: &PrometheusHandle, live: &Arc<Live>) -> String {
    let l = live.clone();
    if let Err(e) = tokio::task::spawn_blocking(move || collect(&l)).await {
        warn!("metrics collection failed: {e}");
    }
    handle.run_upkeep();
    handle.render()
}

/// Serve `GET /metrics` on `listener` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    handle: PrometheusHandle,
    live: Arc<Live>,
    shutdown: impl Future<Output = ()>,
) {
    let opts = LoopOptions {
        what: "metrics",
        limit: None,
        drain: Drain::Abort,
    };
    listen::serve(listener, opts, shutdown, |stream, _, _| {
        let (h, l) = (handle.clone(), live.clone());
        async move {
            let r = tokio::time::timeout(Duration::from_secs(10), http(stream, &h, &l)).await;
            match r {
                Ok(Err(e)) => debug!("metrics connection: {e}"),
                Err(_) => debug!("metrics connection timed out"),
                Ok(Ok(())) => {}
            }
        }
    })
    .await;
}

/// Answer one HTTP/1.x request and close.
async fn http(
    mut s: TcpStream,
    handle: &PrometheusHandle,
    live: &Arc<Live>,
) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && !buf.windows(2).any(|w| w == b"\n\n") {
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > 16 * 1024 {
            return respond(
                &mut s,
                "431 Request Header Fields Too Large",
                "text/plain",
                b"too large\n",
            )
            .await;
        }
    }
    let head = String::from_utf8_lossy(&buf);
    let mut parts = head.lines().next().unwrap_or("").split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET", "/metrics") => {
            let body = scrape(handle, live).await;
            respond(
                &mut s,
                "200 OK",
                "text/plain; version=0.0.4; charset=utf-8",
                body.as_bytes(),
            )
            .await
        }
        ("GET", "/") => {
            respond(
                &mut s,
                "200 OK",
                "text/plain; charset=utf-8",
                b"tierd: metrics at /metrics\n",
            )
            .await
        }
        ("GET", _) => {
            respond(
                &mut s,
                "404 Not Found",
                "text/plain",
                b"not found: try /metrics\n",
            )
            .await
        }
        _ => {
            respond(
                &mut s,
                "405 Method Not Allowed",
                "text/plain",
                b"only GET\n",
            )
            .await
        }
    }
}

async fn respond(s: &mut TcpStream, status: &str, ctype: &str, body: &[u8]) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await?;
    s.write_all(body).await?;
    s.shutdown().await
}
