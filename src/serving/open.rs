//! Turning a [`Config`] into open devices, a metadata store and a volume:
//! creating and formatting the embedded default image files on first
//! start, formatting on request (creating a missing image file only where
//! `images.rs` allows it, and undoing a format that fails), checking what
//! a start would refuse before anything is created, refusing size settings
//! an existing volume does not match, and opening a new SSD in place of a
//! drained one.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

use tracing::{info, warn};

use super::error::{io_ctx, Result, ServiceError};
use super::images::{self, check_given_sizes, Made, TierPath};
use crate::config::{Config, Loaded};
use crate::device::{BlockDevice, FileDevice, LostDevice};
use crate::store::{MetaStore, SledStore, StoreError};
use crate::units::{error_text, human_bytes, ByteSize};
use crate::volume::{
    is_ssd_in_use, Devices, FormatOptions, Geometry, Superblock, Volume, VolumeError,
    VolumeOptions, MIN_DEVICE_SIZE,
};

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
    volume: &Volume,
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
    volume
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
    SledStore::open_with_cache(&path, cfg.meta_cache.0)
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
    if cfg.ssd_lost {
        return Err(ServiceError::Refused(format!(
            "--ssd-lost opens an existing volume from its HDD copies, but there is no metadata store at {}: nothing to open",
            cfg.meta_path().display()
        )));
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
    let devices = if cfg.ssd_lost {
        // The SSD's path may be gone, or name a dead device: not opened.
        Devices {
            ssd: Arc::new(LostDevice::new(cfg.ssd_path().display().to_string())),
            hdd: open_device(cfg, &cfg.hdd_path(), &cfg.hdd_model)?,
        }
    } else {
        open_devices(cfg)?
    };
    let store: Arc<dyn MetaStore> = match store {
        Some(s) => s,
        None => open_store(cfg)?,
    };
    if cfg.ssd_lost {
        refuse_live_ssd(cfg, store.as_ref())?;
    }
    let opts = VolumeOptions {
        heat: cfg.heat,
        // Without the SSD, the volume opens with the SSD drained: no write
        // lands in its log until a replacement ends the draining.
        write_log: cfg.write_log,
        shadows: cfg.shadows,
        ssd_lost: cfg.ssd_lost,
        ..VolumeOptions::default()
    };
    Ok((
        Arc::new(Volume::open_with(devices, store, opts)?),
        formatted,
    ))
}

/// `--ssd-lost` discards what only the SSD holds: refused while the SSD's
/// path still reads as the SSD this volume uses (a device that fails, or
/// is gone, or is another device, is taken as lost), and while the device
/// a `replace ssd` put in (its path as recorded then) reads as it: a
/// configuration that still says `--ssd-lost` after the replacement would
/// otherwise give up what the new SSD holds.
fn refuse_live_ssd(cfg: &Config, store: &dyn MetaStore) -> Result<()> {
    let configured = cfg.ssd_path();
    if reads_as_ssd_in_use(&configured, store)? {
        return Err(ServiceError::Refused(format!(
            "--ssd-lost would give up what only the SSD holds, but {} still reads as this volume's SSD: serve without --ssd-lost and run `tierctl evacuate ssd` to move its data to the HDD (reads the SSD fails are served from HDD copies), then `tierctl replace ssd NEW`; if the device is failing for good, detach it (or point --ssd at a path that does not exist) and start with --ssd-lost again",
            configured.display()
        )));
    }
    if let Some(replaced) = crate::volume::replaced_ssd_path(store)? {
        let replaced = std::path::PathBuf::from(replaced);
        if replaced != configured && reads_as_ssd_in_use(&replaced, store)? {
            return Err(ServiceError::Refused(format!(
                "--ssd-lost would give up what only the SSD holds, but the SSD was replaced by {}, which reads as this volume's SSD: serve with --ssd {} and without --ssd-lost (ssd = \"{}\" in the configuration file)",
                replaced.display(),
                replaced.display(),
                replaced.display()
            )));
        }
    }
    Ok(())
}

/// Whether `path` opens and starts with the superblock of the SSD this
/// volume uses now.
fn reads_as_ssd_in_use(path: &std::path::Path, store: &dyn MetaStore) -> Result<bool> {
    use std::io::Read;
    let mut head = vec![0u8; crate::volume::PROBE_SIZE];
    let read = std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut head));
    if read.is_err() {
        return Ok(false);
    }
    let Ok(sb) = Superblock::decode(&head) else {
        return Ok(false);
    };
    Ok(is_ssd_in_use(store, &sb)?)
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
