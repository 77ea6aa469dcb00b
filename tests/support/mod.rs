//! Shared set-up for the engine tests: a small volume on in-memory devices
//! with the power-cut model, an in-memory store and a manual clock.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use tierd::clock::ManualClock;
use tierd::device::{BlockDevice, MemDevice};
use tierd::heat::HeatConfig;
use tierd::migrate::{MigrateConfig, Migrator, RoundReport};
use tierd::store::{MemStore, MetaStore};
use tierd::units::IoHint;
use tierd::volume::{Devices, FormatOptions, Tier, Volume, VolumeOptions};

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
        let opts = VolumeOptions {
            heat: self.heat,
            clock: self.clock.clone(),
            ..Default::default()
        };
        let store: Arc<dyn MetaStore> = self.store.clone();
        Arc::new(Volume::open_with(self.devices(), store, opts).expect("open"))
    }

    /// Lose everything not flushed, on both devices and the store.
    pub fn power_cut(&self) {
        self.ssd.power_cut();
        self.hdd.power_cut();
        self.store.power_cut();
    }

    pub fn migrator(&self, vol: &Arc<Volume>) -> Migrator {
        let cfg = MigrateConfig {
            bandwidth: tierd::units::ByteSize(0),
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
