//! The image files tierd creates for a volume, and only those: which
//! missing device path may become a sparse image file (in an existing
//! directory, outside `/dev`, of a size that was asked for), refusing any
//! other path with what to do; refusing a size setting an existing image
//! does not have; and undoing what a format that failed made (image files,
//! the data directory, the metadata directory), so that trying again finds
//! everything as it was.

use std::path::{Path, PathBuf};

use tracing::{info, warn};

use super::error::{io_ctx, Result, ServiceError};
use crate::config::{Config, Loaded};
use crate::device::FileDevice;
use crate::units::{human_bytes, ByteSize};

/// One tier's device as the configuration names it.
pub(super) struct TierPath {
    /// `ssd` or `hdd`.
    pub(super) name: &'static str,
    pub(super) path: PathBuf,
    /// The key that sizes its image (`ssd-size`).
    pub(super) size_key: &'static str,
    pub(super) size: ByteSize,
    /// The embedded default image (`<data-dir>/ssd.img`), not a named one.
    pub(super) default_image: bool,
}

impl TierPath {
    pub(super) fn both(cfg: &Config) -> [TierPath; 2] {
        [
            TierPath {
                name: "ssd",
                path: cfg.ssd_path(),
                size_key: "ssd-size",
                size: cfg.ssd_size,
                default_image: cfg.ssd.is_none(),
            },
            TierPath {
                name: "hdd",
                path: cfg.hdd_path(),
                size_key: "hdd-size",
                size: cfg.hdd_size,
                default_image: cfg.hdd.is_none(),
            },
        ]
    }

    /// Remote storage (NBD, RADOS): nothing to create, stat or size here.
    pub(super) fn is_remote(&self) -> bool {
        self.path
            .to_str()
            .is_some_and(|s| crate::nbd::client::is_uri(s) || crate::device::rados::is_rados_uri(s))
    }

    /// A local path with nothing there (a dangling symbolic link counts
    /// as something: tierd does not create through it).
    pub(super) fn is_missing(&self) -> bool {
        !self.is_remote() && std::fs::symlink_metadata(&self.path).is_err()
    }

    /// The size of the image file, if it is an existing regular file (a
    /// block device has its own size, which no setting changes).
    fn image_size(&self) -> Option<u64> {
        if self.is_remote() {
            return None;
        }
        std::fs::metadata(&self.path)
            .ok()
            .filter(|m| m.is_file())
            .map(|m| m.len())
    }
}

/// A size setting (`ssd-size`, `hdd-size`) a layer gave that an existing
/// image file does not have is refused: the size only applies when tierd
/// creates the image, and opening the volume as it is would ignore what
/// was asked without a word. Block devices and remote tiers are not
/// image files: the setting means nothing to them.
pub(super) fn check_given_sizes(loaded: &Loaded) -> Result<()> {
    for t in TierPath::both(&loaded.config) {
        let Some(have) = t.image_size() else {
            continue;
        };
        if loaded.is_given(t.size_key) && have != t.size.0 {
            // In units; in bytes only where the units cannot tell them apart.
            let (mut have_h, mut want_h) = (human_bytes(have), human_bytes(t.size.0));
            if have_h == want_h {
                (have_h, want_h) = (format!("{have} bytes"), format!("{} bytes", t.size.0));
            }
            return Err(ServiceError::Refused(format!(
                "{path} is {have_h}, but {key} asks for {want_h}: \
                 {key} only sizes an image file tierd creates, and an existing image keeps its size. \
                 Drop {key} (--{key}, {var} or the configuration file's key) to use {path} as it is, \
                 or remove the volume's files (images and metadata directory) to start a new volume of that size",
                path = t.path.display(),
                key = t.size_key,
                var = crate::config::env_var(t.size_key),
            )));
        }
    }
    Ok(())
}

/// Whether `dir` (made absolute and free of symbolic links) is in `/dev`,
/// where device nodes live. `/dev/shm`, the tmpfs POSIX shared memory
/// keeps its files in, is not.
fn in_dev(dir: &Path) -> bool {
    dir.starts_with("/dev") && !dir.starts_with("/dev/shm")
}

/// Whether an image file may be made at `t`'s path: its directory exists
/// (the data directory, tierd's own, may be made if its parent exists)
/// and is not in `/dev`. `Err` says why not and what to do.
pub(super) fn check_location(t: &TierPath, data_dir: &Path) -> Result<()> {
    let path = &t.path;
    let abs = std::path::absolute(path).map_err(io_ctx(format!("resolving {}", path.display())))?;
    let Some(dir) = abs.parent() else {
        return Err(ServiceError::Refused(format!(
            "{} is not a file path: name the {} device",
            path.display(),
            t.name
        )));
    };
    let data_dir = std::path::absolute(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    let own_dir = t.default_image && dir == data_dir;
    // The directory that must exist already, and both as given.
    let make_own = own_dir && std::fs::symlink_metadata(dir).is_err();
    let must_exist = match dir.parent() {
        Some(up) if make_own => up,
        _ => dir,
    };
    let shown = |p: Option<&Path>| match p.filter(|p| !p.as_os_str().is_empty()) {
        Some(p) => p.display().to_string(),
        None => ".".to_string(),
    };
    let given_dir = path.parent();
    let (shown_dir, shown_must) = (
        shown(given_dir),
        shown(if make_own {
            given_dir.and_then(Path::parent)
        } else {
            given_dir
        }),
    );
    let dev = || {
        ServiceError::Refused(format!(
            "{} does not exist, and it is in /dev, where device nodes live: tierd never creates an image file there. \
             Check the device's name (lsblk lists the block devices), or attach the device first",
            path.display(),
        ))
    };
    match std::fs::canonicalize(must_exist) {
        Ok(real) if in_dev(&real) => Err(dev()),
        Ok(real) if !real.is_dir() => Err(ServiceError::Refused(format!(
            "{} does not exist, and {shown_must} is not a directory: check the path",
            path.display(),
        ))),
        Ok(_) => Ok(()),
        Err(_) if in_dev(must_exist) => Err(dev()),
        Err(_) if own_dir => Err(ServiceError::Refused(format!(
            "the data directory {shown_dir} does not exist, nor does its parent {shown_must}: \
             tierd makes its data directory only inside an existing directory. \
             Check --data-dir, or create it first (mkdir -p {shown_dir})",
        ))),
        Err(_) => Err(ServiceError::Refused(format!(
            "{} does not exist, nor does its directory {shown_must}: \
             tierd creates an image file only in an existing directory. \
             Check the path, or create the directory first (mkdir -p {shown_must})",
            path.display(),
        ))),
    }
}

/// The tiers whose image files `format` is to create: each missing local
/// device path, where an image may be made ([`check_location`]), and whose
/// size was asked for: the embedded default (neither device named) has
/// its default sizes; a named path, or the default path of one tier
/// beside a named other, needs its size key set (flag, `TIERD_*` or the
/// file). Anything else is refused with what to do.
pub(super) fn images_to_create(loaded: &Loaded) -> Result<Vec<TierPath>> {
    let cfg = &loaded.config;
    let mut out = Vec::new();
    for t in TierPath::both(cfg) {
        if !t.is_missing() {
            continue;
        }
        check_location(&t, &cfg.data_dir)?;
        if !(cfg.uses_default_images() || loaded.is_given(t.size_key)) {
            let key = t.size_key;
            let why = if t.default_image {
                format!(
                    "{name} is not set, so it would be {path}, which does not exist: \
                     name the {name} device (--{name} PATH)",
                    name = t.name,
                    path = t.path.display()
                )
            } else {
                format!(
                    "{} does not exist: name an existing device",
                    t.path.display()
                )
            };
            return Err(ServiceError::Refused(format!(
                "{why}, or give its size to create it as an image file (--{key} SIZE, e.g. --{key} {example}, \
                 or {key} in the configuration file)",
                example = t.size,
            )));
        }
        out.push(t);
    }
    Ok(out)
}

/// What a format made: undone when it is dropped without [`Made::keep`],
/// newest first, so a format that fails leaves nothing it made behind.
#[derive(Default)]
pub(super) struct Made {
    /// Image files, directories (with what they hold), in the order made.
    things: Vec<(PathBuf, bool)>,
    kept: bool,
}

impl Made {
    /// Create the directory `dir` if it does not exist (its parent must).
    fn dir(&mut self, dir: &Path) -> Result<()> {
        if std::fs::symlink_metadata(dir).is_ok() {
            return Ok(());
        }
        std::fs::create_dir(dir)
            .map_err(io_ctx(format!("creating directory {}", dir.display())))?;
        self.things.push((dir.to_path_buf(), true));
        Ok(())
    }

    /// Create the sparse image files of `tiers` (checked by
    /// [`images_to_create`]), and the data directory for the default ones.
    pub(super) fn images(&mut self, tiers: &[TierPath], data_dir: &Path) -> Result<()> {
        for t in tiers {
            if t.default_image {
                self.dir(data_dir)?;
            }
            FileDevice::create_image(&t.path, t.size.0).map_err(|source| ServiceError::Image {
                key: t.size_key,
                source,
            })?;
            self.things.push((t.path.clone(), false));
            info!(path = %t.path.display(), size = %t.size, "created sparse image file");
        }
        Ok(())
    }

    /// Note the directories opening a store at `meta` will create: the
    /// outermost of them that does not exist yet, with all it will hold.
    pub(super) fn store_dir(&mut self, meta: &Path) {
        let mut outermost = None;
        let mut p = Some(meta);
        while let Some(d) = p.filter(|d| !d.as_os_str().is_empty()) {
            if std::fs::symlink_metadata(d).is_ok() {
                break;
            }
            outermost = Some(d.to_path_buf());
            p = d.parent();
        }
        if let Some(d) = outermost {
            self.things.push((d, true));
        }
    }

    /// The format worked: keep everything.
    pub(super) fn keep(mut self) {
        self.kept = true;
    }
}

impl Drop for Made {
    fn drop(&mut self) {
        if self.kept {
            return;
        }
        for (path, is_dir) in self.things.iter().rev() {
            let removed = if *is_dir {
                remove_dir_all_settled(path)
            } else {
                std::fs::remove_file(path)
            };
            match removed {
                Ok(()) => {
                    info!(path = %path.display(), "removed what the failed format made")
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    warn!(path = %path.display(), error = %e, "cannot remove what the failed format made")
                }
            }
        }
    }
}

/// `remove_dir_all`, tried again a few times: a metadata store just
/// dropped may still be writing its last files from a background thread.
fn remove_dir_all_settled(dir: &Path) -> std::io::Result<()> {
    let mut last = Ok(());
    for _ in 0..20 {
        last = std::fs::remove_dir_all(dir);
        match &last {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            _ => return last,
        }
    }
    last
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_dev_itself_is_refused_not_dev_shm() {
        assert!(in_dev(Path::new("/dev")));
        assert!(in_dev(Path::new("/dev/disk/by-id")));
        assert!(!in_dev(Path::new("/dev/shm/x")));
        assert!(!in_dev(Path::new("/devices")));
        assert!(!in_dev(Path::new("/var/tmp")));
    }
}
