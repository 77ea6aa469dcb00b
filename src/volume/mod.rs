//! The tiered volume: geometry, superblocks, the extent map, the slot
//! allocator and the I/O paths that turn logical reads and writes into
//! device I/O on the SSD or the HDD.
//!
//! [`Volume::format`] writes a superblock on each device and initialises the
//! metadata store; [`Volume::open`] checks that the devices and the store
//! belong together and loads the extent map into memory.

mod alloc;
mod extent;
mod failpoint;
mod geometry;
mod io;
mod mover;
mod stats;
mod superblock;

pub use failpoint::MoveStep;
pub use io::AllocRun;
pub use mover::{pin_in, MoveOutcome, MoveRecord, Pin, Placement, MERGE_MAX};
pub use stats::Stats;

pub use extent::{Loc, Mapping, RecordError, Written};
pub use geometry::{
    Geometry, GeometryError, Tier, BLOCK_SIZE, DATA_OFFSET, DEFAULT_EXTENT_SIZE, DEFAULT_RESERVE,
    MAX_EXTENT_SIZE, MIN_EXTENT_SIZE,
};
pub use superblock::{detect_content, Superblock, SuperblockError, FORMAT_VERSION, PROBE_SIZE};

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::{Mutex, RwLock};
use uuid::Uuid;

use crate::clock::{Clock, SystemClock};
use crate::device::BlockDevice;
use crate::heat::{HeatConfig, HeatMap};
use crate::store::{MetaStore, StoreError, FORMAT_VERSION_KEY};
use alloc::Allocator;

const VOLUME_ID_KEY: &str = "volume-id";
const GEOMETRY_KEY: &str = "geometry";
const PINS_KEY: &str = "pins";
const HEAT_KEY: &str = "heat";

/// Options of [`Volume::open_with`].
#[derive(Clone)]
pub struct VolumeOptions {
    /// Heat tracking knobs.
    pub heat: HeatConfig,
    /// The clock heat and migration run on.
    pub clock: Arc<dyn Clock>,
}

impl Default for VolumeOptions {
    fn default() -> Self {
        VolumeOptions {
            heat: HeatConfig::default(),
            clock: Arc::new(SystemClock::default()),
        }
    }
}

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
        "the metadata store has format version {found}; this build reads version {FORMAT_VERSION}"
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
    /// No slot left anywhere (cannot happen while the geometry holds).
    #[error("no free extent slot on either device")]
    NoSpace,
}

/// Result of volume operations.
pub type VolumeResult<T> = Result<T, VolumeError>;

/// Options of [`Volume::format`].
#[derive(Debug, Clone)]
pub struct FormatOptions {
    /// Bytes per extent.
    pub extent_size: u64,
    /// Reserve in bytes (`None`: 4 GiB capped at 25 % of the SSD).
    pub reserve: Option<u64>,
    /// Overwrite devices and stores that carry something.
    pub force: bool,
}

impl Default for FormatOptions {
    fn default() -> Self {
        FormatOptions {
            extent_size: DEFAULT_EXTENT_SIZE,
            reserve: None,
            force: false,
        }
    }
}

/// The two devices of a volume.
#[derive(Clone)]
pub struct Devices {
    /// The fast tier.
    pub ssd: Arc<dyn BlockDevice>,
    /// The slow tier.
    pub hdd: Arc<dyn BlockDevice>,
}

impl Devices {
    fn get(&self, tier: Tier) -> &Arc<dyn BlockDevice> {
        match tier {
            Tier::Ssd => &self.ssd,
            Tier::Hdd => &self.hdd,
        }
    }
}

fn io_err(dev: &dyn BlockDevice) -> impl FnOnce(std::io::Error) -> VolumeError + '_ {
    move |source| VolumeError::Io {
        device: dev.name(),
        source,
    }
}

/// A snapshot of how the volume is used.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Usage {
    /// Logical capacity in bytes.
    pub capacity: u64,
    /// Mapped extents per tier (ssd, hdd).
    pub mapped: [u64; 2],
    /// Free slots per tier.
    pub free: [u32; 2],
    /// Slots waiting for a metadata flush before reuse.
    pub quarantined: u32,
}

/// An open tiered volume.
pub struct Volume {
    geo: Geometry,
    id: Uuid,
    devices: Devices,
    store: Arc<dyn MetaStore>,
    /// The extent map: one lock per logical extent.
    map: Box<[RwLock<Option<Mapping>>]>,
    alloc: Allocator,
    /// Data written to a tier since its last sync.
    dirty: [AtomicBool; 2],
    /// Metadata changed since the last store flush.
    meta_dirty: AtomicBool,
    /// Serialises flushes.
    flush_lock: Mutex<()>,
    /// Per extent: bumped before every change of its data or mapping, so a
    /// migration can tell whether its copy is still current.
    gens: Box<[AtomicU32]>,
    /// Heat of every extent: recorded by the I/O paths, shared with
    /// whoever reads it (the migrator, control, metrics).
    heat: Arc<HeatMap>,
    clock: Arc<dyn Clock>,
    /// Pins, later entries overriding earlier ones.
    pins: RwLock<Vec<Pin>>,
    /// The last move of each extent that moved since start.
    moves: Mutex<HashMap<u64, MoveRecord>>,
    /// Foreground requests in progress.
    inflight: AtomicUsize,
    /// Smoothed latency of foreground HDD reads.
    hdd_latency: io::Latency,
    /// Counters for metrics.
    stats: Stats,
    /// A test's armed crash point for the next migration.
    failpoint: failpoint::Failpoint,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Volume {
    /// Format two devices and a metadata store as a new, empty volume.
    /// Nothing is written unless every check passes.
    pub fn format(
        devices: &Devices,
        store: &dyn MetaStore,
        opts: &FormatOptions,
    ) -> VolumeResult<Geometry> {
        if !opts.force {
            if let Some(v) = store.get(VOLUME_ID_KEY)? {
                return Err(VolumeError::StoreInUse(String::from_utf8_lossy(&v).into()));
            }
            for tier in Tier::ALL {
                let dev = devices.get(tier);
                let mut probe = vec![0u8; PROBE_SIZE.min(dev.size() as usize)];
                dev.read_at(&mut probe, 0).map_err(io_err(dev.as_ref()))?;
                if let Some(found) = detect_content(&probe) {
                    return Err(VolumeError::HasContent {
                        device: dev.name(),
                        found,
                    });
                }
            }
        }
        let geo = Geometry::compute(
            devices.ssd.size(),
            devices.hdd.size(),
            opts.extent_size,
            opts.reserve,
        )?;
        let id = Uuid::new_v4();
        let created = now_secs();
        store.clear()?;
        for tier in Tier::ALL {
            let dev = devices.get(tier);
            let sb = Superblock {
                version: FORMAT_VERSION,
                role: tier,
                volume_id: id,
                extent_size: geo.extent_size,
                device_size: dev.size(),
                data_offset: DATA_OFFSET,
                slots: u64::from(geo.slots(tier)),
                created,
            };
            dev.write_at(&sb.encode(), 0)
                .map_err(io_err(dev.as_ref()))?;
            dev.sync().map_err(io_err(dev.as_ref()))?;
        }
        let geo_json = serde_json::to_vec(&geo).map_err(|e| VolumeError::Corrupt(e.to_string()))?;
        store.put(GEOMETRY_KEY, &geo_json)?;
        store.put(VOLUME_ID_KEY, id.to_string().as_bytes())?;
        store.put(FORMAT_VERSION_KEY, FORMAT_VERSION.to_string().as_bytes())?;
        store.flush()?;
        Ok(geo)
    }

    /// Open a formatted volume, checking that the devices are the right ones
    /// and in the right roles.
    pub fn open(devices: Devices, store: Arc<dyn MetaStore>) -> VolumeResult<Self> {
        Self::open_with(devices, store, VolumeOptions::default())
    }

    /// [`Volume::open`] with explicit heat options and clock.
    pub fn open_with(
        devices: Devices,
        store: Arc<dyn MetaStore>,
        opts: VolumeOptions,
    ) -> VolumeResult<Self> {
        let version = store
            .get(FORMAT_VERSION_KEY)?
            .ok_or_else(|| VolumeError::NotFormatted("the metadata store".into()))?;
        if version != FORMAT_VERSION.to_string().as_bytes() {
            return Err(VolumeError::UnknownStoreVersion {
                found: String::from_utf8_lossy(&version).into(),
            });
        }
        let id_raw = store
            .get(VOLUME_ID_KEY)?
            .ok_or_else(|| VolumeError::Corrupt("volume id missing".into()))?;
        let id = Uuid::parse_str(&String::from_utf8_lossy(&id_raw))
            .map_err(|e| VolumeError::Corrupt(format!("volume id: {e}")))?;
        let geo_raw = store
            .get(GEOMETRY_KEY)?
            .ok_or_else(|| VolumeError::Corrupt("geometry missing".into()))?;
        let geo: Geometry = serde_json::from_slice(&geo_raw)
            .map_err(|e| VolumeError::Corrupt(format!("geometry: {e}")))?;

        let sbs = [Tier::Ssd, Tier::Hdd].map(|tier| {
            let dev = devices.get(tier);
            let mut buf = vec![0u8; superblock::SUPERBLOCK_SIZE.min(dev.size() as usize)];
            dev.read_at(&mut buf, 0)
                .map_err(io_err(dev.as_ref()))
                .and_then(|_| {
                    Superblock::decode(&buf).map_err(|problem| VolumeError::BadSuperblock {
                        device: dev.name(),
                        problem,
                    })
                })
        });
        let [ssd_sb, hdd_sb] = sbs;
        let (ssd_sb, hdd_sb) = (ssd_sb?, hdd_sb?);
        if ssd_sb.volume_id == id
            && hdd_sb.volume_id == id
            && ssd_sb.role == Tier::Hdd
            && hdd_sb.role == Tier::Ssd
        {
            return Err(VolumeError::Swapped {
                ssd: devices.ssd.name(),
                hdd: devices.hdd.name(),
            });
        }
        for (tier, sb) in [(Tier::Ssd, &ssd_sb), (Tier::Hdd, &hdd_sb)] {
            let dev = devices.get(tier);
            if sb.volume_id != id {
                return Err(VolumeError::OtherVolume {
                    device: dev.name(),
                    found: sb.volume_id,
                    expected: id,
                });
            }
            if sb.role != tier {
                return Err(VolumeError::WrongRole {
                    device: dev.name(),
                    expected: tier,
                    found: sb.role,
                });
            }
            if sb.extent_size != geo.extent_size || sb.slots != u64::from(geo.slots(tier)) {
                return Err(VolumeError::Corrupt(format!(
                    "{}: superblock geometry differs from the metadata store",
                    dev.name()
                )));
            }
            let needed = geo.min_device_size(tier);
            if dev.size() < needed {
                return Err(VolumeError::TooSmall {
                    device: dev.name(),
                    size: dev.size(),
                    needed,
                });
            }
        }

        let logical = geo.logical_extents();
        let blocks = geo.blocks_per_extent();
        let mut map: Vec<RwLock<Option<Mapping>>> =
            (0..logical).map(|_| RwLock::new(None)).collect();
        let mut owner = [
            vec![false; geo.ssd_slots as usize],
            vec![false; geo.hdd_slots as usize],
        ];
        for (index, record) in store.load_extents()? {
            let m = Mapping::decode(&record, blocks)
                .map_err(|e| VolumeError::Corrupt(format!("extent {index}: {e}")))?;
            let entry = map.get_mut(index as usize).ok_or_else(|| {
                VolumeError::Corrupt(format!("extent {index} is beyond the volume"))
            })?;
            let owned = owner[m.loc.tier.index()]
                .get_mut(m.loc.slot as usize)
                .ok_or_else(|| {
                    VolumeError::Corrupt(format!(
                        "extent {index}: slot {} out of range",
                        m.loc.slot
                    ))
                })?;
            if *owned {
                return Err(VolumeError::Corrupt(format!(
                    "{} slot {} is owned twice",
                    m.loc.tier, m.loc.slot
                )));
            }
            *owned = true;
            *entry.get_mut() = Some(m);
        }
        let alloc = Allocator::new(
            [geo.ssd_slots, geo.hdd_slots],
            map.iter().filter_map(|e| e.read().as_ref().map(|m| m.loc)),
        );
        let pins: Vec<Pin> = match store.get(PINS_KEY)? {
            Some(raw) => serde_json::from_slice(&raw)
                .map_err(|e| VolumeError::Corrupt(format!("pins: {e}")))?,
            None => Vec::new(),
        };
        let heat = HeatMap::new(
            opts.heat,
            logical,
            geo.extent_size,
            BLOCK_SIZE,
            opts.clock.now(),
        );
        if let Some(raw) = store.get(HEAT_KEY)? {
            heat.restore(&raw);
        }
        Ok(Volume {
            geo,
            id,
            devices,
            store,
            map: map.into_boxed_slice(),
            alloc,
            // A previous process may have left writes in the OS cache that
            // were never synced: the first flush syncs everything.
            dirty: [AtomicBool::new(true), AtomicBool::new(true)],
            meta_dirty: AtomicBool::new(true),
            flush_lock: Mutex::new(()),
            gens: (0..logical).map(|_| AtomicU32::new(0)).collect(),
            heat: Arc::new(heat),
            clock: opts.clock,
            pins: RwLock::new(pins),
            moves: Mutex::new(HashMap::new()),
            inflight: AtomicUsize::new(0),
            hdd_latency: io::Latency::default(),
            stats: Stats::default(),
            failpoint: failpoint::Failpoint::default(),
        })
    }

    /// The volume's geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    /// The volume's id.
    pub fn id(&self) -> Uuid {
        self.id
    }

    /// Logical size in bytes.
    pub fn size(&self) -> u64 {
        self.geo.capacity()
    }

    /// Where a logical extent lives now, if mapped.
    pub fn mapping(&self, extent: u64) -> Option<Mapping> {
        self.map.get(extent as usize).and_then(|e| e.read().clone())
    }

    /// A handle on the heat map this volume's I/O records into (restored
    /// from the store at open): taken once at start-up and handed to the
    /// migrator and the serving layer.
    pub fn heat(&self) -> Arc<HeatMap> {
        self.heat.clone()
    }

    /// The clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Foreground requests in progress.
    pub fn inflight(&self) -> usize {
        self.inflight.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Smoothed latency of foreground HDD reads (on the volume's clock),
    /// unless none completed within the last second.
    pub fn hdd_read_latency(&self) -> Option<std::time::Duration> {
        self.hdd_latency
            .get(self.clock.now(), std::time::Duration::from_secs(1))
    }

    /// Free slots on a tier (not counting slots awaiting a flush).
    pub fn free_slots(&self, tier: Tier) -> u32 {
        self.alloc.free_count(tier)
    }

    /// Save the heat scores in the metadata store (made durable by the next
    /// flush). Heat is advisory: losing recent heat in a crash is accepted.
    pub fn save_heat(&self) -> VolumeResult<()> {
        self.store.put(HEAT_KEY, &self.heat.snapshot())?;
        self.meta_dirty
            .store(true, std::sync::atomic::Ordering::Release);
        Ok(())
    }

    /// Failpoint (tests only, `failpoints` feature): the next
    /// [`Volume::migrate_extent`] or [`Volume::migrate_batch`] stops after
    /// `step`, as a crash there would; drop the volume without flushing to
    /// complete the simulated crash.
    #[cfg(feature = "failpoints")]
    pub fn arm_crash_after(&self, step: MoveStep) {
        self.failpoint.arm(step);
    }

    /// Counts of mapped and free slots.
    pub fn usage(&self) -> Usage {
        let mut mapped = [0u64; 2];
        for e in self.map.iter() {
            if let Some(m) = e.read().as_ref() {
                mapped[m.loc.tier.index()] += 1;
            }
        }
        Usage {
            capacity: self.size(),
            mapped,
            free: [
                self.alloc.free_count(Tier::Ssd),
                self.alloc.free_count(Tier::Hdd),
            ],
            quarantined: self.alloc.quarantined(),
        }
    }
}
