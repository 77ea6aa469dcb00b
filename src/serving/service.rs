//! Running a volume as a service: serving it over NBD on endpoints bound
//! beforehand, with the control socket, metrics, the status line and the
//! systemd watchdog beside it, until shutdown; then flushing it. Opening
//! and formatting the volume are in `open.rs` (re-exported here).

use std::future::Future;
use std::sync::Arc;

use tracing::{debug, info, warn};

use super::adapter::VolumeExport;
use super::control_server;
use super::endpoints::Endpoints;
use super::error::{io_ctx, Result};
use super::live::{ConnectionProbe, Live, META_FLUSH_EVERY, TRIM_EVERY};
use super::metrics;
use super::settings::Settings;
use super::systemd::watchdog_interval;
use crate::config::Config;
use crate::migrate::Migrator;
use crate::nbd::{RequestObserver, Server, ServerOptions, ServerTls, TlsFiles};
use crate::volume::{Tier, Volume};

pub use super::error::ServiceError;
pub use super::open::{
    check_before_start, format, open_device, open_devices, open_store, prepare, replace_ssd,
};
pub use super::systemd::{reload, sd_notify, status_line};

/// The TLS the NBD server requires, from `tls-cert`, `tls-key` and
/// `tls-ca`; `None` when `tls-cert` is unset. Never falls back to plain
/// NBD: unreadable or unusable files refuse the start.
fn tls_from_config(cfg: &Config) -> Result<Option<ServerTls>> {
    let (cert, key) = match (&cfg.tls_cert, &cfg.tls_key) {
        (Some(cert), Some(key)) => (cert, key),
        (None, None) if cfg.tls_ca.is_none() => return Ok(None),
        _ => {
            return Err(ServiceError::Refused(
                "tls-cert and tls-key must be set together (and tls-ca needs both)".into(),
            ))
        }
    };
    let files = TlsFiles {
        cert: cert.clone(),
        key: key.clone(),
        ca: cfg.tls_ca.clone(),
    };
    let tls = ServerTls::from_files(&files)
        .map_err(|e| ServiceError::Refused(format!("cannot set up NBD TLS: {e}")))?;
    info!(
        cert = %cert.display(),
        client_certificates = files.ca.is_some(),
        "NBD clients must use TLS (STARTTLS)"
    );
    Ok(Some(tls))
}

/// Hooks the binary gives [`run_with`]: how to reload the configuration on
/// SIGHUP and how to change the log level live.
#[derive(Default)]
pub struct Hooks {
    /// Load the configuration again from the same file, environment and
    /// flags; `Err` is a message to log (the old configuration stays).
    pub reload: Option<ReloadFn>,
    /// Apply a new log level; `Err` says why not.
    pub set_log_level: Option<LogLevelFn>,
}

/// Counts every NBD request served in the Prometheus metrics, and those
/// answered with an error for the health in `status`.
struct NbdMetrics {
    errors: Arc<super::live::ClientErrors>,
}

impl RequestObserver for NbdMetrics {
    fn request_done(&self, command: &'static str, bytes: u64, took: std::time::Duration, ok: bool) {
        metrics::record_nbd_request(command, bytes, took, ok);
        if !ok {
            self.errors.note();
        }
    }
}

pub use super::settings::{LogLevelFn, ReloadFn};

/// Serve `volume` over NBD on the configured endpoints until `shutdown`
/// completes; then finish in-flight requests and flush the volume.
pub async fn run(
    cfg: &Config,
    volume: Arc<Volume>,
    shutdown: impl Future<Output = ()>,
) -> Result<()> {
    let endpoints = Endpoints::bind(cfg)?;
    run_with(cfg, volume, endpoints, shutdown, Hooks::default()).await
}

/// [`run`] on endpoints bound beforehand ([`Endpoints::bind`], before the
/// volume was opened), with hooks: also serves metrics and the control
/// socket as configured, reloads on SIGHUP, and tells systemd when it is
/// ready and when it stops (`NOTIFY_SOCKET`).
pub async fn run_with(
    cfg: &Config,
    volume: Arc<Volume>,
    mut endpoints: Endpoints,
    shutdown: impl Future<Output = ()>,
    hooks: Hooks,
) -> Result<()> {
    let tls = tls_from_config(cfg)?;
    let client_errors = Arc::new(super::live::ClientErrors::default());
    let opts = ServerOptions {
        export_name: cfg.export_name.clone(),
        description: format!("tierd volume {}", volume.id()),
        read_only: cfg.read_only,
        max_connections: cfg.max_connections,
        threads: cfg.nbd_threads,
        zero_copy: cfg.nbd_zero_copy,
        slow_lane: cfg.nbd_slow_lane,
        poll: cfg.nbd_poll,
        handshake_timeout: cfg.handshake_timeout,
        tls: tls.clone(),
        observer: Arc::new(NbdMetrics {
            errors: client_errors.clone(),
        }),
        ..ServerOptions::default()
    };
    let recorder = Arc::new(super::recorder::Recorder::new());
    let server = Server::new(
        Arc::new(VolumeExport::new(volume.clone()).with_recorder(recorder.clone())),
        opts,
    );
    let heat = volume.heat();
    // Live settings saved by `tierctl config set` win over the configuration.
    let settings = Arc::new(Settings::new(
        cfg.clone(),
        Settings::saved(&volume),
        hooks.reload,
        hooks.set_log_level,
    ));
    let in_force = settings.config();
    if let Some(t) = settings.evacuating().filter(|_| !volume.ssd_lost()) {
        volume.set_evacuating(Some(t))?;
        warn!(tier = %t, "the {t} is being drained (tierctl evacuate): new data goes to the other tier; `tierctl evacuate --cancel` ends it");
    }
    heat.set_sequential_cutoff(in_force.heat.sequential_cutoff.0);
    let migrator = Arc::new(Migrator::new(
        volume.clone(),
        heat.clone(),
        in_force.migrate,
    ));
    migrator.set_exposure_bound(in_force.durability.ssd_exposure);
    if !in_force.durability.ssd_exposure.is_zero() {
        info!(
            bound_s = in_force.durability.ssd_exposure.as_secs_f64(),
            "SSD exposure bound: SSD-only data gets an HDD copy within this time while the HDD has room"
        );
    }
    if settings.live_settings().contains_key("reserve") {
        if let Some(bytes) = in_force.reserve {
            let es = volume.geometry().extent_size;
            migrator.set_reserve_extents(bytes.0.div_ceil(es));
            info!(
                bytes = bytes.0,
                "reserve target from the saved live setting"
            );
        }
    }
    let worker = if in_force.migrate.enabled {
        Some(
            migrator
                .spawn()
                .map_err(io_ctx("starting the migration thread"))?,
        )
    } else {
        info!("background migration is disabled");
        None
    };
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let mut probe = ConnectionProbe::default();
    let mut tasks = tokio::task::JoinSet::new();
    if let Some(listener) = endpoints.tcp.take() {
        let addr = listener
            .local_addr()
            .map_err(io_ctx("reading the bound address"))?;
        if !addr.ip().is_loopback() && tls.is_none() {
            warn!(%addr, "serving NBD beyond loopback WITHOUT TLS: anyone who can reach this address can read and write the volume (set tls-cert and tls-key, keep `listen` on loopback, or use a tunnel)");
        }
        probe.tcp_port = Some(addr.port());
        info!(%addr, "serving NBD over TCP");
        let (server, rx) = (server.clone(), stop_rx.clone());
        tasks.spawn(async move { server.serve_tcp(listener, stopped(rx)).await });
    }
    if let Some((path, listener)) = endpoints.unix.take() {
        probe.unix = Some(path.clone());
        info!(path = %path.display(), "serving NBD over a Unix socket");
        let (server, rx) = (server.clone(), stop_rx.clone());
        tasks.spawn(async move { server.serve_unix(listener, stopped(rx)).await });
    }
    let live = Arc::new(
        Live::new(volume.clone(), heat, migrator.clone(), worker, probe)
            .with_recorder(recorder.clone())
            .with_client_errors(client_errors),
    );
    if cfg.ssd_lost && settings.evacuating() != Some(Tier::Ssd) {
        // The volume opened with the SSD drained; saved, so that the drain
        // lasts until `tierctl replace ssd` ends it, whatever the restarts.
        if let Err(e) = settings.evacuate(&live, Some(Tier::Ssd)) {
            warn!("cannot record that the lost SSD is drained: {e}");
        }
    }
    // Side services: their end never stops the daemon.
    let mut side = tokio::task::JoinSet::new();
    // Kept until the end: tierctl finds the daemon from any directory.
    let mut _registration = None;
    if let Some((path, listener)) = endpoints.control.take() {
        info!(path = %path.display(), "control socket ready");
        match crate::control::find::register(&path) {
            Ok(Some(r)) => {
                info!(entry = %r.entry().display(), "control socket registered: tierctl finds it from any directory");
                _registration = Some(r);
            }
            Ok(None) => info!("no runtime directory to register the control socket in (set XDG_RUNTIME_DIR); tierctl finds it with --control {} or TIERD_CONTROL", path.display()),
            Err(e) => warn!("cannot register the control socket for tierctl ({e}); tierctl finds it with --control {}", path.display()),
        }
        let (live, settings, rx) = (live.clone(), settings.clone(), stop_rx.clone());
        side.spawn(async move {
            control_server::serve(listener, live, Some(settings), stopped(rx)).await
        });
    }
    // Metrics are worth less than serving the volume: a busy port or a
    // recorder failure was logged when the endpoints were bound.
    if let Some((handle, listener)) = endpoints.metrics.take() {
        match listener.local_addr() {
            Ok(addr) => info!("serving metrics on http://{addr}/metrics"),
            Err(e) => warn!("metrics listener address: {e}"),
        }
        let (live, rx) = (live.clone(), stop_rx.clone());
        side.spawn(async move { metrics::serve(listener, handle, live, stopped(rx)).await });
    }
    // systemd hears READY=1 first: the status line and the watchdog pings
    // wait for it (they raced it before, and a STATUS could come first).
    let (ready_tx, ready_rx) = tokio::sync::watch::channel(false);
    {
        let (live, mut rx) = (live.clone(), stop_rx.clone());
        let mut ready = ready_rx.clone();
        side.spawn(async move {
            if !ready_unless_stopped(&mut ready, &mut rx).await {
                return;
            }
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
            let mut last_flush = std::time::Instant::now();
            let mut last_trim = std::time::Instant::now();
            let mut said = String::new();
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = rx.wait_for(|s| *s) => break,
                }
                live.sample();
                if last_trim.elapsed() >= TRIM_EVERY {
                    last_trim = std::time::Instant::now();
                    if let Ok(Some(free)) =
                        tokio::task::spawn_blocking(super::allocator::trim_when_worth).await
                    {
                        debug!(
                            free_bytes = free,
                            "gave memory the allocator held free back"
                        );
                    }
                }
                if last_flush.elapsed() >= META_FLUSH_EVERY {
                    last_flush = std::time::Instant::now();
                    background_flush(&live).await;
                }
                let line = status_line(&live.health());
                if line != said {
                    sd_notify(&format!("STATUS={line}"));
                    said = line;
                }
            }
        });
    }
    if let Some(every) = watchdog_interval() {
        // Pings come from the runtime that serves the volume, once the
        // volume's flush lock came free within the interval: a wedged
        // runtime, blocking pool or flush stops them.
        let (live, mut rx) = (live.clone(), stop_rx.clone());
        info!(every = ?every, "pinging the systemd watchdog");
        let mut ready = ready_rx.clone();
        side.spawn(async move {
            if !ready_unless_stopped(&mut ready, &mut rx).await {
                return;
            }
            let mut tick = tokio::time::interval(every);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = rx.wait_for(|s| *s) => break,
                }
                let l = live.clone();
                let ok = tokio::task::spawn_blocking(move || l.volume.responsive(every))
                    .await
                    .unwrap_or(false);
                if ok {
                    sd_notify("WATCHDOG=1");
                } else {
                    warn!("the volume did not answer within {every:?}: no watchdog ping");
                }
            }
        });
    }
    // SIGHUP is watched before systemd hears we are ready: a reload it
    // sends at once must not kill the process (SIGHUP's default action).
    let mut hup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(e) => {
            warn!("cannot watch SIGHUP ({e}); configuration reload is off");
            None
        }
    };
    sd_notify("READY=1\nSTATUS=serving");
    // Kept by the channel for tasks not waiting yet.
    ready_tx.send_replace(true);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => {
                info!("shutting down: finishing in-flight requests");
                break;
            }
            Some(res) = tasks.join_next() => {
                // A listener died on its own: stop the others too.
                warn!("a listener stopped unexpectedly: {res:?}");
                break;
            }
            Some(()) = async { match hup.as_mut() { Some(h) => h.recv().await, None => None } } => {
                let (l, st) = (live.clone(), settings.clone());
                // Reloading walks no extent map, but may flush: off the
                // async threads.
                let _ = tokio::task::spawn_blocking(move || reload(&l, &st)).await;
            }
        }
    }
    sd_notify("STOPPING=1");
    let _ = stop_tx.send(true);
    while let Some(res) = tasks.join_next().await {
        match res {
            Ok(Err(e)) => warn!("listener ended with an error: {e}"),
            Err(e) => warn!("listener task failed: {e}"),
            Ok(Ok(())) => {}
        }
    }
    while side.join_next().await.is_some() {}
    if let Some(path) = &cfg.unix {
        let _ = std::fs::remove_file(path);
    }
    if let Some(path) = cfg.control_path() {
        let _ = std::fs::remove_file(path);
    }
    // Every connection is gone: a recording under way ends complete.
    live.recorder.shutdown();
    let worker = live.worker.lock().take();
    if let Some(w) = worker {
        // Finishes its current move and saves heat.
        tokio::task::spawn_blocking(move || w.stop())
            .await
            .map_err(|e| ServiceError::Refused(format!("stopping the migrator: {e}")))?;
    }
    let v = volume.clone();
    // A clean close: the shadows stay trusted at the next start.
    tokio::task::spawn_blocking(move || v.close())
        .await
        .map_err(|e| ServiceError::Refused(format!("flush task failed: {e}")))??;
    info!("volume flushed; bye");
    Ok(())
}

/// Flush metadata that clients left dirty (writes without a FLUSH), so a
/// power cut loses at most [`META_FLUSH_EVERY`] of mapping changes.
async fn background_flush(live: &Arc<Live>) {
    if !live.volume.flush_state().meta_dirty {
        return;
    }
    let v = live.volume.clone();
    match tokio::task::spawn_blocking(move || v.flush()).await {
        Ok(Ok(())) => debug!("background flush done"),
        Ok(Err(e)) => warn!("background flush failed: {e}"),
        Err(e) => warn!("background flush task failed: {e}"),
    }
}

/// Wait for READY=1 to have been sent (`ready`), or for the stop (`stop`);
/// true once ready. Tasks that talk to systemd start only then.
async fn ready_unless_stopped(
    ready: &mut tokio::sync::watch::Receiver<bool>,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> bool {
    tokio::select! {
        r = ready.wait_for(|r| *r) => r.is_ok(),
        _ = stop.wait_for(|s| *s) => false,
    }
}
