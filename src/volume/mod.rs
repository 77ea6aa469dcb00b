//! The tiered volume: geometry, superblocks, the extent map, the slot
//! allocator and the I/O paths that turn logical reads and writes into
//! device I/O on the SSD or the HDD.
//!
//! [`Volume::format`] writes a superblock on each device and initialises the
//! metadata store; [`Volume::open`] checks that the devices and the store
//! belong together and loads the extent map into memory.

mod admit;
mod alloc;
mod error;
mod exposure;
mod extent;
mod geometry;
mod hold;
mod io;
mod ledger;
mod lock;
mod log;
mod lost;
mod map;
mod moves;
mod open;
mod pins;
mod placement;
mod replace;
mod room;
mod runs;
mod space;
mod stamp;
mod stats;
mod superblock;
mod write;

pub use admit::{Class as AdmitClass, Eviction, Miss};
pub use error::{VolumeError, VolumeResult};
pub use exposure::{Exposure, SsdOnlyRanges};
pub use hold::WriteHold;
pub use io::AllocRun;
pub use ledger::{Ledger, LedgerStatus};
pub use log::LogUsage;
pub use lost::Salvaged;
pub use moves::{AwaitedCopies, Goal, MoveOutcome, MoveRecord, MoveStep, MERGE_MAX};
pub use open::{FormatOptions, VolumeOptions, STORE_FORMAT_VERSION};
pub use pins::{pin_in, pinned_ranges, Pin};
pub use placement::Placement;
pub use replace::{is_ssd_in_use, replaced_ssd_path};
pub use space::FlushState;
pub use stats::Stats;

pub use extent::{Loc, LogPos, Logged, Mapping, RecordError, Shadow, Written};
pub use geometry::{
    Geometry, GeometryError, Tier, BLOCK_SIZE, DATA_OFFSET, DEFAULT_EXTENT_SIZE, DEFAULT_RESERVE,
    MAX_EXTENT_SIZE, MIN_DEVICE_SIZE, MIN_EXTENT_SIZE,
};
pub use superblock::{detect_content, Superblock, SuperblockError, FORMAT_VERSION, PROBE_SIZE};

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use uuid::Uuid;

use crate::clock::Clock;
use crate::device::{BlockDevice, IoMeter};
use crate::heat::HeatMap;
use crate::store::MetaStore;
use alloc::Allocator;
use error::io_err;

const VOLUME_ID_KEY: &str = "volume-id";
const GEOMETRY_KEY: &str = "geometry";
const PINS_KEY: &str = "pins";
const HEAT_KEY: &str = "heat";
/// The live settings an operator made (`tierctl config set`).
const SETTINGS_KEY: &str = "live-settings";
/// "1" while the volume is closed cleanly; "0" from open until then. Shadows
/// are trusted only after a clean close (see docs/design.md, "Second copies").
const CLEAN_KEY: &str = "clean-shutdown";

/// The two devices of a volume.
#[derive(Clone)]
pub struct Devices {
    /// The fast tier.
    pub ssd: Arc<dyn BlockDevice>,
    /// The slow tier.
    pub hdd: Arc<dyn BlockDevice>,
}

impl Devices {
    pub(crate) fn get(&self, tier: Tier) -> &Arc<dyn BlockDevice> {
        match tier {
            Tier::Ssd => &self.ssd,
            Tier::Hdd => &self.hdd,
        }
    }
}

/// The devices of an open volume: each behind a lock only so that an
/// emptied SSD can be replaced while the volume serves
/// ([`Volume::replace_ssd`]); every I/O takes an uncontended read lock and
/// a reference.
pub(crate) struct DeviceSlots([RwLock<Arc<dyn BlockDevice>>; 2]);

impl DeviceSlots {
    fn new(d: Devices) -> DeviceSlots {
        DeviceSlots([RwLock::new(d.ssd), RwLock::new(d.hdd)])
    }

    pub(crate) fn get(&self, tier: Tier) -> Arc<dyn BlockDevice> {
        self.0[tier.index()].read().clone()
    }

    fn set(&self, tier: Tier, dev: Arc<dyn BlockDevice>) {
        *self.0[tier.index()].write() = dev;
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
    /// The SSD write log.
    pub log: LogUsage,
    /// Blocks of HDD extents whose newest data is in the write log (the
    /// write-back backlog).
    pub logged_blocks: u64,
    /// SSD extents that keep a clean HDD copy.
    pub shadows: u64,
    /// Blocks of those copies that are still current (demoting them costs no
    /// write).
    pub shadow_clean_blocks: u64,
    /// Blocks of those copies written on the SSD since (written back when
    /// the extent is demoted).
    pub shadow_stale_blocks: u64,
    /// SSD extents whose HDD copy holds every written block: each leaves by
    /// a mapping change, so with the free slots they cover the reserve.
    pub clean_extents: u64,
}

/// An open tiered volume.
pub struct Volume {
    geo: Geometry,
    id: Uuid,
    devices: DeviceSlots,
    /// Device operation times, SSD then HDD.
    meters: [Arc<IoMeter>; 2],
    store: Arc<dyn MetaStore>,
    /// The extent map: one lock per logical extent.
    map: map::ExtentMap,
    alloc: Allocator,
    /// The SSD write log's places.
    log: log::WriteLog,
    /// Writes to HDD extents may land in the write log.
    log_enabled: AtomicBool,
    /// Promotions may keep their HDD slot as a shadow.
    shadows_enabled: AtomicBool,
    /// The reserve while the volume runs: SSD slots kept free
    /// ([`Volume::reserve_target`]; the geometry's at open).
    reserve_target: std::sync::atomic::AtomicU32,
    /// The tier an operator is draining (0 none, 1 SSD, 2 HDD): new data
    /// goes to the other tier first, and an SSD being drained takes no
    /// writes into the write log.
    evacuating: std::sync::atomic::AtomicU8,
    /// Serialises changes of the drained tier with SSD replacements.
    evac_lock: Mutex<()>,
    /// Some SSD extent may have a clean shadow (cleared when a search found
    /// none, set when a shadow is made): spares writes a fruitless search.
    clean_shadows: AtomicBool,
    /// The heat tick at which new data last looked for an idle extent with
    /// a clean copy and found none (no new look before the next tick).
    no_idle_clean: std::sync::atomic::AtomicU64,
    /// The batch of clean SSD extents new data takes back next.
    evict_run: space::EvictRun,
    /// Data written to a tier since its last sync.
    dirty: [AtomicBool; 2],
    /// Metadata changed since the last store flush.
    meta_dirty: AtomicBool,
    /// Clock time (ns) of the last metadata flush, or of the open.
    meta_flushed_at: std::sync::atomic::AtomicU64,
    /// Clock time (ns) when the metadata last became dirty.
    meta_dirty_at: std::sync::atomic::AtomicU64,
    /// The latest flush failed.
    flush_failed: AtomicBool,
    /// Serialises flushes.
    flush_lock: Mutex<()>,
    /// Held shared by a foreground write from its data write to its record
    /// in the store, exclusively by a flush around its store flush.
    meta_gate: RwLock<()>,
    /// Watches in progress: promotions that watch their extents' writes
    /// (see `moves`: a write during the copy is re-copied at the commit
    /// instead of failing it). Writes look at `touched` only while some
    /// watch is on.
    watching: AtomicUsize,
    /// Per watched extent: how many watch it, and the blocks written since
    /// the first began.
    touched: Mutex<HashMap<u64, (u32, Written)>>,
    /// Extents whose foreground writes wait for a copy to commit
    /// ([`Volume::hold_writes`]).
    held: hold::Held,
    /// Opened without its SSD (`tierd serve --ssd-lost`), and not replaced
    /// since.
    ssd_lost: AtomicBool,
    /// Blocks lost with a dead SSD: they read as I/O errors.
    lost: lost::LostBlocks,
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
    /// Writes waiting for room in the write log, and how long they may.
    room: room::Room,
    /// When the HDD last served foreground I/O (ns on the volume's clock).
    hdd_fg_at: stamp::Stamp,
    /// Users' reads sent to the HDD and not yet answered.
    hdd_user_reads: AtomicUsize,
    /// When the HDD last served a user's read (ns on the volume's clock;
    /// `u64::MAX`: never).
    hdd_read_at: stamp::Stamp,
    /// The ledger of HDD time: what placement spends, what flash saves.
    ledger: ledger::Ledger,
    /// When a foreground write last took a slot for new data (volume
    /// clock, ns; `u64::MAX`: never).
    new_data_at: stamp::Stamp,
    /// When a user's sequential stream last sent a write to the HDD in
    /// place (volume clock, ns; `u64::MAX`: never).
    hdd_stream_at: stamp::Stamp,
    /// Admission at the miss: its order and its candidates.
    admission: admit::Admission,
    /// Counters for metrics.
    stats: Stats,
}

/// How recent the last foreground HDD read must be for the smoothed read
/// latency to count ([`Volume::hdd_read_latency`], [`Volume::hdd_congested`]).
const LATENCY_FRESH: std::time::Duration = std::time::Duration::from_secs(1);

impl Volume {
    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    /// The operation times of a tier's device since open.
    pub fn io_meter(&self, tier: Tier) -> &IoMeter {
        &self.meters[tier.index()]
    }

    /// Time a tier's modelled drive spent working (a disk's head time, on
    /// the model's clock), when the tier runs on a timing model.
    pub fn model_busy(&self, tier: Tier) -> Option<std::time::Duration> {
        self.devices.get(tier).model_busy()
    }

    /// The HDD's modelled mechanism time spent on the calling thread's own
    /// requests so far (see [`crate::device::BlockDevice::model_busy_here`]);
    /// `None` when the HDD has no such model.
    pub(crate) fn hdd_busy_here(&self) -> Option<std::time::Duration> {
        self.devices.get(Tier::Hdd).model_busy_here()
    }

    /// The HDD tier's link as measured, when it is remote.
    pub fn hdd_link(&self) -> Option<crate::device::LinkEstimate> {
        self.devices.get(Tier::Hdd).link()
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
        self.map.get(extent).and_then(|e| e.read().clone())
    }

    /// Whether the volume was opened without its SSD (`--ssd-lost`).
    pub fn ssd_lost(&self) -> bool {
        self.ssd_lost.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The tier a logical extent is mapped on, if it is (no lock, no copy:
    /// what a map of the whole volume reads).
    pub fn tier_of(&self, extent: u64) -> Option<Tier> {
        self.map.tier(extent)
    }

    /// Whether a read of `offset..offset + len` goes to the HDD for any
    /// part of it: an extent of the range is mapped there (no lock, no
    /// copy; blocks of such an extent rewritten on flash still count, so
    /// the answer errs towards the HDD). Lets the NBD server keep reads
    /// that wait for the HDD from taking every thread, so that requests
    /// flash serves are not queued behind them.
    pub fn reads_from_hdd(&self, offset: u64, len: u64) -> bool {
        let es = self.geometry().extent_size;
        if len == 0 || es == 0 {
            return false;
        }
        let first = offset / es;
        let last = offset.saturating_add(len - 1) / es;
        (first..=last).any(|e| self.tier_of(e) == Some(Tier::Hdd))
    }

    /// Where a logical extent is mapped, tier and slot, if it is (no lock,
    /// no copy of the mapping).
    pub fn loc_of(&self, extent: u64) -> Option<Loc> {
        self.map.loc(extent)
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
    pub(crate) fn inflight(&self) -> usize {
        self.inflight.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How long the HDD has served no foreground I/O (a user's read or a
    /// write in place), on the volume's clock; since the volume opened if
    /// never. Zero while a user's read waits on the HDD: the stamp is
    /// taken when a read completes, and one queued behind copies for
    /// longer than the migrator's idle window made the HDD look free of
    /// users.
    pub fn hdd_foreground_idle(&self) -> std::time::Duration {
        if self.hdd_user_reading() {
            return std::time::Duration::ZERO;
        }
        self.hdd_fg_at.since(self.clock.as_ref())
    }

    /// How long the HDD has served no user's read, on the volume's clock
    /// (`Duration::MAX` if none since the volume opened); zero while one
    /// waits on it.
    pub fn hdd_reads_idle(&self) -> std::time::Duration {
        if self.hdd_user_reading() {
            return std::time::Duration::ZERO;
        }
        self.hdd_read_at.since(self.clock.as_ref())
    }

    /// Whether a user's read waits on the HDD now.
    fn hdd_user_reading(&self) -> bool {
        self.hdd_user_reads
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0
    }

    /// A user's read of the HDD in progress, counted until the guard
    /// drops (for [`Volume::hdd_foreground_idle`]); `None` for background
    /// reads.
    pub(crate) fn hdd_user_read(&self) -> Option<io::InFlight<'_>> {
        (crate::device::IoClass::current() == crate::device::IoClass::Foreground)
            .then(|| io::InFlight::new(&self.hdd_user_reads))
    }

    /// Note foreground I/O on the HDD now (for [`Volume::hdd_foreground_idle`]).
    pub(crate) fn hdd_foreground_now(&self) {
        self.hdd_fg_at.note(self.clock.as_ref());
    }

    /// Note foreground I/O on the HDD that began at `t0` and ended now:
    /// [`Volume::hdd_foreground_now`], and its time counted as the HDD's
    /// users' in the ledger (while it counts). `t0` is on
    /// [`crate::clock::Clock::io_now`]'s scale.
    pub(crate) fn hdd_foreground_done(&self, t0: std::time::Duration) {
        if crate::device::IoClass::current() == crate::device::IoClass::Foreground {
            self.hdd_fg_at.note(self.clock.as_ref());
            self.ledger.hdd_foreground(t0, self.clock.io_now());
        }
    }

    /// A foreground HDD read that began at `io0` (on
    /// [`crate::clock::Clock::io_now`]'s scale) is done: its latency feeds
    /// the smoothed one, then [`Volume::hdd_foreground_done`]. Both the
    /// latency and the moment it ended are taken on `io_now`: on the real
    /// clock that is the time itself; on a virtual clock whose devices add
    /// their time to the calling thread (the bench's) it is when the read
    /// ends, where the shared time still says when it was sent, so a read
    /// queued for a minute keeps the HDD counted busy until it is served,
    /// as the daemon sees it.
    pub(crate) fn sample_hdd_read(&self, io0: std::time::Duration) {
        let end = self.clock.io_now();
        if crate::device::IoClass::current() == crate::device::IoClass::Foreground {
            self.hdd_read_at.note(self.clock.as_ref());
        }
        self.hdd_latency
            .sample(end.saturating_sub(io0), end, LATENCY_FRESH);
        self.hdd_foreground_done(io0);
    }

    /// How long since a foreground write last took a slot for new data, on
    /// the volume's clock (`Duration::MAX` if none has since it opened).
    pub fn new_data_idle(&self) -> std::time::Duration {
        self.new_data_at.since(self.clock.as_ref())
    }

    /// How long since a user's sequential stream last sent a write to the
    /// HDD in place (a write to an HDD extent that the write log left to
    /// the HDD because it continues a long stream, `Volume::log_way`), on
    /// the volume's clock; `Duration::MAX` if none has since the volume
    /// opened. Such a stream runs at the disk's streaming speed only while
    /// the disk's write cache takes its writes, which it stops doing once
    /// the mechanism falls behind: the tiers' own copies queued in front of
    /// it make each of its writes wait for them. The migrator yields to it
    /// ([`crate::migrate::Migrator`]).
    pub fn hdd_stream_idle(&self) -> std::time::Duration {
        self.hdd_stream_at.since(self.clock.as_ref())
    }

    /// Note a user's stream write going to the HDD in place now (for
    /// [`Volume::hdd_stream_idle`]).
    pub(crate) fn hdd_stream_now(&self) {
        self.hdd_stream_at.note(self.clock.as_ref());
    }

    /// Note new data landing now (for [`Volume::new_data_idle`]).
    pub(crate) fn new_data_now(&self) {
        self.new_data_at.note(self.clock.as_ref());
    }

    /// The ledger of HDD time (see `ledger`): what admissions and the
    /// migrator may spend, and what flash has saved.
    pub fn ledger(&self) -> &ledger::Ledger {
        &self.ledger
    }

    /// Smoothed latency of foreground HDD reads (on the volume's clock),
    /// unless none completed within the last second.
    pub fn hdd_read_latency(&self) -> Option<std::time::Duration> {
        self.hdd_latency.get(self.clock.now(), LATENCY_FRESH)
    }

    /// Whether users' reads are queueing on the HDD: their smoothed latency,
    /// fresh within the last second, is at [`Volume::set_busy_latency`]'s
    /// threshold or above. A sequential stream's writes would wait in that
    /// queue instead of streaming; the write log takes them.
    pub(crate) fn hdd_congested(&self) -> bool {
        self.hdd_latency.busy(self.clock.now(), LATENCY_FRESH)
    }

    /// How long users' reads have queued on the HDD without a break
    /// ([`Volume::hdd_congested`] all along; zero when not now).
    pub fn hdd_congested_for(&self) -> std::time::Duration {
        self.hdd_latency.busy_for(self.clock.now(), LATENCY_FRESH)
    }

    /// Whether the HDD is saturated, not in a burst: users' reads have
    /// queued on it without a break for at least heat's half-life, the
    /// time over which a copy's savings come (an extent's heat halves in
    /// it). A queue that has lasted that long is taken to outlast them too
    /// ([`ledger::Ledger::admitted`] prices copies by it).
    pub fn hdd_saturated(&self) -> bool {
        let horizon = self.heat.config().half_life;
        !horizon.is_zero() && self.hdd_congested_for() >= horizon
    }

    /// The foreground HDD read latency at which the HDD counts as busy with
    /// users (`migrate.busy-latency`, 100 ms until set; zero: never).
    pub fn set_busy_latency(&self, d: std::time::Duration) {
        self.hdd_latency.set_busy(d);
    }

    /// Drain `tier` (or stop draining): new extents go to the other tier
    /// while it has room, and with the SSD drained writes to HDD extents no
    /// longer land in the write log. Moving what is there is the
    /// migrator's job. Refused while the SSD is lost (the volume opened
    /// without it): it stays drained, its slots closed, until
    /// [`Volume::replace_ssd`] brings a new one in.
    pub fn set_evacuating(&self, tier: Option<Tier>) -> VolumeResult<()> {
        // Never in the middle of a replacement of the SSD.
        let _serial = self.evac_lock.lock();
        self.may_set_evacuating(tier)?;
        if tier != Some(Tier::Ssd) {
            // A replaced SSD's slots open again when its draining ends.
            self.alloc.reopen(Tier::Ssd);
        }
        let v = match tier {
            None => 0,
            Some(Tier::Ssd) => 1,
            Some(Tier::Hdd) => 2,
        };
        self.evacuating
            .store(v, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Whether [`Volume::set_evacuating`] would take `tier`: not while the
    /// SSD is lost, unless it keeps the SSD drained.
    pub fn may_set_evacuating(&self, tier: Option<Tier>) -> VolumeResult<()> {
        if self.ssd_lost() && tier != Some(Tier::Ssd) {
            return Err(VolumeError::SsdGone);
        }
        Ok(())
    }

    /// The tier being drained, if any.
    pub fn evacuating(&self) -> Option<Tier> {
        match self.evacuating.load(std::sync::atomic::Ordering::Relaxed) {
            1 => Some(Tier::Ssd),
            2 => Some(Tier::Hdd),
            _ => None,
        }
    }

    /// What still occupies `tier`, in extents: its mapped extents, and the
    /// write log's segments (SSD) or the shadows (HDD).
    pub fn occupying(&self, tier: Tier) -> u64 {
        let u = self.usage();
        u.mapped[tier.index()]
            + match tier {
                Tier::Ssd => u64::from(u.log.segments),
                Tier::Hdd => u.shadows,
            }
    }

    /// Turn the SSD write log on or off for new writes (what it holds stays
    /// until written back).
    pub fn set_write_log(&self, on: bool) {
        self.log_enabled
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Record that blocks `first..=last` of `extent` were written (called
    /// with the extent's lock held, after the data write): a promotion
    /// watching the extent re-copies them at its commit.
    pub(crate) fn touch(&self, extent: u64, first: u32, last: u32) {
        // The watch's entry is made before the count goes up, and the count
        // goes up before the watch's snapshot: a write the snapshot did not
        // see either sees the count here or wrote before the snapshot.
        if self.watching.load(std::sync::atomic::Ordering::SeqCst) == 0 {
            return;
        }
        let blocks = self.geo.blocks_per_extent();
        if let Some((_, w)) = self.touched.lock().get_mut(&extent) {
            w.set_range(first, last, true, blocks);
        }
    }

    /// Start watching `extent`'s writes (before its snapshot is taken).
    pub(crate) fn watch(&self, extent: u64) {
        let blocks = self.geo.blocks_per_extent();
        self.touched
            .lock()
            .entry(extent)
            .or_insert_with(|| (0, Written::empty(blocks)))
            .0 += 1;
        self.watching
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// Stop one watch of `extent`; the blocks written since it began.
    pub(crate) fn unwatch(&self, extent: u64) -> Option<Written> {
        let mut t = self.touched.lock();
        let (n, w) = t.get_mut(&extent)?;
        *n -= 1;
        let got = if *n == 0 {
            t.remove(&extent).map(|(_, w)| w)
        } else {
            Some(w.clone())
        };
        self.watching
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        got
    }

    /// Whether new writes to HDD extents may land in the write log.
    pub fn write_log_enabled(&self) -> bool {
        self.log_enabled.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether new promotions keep their HDD copy as a shadow.
    pub fn shadows_enabled(&self) -> bool {
        self.shadows_enabled
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Turn shadows on or off for new promotions.
    pub fn set_shadows(&self, on: bool) {
        self.shadows_enabled
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// HDD extents with blocks in the write log, with how many, in HDD slot
    /// order (the write-back's elevator order).
    pub fn logged_extents(&self) -> Vec<(u64, u32)> {
        if self.map.counts().logged == 0 {
            return Vec::new();
        }
        // Only side-table mappings can have logged blocks.
        let mut v: Vec<(u32, u64, u32)> = self
            .map
            .extra_extents()
            .into_iter()
            .filter_map(|i| {
                let g = self.map.at(i).read();
                let m = g.as_ref()?;
                (!m.logged.is_empty()).then_some((m.loc.slot, i, m.logged.len() as u32))
            })
            .collect();
        v.sort_unstable();
        v.into_iter().map(|(_, e, n)| (e, n)).collect()
    }

    /// How full the write log is.
    pub fn log_usage(&self) -> LogUsage {
        self.log.usage()
    }

    /// The reserve while the volume runs: the SSD slots kept free. It
    /// starts at the geometry's (fixed at format, which also sizes the
    /// volume) and moves with [`Volume::set_reserve_target`]. What keeps
    /// that room follows it: the migrator's demotions, the HDD room clean
    /// shadows and pre-cleaning leave for them, admissions, and the write
    /// log.
    pub fn reserve_target(&self) -> u32 {
        self.reserve_target
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Keep `extents` SSD slots free from now on (clamped to the SSD's
    /// slots); the capacity does not change. The write log, which lives in
    /// that room, may take what [`log::cap_for`] leaves of it, and never
    /// more than of the reserve fixed at format (the only room a full
    /// volume has).
    pub fn set_reserve_target(&self, extents: u64) {
        let target = extents.min(u64::from(self.geo.ssd_slots)) as u32;
        self.reserve_target
            .store(target, std::sync::atomic::Ordering::Relaxed);
        self.log
            .set_cap(log::cap_for(target.min(self.geo.reserve_extents)));
    }

    /// Free slots on a tier (not counting slots awaiting a flush).
    pub fn free_slots(&self, tier: Tier) -> u32 {
        self.alloc.free_count(tier)
    }

    /// Save the heat scores in the metadata store (made durable by the next
    /// flush). Heat is advisory: losing recent heat in a crash is accepted.
    pub(crate) fn save_heat(&self) -> VolumeResult<()> {
        self.store.put(HEAT_KEY, &self.heat.snapshot())?;
        self.mark_meta_dirty();
        Ok(())
    }

    /// Metadata changed: the next flush must flush the store.
    pub(crate) fn mark_meta_dirty(&self) {
        use std::sync::atomic::Ordering;
        if !self.meta_dirty.swap(true, Ordering::AcqRel) {
            self.meta_dirty_at
                .store(self.clock.now().as_nanos() as u64, Ordering::Relaxed);
        }
    }

    /// The operator's live settings as last saved (an opaque blob the
    /// serving layer owns: `tierctl config set`), if any.
    pub fn load_settings(&self) -> VolumeResult<Option<Vec<u8>>> {
        Ok(self.store.get(SETTINGS_KEY)?)
    }

    /// Save the live settings durably. A full flush, data first: the store
    /// never holds a mapping ahead of the data it points at.
    pub fn save_settings(&self, raw: &[u8]) -> VolumeResult<()> {
        self.store.put(SETTINGS_KEY, raw)?;
        self.mark_meta_dirty();
        self.flush()
    }

    /// Counts of mapped and free slots.
    pub fn usage(&self) -> Usage {
        // Kept by the map as it changes: no scan of the volume.
        let c = self.map.counts();
        Usage {
            log: self.log.usage(),
            logged_blocks: c.logged,
            shadows: c.shadows,
            shadow_clean_blocks: c.shadow_clean,
            shadow_stale_blocks: c.shadow_stale,
            clean_extents: c.clean_extents,
            capacity: self.size(),
            mapped: c.mapped,
            free: [
                self.alloc.free_count(Tier::Ssd),
                self.alloc.free_count(Tier::Hdd),
            ],
            quarantined: self.alloc.quarantined(),
        }
    }
}
