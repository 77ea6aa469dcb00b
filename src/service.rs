//! Running a volume as a service: turning a [`Config`] into open devices, a
//! metadata store and a volume (creating and formatting the embedded default
//! image files on first start), formatting on request, and serving the volume
//! over NBD until shutdown, then flushing it.

use std::future::Future;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::net::{TcpListener, UnixListener};
use tracing::{info, warn};

use crate::config::Config;
use crate::device::{BlockDevice, FileDevice};
use crate::migrate::Migrator;
use crate::nbd::{Server, ServerOptions};
use crate::store::{MetaStore, SledStore, StoreError};
use crate::volume::{Devices, FormatOptions, Geometry, Volume, VolumeError, VolumeOptions};

/// Errors of preparing and running the service.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// A volume-level refusal or failure.
    #[error(transparent)]
    Volume(#[from] VolumeError),
    /// The metadata store cannot be opened.
    #[error("metadata store at {path}: {source}")]
    Store {
        /// Its directory.
        path: PathBuf,
        /// Why.
        source: StoreError,
    },
    /// A file-level failure with what was being done.
    #[error("{what}: {source}")]
    Io {
        /// What failed.
        what: String,
        /// Why.
        source: std::io::Error,
    },
    /// A state the service will not act on by itself.
    #[error("{0}")]
    Refused(String),
}

type Result<T> = std::result::Result<T, ServiceError>;

fn io_ctx(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ServiceError {
    let what = what.into();
    move |source| ServiceError::Io { what, source }
}

/// Open the two devices named by the configuration.
pub fn open_devices(cfg: &Config) -> Result<Devices> {
    let (ssd, hdd) = (cfg.ssd_path(), cfg.hdd_path());
    if same_file(&ssd, &hdd) {
        return Err(VolumeError::SameDevice(ssd.display().to_string()).into());
    }
    let open = |p: &Path| -> Result<Arc<dyn BlockDevice>> {
        let dev = FileDevice::open(p, cfg.direct_io)
            .map_err(io_ctx(format!("opening device {}", p.display())))?;
        Ok(Arc::new(dev))
    };
    Ok(Devices {
        ssd: open(&ssd)?,
        hdd: open(&hdd)?,
    })
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
        .map_err(|source| ServiceError::Store {
            path: path.clone(),
            source: match source {
                StoreError::Io(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    StoreError::Backend(
                        "locked by another process: is another tierd running on it?".into(),
                    )
                }
                other => other,
            },
        })
}

/// Format the configured devices as a new volume.
pub fn format(cfg: &Config, force: bool) -> Result<Geometry> {
    if cfg.uses_default_images() {
        create_default_images(cfg, false)?;
    }
    let devices = open_devices(cfg)?;
    let store = open_store(cfg)?;
    let opts = FormatOptions {
        extent_size: cfg.extent_size.0,
        reserve: cfg.reserve.map(|r| r.0),
        force,
    };
    Ok(Volume::format(&devices, store.as_ref(), &opts)?)
}

/// Create the default image files (sparse). With `require_new`, both must
/// be absent.
fn create_default_images(cfg: &Config, require_new: bool) -> Result<()> {
    std::fs::create_dir_all(&cfg.data_dir).map_err(io_ctx(format!(
        "creating data directory {}",
        cfg.data_dir.display()
    )))?;
    for (path, size) in [
        (cfg.ssd_path(), cfg.ssd_size),
        (cfg.hdd_path(), cfg.hdd_size),
    ] {
        if path.exists() {
            if require_new {
                return Err(ServiceError::Refused(format!(
                    "{} exists but the volume is not formatted; tierd never formats existing devices implicitly: run `tierd format` (add --force to overwrite)",
                    path.display()
                )));
            }
            continue;
        }
        FileDevice::create_image(&path, size.0)
            .map_err(io_ctx(format!("creating image {}", path.display())))?;
        info!(path = %path.display(), size = %size, "created sparse image file");
    }
    Ok(())
}

/// Open the configured volume. With the embedded default (no `ssd`/`hdd`
/// configured) and nothing in the data directory yet, create and format the
/// image files first. Returns the volume and whether it was formatted now.
pub fn prepare(cfg: &Config) -> Result<(Arc<Volume>, bool)> {
    let mut formatted = false;
    let store_exists = SledStore::exists(&cfg.meta_path());
    if cfg.uses_default_images() && !store_exists {
        create_default_images(cfg, true)?;
        let geo = format(cfg, false)?;
        info!(
            capacity = geo.capacity(),
            "formatted a new volume on the default image files"
        );
        formatted = true;
    } else if !store_exists {
        return Err(ServiceError::Refused(format!(
            "no metadata store at {}: the devices are not formatted as a tierd volume (run `tierd format --ssd {} --hdd {}`)",
            cfg.meta_path().display(),
            cfg.ssd_path().display(),
            cfg.hdd_path().display()
        )));
    }
    let devices = open_devices(cfg)?;
    let store: Arc<dyn MetaStore> = open_store(cfg)?;
    let opts = VolumeOptions {
        heat: cfg.heat,
        ..VolumeOptions::default()
    };
    Ok((
        Arc::new(Volume::open_with(devices, store, opts)?),
        formatted,
    ))
}

/// Serve `volume` over NBD on the configured endpoints until `shutdown`
/// completes; then finish in-flight requests and flush the volume.
pub async fn run(
    cfg: &Config,
    volume: Arc<Volume>,
    shutdown: impl Future<Output = ()>,
) -> Result<()> {
    let opts = ServerOptions {
        export_name: cfg.export_name.clone(),
        description: format!("tierd volume {}", volume.id()),
        read_only: cfg.read_only,
        max_connections: cfg.max_connections,
        handshake_timeout: cfg.handshake_timeout,
        ..ServerOptions::default()
    };
    let server = Server::new(volume.clone(), opts);
    let migrator = Arc::new(Migrator::new(volume.clone(), cfg.migrate));
    let worker = if cfg.migrate.enabled {
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
    let mut tasks = tokio::task::JoinSet::new();
    if !cfg.listen.is_empty() {
        let listener = TcpListener::bind(&cfg.listen)
            .await
            .map_err(io_ctx(format!("listening on {}", cfg.listen)))?;
        let addr = listener
            .local_addr()
            .map_err(io_ctx("reading the bound address"))?;
        if !addr.ip().is_loopback() {
            warn!(%addr, "serving NBD beyond loopback without TLS: anyone who can reach this address can read and write the volume");
        }
        info!(%addr, "serving NBD over TCP");
        let (server, rx) = (server.clone(), stop_rx.clone());
        tasks.spawn(async move { server.serve_tcp(listener, stopped(rx)).await });
    }
    if let Some(path) = &cfg.unix {
        if path.exists() {
            // A leftover socket from an earlier run; refuse anything else.
            let meta = std::fs::symlink_metadata(path)
                .map_err(io_ctx(format!("inspecting {}", path.display())))?;
            if !std::os::unix::fs::FileTypeExt::is_socket(&meta.file_type()) {
                return Err(ServiceError::Refused(format!(
                    "{} exists and is not a socket; refusing to replace it",
                    path.display()
                )));
            }
            std::fs::remove_file(path)
                .map_err(io_ctx(format!("removing stale socket {}", path.display())))?;
        }
        let listener =
            UnixListener::bind(path).map_err(io_ctx(format!("binding {}", path.display())))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(io_ctx(format!("restricting {}", path.display())))?;
        info!(path = %path.display(), "serving NBD over a Unix socket");
        let (server, rx) = (server.clone(), stop_rx.clone());
        tasks.spawn(async move { server.serve_unix(listener, stopped(rx)).await });
    }
    tokio::select! {
        _ = shutdown => info!("shutting down: finishing in-flight requests"),
        Some(res) = tasks.join_next() => {
            // A listener died on its own: stop the others too.
            warn!("a listener stopped unexpectedly: {res:?}");
        }
    }
    let _ = stop_tx.send(true);
    while let Some(res) = tasks.join_next().await {
        match res {
            Ok(Err(e)) => warn!("listener ended with an error: {e}"),
            Err(e) => warn!("listener task failed: {e}"),
            Ok(Ok(())) => {}
        }
    }
    if let Some(path) = &cfg.unix {
        let _ = std::fs::remove_file(path);
    }
    if let Some(w) = worker {
        // Finishes its current move and saves heat.
        tokio::task::spawn_blocking(move || w.stop())
            .await
            .map_err(|e| ServiceError::Refused(format!("stopping the migrator: {e}")))?;
    }
    let v = volume.clone();
    tokio::task::spawn_blocking(move || v.flush())
        .await
        .map_err(|e| ServiceError::Refused(format!("flush task failed: {e}")))??;
    info!("volume flushed; bye");
    Ok(())
}
