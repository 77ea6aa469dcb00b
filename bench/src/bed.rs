//! A test bed for one trace replay at one SSD size: every executed target
//! on its own modelled drives, on one fresh virtual clock. The hybrid is
//! formatted and filled to the stated fill as a used disk (see
//! [`crate::replay::Layout`]), its reserve restored by its migrator; the
//! pure SSD (as large as the hybrid's volume) and the pure HDD stand alone;
//! the caches ([`crate::cache`]) run on an SSD and an HDD of the hybrid's
//! sizes, the HDD being their whole capacity, their SSD empty at the start.

use std::sync::Arc;
use std::time::Duration;

use tierd::clock::Clock;
use tierd::device::model::ModelKind;
use tierd::device::{BlockDevice, NullDevice, TimedDevice};
use tierd::migrate::Migrator;
use tierd::store::{MemStore, MetaStore};
use tierd::volume::{Devices, FormatOptions, Geometry, Tier, Volume, VolumeOptions};

use super::cache::{Cache, CacheConfig};
use super::replay::Layout;
use super::sched::VirtualSched;
use super::target::{Hybrid, Pure, Target};
use super::{setup, BenchError, BenchOptions};

/// The executed targets of a trace replay, in the order they run.
pub const TRACE_TARGETS: [&str; 6] = [
    "hybrid",
    "pure-ssd",
    "pure-hdd",
    "cache-lru-1m",
    "cache-lru-256k",
    "cache-larc-1m",
];

/// Whether a target is one of the caches.
pub fn is_cache(name: &str) -> bool {
    name.starts_with("cache-")
}

/// One bed: the targets, the hybrid's migrator, the layout, the clock.
pub struct Bed {
    /// Its own virtual time.
    pub sched: Arc<VirtualSched>,
    /// Every target of [`TRACE_TARGETS`], in that order.
    pub targets: Vec<Box<dyn Target>>,
    /// The hybrid's migrator.
    pub migrator: Option<Arc<Migrator>>,
    /// Where the data lies.
    pub layout: Layout,
    /// The SSD's size.
    pub ssd_size: u64,
    /// The hybrid's room for data: SSD slots less the reserve, in extents.
    pub room: u64,
    /// Bytes per extent.
    pub extent: u64,
}

/// The smallest SSD (in whole extents) whose room for data (slots less
/// the default reserve) holds `room` extents next to an HDD of `hdd_size`.
pub fn ssd_for_room(room: u64, extent: u64, hdd_size: u64) -> u64 {
    let room = room.max(1);
    let fits = |slots: u64| {
        Geometry::compute(slots * extent, hdd_size, extent, None)
            .map(|g| u64::from(g.slots(Tier::Ssd)) - u64::from(g.reserve_extents) >= room)
            .unwrap_or(false)
    };
    // Room plus a quarter more is about right (the reserve is a quarter
    // of a small SSD); step up from a little below it.
    let mut slots = room + room / 4;
    while slots > room && fits(slots - 1) {
        slots -= 1;
    }
    while !fits(slots) {
        slots += 1;
    }
    slots * extent
}

fn timed(
    dev: Arc<dyn BlockDevice>,
    model: ModelKind,
    clock: &Arc<dyn Clock>,
) -> Arc<dyn BlockDevice> {
    let size = dev.size();
    Arc::new(TimedDevice::new(dev, model.build(size), clock.clone()))
}

/// Check, before anything runs, that a trace of `footprint` extents fits
/// a bed with an SSD of `ssd_size` bytes at `fill` (the same checks
/// [`Bed::build`] makes).
pub fn check(
    opts: &BenchOptions,
    ssd_size: u64,
    footprint: u64,
    fill: f64,
) -> Result<(), BenchError> {
    let es = opts.extent_size;
    let g = Geometry::compute(ssd_size, opts.hdd_size, es, None)
        .map_err(setup("sizing a trace's test bed"))?;
    let layout = Layout::new(
        g.logical_extents(),
        u64::from(g.slots(Tier::Ssd)),
        footprint,
        fill,
    )?;
    fits_hdd(opts, &layout)
}

/// The footprint must lie on the HDD of the caches and of the pure HDD too.
fn fits_hdd(opts: &BenchOptions, layout: &Layout) -> Result<(), BenchError> {
    let es = opts.extent_size;
    if (layout.base + layout.footprint) * es > opts.hdd_size {
        return Err(BenchError::Options(format!(
            "the trace's {} extents do not fit the HDD's {} after the SSD's {}: give a larger --hdd-size",
            layout.footprint,
            opts.hdd_size / es,
            layout.base
        )));
    }
    Ok(())
}

impl Bed {
    /// Build a bed for a trace of `footprint` extents on an SSD of
    /// `ssd_size` bytes at `fill`.
    pub fn build(
        opts: &BenchOptions,
        ssd_size: u64,
        footprint: u64,
        fill: f64,
    ) -> Result<Bed, BenchError> {
        let (Some(ssd_model), Some(hdd_model)) = (opts.ssd_model, opts.hdd_model) else {
            return Err(BenchError::Options(
                "trace replays run on device models".into(),
            ));
        };
        let es = opts.extent_size;
        let sched = VirtualSched::new();
        let device_clock: Arc<dyn Clock> = sched.device_clock();
        let ssd_raw: Arc<dyn BlockDevice> = Arc::new(NullDevice::new(ssd_size));
        let hdd_raw: Arc<dyn BlockDevice> = Arc::new(NullDevice::new(opts.hdd_size));
        let store = Arc::new(MemStore::new());
        let plain = Devices {
            ssd: ssd_raw.clone(),
            hdd: hdd_raw.clone(),
        };
        let fopts = FormatOptions {
            extent_size: es,
            reserve: None,
            force: true,
        };
        Volume::format(&plain, store.as_ref(), &fopts).map_err(setup("formatting the hybrid"))?;
        let vol_store: Arc<dyn MetaStore> = store.clone();
        let layout = {
            let vol = Volume::open_with(plain, vol_store.clone(), VolumeOptions::default())
                .map_err(setup("opening the hybrid"))?;
            let g = *vol.geometry();
            let layout = Layout::new(
                g.logical_extents(),
                u64::from(g.slots(Tier::Ssd)),
                footprint,
                fill,
            )?;
            fits_hdd(opts, &layout)?;
            let data = vec![0x5au8; es as usize];
            for e in 0..layout.filled {
                vol.write(e * es, &data, false).map_err(setup("filling"))?;
            }
            vol.flush().map_err(setup("filling"))?;
            layout
        };
        let devices = Devices {
            ssd: timed(ssd_raw, ssd_model, &device_clock),
            hdd: timed(hdd_raw, hdd_model, &device_clock),
        };
        let clock: Arc<dyn Clock> = sched.clock();
        let vopts = VolumeOptions {
            heat: opts.heat,
            clock,
            ..Default::default()
        };
        let vol = Arc::new(
            Volume::open_with(devices, vol_store, vopts).map_err(setup("opening the hybrid"))?,
        );
        let g = *vol.geometry();
        let room = u64::from(g.slots(Tier::Ssd)) - u64::from(g.reserve_extents);
        let migrator = opts.migrate.enabled.then(|| {
            let mig = Arc::new(Migrator::new(vol.clone(), vol.heat(), opts.migrate));
            mig.set_exposure_bound(opts.durability.ssd_exposure);
            settle_idle(&sched, &mig, &vol);
            mig
        });
        let capacity = vol.size();
        let null = |size: u64| -> Arc<dyn BlockDevice> { Arc::new(NullDevice::new(size)) };
        let cache = |name: &'static str, cfg: CacheConfig| -> Box<dyn Target> {
            Box::new(Cache::new(
                name,
                cfg,
                timed(null(ssd_size), ssd_model, &device_clock),
                timed(null(opts.hdd_size), hdd_model, &device_clock),
            ))
        };
        let targets: Vec<Box<dyn Target>> = vec![
            Box::new(Hybrid::new(vol)),
            Box::new(Pure::new(
                timed(null(capacity), ssd_model, &device_clock),
                true,
            )),
            Box::new(Pure::new(
                timed(null(opts.hdd_size), hdd_model, &device_clock),
                false,
            )),
            cache("cache-lru-1m", CacheConfig::lru(1 << 20)),
            cache("cache-lru-256k", CacheConfig::lru(256 << 10)),
            cache("cache-larc-1m", CacheConfig::larc(1 << 20)),
        ];
        debug_assert!(targets
            .iter()
            .map(|t| t.name())
            .eq(TRACE_TARGETS.iter().copied()));
        Ok(Bed {
            sched,
            targets,
            migrator,
            layout,
            ssd_size,
            room,
            extent: es,
        })
    }
}

/// Run the migrator until the SSD has its reserve free again (what a fill
/// took of it), on the virtual clock.
pub(crate) fn settle(sched: &Arc<VirtualSched>, mig: &Arc<Migrator>, vol: &Arc<Volume>) {
    let reserve = vol.geometry().reserve_extents;
    sched.phase(1, |p, _| {
        for _ in 0..10_000 {
            if vol.free_slots(Tier::Ssd) >= reserve {
                break;
            }
            p.sleep_until(p.now() + Duration::from_secs(1));
            p.set_own_now(p.now());
            mig.run_round();
        }
    });
}

/// [`settle`], then idle rounds until the migrator has nothing left to do
/// (the SSD's data given clean HDD copies while the HDD has room for them,
/// as on a used disk that had idle time): the state a trace replay starts
/// from.
pub(crate) fn settle_idle(sched: &Arc<VirtualSched>, mig: &Arc<Migrator>, vol: &Arc<Volume>) {
    settle(sched, mig, vol);
    sched.phase(1, |p, _| {
        let mut quiet = 0;
        for _ in 0..100_000 {
            p.sleep_until(p.now() + Duration::from_secs(1));
            p.set_own_now(p.now());
            let r = mig.run_round();
            quiet = if r.moved + r.precleaned + r.written_back == 0 {
                quiet + 1
            } else {
                0
            };
            // The pre-clean list is looked at again after a while: a few
            // quiet rounds in a row mean it is done.
            if quiet >= 30 {
                break;
            }
        }
    });
}
