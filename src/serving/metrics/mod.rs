//! Prometheus metrics: the `metrics` facade with the
//! `metrics-exporter-prometheus` recorder, and a small HTTP responder that
//! serves `GET /metrics`.
//!
//! Three parts: this file installs the recorder, records NBD requests and
//! answers scrapes; `collect` copies the live state into the recorder's
//! series before each scrape; `text` renders what the recorder cannot hold
//! (fixed-bucket device latency histograms, counters in seconds, process
//! metrics) straight into the exposition text.
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

mod collect;
mod text;

pub use collect::collect;

use metrics::{counter, histogram, Counter, Histogram};
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tracing::{debug, warn};

use super::live::Live;
use crate::listen::{self, Drain, LoopOptions};

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
    collect::describe();
    Ok(HANDLE.get_or_init(|| handle).clone())
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

/// Collect and render the exposition text.
pub async fn scrape(handle: &PrometheusHandle, live: &Arc<Live>) -> String {
    let l = live.clone();
    if let Err(e) = tokio::task::spawn_blocking(move || collect(&l)).await {
        warn!("metrics collection failed: {e}");
    }
    handle.run_upkeep();
    let mut body = handle.render();
    let l = live.clone();
    match tokio::task::spawn_blocking(move || text::render(&l)).await {
        Ok(more) => body.push_str(&more),
        Err(e) => warn!("rendering the device and process metrics failed: {e}"),
    }
    body
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
