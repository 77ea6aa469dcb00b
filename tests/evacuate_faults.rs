//! Faults in the middle of draining a tier (`tierctl evacuate`), on the
//! engine: a crash after each step of an evacuation batch's copy protocol,
//! as a process kill and as a power cut, for both tiers; and a device
//! error (a failed copy read, a failed copy write, a failed sync) in the
//! middle of draining the SSD. After each, every byte reads as it was
//! written and flushed, no slot is lost or doubled, and the draining, taken
//! up again (the daemon keeps the drained tier across restarts:
//! tests/evacuate.rs), runs to its end.

mod support;

use std::sync::Arc;
use std::time::Duration;

use support::*;
use tierd::clock::ManualClock;
use tierd::device::{BlockDevice, FaultDevice, FaultOp, FaultRule, MemDevice};
use tierd::migrate::{MigrateConfig, Migrator};
use tierd::store::{MemStore, MetaStore};
use tierd::volume::{Devices, FormatOptions, MoveStep, Tier, Volume, VolumeOptions};

/// Slots of the beds: 8 SSD + 16 HDD.
const SLOTS: u64 = 24;

/// Data on both tiers and in the write log: extents 0..4 written on the
/// HDD (one with blocks in the log), 4..8 new data on the SSD; flushed.
fn layout(vol: &Volume) -> Vec<u8> {
    let mut model = model_of(vol);
    for e in 0..4 {
        hdd_extent(vol, &mut model, e, 0, &pattern(10 + e, EXTENT as usize));
    }
    // A write into HDD data lands in the SSD write log.
    put(vol, &mut model, 2 * EXTENT + 8192, &pattern(20, 3 * 4096));
    for e in 4..8 {
        put(
            vol,
            &mut model,
            e * EXTENT,
            &pattern(30 + e, EXTENT as usize),
        );
    }
    vol.flush().expect("flush");
    assert!(
        !logged_blocks(vol, 2).is_empty(),
        "extent 2 has logged blocks"
    );
    assert!(vol.occupying(Tier::Ssd) > 0 && vol.occupying(Tier::Hdd) > 0);
    model
}

/// Drain `from` with rounds of `m` until it is as empty as it gets (the
/// SSD: empty; the HDD: its extents all fit the SSD here).
fn drain(vol: &Arc<Volume>, m: &Migrator, from: Tier, what: &str) {
    vol.set_evacuating(Some(from)).expect("set draining");
    for _ in 0..200 {
        let u = vol.usage();
        if u.mapped[from.index()] == 0 && (from == Tier::Hdd || u.log.segments == 0) {
            return;
        }
        m.run_round();
    }
    panic!(
        "{what}: {from:?} not drained in 200 rounds: {:?}",
        vol.usage()
    );
}

fn crash_mid_drain(from: Tier, step: Option<MoveStep>, power_cut: bool) {
    let what = format!("draining the {from:?}, crash after {step:?}, power cut {power_cut}");
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    let model = if from == Tier::Ssd {
        layout(&vol)
    } else {
        // The HDD's data must fit the SSD: four extents written there.
        let mut model = model_of(&vol);
        for e in 0..4 {
            hdd_extent(&vol, &mut model, e, 0, &pattern(10 + e, EXTENT as usize));
        }
        model
    };
    let m = bed.migrator(&vol);
    vol.set_evacuating(Some(from)).expect("set draining");
    if let Some(s) = step {
        tierd::migrate::arm_crash_after(s);
    }
    m.run_round();
    drop(m);
    drop(vol);
    if power_cut {
        bed.power_cut();
    }
    let vol = bed.open();
    assert_reads(&vol, &model, &what);
    assert_accounting(&vol, SLOTS);
    // Taken up again, the draining finishes; then a power cut loses
    // nothing of it.
    let m = bed.migrator(&vol);
    drain(&vol, &m, from, &what);
    assert_reads(&vol, &model, &what);
    assert_accounting(&vol, SLOTS);
    vol.flush().expect("flush");
    drop(m);
    let vol = power_cycle(&bed, vol, &model, &what, SLOTS);
    assert_eq!(
        vol.usage().mapped[from.index()],
        0,
        "{what}: drained for good"
    );
}

#[test]
fn a_crash_at_each_step_of_draining_the_ssd_loses_nothing_and_draining_resumes() {
    for power_cut in [false, true] {
        for step in crash_steps() {
            crash_mid_drain(Tier::Ssd, step, power_cut);
        }
    }
}

#[test]
fn a_crash_at_each_step_of_draining_the_hdd_loses_nothing_and_draining_resumes() {
    for power_cut in [false, true] {
        for step in crash_steps() {
            crash_mid_drain(Tier::Hdd, step, power_cut);
        }
    }
}

/// A bed whose devices can fail.
struct Faulty {
    ssd_mem: Arc<MemDevice>,
    hdd_mem: Arc<MemDevice>,
    ssd: Arc<FaultDevice>,
    hdd: Arc<FaultDevice>,
    store: Arc<MemStore>,
    clock: Arc<ManualClock>,
}

impl Faulty {
    fn new() -> Faulty {
        let ssd_mem = Arc::new(MemDevice::with_power_model((1 << 20) + 8 * EXTENT));
        let hdd_mem = Arc::new(MemDevice::with_power_model((1 << 20) + 16 * EXTENT));
        let f = Faulty {
            ssd: Arc::new(FaultDevice::new(ssd_mem.clone(), 3)),
            hdd: Arc::new(FaultDevice::new(hdd_mem.clone(), 4)),
            ssd_mem,
            hdd_mem,
            store: Arc::new(MemStore::new()),
            clock: Arc::new(ManualClock::new()),
        };
        let opts = FormatOptions {
            extent_size: EXTENT,
            reserve: Some(2 * EXTENT),
            force: false,
        };
        Volume::format(&f.devices(), f.store.as_ref(), &opts).expect("format");
        f
    }

    fn devices(&self) -> Devices {
        Devices {
            ssd: self.ssd.clone() as Arc<dyn BlockDevice>,
            hdd: self.hdd.clone() as Arc<dyn BlockDevice>,
        }
    }

    fn open(&self) -> Arc<Volume> {
        let opts = VolumeOptions {
            clock: self.clock.clone(),
            ..Default::default()
        };
        let store: Arc<dyn MetaStore> = self.store.clone();
        Arc::new(Volume::open_with(self.devices(), store, opts).expect("open"))
    }

    fn migrator(&self, vol: &Arc<Volume>) -> Migrator {
        let cfg = MigrateConfig {
            bandwidth: tierd::units::ByteSize(0),
            admission: false,
            ..MigrateConfig::default()
        };
        Migrator::new(vol.clone(), vol.heat(), cfg)
    }
}

#[test]
fn a_device_error_mid_drain_leaves_data_in_place_and_draining_finishes() {
    let cases: [(&str, Tier, FaultOp); 3] = [
        ("a copy's read of the SSD fails", Tier::Ssd, FaultOp::Read),
        ("a copy's write to the HDD fails", Tier::Hdd, FaultOp::Write),
        (
            "the HDD's sync after the copies fails",
            Tier::Hdd,
            FaultOp::Sync,
        ),
    ];
    for (what, tier, op) in cases {
        let f = Faulty::new();
        let vol = f.open();
        let model = layout(&vol);
        let m = f.migrator(&vol);
        let dev = match tier {
            Tier::Ssd => &f.ssd,
            Tier::Hdd => &f.hdd,
        };
        vol.set_evacuating(Some(Tier::Ssd)).expect("set draining");
        dev.add(FaultRule::new(&[op]));
        f.clock.advance(Duration::from_secs(1));
        m.run_round();
        assert!(dev.injected(op) > 0, "{what}: the fault was never met");
        // The device recovers. Nothing was lost: every byte reads as
        // written, and the draining goes on to its end.
        dev.clear();
        assert_reads(&vol, &model, what);
        assert_accounting(&vol, SLOTS);
        for _ in 0..200 {
            let u = vol.usage();
            if u.mapped[0] == 0 && u.log.segments == 0 {
                break;
            }
            f.clock.advance(Duration::from_secs(1));
            m.run_round();
        }
        let u = vol.usage();
        assert!(
            u.mapped[0] == 0 && u.log.segments == 0,
            "{what}: the SSD was not drained: {u:?}"
        );
        assert_reads(&vol, &model, what);
        vol.flush().expect("flush");
        drop(m);
        drop(vol);
        for mem in [&f.ssd_mem, &f.hdd_mem] {
            mem.power_cut();
        }
        f.store.power_cut();
        let vol = f.open();
        assert_reads(&vol, &model, what);
        assert_accounting(&vol, SLOTS);
    }
}
