//! The daemon's listening endpoints: NBD over TCP and over a Unix socket,
//! the control socket and the metrics address, all bound before the volume
//! is opened (or created and formatted), so a busy port or a socket another
//! process serves on stops the start before anything is written. A socket
//! file bound by a start that fails later is removed again, and so is the
//! directory made for it.

use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::{TcpListener, UnixListener};
use tracing::warn;

use super::error::ServiceError;
use super::metrics;
use crate::config::Config;

/// The bound endpoints the configuration asks for; each `None` when turned
/// off (the metrics endpoint also when it cannot be had: metrics are worth
/// less than serving the volume).
pub struct Endpoints {
    pub(super) tcp: Option<TcpListener>,
    pub(super) unix: Option<(PathBuf, UnixListener)>,
    pub(super) control: Option<(PathBuf, UnixListener)>,
    pub(super) metrics: Option<(PrometheusHandle, TcpListener)>,
    /// Directories made for the control socket, outermost first: removed
    /// again (when empty) if the start fails before the socket is served.
    pub(super) made_dirs: Vec<PathBuf>,
}

/// A TCP listener on `addr`, for the runtime we are in.
fn tcp(addr: &str) -> io::Result<TcpListener> {
    let l = std::net::TcpListener::bind(addr)?;
    l.set_nonblocking(true)?;
    TcpListener::from_std(l)
}

/// Whether a process answers on the Unix socket at `path`.
pub(super) fn socket_answers(path: &Path) -> bool {
    std::os::unix::net::UnixStream::connect(path).is_ok()
}

impl Endpoints {
    /// Bind every endpoint of `cfg`. Call it inside a tokio runtime context
    /// (`Runtime::enter`): the listeners belong to that runtime.
    pub fn bind(cfg: &Config) -> Result<Endpoints, ServiceError> {
        let mut e = Endpoints {
            tcp: None,
            unix: None,
            control: None,
            metrics: None,
            made_dirs: Vec::new(),
        };
        if !cfg.listen.is_empty() {
            e.tcp = Some(tcp(&cfg.listen).map_err(|source| ServiceError::Io {
                what: format!(
                    "NBD cannot listen on {} (is another tierd running? set listen to a free HOST:PORT)",
                    cfg.listen
                ),
                source,
            })?);
        }
        if let Some(path) = &cfg.unix {
            e.unix = Some((path.clone(), bind_unix(path)?));
        }
        if let Some(path) = cfg.control_path() {
            e.made_dirs = missing_dirs(path.parent());
            let l = bind_control(&path)
                .map_err(|e| ServiceError::Refused(crate::units::error_text(&e)))?;
            e.control = Some((path, l));
        }
        if !cfg.metrics_listen.is_empty() {
            match (metrics::install(), tcp(&cfg.metrics_listen)) {
                (Ok(handle), Ok(listener)) => e.metrics = Some((handle, listener)),
                (Err(err), _) => warn!("metrics are off: {err}"),
                (_, Err(err)) => warn!(
                    "metrics are off: cannot listen on {} ({err}); set metrics-listen to a free HOST:PORT or \"\"",
                    cfg.metrics_listen
                ),
            }
        }
        Ok(e)
    }

    /// The address NBD is served on over TCP, if it is.
    pub fn tcp_addr(&self) -> Option<std::net::SocketAddr> {
        self.tcp.as_ref().and_then(|l| l.local_addr().ok())
    }
}

/// The NBD Unix socket at `path`, mode 0600: a stale socket there is
/// replaced, a live one or anything else refused.
fn bind_unix(path: &Path) -> Result<UnixListener, ServiceError> {
    let io_err = |what: String| move |source| ServiceError::Io { what, source };
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !std::os::unix::fs::FileTypeExt::is_socket(&meta.file_type()) {
            return Err(ServiceError::Refused(format!(
                "{} exists and is not a socket; refusing to replace it",
                path.display()
            )));
        }
        if socket_answers(path) {
            return Err(ServiceError::Refused(format!(
                "another process serves on {} (is another tierd running?); set unix to another path",
                path.display()
            )));
        }
        std::fs::remove_file(path)
            .map_err(io_err(format!("removing stale socket {}", path.display())))?;
    }
    let listener =
        UnixListener::bind(path).map_err(io_err(format!("binding {}", path.display())))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(io_err(format!("restricting {}", path.display())))?;
    Ok(listener)
}

/// Why the control socket cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// Something else sits at the socket path.
    #[error("{0} exists and is not a socket; refusing to replace it")]
    NotASocket(String),
    /// Another process answers on the socket.
    #[error("another process serves on the control socket {0} (is another tierd running? set control to another path, or \"\" for none)")]
    InUse(String),
    /// A file operation failed.
    #[error("control socket {path}: {what}")]
    Io {
        /// The socket path.
        path: String,
        /// What failed.
        what: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Bind the control socket at `path` (replacing a stale socket, never
/// anything else) with mode 0600.
pub fn bind_control(path: &Path) -> Result<UnixListener, ControlError> {
    let p = path.display().to_string();
    let io = |what: &'static str| {
        let path = p.clone();
        move |source| ControlError::Io { path, what, source }
    };
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(ControlError::NotASocket(p));
        }
        if socket_answers(path) {
            return Err(ControlError::InUse(p));
        }
        std::fs::remove_file(path).map_err(io("removing the stale socket"))?;
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io("creating its directory"))?;
    }
    // Bound under a private name, restricted, then renamed into place, so
    // the path never shows the socket with the umask's mode (a client
    // waiting for the path saw 0755 before the chmod).
    let name = path.file_name().map_or_else(
        || "control.sock".into(),
        |n| n.to_string_lossy().into_owned(),
    );
    let tmp = path.with_file_name(format!(".{name}.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let listener = UnixListener::bind(&tmp).map_err(io("binding"))?;
    let placed = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
        .map_err(io("restricting it to mode 0600"))
        .and_then(|()| std::fs::rename(&tmp, path).map_err(io("moving it into place")));
    if let Err(e) = placed {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(listener)
}

/// The directories of `dir` and its ancestors that do not exist, outermost
/// first.
fn missing_dirs(dir: Option<&Path>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut d = dir;
    while let Some(p) = d.filter(|p| !p.as_os_str().is_empty()) {
        if std::fs::symlink_metadata(p).is_ok() {
            break;
        }
        out.push(p.to_path_buf());
        d = p.parent();
    }
    out.reverse();
    out
}

impl Drop for Endpoints {
    /// Sockets not handed to the server (the start failed) are removed,
    /// and the directories made for them if nothing else is in them.
    fn drop(&mut self) {
        if let Some((path, _)) = self.unix.take() {
            let _ = std::fs::remove_file(path);
        }
        if let Some((path, _)) = self.control.take() {
            let _ = std::fs::remove_file(path);
            for dir in self.made_dirs.iter().rev() {
                if std::fs::remove_dir(dir).is_err() {
                    break;
                }
            }
        }
    }
}
