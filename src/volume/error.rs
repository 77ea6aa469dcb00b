//! The volume's errors: what formatting, opening and using a volume can
//! fail with, each naming the device or key involved and keeping its source.

use crate::device::BlockDevice;
use crate::store::StoreError;

use uuid::Uuid;

use super::geometry::{GeometryError, Tier};
use super::open::STORE_FORMAT_VERSION;
use super::superblock::SuperblockError;

/// Errors of formatting, opening and using a volume.
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    /// Bad geometry parameters.
    #[error(transparent)]
    Geometry(#[from] GeometryError),
    /// The metadata store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A device failed.
    #[error("I/O error on {device}: {source}")]
    Io {
        /// The device.
        device: String,
        /// The error.
        source: std::io::Error,
    },
    /// Formatting would destroy something.
    #[error("{device} already carries {found}; refusing to format it (pass --force to overwrite)")]
    HasContent {
        /// The device.
        device: String,
        /// What was found.
        found: String,
    },
    /// The metadata store already holds a volume.
    #[error("the metadata store already holds volume {0}; refusing to format (pass --force to overwrite)")]
    StoreInUse(String),
    /// Same device given twice.
    #[error("the SSD and the HDD are the same device ({0})")]
    SameDevice(String),
    /// Not formatted.
    #[error("{0} is not formatted: run `tierd format` first")]
    NotFormatted(String),
    /// A device without (a valid) superblock.
    #[error("{device}: {problem}; is the path right? (`tierd format` prepares a new device)")]
    BadSuperblock {
        /// The device.
        device: String,
        /// What is wrong.
        problem: SuperblockError,
    },
    /// The two devices were given the wrong way round.
    #[error("the devices are swapped: {ssd} is this volume's HDD and {hdd} its SSD; pass --ssd {hdd} --hdd {ssd}")]
    Swapped {
        /// Path given as SSD.
        ssd: String,
        /// Path given as HDD.
        hdd: String,
    },
    /// A device carries the other role.
    #[error("{device} is this volume's {found}, not its {expected}; check --ssd and --hdd")]
    WrongRole {
        /// The device.
        device: String,
        /// Role expected.
        expected: Tier,
        /// Role found.
        found: Tier,
    },
    /// A device of another volume.
    #[error("{device} belongs to another tierd volume ({found}), not to {expected}; check the path or the metadata directory")]
    OtherVolume {
        /// The device.
        device: String,
        /// Its volume.
        found: Uuid,
        /// Ours.
        expected: Uuid,
    },
    /// A device shrank.
    #[error("{device} has {size} bytes, fewer than the {needed} bytes the volume was formatted with; restore the full device")]
    TooSmall {
        /// The device.
        device: String,
        /// Its size now.
        size: u64,
        /// Bytes needed.
        needed: u64,
    },
    /// The metadata is from another format version.
    #[error(
        "the metadata store has format version {found}; this build reads versions 1 to {STORE_FORMAT_VERSION} (a newer release wrote it: run that release)"
    )]
    UnknownStoreVersion {
        /// Version found.
        found: String,
    },
    /// The metadata is damaged.
    #[error("metadata is damaged: {0}")]
    Corrupt(String),
    /// A request outside the volume.
    #[error("range {offset}+{len} is outside the volume ({size} bytes)")]
    OutOfRange {
        /// Start.
        offset: u64,
        /// Length.
        len: u64,
        /// Volume size.
        size: u64,
    },
    /// A pin that cannot be honoured.
    #[error("cannot pin: {0}")]
    Pin(String),
    /// The SSD was replaced (`tierctl replace ssd`) and this is the old one.
    #[error("{device} is this volume's old SSD: it was replaced by {replaced_by}; set ssd = {replaced_by} (or --ssd {replaced_by})")]
    ReplacedSsd {
        /// The device given.
        device: String,
        /// The path the replacement was given as.
        replaced_by: String,
    },
    /// A replacement that cannot be done now or with this device.
    #[error("cannot replace the SSD: {0}")]
    Replace(String),
    /// A read of blocks lost with a dead SSD.
    #[error("the data at byte {offset} was lost with the SSD ({device}): it had no HDD copy; a write of the whole 4 KiB block or a discard makes it usable again")]
    Lost {
        /// The first lost byte of the request.
        offset: u64,
        /// The lost SSD.
        device: String,
    },
    /// A change of draining while the SSD is lost.
    #[error("the SSD is lost (the volume was opened with --ssd-lost): it stays drained until `tierctl replace ssd NEW` brings a new one in")]
    SsdGone,
    /// No slot left anywhere (cannot happen while the geometry holds).
    #[error("no free extent slot on either device")]
    NoSpace,
}

/// Result of volume operations.
pub type VolumeResult<T> = Result<T, VolumeError>;

/// Wrap a device's I/O error with the device's name.
pub(crate) fn io_err(dev: &dyn BlockDevice) -> impl FnOnce(std::io::Error) -> VolumeError + '_ {
    move |source| VolumeError::Io {
        device: dev.name(),
        source,
    }
}
