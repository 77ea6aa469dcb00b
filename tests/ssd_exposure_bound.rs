//! The SSD exposure bound (`durability.ssd-exposure`), judged the way it
//! is promised: the SSD dies at a random moment and nothing flushed more
//! than the bound before is lost.
//!
//! Each trial runs a fresh volume on in-memory devices (the SSD behind a
//! fault injector) at a fill of at most 0.6, with the migrator keeping a
//! 30 s bound on a manual clock: random runs of 4 KiB blocks written over
//! the used part (new data landing on the SSD, writes to HDD data landing
//! in the write log, rewrites of SSD data whose HDD copy goes stale), a
//! FLUSH now and then, a migration round each second. At a random moment
//! every SSD request starts failing. Then every block is read on its own:
//! - a block whose newest write was flushed more than 30 s before the
//!   failure reads back that write (the bound);
//! - any block reads back its newest write, zeros if it was never written,
//!   or an error: never older data, never bytes no write wrote.
//!
//! A second test shows what the bound needs: with no room on the HDD for
//! copies the data stays SSD-only, and the volume says why.

use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use tierd::clock::{Clock, ManualClock};
use tierd::device::{BlockDevice, FaultDevice, FaultRule, LostDevice, MemDevice};
use tierd::heat::HeatConfig;
use tierd::migrate::{MigrateConfig, Migrator};
use tierd::store::{MemStore, MetaStore};
use tierd::volume::{Devices, FormatOptions, Stats, Volume, VolumeOptions};

const EXTENT: u64 = 64 * 1024;
const BLK: u64 = 4096;
const BPE: u64 = EXTENT / BLK;
const SSD_SLOTS: u64 = 16;
const HDD_SLOTS: u64 = 64;
const RESERVE: u64 = 4;
const BOUND: Duration = Duration::from_secs(30);

/// A volume whose SSD can be made to die.
struct Rig {
    ssd: Arc<FaultDevice>,
    hdd: Arc<MemDevice>,
    store: Arc<MemStore>,
    heat: HeatConfig,
    clock: Arc<ManualClock>,
    vol: Arc<Volume>,
    mig: Migrator,
}

impl Rig {
    fn new(admission: bool) -> Rig {
        let ssd_mem = Arc::new(MemDevice::new((1 << 20) + SSD_SLOTS * EXTENT));
        let hdd = Arc::new(MemDevice::new((1 << 20) + HDD_SLOTS * EXTENT));
        let ssd = Arc::new(FaultDevice::new(ssd_mem, 7));
        let mem_store = Arc::new(MemStore::new());
        let store: Arc<dyn MetaStore> = mem_store.clone();
        let devices = Devices {
            ssd: ssd.clone() as Arc<dyn BlockDevice>,
            hdd: hdd.clone() as Arc<dyn BlockDevice>,
        };
        let fmt = FormatOptions {
            extent_size: EXTENT,
            reserve: Some(RESERVE * EXTENT),
            force: false,
        };
        Volume::format(&devices, store.as_ref(), &fmt).expect("format");
        let clock = Arc::new(ManualClock::new());
        let heat = HeatConfig {
            half_life: Duration::from_secs(10),
            coverage_window: Duration::from_secs(10),
            sequential_cutoff: tierd::units::ByteSize(4 * EXTENT),
            ..HeatConfig::default()
        };
        let opts = VolumeOptions {
            heat,
            clock: clock.clone(),
            ..Default::default()
        };
        let vol = Arc::new(Volume::open_with(devices, store, opts).expect("open"));
        let cfg = MigrateConfig {
            bandwidth: tierd::units::ByteSize(0),
            admission,
            ..MigrateConfig::default()
        };
        let mig = Migrator::new(vol.clone(), vol.heat(), cfg);
        mig.set_exposure_bound(BOUND);
        Rig {
            ssd,
            hdd,
            store: mem_store,
            heat,
            clock,
            vol,
            mig,
        }
    }
}

/// What the test knows of one block: its newest write (a version number,
/// 0 for never written) and when the FLUSH after it was acknowledged.
#[derive(Clone, Copy, Default)]
struct Block {
    version: u64,
    flushed: Option<Duration>,
}

/// The 4 KiB a write of `version` put at `block`: distinct per both.
fn content(block: u64, version: u64) -> Vec<u8> {
    let mut v = vec![0u8; BLK as usize];
    for (i, c) in v.chunks_mut(16).enumerate() {
        c[..8].copy_from_slice(&block.to_le_bytes());
        c[8..].copy_from_slice(&(version ^ ((i as u64) << 48)).to_le_bytes());
    }
    v
}

/// One trial; returns the blocks checked under the bound, the blocks that
/// read an error and the reads an HDD copy served, or panics on a
/// violation.
fn trial(seed: u64) -> (u64, u64, u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let rig = Rig::new(seed.is_multiple_of(2));
    let vol = &rig.vol;
    let extents = vol.size() / EXTENT;
    // Fill at most 0.6 of the capacity: the HDD has room for a copy of
    // everything on the SSD.
    let used = (extents as f64 * rng.gen_range(0.3..0.6)) as u64;
    let blocks = used * BPE;
    let mut model = vec![Block::default(); blocks as usize];
    let mut version = 0u64;
    // First a sequential fill of part of it, so some data lives on the HDD
    // (its later writes land in the write log).
    for b in 0..blocks / 2 {
        version += 1;
        vol.write(b * BLK, &content(b, version), false)
            .expect("fill");
        model[b as usize].version = version;
    }
    vol.flush().expect("flush");
    for m in model.iter_mut().filter(|m| m.version > 0) {
        m.flushed = Some(rig.clock.now());
    }
    let steps = rng.gen_range(100..400);
    let mut next_round = rig.clock.now();
    for _ in 0..steps {
        rig.clock
            .advance(Duration::from_millis(rng.gen_range(0..1500)));
        let first = rng.gen_range(0..blocks);
        let n = rng.gen_range(1..=16).min(blocks - first);
        let mut data = Vec::with_capacity((n * BLK) as usize);
        for b in first..first + n {
            version += 1;
            data.extend_from_slice(&content(b, version));
            model[b as usize] = Block {
                version,
                flushed: None,
            };
        }
        vol.write(first * BLK, &data, false).expect("write");
        if rng.gen_bool(0.15) {
            vol.flush().expect("flush");
            let now = rig.clock.now();
            for m in model
                .iter_mut()
                .filter(|m| m.version > 0 && m.flushed.is_none())
            {
                m.flushed = Some(now);
            }
        }
        while rig.clock.now() >= next_round {
            rig.mig.run_round();
            next_round += Duration::from_secs(1);
            // After a round nothing has been SSD-only for longer than the
            // bound (a round each second keeps it with room to spare).
            let e = vol.exposure();
            assert!(
                e.oldest.is_none_or(|o| o <= BOUND),
                "seed {seed}: exposure {e:?} past the bound"
            );
        }
    }
    // The SSD dies.
    let died = rig.clock.now();
    rig.ssd.add(FaultRule::dead());
    let (mut checked, mut errors) = (0, 0);
    let mut buf = vec![0u8; BLK as usize];
    // Each block's answer: `Some(version)` read back, `None` an error.
    let mut answers: Vec<Option<u64>> = Vec::with_capacity(model.len());
    // What the volume says an SSD failure loses: exactly the blocks that
    // read an error below.
    let lost = vol.ssd_only_ranges(0, vol.size(), usize::MAX);
    assert!(!lost.truncated);
    let is_lost = |b: u64| {
        lost.runs
            .iter()
            .any(|&(at, n)| (at..at + n).contains(&(b * BLK)))
    };
    for (b, m) in model.iter().enumerate() {
        let b = b as u64;
        let read = vol.read(b * BLK, &mut buf);
        assert_eq!(
            read.is_err(),
            is_lost(b),
            "seed {seed}: block {b} (extent {}) reads {read:?}, yet the SSD-only ranges {} it",
            b / BPE,
            if is_lost(b) { "list" } else { "do not list" }
        );
        let bound_covers = m.flushed.is_some_and(|f| died.saturating_sub(f) > BOUND);
        match read {
            Ok(()) => {
                let want = if m.version == 0 {
                    vec![0u8; BLK as usize]
                } else {
                    content(b, m.version)
                };
                assert!(
                    buf == want,
                    "seed {seed}: block {b} (extent {}) reads other data than its newest write {}",
                    b / BPE,
                    m.version
                );
                answers.push(Some(m.version));
            }
            Err(e) => {
                assert!(
                    !bound_covers,
                    "seed {seed}: block {b} (extent {}) was flushed {:?} before the SSD died, yet reads {e}",
                    b / BPE,
                    died.saturating_sub(m.flushed.unwrap_or_default())
                );
                errors += 1;
                answers.push(None);
            }
        }
        if bound_covers {
            checked += 1;
        }
    }
    let copies = Stats::get(&vol.stats().read_from_copy);
    reopen_without_the_ssd(&rig, seed, &answers);
    (checked, errors, copies)
}

/// The process dies with the SSD, and the volume opens without it
/// (`--ssd-lost`): every block answers as it did with the SSD failing (the
/// same data, or an I/O error), and the lost ranges are exactly the blocks
/// that error.
fn reopen_without_the_ssd(rig: &Rig, seed: u64, answers: &[Option<u64>]) {
    let devices = Devices {
        ssd: Arc::new(LostDevice::new("dead")) as Arc<dyn BlockDevice>,
        hdd: rig.hdd.clone() as Arc<dyn BlockDevice>,
    };
    let opts = VolumeOptions {
        heat: rig.heat,
        clock: rig.clock.clone(),
        ssd_lost: true,
        ..Default::default()
    };
    let store: Arc<dyn MetaStore> = rig.store.clone();
    let vol = Volume::open_with(devices, store, opts)
        .unwrap_or_else(|e| panic!("seed {seed}: opening without the SSD: {e}"));
    let (lost, more) = vol.lost_ranges(0, vol.size(), usize::MAX);
    assert!(!more);
    let is_lost = |b: u64| {
        lost.iter()
            .any(|&(at, n)| (at..at + n).contains(&(b * BLK)))
    };
    let mut buf = vec![0u8; BLK as usize];
    for (b, want) in answers.iter().enumerate() {
        let b = b as u64;
        let got = vol.read(b * BLK, &mut buf);
        match want {
            Some(v) => {
                got.unwrap_or_else(|e| {
                    panic!("seed {seed}: block {b} read back before the restart, now {e}")
                });
                let want = if *v == 0 {
                    vec![0u8; BLK as usize]
                } else {
                    content(b, *v)
                };
                assert!(
                    buf == want,
                    "seed {seed}: block {b} reads other data after the restart"
                );
                assert!(
                    !is_lost(b),
                    "seed {seed}: block {b} reads, yet is listed lost"
                );
            }
            None => {
                assert!(
                    got.is_err(),
                    "seed {seed}: block {b} erred before the restart, now reads"
                );
                assert!(
                    is_lost(b),
                    "seed {seed}: block {b} errs, yet is not listed lost"
                );
            }
        }
    }
}

#[test]
fn an_ssd_that_dies_loses_nothing_flushed_before_the_bound() {
    let trials: u64 = ["TIERD_SOAK_CYCLES", "TIERD_MODEL_SEEDS"]
        .iter()
        .find_map(|k| std::env::var(k).ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let (mut checked, mut errors, mut copies) = (0, 0, 0);
    for seed in 0..trials {
        let (c, e, k) = trial(0xb0_0000 + seed);
        checked += c;
        errors += e;
        copies += k;
    }
    eprintln!(
        "ssd loss model passed: {trials} trials, 0 lost: {checked} blocks flushed more than {BOUND:?} before the SSD died all read back \
         ({copies} reads served by HDD copies); {errors} younger blocks read an error"
    );
    assert!(
        checked > trials * 100,
        "too few blocks under the bound: {checked}"
    );
    assert!(copies > 0, "no read was served from an HDD copy");
}

#[test]
fn without_the_bound_the_same_failure_loses_flushed_data() {
    // The test above can fail: with no bound, data flushed long ago and
    // left on the SSD without a copy reads an error once the SSD dies.
    let rig = Rig::new(false);
    rig.mig.set_exposure_bound(Duration::ZERO);
    let data = content(0, 1);
    rig.vol.write(0, &data, false).expect("write");
    rig.vol.flush().expect("flush");
    for _ in 0..120 {
        rig.clock.advance(Duration::from_secs(1));
        // A write each second keeps pre-cleaning (idle-only) out of it.
        rig.vol
            .write(EXTENT * 8, &content(8 * BPE, 2), false)
            .expect("write");
        rig.mig.run_round();
    }
    assert!(rig.vol.exposure().oldest.is_some_and(|o| o > BOUND));
    rig.ssd.add(FaultRule::dead());
    let mut buf = vec![0u8; BLK as usize];
    assert!(rig.vol.read(0, &mut buf).is_err());
}

#[test]
fn with_no_room_on_the_hdd_the_bound_cannot_be_kept() {
    let rig = Rig::new(false);
    let vol = &rig.vol;
    // Fill the HDD's slots with data, then new data on the SSD: no slot is
    // left to spare for its copies.
    let hdd_data = HDD_SLOTS - RESERVE;
    let big = vec![7u8; (EXTENT * hdd_data) as usize];
    vol.write(0, &big, false).expect("fill");
    for _ in 0..5 {
        rig.clock.advance(Duration::from_secs(1));
        rig.mig.run_round();
    }
    let first_new = vol.size() / EXTENT - 2;
    vol.write(first_new * EXTENT, &content(0, 1), false)
        .expect("new data");
    vol.flush().expect("flush");
    assert_eq!(vol.clean_copy_room(), 0, "the HDD has no slot to spare");
    for _ in 0..60 {
        rig.clock.advance(Duration::from_secs(1));
        rig.mig.run_round();
    }
    let e = vol.exposure();
    assert!(
        e.bytes > 0 && e.oldest.is_some_and(|o| o > BOUND),
        "exposure {e:?}"
    );
}

#[test]
fn a_held_extent_takes_no_write_until_its_copy_is_done() {
    // Late copies hold their extents' writes: a write into a held extent
    // waits for the release, a write elsewhere and reads do not.
    let rig = Rig::new(false);
    let vol = rig.vol.clone();
    vol.write(0, &content(0, 1), false).expect("write");
    vol.write(EXTENT, &content(BPE, 1), false).expect("write");
    let hold = vol.hold_writes(&[0]);
    let (tx, rx) = std::sync::mpsc::channel();
    let writer = {
        let vol = vol.clone();
        std::thread::spawn(move || {
            vol.write(BLK, &content(1, 2), false).expect("held write");
            tx.send(()).expect("send");
        })
    };
    assert!(
        rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "a write went into a held extent"
    );
    vol.write(EXTENT + BLK, &content(BPE + 1, 2), false)
        .expect("a write elsewhere goes on");
    let mut buf = vec![0u8; BLK as usize];
    vol.read(0, &mut buf).expect("reads go on");
    assert_eq!(buf, content(0, 1));
    drop(hold);
    rx.recv_timeout(Duration::from_secs(30))
        .expect("the write goes on once the hold is released");
    writer.join().expect("writer");
    vol.read(BLK, &mut buf).expect("read");
    assert_eq!(buf, content(1, 2));
}
