//! Formatting two devices and a metadata store as a new volume, and opening
//! an existing one: every check that the devices and the store belong
//! together, then loading the extent map, the pins and the saved heat.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::{Mutex, RwLock};
use uuid::Uuid;

use super::alloc::Allocator;
use super::error::io_err;
use super::extent::Mapping;
use super::geometry::{Geometry, Tier, BLOCK_SIZE, DATA_OFFSET, DEFAULT_EXTENT_SIZE};
use super::log::WriteLog;
use super::pins::Pin;
use super::stats::Stats;
use super::superblock::{detect_content, Superblock, FORMAT_VERSION, PROBE_SIZE};
use super::{
    io, Devices, Volume, VolumeError, VolumeResult, CLEAN_KEY, GEOMETRY_KEY, HEAT_KEY, PINS_KEY,
    VOLUME_ID_KEY,
};
use crate::clock::{Clock, SystemClock};
use crate::device::MeteredDevice;
use crate::heat::{HeatConfig, HeatMap};
use crate::store::{MetaStore, FORMAT_VERSION_KEY};

/// Options of [`Volume::open_with`].
#[derive(Clone)]
pub struct VolumeOptions {
    /// Heat tracking knobs.
    pub heat: HeatConfig,
    /// The clock heat and migration run on.
    pub clock: Arc<dyn Clock>,
    /// Writes to HDD extents land in the SSD write log.
    pub write_log: bool,
    /// Promotions keep the HDD slot as a clean shadow.
    pub shadows: bool,
    /// The SSD is lost (`tierd serve --ssd-lost`; its device is a
    /// [`crate::device::LostDevice`]): its superblock is not read, and
    /// HDD copies are kept even after an unclean shutdown (see
    /// [`Volume::open_with`]).
    pub ssd_lost: bool,
}

impl Default for VolumeOptions {
    fn default() -> Self {
        VolumeOptions {
            heat: HeatConfig::default(),
            clock: Arc::new(SystemClock::default()),
            write_log: true,
            shadows: true,
            ssd_lost: false,
        }
    }
}

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

/// The metadata store's format version. Version 1 (releases before the
/// write log and shadows) is read and upgraded in place at open: its
/// records are valid version-2 records, and from then on older releases
/// refuse the store instead of misreading a record they do not know.
pub const STORE_FORMAT_VERSION: u32 = 2;

pub(super) fn now_secs() -> u64 {
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
        store.put(
            FORMAT_VERSION_KEY,
            STORE_FORMAT_VERSION.to_string().as_bytes(),
        )?;
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
        // Every device operation from here on is timed per tier.
        let [ssd, hdd] = [devices.ssd, devices.hdd].map(MeteredDevice::new);
        let meters = [ssd.meter(), hdd.meter()];
        let devices = Devices {
            ssd: Arc::new(ssd),
            hdd: Arc::new(hdd),
        };
        let version = store
            .get(FORMAT_VERSION_KEY)?
            .ok_or_else(|| VolumeError::NotFormatted("the metadata store".into()))?;
        let upgrade = version == b"1";
        if !upgrade && version != STORE_FORMAT_VERSION.to_string().as_bytes() {
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

        // Without the SSD, its superblock is the HDD's twin as far as the
        // checks below go: only the HDD's is read.
        let tiers: &[Tier] = if opts.ssd_lost {
            &[Tier::Hdd]
        } else {
            &[Tier::Ssd, Tier::Hdd]
        };
        let sbs = [Tier::Ssd, Tier::Hdd].map(|tier| {
            if !tiers.contains(&tier) {
                return Ok(None);
            }
            let dev = devices.get(tier);
            let mut buf = vec![0u8; super::superblock::SUPERBLOCK_SIZE.min(dev.size() as usize)];
            dev.read_at(&mut buf, 0)
                .map_err(io_err(dev.as_ref()))
                .and_then(|_| {
                    Superblock::decode(&buf).map_err(|problem| VolumeError::BadSuperblock {
                        device: dev.name(),
                        problem,
                    })
                })
                .map(Some)
        });
        let [ssd_sb, hdd_sb] = sbs;
        let (ssd_sb, hdd_sb) = (
            ssd_sb?,
            hdd_sb?
                .ok_or_else(|| VolumeError::Corrupt("the HDD's superblock was not read".into()))?,
        );
        let ssd_sb = ssd_sb.unwrap_or_else(|| Superblock {
            role: Tier::Ssd,
            slots: u64::from(geo.slots(Tier::Ssd)),
            ..hdd_sb.clone()
        });
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
            if !tiers.contains(&tier) {
                continue;
            }
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
        if !opts.ssd_lost {
            super::replace::check_replaced(store.as_ref(), &ssd_sb, devices.ssd.name())?;
        }

        let logical = geo.logical_extents();
        let blocks = geo.blocks_per_extent();
        let map = super::map::ExtentMap::new(logical, geo.ssd_slots, blocks, opts.clock.clone());
        let mut owner = [
            vec![false; geo.ssd_slots as usize],
            vec![false; geo.hdd_slots as usize],
        ];
        let mut log_in_use = Vec::new();
        // One record at a time: at millions of extents, the records held
        // all at once took more memory than the map they fill.
        let mut failed = None;
        let mut load = |index: u64, record: &[u8]| -> Result<(), VolumeError> {
            let m = Mapping::decode(record, blocks)
                .map_err(|e| VolumeError::Corrupt(format!("extent {index}: {e}")))?;
            let entry = map.get(index).ok_or_else(|| {
                VolumeError::Corrupt(format!("extent {index} is beyond the volume"))
            })?;
            for loc in m.slots() {
                claim(&mut owner, loc, index)?;
            }
            log_in_use.extend(m.logged.iter().map(|l| l.at));
            *entry.write() = Some(m);
            Ok(())
        };
        store.each_extent(&mut |index, record| match load(index, record) {
            Ok(()) => true,
            Err(e) => {
                failed = Some(e);
                false
            }
        })?;
        if let Some(e) = failed {
            return Err(e);
        }
        // Log segments are SSD slots no extent owns; no place is used twice.
        let mut places = std::collections::HashSet::new();
        let mut segments = std::collections::HashSet::new();
        for p in &log_in_use {
            if !places.insert(*p) {
                return Err(VolumeError::Corrupt(format!(
                    "log place {}:{} is used twice",
                    p.slot, p.index
                )));
            }
            if segments.insert(p.slot) {
                claim(
                    &mut owner,
                    super::extent::Loc {
                        tier: Tier::Ssd,
                        slot: p.slot,
                    },
                    u64::MAX,
                )?;
            }
        }
        let clean = store.get(CLEAN_KEY)?.as_deref() == Some(b"1".as_slice());
        // Without the SSD the copies are kept whatever the shutdown: a write
        // whose stale mark a crash lost reached only the SSD, and was not
        // flushed (a flush makes the mark durable), so the copy's older
        // data is what a crash may leave; and nothing newer can be read
        // any more, so no block can seem to change without a write.
        if !clean && !opts.ssd_lost {
            // After a crash a shadow may miss the stale mark of a write that
            // reached the SSD: its copy is no longer trusted.
            // Only side-table mappings can have one.
            for index in map.extra_extents() {
                let mut e = map.at(index).write();
                if let Some(m) = e.as_mut() {
                    if let Some(s) = m.shadow.take() {
                        owner[Tier::Hdd.index()][s.slot as usize] = false;
                        store.put_extent(index, &m.encode())?;
                    }
                }
            }
        }
        let lost = match store.get(super::lost::LOST_KEY)? {
            Some(raw) => super::lost::LostBlocks::decode(&raw)?,
            None => super::lost::LostBlocks::default(),
        };
        if opts.ssd_lost {
            let done = super::lost::salvage(
                &map,
                store.as_ref(),
                &lost,
                blocks,
                &mut owner,
                &mut log_in_use,
            )?;
            tracing::warn!(
                moved = done.moved,
                unmapped = done.unmapped,
                unlogged = done.unlogged,
                newly_lost_blocks = done.lost_blocks,
                lost_blocks = lost.count(),
                "opened without the SSD: extents with an HDD copy now read from it; blocks whose newest data was only on the SSD read as I/O errors (tierctl placement --ssd-only lists them)"
            );
        }
        super::lost::drop_written(&map, store.as_ref(), &lost, blocks, || {
            for &tier in tiers {
                let dev = devices.get(tier);
                dev.sync().map_err(io_err(dev.as_ref()))?;
            }
            Ok(())
        })?;
        // What is exposed now was written before: its time is not known.
        map.loaded();
        // From here until a clean close, a crash is an unclean shutdown.
        store.put(CLEAN_KEY, b"0")?;
        if upgrade {
            store.put(
                FORMAT_VERSION_KEY,
                STORE_FORMAT_VERSION.to_string().as_bytes(),
            )?;
        }
        store.flush()?;
        let log = WriteLog::new(
            super::log::cap_for(geo.reserve_extents),
            blocks,
            log_in_use.into_iter(),
        );
        let used: Vec<super::extent::Loc> = owner
            .iter()
            .enumerate()
            .flat_map(|(t, o)| {
                let tier = if t == 0 { Tier::Ssd } else { Tier::Hdd };
                o.iter()
                    .enumerate()
                    .filter(|(_, u)| **u)
                    .map(move |(slot, _)| super::extent::Loc {
                        tier,
                        slot: slot as u32,
                    })
            })
            .collect();
        let alloc = Allocator::new([geo.ssd_slots, geo.hdd_slots], used.into_iter());
        if opts.ssd_lost {
            // The salvage mapped nothing on the SSD: its slots close, so
            // no data lands on it and a full HDD answers "no space".
            alloc
                .close_if_empty(Tier::Ssd, geo.ssd_slots)
                .map_err(|used| {
                    VolumeError::Corrupt(format!(
                        "{used} SSD slots still in use after the salvage of the lost SSD"
                    ))
                })?;
        }
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
        let ledger = super::ledger::Ledger::new(
            opts.clock.clone(),
            u64::from(geo.ssd_slots.saturating_sub(geo.reserve_extents)),
        );
        Ok(Volume {
            reserve_target: std::sync::atomic::AtomicU32::new(geo.reserve_extents),
            geo,
            id,
            devices: super::DeviceSlots::new(devices),
            meters,
            store,
            map,
            alloc,
            log,
            log_enabled: AtomicBool::new(opts.write_log),
            shadows_enabled: AtomicBool::new(opts.shadows),
            // Without the SSD nothing may land there: drained from the start.
            evacuating: std::sync::atomic::AtomicU8::new(u8::from(opts.ssd_lost)),
            lost,
            evac_lock: Mutex::new(()),
            clean_shadows: AtomicBool::new(true),
            no_idle_clean: std::sync::atomic::AtomicU64::new(u64::MAX),
            evict_run: Default::default(),
            // A previous process may have left writes in the OS cache that
            // were never synced: the first flush syncs everything.
            dirty: [AtomicBool::new(true), AtomicBool::new(true)],
            meta_dirty: AtomicBool::new(true),
            meta_flushed_at: std::sync::atomic::AtomicU64::new(opts.clock.now().as_nanos() as u64),
            meta_dirty_at: std::sync::atomic::AtomicU64::new(opts.clock.now().as_nanos() as u64),
            flush_failed: AtomicBool::new(false),
            flush_lock: Mutex::new(()),
            meta_gate: RwLock::new(()),
            watching: AtomicUsize::new(0),
            touched: Mutex::new(HashMap::new()),
            held: Default::default(),
            ssd_lost: AtomicBool::new(opts.ssd_lost),
            heat: Arc::new(heat),
            clock: opts.clock,
            pins: RwLock::new(pins),
            moves: Mutex::new(HashMap::new()),
            inflight: AtomicUsize::new(0),
            hdd_latency: io::Latency::default(),
            room: super::room::Room::default(),
            hdd_fg_at: super::stamp::Stamp::at_zero(),
            hdd_user_reads: AtomicUsize::new(0),
            hdd_read_at: super::stamp::Stamp::never(),
            ledger,
            new_data_at: super::stamp::Stamp::never(),
            hdd_stream_at: super::stamp::Stamp::never(),
            // Off until the migrator's `migrate.admission` turns it on.
            admission: super::admit::Admission::new(logical),
            stats: Stats::default(),
        })
    }
}

/// Mark `loc` owned (by extent `index`, or the log for `u64::MAX`), refusing
/// a slot out of range or owned twice.
fn claim(owner: &mut [Vec<bool>; 2], loc: super::extent::Loc, index: u64) -> VolumeResult<()> {
    let who = if index == u64::MAX {
        "the write log".to_string()
    } else {
        format!("extent {index}")
    };
    let owned = owner[loc.tier.index()]
        .get_mut(loc.slot as usize)
        .ok_or_else(|| VolumeError::Corrupt(format!("{who}: slot {} out of range", loc.slot)))?;
    if *owned {
        return Err(VolumeError::Corrupt(format!(
            "{} slot {} is owned twice",
            loc.tier, loc.slot
        )));
    }
    *owned = true;
    Ok(())
}
