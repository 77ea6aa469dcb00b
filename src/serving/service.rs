//! Running a volume as a service: turning a [`Config`] into open devices, a
//! metadata store and a volume (creating and formatting the embedded default
//! image files on first start), formatting on request (creating a missing
//! image file when its size is given), refusing size settings an existing
//! volume does not match, and serving the volume over NBD on endpoints bound
//! beforehand until shutdown, then flushing it.

use std::future::Future;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tracing::{debug, info, warn};

use super::adapter::VolumeExport;
use super::control;
use super::endpoints::Endpoints;
use super::images::{self, check_given_sizes, Made, TierPath};
use super::live::{ConnectionProbe, Live, META_FLUSH_EVERY};
use super::metrics;
use super::settings::Settings;
use crate::config::{Config, Loaded};
use crate::device::{BlockDevice, FileDevice, ImageError};
use crate::migrate::Migrator;
use crate::nbd::{RequestObserver, Server, ServerOptions, ServerTls, TlsFiles};
use crate::store::{MetaStore, SledStore, StoreError};
use crate::units::{error_text, human_bytes, ByteSize};
use crate::volume::{
    Devices, FormatOptions, Geometry, Volume, VolumeError, VolumeOptions, MIN_DEVICE_SIZE,
};

/// Errors of preparing and running the service.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// A volume-level refusal or failure.
    #[error(transparent)]
    Volume(#[from] VolumeError),
    /// The metadata store cannot be opened.
    #[error("metadata store at {}", .path.display())]
    Store {
        /// Its directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: StoreError,
    },
    /// The metadata store is locked: another process (a tierd) has it open.
    #[error(
        "the metadata store at {} is locked by another process: is another tierd running on it? \
         (stop it, or give this one another --meta-dir)",
        .path.display()
    )]
    StoreLocked {
        /// Its directory.
        path: PathBuf,
        /// The lock's error, which the message says in words (so it is
        /// not a source: the one line would say it twice).
        lock_error: std::io::Error,
    },
    /// A file-level failure with what was being done.
    #[error("{what}")]
    Io {
        /// What failed.
        what: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// An image file could not be made; when the filesystem does not
    /// allow a file that large, the message says what to do instead.
    #[error("{source}{}", ImageAdvice(.source, .key))]
    Image {
        /// The key that sized it (`hdd-size`).
        key: &'static str,
        /// Why.
        #[source]
        source: ImageError,
    },
    /// A state the service will not act on by itself.
    #[error("{0}")]
    Refused(String),
}

/// What to do about an image file too large for its filesystem (nothing
/// for other failures: their cause says it).
struct ImageAdvice<'a>(&'a ImageError, &'a str);

impl std::fmt::Display for ImageAdvice<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ImageAdvice(e, key) = *self;
        if !e.is_too_large() {
            return Ok(());
        }
        write!(
            f,
            "; use a smaller {key} (--{key}, {var} or the configuration file's key), \
             a block device, or a filesystem without that limit such as XFS",
            var = crate::config::env_var(key),
        )
    }
}

pub(super) type Result<T> = std::result::Result<T, ServiceError>;

pub(super) fn io_ctx(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ServiceError {
    let what = what.into();
    move |source| ServiceError::Io { what, source }
}

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

/// Open the two devices named by the configuration.
pub fn open_devices(cfg: &Config) -> Result<Devices> {
    let (ssd, hdd) = (cfg.ssd_path(), cfg.hdd_path());
    if same_file(&ssd, &hdd) {
        return Err(VolumeError::SameDevice(ssd.display().to_string()).into());
    }
    Ok(Devices {
        ssd: open_device(cfg, &ssd, &cfg.ssd_model)?,
        hdd: open_device(cfg, &hdd, &cfg.hdd_model)?,
    })
}

/// The client options of a remote HDD tier: its timeout and TLS.
fn remote_options(cfg: &Config) -> Result<crate::nbd::client::ClientOptions> {
    let tls = match &cfg.remote_tls_ca {
        Some(ca) => {
            let cert_key = cfg
                .remote_tls_cert
                .as_deref()
                .zip(cfg.remote_tls_key.as_deref());
            let c = crate::nbd::tls::client_config(ca, cert_key).map_err(|e| {
                ServiceError::Refused(format!("the remote capacity tier's TLS: {e}"))
            })?;
            Some(Arc::new(c))
        }
        None => None,
    };
    Ok(crate::nbd::client::ClientOptions {
        timeout: cfg.remote_timeout,
        tls,
        ..Default::default()
    })
}

/// Open one device as the configuration says (O_DIRECT, a drive model).
pub fn open_device(cfg: &Config, p: &Path, model: &Option<String>) -> Result<Arc<dyn BlockDevice>> {
    if let Some(uri) = p.to_str().filter(|s| crate::device::rados::is_rados_uri(s)) {
        let dev = crate::device::rados::RadosDevice::open(uri, cfg.remote_timeout)
            .map_err(|e| ServiceError::Refused(format!("the RADOS capacity tier: {e}")))?;
        info!(tier = %dev.name(), "the HDD tier is a RADOS pool");
        return Ok(Arc::new(dev));
    }
    let remote = p.to_str().filter(|s| crate::nbd::client::is_uri(s));
    let dev: Arc<dyn BlockDevice> = match remote {
        Some(uri) => Arc::new(
            super::remote::RemoteDevice::connect(uri, remote_options(cfg)?)
                .map_err(|e| ServiceError::Refused(format!("the remote capacity tier: {e}")))?,
        ),
        None => Arc::new(
            FileDevice::open(p, cfg.direct_io)
                .map_err(io_ctx(format!("opening device {}", p.display())))?,
        ),
    };
    // Validated on load; an unknown name here means no model.
    match model
        .as_deref()
        .and_then(crate::device::model::ModelKind::parse)
    {
        Some(m) => {
            info!(device = %p.display(), model = m.name(), "timing the device like a modelled drive");
            let timed = crate::device::TimedDevice::new(
                dev.clone(),
                m.build(dev.size()),
                Arc::new(crate::clock::SystemClock::default()),
            );
            Ok(Arc::new(timed))
        }
        None => Ok(dev),
    }
}

/// `tierctl replace ssd PATH`: open PATH as the configuration would open
/// an SSD and put it in place of the drained one.
pub fn replace_ssd(
    live: &Live,
    cfg: &Config,
    path: &Path,
    force: bool,
) -> std::result::Result<String, String> {
    if same_file(path, &cfg.hdd_path()) {
        return Err(format!("{} is the HDD", path.display()));
    }
    if path
        .to_str()
        .is_some_and(|s| crate::nbd::client::is_uri(s) || crate::device::rados::is_rados_uri(s))
    {
        return Err(format!(
            "{} is remote storage: the SSD must be a local device",
            path.display()
        ));
    }
    let dev = open_device(cfg, path, &cfg.ssd_model).map_err(|e| error_text(&e))?;
    live.volume
        .replace_ssd(dev, &path.display().to_string(), force)
        .map_err(|e| e.to_string())?;
    warn!(ssd = %path.display(), "the SSD was replaced: set ssd = {} in the configuration before the next restart (the old device is refused)", path.display());
    Ok(format!(
        "the SSD is now {p}; it stays drained until `tierctl evacuate --cancel`; set ssd = {p} in the configuration before the next restart (the old device is refused)",
        p = path.display()
    ))
}

/// Whether two paths name the same file or device node.
fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => {
            (x.dev() == y.dev() && x.ino() == y.ino()) || (x.rdev() != 0 && x.rdev() == y.rdev())
        }
        _ => false,
    }
}

/// Open (or create) the metadata store of the configuration.
pub fn open_store(cfg: &Config) -> Result<Arc<SledStore>> {
    let path = cfg.meta_path();
    SledStore::open(&path)
        .map(Arc::new)
        .map_err(|source| match source {
            // sled wraps the lock's EWOULDBLOCK in an error of its own kind.
            StoreError::Io(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.to_string().contains("could not acquire lock") =>
            {
                ServiceError::StoreLocked {
                    path: path.clone(),
                    lock_error: e,
                }
            }
            source => ServiceError::Store {
                path: path.clone(),
                source,
            },
        })
}

/// Format the configured devices as a new volume. A missing image file is
/// created (sparse) only where [`images::images_to_create`] allows it: in
/// an existing directory, outside `/dev`, with its size asked for (or the
/// embedded default's). Listen addresses are the caller's to check first.
/// A format that fails removes what it made (image files, the data and
/// metadata directories).
pub fn format(loaded: &Loaded, force: bool) -> Result<Geometry> {
    let cfg = &loaded.config;
    check_given_sizes(loaded)?;
    let missing = images::images_to_create(loaded)?;
    // Dropped last, after the store: undoes what was made on an error.
    let mut made = Made::default();
    made.images(&missing, &cfg.data_dir)?;
    made.store_dir(&cfg.meta_path());
    let geo = {
        let store = open_store(cfg)?;
        format_with(cfg, store.as_ref(), force)?
    };
    made.keep();
    Ok(geo)
}

/// [`format`] with an already open store.
fn format_with(cfg: &Config, store: &dyn MetaStore, force: bool) -> Result<Geometry> {
    let devices = open_devices(cfg)?;
    for (t, dev) in TierPath::both(cfg).iter().zip([&devices.ssd, &devices.hdd]) {
        if dev.size() < MIN_DEVICE_SIZE {
            return Err(ServiceError::Refused(format!(
                "the {} device {} ({}) is too small: a tier needs at least {}",
                t.name,
                t.path.display(),
                human_bytes(dev.size()),
                ByteSize(MIN_DEVICE_SIZE)
            )));
        }
    }
    if devices.ssd.size() > devices.hdd.size() {
        warn!(
            ssd = %human_bytes(devices.ssd.size()),
            hdd = %human_bytes(devices.hdd.size()),
            "the SSD is larger than the HDD: are the devices swapped? (--ssd is the fast tier, --hdd the large one)"
        );
    }
    let opts = FormatOptions {
        extent_size: cfg.extent_size.0,
        reserve: cfg.reserve.map(|r| r.0),
        force,
    };
    Ok(Volume::format(&devices, store, &opts)?)
}

/// What [`prepare`] would refuse before it creates anything, checked with
/// nothing created (`serve` checks it before it binds its sockets): a size
/// setting an existing image does not have; on a first start on the
/// default images, an image already there or one that may not be made
/// (its data directory in /dev or in a missing directory); with no
/// metadata store, a missing device where no image may be made.
pub fn check_before_start(loaded: &Loaded) -> Result<()> {
    let cfg = &loaded.config;
    check_given_sizes(loaded)?;
    if SledStore::exists(&cfg.meta_path()) {
        return Ok(());
    }
    if cfg.uses_default_images() {
        for t in TierPath::both(cfg) {
            if !t.is_missing() {
                return Err(ServiceError::Refused(format!(
                    "{} exists but the volume is not formatted; tierd never formats existing devices implicitly: run `tierd format --data-dir {}` (add --force to overwrite)",
                    t.path.display(),
                    cfg.data_dir.display()
                )));
            }
        }
        images::images_to_create(loaded)?;
    } else {
        // A device that is missing where no image may be made: say that,
        // not "format it".
        for t in TierPath::both(cfg) {
            if t.is_missing() {
                images::check_location(&t, &cfg.data_dir)?;
            }
        }
    }
    Ok(())
}

/// Open the configured volume. With the embedded default (no `ssd`/`hdd`
/// configured) and nothing in the data directory yet, create and format the
/// image files first. Returns the volume and whether it was formatted now.
pub fn prepare(loaded: &Loaded) -> Result<(Arc<Volume>, bool)> {
    let cfg = &loaded.config;
    check_before_start(loaded)?;
    let mut formatted = false;
    let store_exists = SledStore::exists(&cfg.meta_path());
    // Opened once: sled releases its lock asynchronously after a drop, so
    // formatting and then reopening could race our own lock.
    let mut store: Option<Arc<SledStore>> = None;
    if cfg.uses_default_images() && !store_exists {
        let missing = images::images_to_create(loaded)?;
        // Dropped last, after the store: undoes what was made on an error.
        let mut made = Made::default();
        made.images(&missing, &cfg.data_dir)?;
        made.store_dir(&cfg.meta_path());
        let s = open_store(cfg)?;
        let geo = format_with(cfg, s.as_ref(), false)?;
        made.keep();
        store = Some(s);
        info!(
            capacity = geo.capacity(),
            "formatted a new volume on the default image files"
        );
        formatted = true;
    } else if !store_exists {
        return Err(ServiceError::Refused(format!(
            "no metadata store at {}: the devices are not formatted as a tierd volume; format them: `{}` (with the --config and other flags given here, which format takes too)",
            cfg.meta_path().display(),
            format_command(cfg)
        )));
    }
    let devices = open_devices(cfg)?;
    let store: Arc<dyn MetaStore> = match store {
        Some(s) => s,
        None => open_store(cfg)?,
    };
    let opts = VolumeOptions {
        heat: cfg.heat,
        write_log: cfg.write_log,
        shadows: cfg.shadows,
        ..VolumeOptions::default()
    };
    Ok((
        Arc::new(Volume::open_with(devices, store, opts)?),
        formatted,
    ))
}

/// The `tierd format` command that formats the devices `cfg` names, with
/// the size of each missing image file, so that it works as printed.
fn format_command(cfg: &Config) -> String {
    let mut cmd = format!(
        "tierd format --ssd {} --hdd {} --meta-dir {}",
        cfg.ssd_path().display(),
        cfg.hdd_path().display(),
        cfg.meta_path().display()
    );
    for t in TierPath::both(cfg) {
        if t.is_missing() {
            cmd.push_str(&format!(" --{} {}", t.size_key, t.size));
        }
    }
    cmd
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
    if let Some(t) = settings.evacuating() {
        volume.set_evacuating(Some(t));
        warn!(tier = %t, "the {t} is being drained (tierctl evacuate): new data goes to the other tier; `tierctl evacuate --cancel` ends it");
    }
    heat.set_sequential_cutoff(in_force.heat.sequential_cutoff.0);
    let migrator = Arc::new(Migrator::new(
        volume.clone(),
        heat.clone(),
        in_force.migrate,
    ));
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
            .with_settings(settings.clone())
            .with_recorder(recorder.clone())
            .with_client_errors(client_errors),
    );
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
        let (live, rx) = (live.clone(), stop_rx.clone());
        side.spawn(async move { control::serve(listener, live, stopped(rx)).await });
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
    {
        let (live, mut rx) = (live.clone(), stop_rx.clone());
        side.spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
            let mut last_flush = std::time::Instant::now();
            let mut said = String::new();
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = rx.wait_for(|s| *s) => break,
                }
                live.sample();
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
        side.spawn(async move {
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

/// A reload (SIGHUP, `tierctl reload`): tell systemd it runs
/// (`RELOADING=1` with the monotonic time `Type=notify-reload` wants), load
/// the configuration again, apply what can change live, and say how it
/// went in the status line (`READY=1`). `Err`: the old configuration stays.
pub fn reload(live: &Live, settings: &Settings) -> std::result::Result<String, String> {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let usec = now.tv_sec as u64 * 1_000_000 + now.tv_nsec as u64 / 1_000;
    sd_notify(&format!("RELOADING=1\nMONOTONIC_USEC={usec}"));
    let r = settings.reload(live);
    match &r {
        Ok(_) => sd_notify(&format!("READY=1\nSTATUS={}", status_line(&live.health()))),
        Err(e) => {
            warn!("reload failed: {e}");
            sd_notify(&format!(
                "READY=1\nSTATUS=serving; the last reload FAILED: {e}"
            ));
        }
    }
    r
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

/// The systemd status line: serving, and the health.
pub fn status_line(h: &crate::control::HealthStatus) -> String {
    if h.problems.is_empty() {
        "serving; health ok".into()
    } else {
        format!("serving; DEGRADED: {}", h.problems.join("; "))
    }
}

/// Half the watchdog timeout systemd set for us (`WATCHDOG_USEC`, for this
/// process when `WATCHDOG_PID` is set), or `None` without a watchdog.
fn watchdog_interval() -> Option<std::time::Duration> {
    if let Some(pid) = std::env::var_os("WATCHDOG_PID") {
        if pid.to_str().and_then(|p| p.parse::<u32>().ok()) != Some(std::process::id()) {
            return None;
        }
    }
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    (usec > 0).then(|| std::time::Duration::from_micros(usec / 2))
}

/// Tell systemd about our state (`sd_notify(3)` datagram protocol); a
/// no-op without `NOTIFY_SOCKET`.
pub fn sd_notify(state: &str) {
    use std::os::unix::net::UnixDatagram;
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let sent = UnixDatagram::unbound().and_then(|sock| {
        let bytes = path.as_encoded_bytes();
        if let Some(name) = bytes.strip_prefix(b"@") {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
            sock.send_to_addr(state.as_bytes(), &addr)
        } else {
            sock.send_to(state.as_bytes(), &path)
        }
    });
    if let Err(e) = sent {
        warn!("notifying systemd ({state:?}): {e}");
    }
}
