//! Migration yields to slow foreground HDD reads: with the smoothed latency of
//! recent foreground HDD reads at or above `busy-latency`, each batch waits
//! (up to `max-backoff`) before it starts, and still runs afterwards; fast or
//! stale latency costs no wait. Time is a manual clock that the HDD double
//! advances by its latency on every read; the migrator's sleeps on it are
//! counted, not slept.

use std::cell::Cell;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tierd::clock::{Clock, ManualClock};
use tierd::device::{BlockDevice, MemDevice};
use tierd::heat::HeatConfig;
use tierd::migrate::{MigrateConfig, Migrator};
use tierd::store::{MemStore, MetaStore};
use tierd::volume::{Devices, FormatOptions, Tier, Volume, VolumeOptions};

const EXTENT: u64 = 64 * 1024;

/// The manual clock, with the time the migrator asked to sleep added up
/// instead of slept.
#[derive(Default)]
struct CountingClock {
    manual: ManualClock,
    slept: Mutex<Duration>,
}

impl CountingClock {
    fn advance(&self, d: Duration) {
        self.manual.advance(d);
    }

    /// The time asked to sleep since the last call.
    fn take_slept(&self) -> Duration {
        std::mem::take(&mut *self.slept.lock().expect("lock"))
    }
}

impl Clock for CountingClock {
    fn now(&self) -> Duration {
        self.manual.now()
    }
    fn unix_secs(&self) -> u64 {
        self.manual.unix_secs()
    }
    fn sleep(&self, d: Duration) {
        *self.slept.lock().expect("lock") += d;
    }
}

/// An HDD whose every read takes `delay_ms` on the manual clock.
struct SlowHdd {
    inner: MemDevice,
    clock: Arc<CountingClock>,
    delay_ms: AtomicU64,
}

impl BlockDevice for SlowHdd {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.clock
            .advance(Duration::from_millis(self.delay_ms.load(Ordering::Relaxed)));
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.inner.write_at(buf, offset)
    }
    fn sync(&self) -> io::Result<()> {
        self.inner.sync()
    }
    fn name(&self) -> String {
        "slow-hdd".into()
    }
}

struct Rig {
    vol: Arc<Volume>,
    hdd: Arc<SlowHdd>,
    clock: Arc<CountingClock>,
    mig: Migrator,
    next: Cell<u64>,
}

impl Rig {
    fn new() -> Rig {
        let clock = Arc::new(CountingClock::default());
        let hdd = Arc::new(SlowHdd {
            inner: MemDevice::new((1 << 20) + 32 * EXTENT),
            clock: clock.clone(),
            delay_ms: AtomicU64::new(0),
        });
        let devices = Devices {
            ssd: Arc::new(MemDevice::new((1 << 20) + 8 * EXTENT)) as Arc<dyn BlockDevice>,
            hdd: hdd.clone() as Arc<dyn BlockDevice>,
        };
        let store = Arc::new(MemStore::new());
        let fopts = FormatOptions {
            extent_size: EXTENT,
            reserve: Some(2 * EXTENT),
            force: false,
        };
        Volume::format(&devices, store.as_ref(), &fopts).expect("format");
        let store: Arc<dyn MetaStore> = store;
        let vopts = VolumeOptions {
            heat: HeatConfig::default(),
            clock: clock.clone(),
            ..Default::default()
        };
        let vol = Arc::new(Volume::open_with(devices, store, vopts).expect("open"));
        let cfg = MigrateConfig {
            bandwidth: tierd::units::ByteSize(0),
            busy_latency: Duration::from_millis(100),
            max_backoff: Duration::from_millis(500),
            // The heat migrator's back-off (admission off).
            admission: false,
            ..MigrateConfig::default()
        };
        let mig = Migrator::new(vol.clone(), vol.heat(), cfg);
        Rig {
            vol,
            hdd,
            clock,
            mig,
            next: Cell::new(0),
        }
    }

    /// Write `n` new extents (they land on the SSD while it has room).
    fn write_new(&self, n: u64) {
        for _ in 0..n {
            let e = self.next.get();
            self.vol
                .write(e * EXTENT, &vec![e as u8 + 1; EXTENT as usize], false)
                .expect("write");
            self.next.set(e + 1);
        }
    }

    /// A foreground read of an extent on the HDD, taking `ms`.
    fn slow_read(&self, ms: u64) {
        let e = (0..self.next.get())
            .find(|e| self.vol.mapping(*e).map(|m| m.loc.tier) == Some(Tier::Hdd))
            .expect("an extent on the HDD");
        self.hdd.delay_ms.store(ms, Ordering::Relaxed);
        let mut buf = vec![0u8; 4096];
        self.vol.read(e * EXTENT, &mut buf).expect("read");
        self.hdd.delay_ms.store(0, Ordering::Relaxed);
    }

    /// One round; returns (moves done, total time it asked to sleep).
    fn round(&self) -> (usize, Duration) {
        self.clock.take_slept();
        let r = self.mig.run_round();
        (r.moved, self.clock.take_slept())
    }
}

#[test]
fn slow_hdd_reads_make_migration_wait_then_it_proceeds() {
    let rig = Rig::new();
    // 8 SSD slots and 4 HDD extents; the SSD is full: the reserve (2) must
    // be restored by demotions.
    rig.write_new(12);
    assert_eq!(rig.vol.free_slots(Tier::Ssd), 0);
    // New data has just landed: the refill waits for the writes to pause
    // (`speculative-idle`, 250 ms), asking for no sleep.
    assert_eq!(
        rig.round(),
        (0, Duration::ZERO),
        "no refill while new data lands"
    );
    assert_eq!(rig.vol.free_slots(Tier::Ssd), 0);
    // The writes pause; one rewrite in place (no new data) keeps the
    // write rate up, so the reserve is refilled at once, not when the HDD
    // is free of users.
    rig.clock.advance(Duration::from_millis(300));
    rig.vol
        .write(0, &vec![9u8; EXTENT as usize], false)
        .expect("rewrite");
    rig.slow_read(200);
    let lat = rig.vol.hdd_read_latency().expect("a fresh sample");
    assert_eq!(lat, Duration::from_millis(200));
    let (moved, slept) = rig.round();
    assert_eq!(slept, Duration::from_millis(500), "waited max-backoff");
    assert_eq!(moved, 2, "the batch ran after the wait");
    assert_eq!(rig.vol.free_slots(Tier::Ssd), 2);

    // Fast HDD reads: the smoothed latency falls below busy-latency after
    // enough samples, and the next batch starts at once.
    for _ in 0..40 {
        rig.slow_read(5);
    }
    let lat = rig.vol.hdd_read_latency().expect("fresh");
    assert!(lat < Duration::from_millis(100), "{lat:?}");
    rig.write_new(2);
    rig.clock.advance(Duration::from_millis(300));
    let (moved, slept) = rig.round();
    assert_eq!(slept, Duration::ZERO);
    assert!(moved >= 2, "{moved}");

    // A slow sample that has gone stale (no HDD read for over a second)
    // does not hold migration back.
    for _ in 0..40 {
        rig.slow_read(300);
    }
    rig.clock.advance(Duration::from_secs(2));
    assert_eq!(rig.vol.hdd_read_latency(), None);
    rig.write_new(2);
    rig.clock.advance(Duration::from_millis(300));
    let (moved, slept) = rig.round();
    assert_eq!(slept, Duration::ZERO);
    // The reserve refill, and maybe the much-read extent's promotion.
    assert!(moved >= 2, "{moved}");
    assert_eq!(rig.vol.free_slots(Tier::Ssd), 2);
}
