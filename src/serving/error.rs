//! [`ServiceError`]: why preparing or running the service failed, with the
//! advice an image file too large for its filesystem needs; the `Result`
//! and the I/O-error context every file of the serving layer uses.

use std::path::PathBuf;

use crate::device::ImageError;
use crate::store::StoreError;
use crate::volume::VolumeError;

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

/// A file-level failure with what was being done.
pub(super) fn io_ctx(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ServiceError {
    let what = what.into();
    move |source| ServiceError::Io { what, source }
}
