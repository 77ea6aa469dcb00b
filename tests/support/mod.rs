//! Shared set-up for the engine tests: a small volume on in-memory devices
//! with the power-cut model, an in-memory store and a manual clock.
#![allow(dead_code)]

mod gate;
#[allow(unused_imports)]
pub use gate::Gate;

use std::sync::Arc;
use std::time::Duration;

use tierd::clock::ManualClock;
use tierd::device::{BlockDevice, MemDevice};
use tierd::heat::HeatConfig;
use tierd::migrate::{MigrateConfig, Migrator, RoundReport};
use tierd::store::{MemStore, MetaStore};
use tierd::units::IoHint;
use tierd::units::Reason;
use tierd::volume::{Devices, FormatOptions, MoveOutcome, Stats, Tier, Volume, VolumeOptions};

pub const EXTENT: u64 = 64 * 1024;

/// A test bed: devices, store and clock survive "restarts" of the volume.
pub struct Bed {
    pub ssd: Arc<MemDevice>,
    pub hdd: Arc<MemDevice>,
    pub store: Arc<MemStore>,
    pub clock: Arc<ManualClock>,
    pub heat: HeatConfig,
}

impl Bed {
    /// `ssd` and `hdd` slots of 64 KiB, `reserve` slots held back.
    pub fn new(ssd: u64, hdd: u64, reserve: u64) -> Self {
        let bed = Bed {
            ssd: Arc::new(MemDevice::with_power_model((1 << 20) + ssd * EXTENT)),
            hdd: Arc::new(MemDevice::with_power_model((1 << 20) + hdd * EXTENT)),
            store: Arc::new(MemStore::new()),
            clock: Arc::new(ManualClock::new()),
            heat: HeatConfig {
                half_life: Duration::from_secs(10),
                coverage_window: Duration::from_secs(10),
                // Scaled to the small test geometry: 4 extents.
                sequential_cutoff: tierd::units::ByteSize(4 * EXTENT),
                ..HeatConfig::default()
            },
        };
        let opts = FormatOptions {
            extent_size: EXTENT,
            reserve: Some(reserve * EXTENT),
            force: false,
        };
        Volume::format(&bed.devices(), bed.store.as_ref(), &opts).expect("format");
        bed
    }

    pub fn devices(&self) -> Devices {
        Devices {
            ssd: self.ssd.clone() as Arc<dyn BlockDevice>,
            hdd: self.hdd.clone() as Arc<dyn BlockDevice>,
        }
    }

    pub fn open(&self) -> Arc<Volume> {
        self.open_on(self.devices())
    }

    /// Open the volume on `devices` (the bed's own, or one of them wrapped
    /// to fail or stop on cue) with the bed's store, heat and clock.
    pub fn open_on(&self, devices: Devices) -> Arc<Volume> {
        let opts = VolumeOptions {
            heat: self.heat,
            clock: self.clock.clone(),
            ..Default::default()
        };
        let store: Arc<dyn MetaStore> = self.store.clone();
        Arc::new(Volume::open_with(devices, store, opts).expect("open"))
    }

    /// Lose everything not flushed, on both devices and the store.
    pub fn power_cut(&self) {
        self.ssd.power_cut();
        self.hdd.power_cut();
        self.store.power_cut();
    }

    /// The heat migrator (admission off: these beds' data fits the HDD,
    /// where admission at the miss would place reads and cover the reserve
    /// by cleaning; tests/admission.rs covers that).
    pub fn migrator(&self, vol: &Arc<Volume>) -> Migrator {
        let cfg = MigrateConfig {
            bandwidth: tierd::units::ByteSize(0),
            admission: false,
            ..MigrateConfig::default()
        };
        Migrator::new(vol.clone(), vol.heat(), cfg)
    }

    /// Advance the clock by `secs` and run one migration round.
    pub fn round(&self, m: &Migrator, secs: u64) -> RoundReport {
        self.clock.advance(Duration::from_secs(secs));
        m.run_round()
    }
}

/// Bytes `len` at `seed`, distinct per seed and offset.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((seed.wrapping_mul(31).wrapping_add(i as u64 / 7)) % 251) as u8 + 1)
        .collect()
}

/// Read a whole extent densely `times` times, one 4 KiB request per block.
pub fn heat_up(vol: &Volume, extent: u64, times: usize) {
    let mut buf = vec![0u8; 4096];
    for _ in 0..times {
        for b in 0..EXTENT / 4096 {
            vol.read_hinted(extent * EXTENT + b * 4096, &mut buf, IoHint::default())
                .expect("read");
        }
    }
}

/// Every slot is mapped once (as an extent's slot, a shadow or a write-log
/// segment), free, or quarantined: nothing leaked or doubled.
pub fn assert_accounting(vol: &Volume, total_slots: u64) {
    let u = vol.usage();
    let mapped = u.mapped[0] + u.mapped[1] + u.shadows + u64::from(u.log.segments);
    assert_eq!(
        mapped + u64::from(u.free[0] + u.free[1] + u.quarantined),
        total_slots,
        "slot accounting: {u:?}"
    );
}

pub fn tier_of(vol: &Volume, extent: u64) -> Option<Tier> {
    vol.mapping(extent).map(|m| m.loc.tier)
}

/// Move `extent` to `to` with the copy protocol, unpaced.
pub fn migrate(vol: &Volume, extent: u64, to: Tier) -> MoveOutcome {
    tierd::migrate::migrate_extent(vol, extent, to, Reason::Manual, &mut |_| {})
        .unwrap_or_else(|e| panic!("moving extent {extent} to the {to:?}: {e}"))
}

/// Write the logged blocks of `extents` back to the HDD, unpaced.
pub fn write_back(vol: &Volume, extents: &[u64]) -> Vec<(u64, MoveOutcome)> {
    tierd::migrate::write_back_batch(vol, extents, &mut |_| {})
        .unwrap_or_else(|e| panic!("writing back {extents:?}: {e}"))
}

/// Write `data` at `offset` (no FUA) and mirror it into the byte `model`.
pub fn put(vol: &Volume, model: &mut [u8], offset: u64, data: &[u8]) {
    vol.write(offset, data, false)
        .unwrap_or_else(|e| panic!("write {offset}+{}: {e}", data.len()));
    model[offset as usize..offset as usize + data.len()].copy_from_slice(data);
}

/// Read the whole volume and compare it with the byte `model`, naming the
/// first differing block.
pub fn assert_reads(vol: &Volume, model: &[u8], what: &str) {
    let mut buf = vec![0u8; model.len()];
    vol.read(0, &mut buf)
        .unwrap_or_else(|e| panic!("{what}: reading the volume: {e}"));
    if buf != model {
        let at = buf.iter().zip(model).position(|(a, b)| a != b).unwrap_or(0);
        panic!(
            "{what}: byte {at} (extent {}, block {}) reads {} but the model has {}",
            at as u64 / EXTENT,
            (at as u64 % EXTENT) / 4096,
            buf[at],
            model[at]
        );
    }
}

/// Bytes written to a tier's device so far.
pub fn dev_written(vol: &Volume, tier: Tier) -> u64 {
    Stats::get(&vol.stats().dev_write_bytes[tier.index()])
}

/// Bytes read from a tier's device so far.
pub fn dev_read(vol: &Volume, tier: Tier) -> u64 {
    Stats::get(&vol.stats().dev_read_bytes[tier.index()])
}

/// The blocks of `extent` whose newest data is in the write log.
pub fn logged_blocks(vol: &Volume, extent: u64) -> Vec<u32> {
    vol.mapping(extent)
        .map(|m| m.logged.iter().map(|l| l.block).collect())
        .unwrap_or_default()
}

/// Write `data` into `extent` (it lands on the SSD while there is room),
/// then move it to the HDD and flush: an extent living on the HDD with
/// nothing in the write log.
pub fn hdd_extent(vol: &Volume, model: &mut [u8], extent: u64, at: u64, data: &[u8]) {
    put(vol, model, extent * EXTENT + at, data);
    vol.flush().expect("flush");
    if tier_of(vol, extent) == Some(Tier::Ssd) {
        let out = migrate(vol, extent, Tier::Hdd);
        assert!(
            matches!(out, MoveOutcome::Moved(_)),
            "demoting {extent}: {out:?}"
        );
    }
    vol.flush().expect("flush");
    let m = vol.mapping(extent).expect("mapped");
    assert_eq!(m.loc.tier, Tier::Hdd, "extent {extent}");
    assert!(m.logged.is_empty() && m.shadow.is_none(), "{m:?}");
}

/// A zeroed byte model of the whole volume.
pub fn model_of(vol: &Volume) -> Vec<u8> {
    vec![0u8; vol.size() as usize]
}

/// Lose everything not flushed (drop the volume, cut the power), reopen,
/// and check the reads against `model` and the slot accounting against
/// `total_slots`. Returns the reopened volume.
pub fn power_cycle(
    bed: &Bed,
    vol: Arc<Volume>,
    model: &[u8],
    what: &str,
    total_slots: u64,
) -> Arc<Volume> {
    drop(vol);
    bed.power_cut();
    let vol = bed.open();
    assert_reads(&vol, model, what);
    assert_accounting(&vol, total_slots);
    vol
}

/// On a bed of 8 SSD and 16 HDD slots: six extents written on the HDD and
/// promoted, keeping clean shadows (and kept in use, so new data does not
/// push them out), then new extents until the HDD has `hdd_free` free
/// slots. Returns the model of the volume's data.
pub fn shadows_then_new_data(bed: &Bed, vol: &Volume, hdd_free: u32) -> Vec<u8> {
    let mut model = model_of(vol);
    for e in 0..6 {
        hdd_extent(vol, &mut model, e, 0, &pattern(e, EXTENT as usize));
    }
    for e in 0..6 {
        assert!(matches!(migrate(vol, e, Tier::Ssd), MoveOutcome::Moved(_)));
        heat_up(vol, e, 1);
    }
    vol.heat()
        .tick(tierd::clock::Clock::now(bed.clock.as_ref()));
    let mut e = 6;
    while vol.free_slots(Tier::Hdd) > hdd_free {
        put(
            vol,
            &mut model,
            e * EXTENT,
            &pattern(50 + e, EXTENT as usize),
        );
        e += 1;
    }
    model
}

/// Every point a crash test stops a move at: after each of its steps, and
/// `None` (the move runs to its end).
pub fn crash_steps() -> impl Iterator<Item = Option<tierd::volume::MoveStep>> {
    tierd::volume::MoveStep::ALL
        .into_iter()
        .map(Some)
        .chain(std::iter::once(None))
}
