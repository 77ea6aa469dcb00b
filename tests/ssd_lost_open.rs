//! Opening a volume without its SSD (`tierd serve --ssd-lost`), on the
//! engine: the salvage keeps every block that has an HDD copy and marks the
//! rest lost, lost blocks read as I/O errors (never older data, never
//! zeros) until rewritten whole or discarded, the marks survive restarts
//! and power cuts, a crash at any step of the salvage leaves the same
//! result once it is taken up again, and `replace ssd` brings a new SSD in.

mod support;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use support::*;
use tierd::device::{BlockDevice, LostDevice, MemDevice};
use tierd::store::{MemStore, MetaStore, StoreError, StoreResult};
use tierd::volume::{Devices, Tier, Volume, VolumeError, VolumeOptions};

const BLK: u64 = 4096;
const BPE: u64 = EXTENT / BLK;
/// 8 SSD + 32 HDD slots.
const SLOTS: u64 = 40;

/// Data in every place an SSD failure touches, flushed:
/// - extents 0..3 on the HDD, extent 2 with blocks in the write log;
/// - extents 4..6 promoted with clean HDD copies, then a few blocks of
///   extent 5 rewritten on the SSD (its copy of them is stale);
/// - extents 8..10 new data on the SSD with no copy at all.
///
/// Returns the byte model and the blocks whose newest data is on the SSD
/// alone (what the loss must mark, and nothing else).
fn layout(bed: &Bed, vol: &Volume) -> (Vec<u8>, BTreeSet<u64>) {
    let mut model = model_of(vol);
    for e in 0..4 {
        hdd_extent(vol, &mut model, e, 0, &pattern(10 + e, EXTENT as usize));
    }
    for e in 4..7 {
        hdd_extent(vol, &mut model, e, 0, &pattern(20 + e, EXTENT as usize));
        assert!(matches!(
            migrate(vol, e, Tier::Ssd),
            tierd::volume::MoveOutcome::Moved(_)
        ));
        assert!(vol.mapping(e).is_some_and(|m| m.shadow.is_some()));
    }
    // Rewrites of SSD data with a copy: blocks 3..5 of extent 5 go stale.
    put(
        vol,
        &mut model,
        5 * EXTENT + 3 * BLK,
        &pattern(40, 3 * BLK as usize),
    );
    // A write into HDD data lands in the write log: blocks 2..4 of extent 2.
    put(
        vol,
        &mut model,
        2 * EXTENT + 2 * BLK,
        &pattern(41, 3 * BLK as usize),
    );
    for e in 8..11 {
        put(
            vol,
            &mut model,
            e * EXTENT,
            &pattern(50 + e, EXTENT as usize),
        );
        assert_eq!(tier_of(vol, e), Some(Tier::Ssd));
    }
    vol.flush().expect("flush");
    assert_eq!(
        logged_blocks(vol, 2),
        vec![2, 3, 4],
        "the write log holds them"
    );
    let _ = bed;
    let mut lost: BTreeSet<u64> = (5 * BPE + 3..5 * BPE + 6).collect();
    lost.extend(2 * BPE + 2..2 * BPE + 5);
    lost.extend(8 * BPE..11 * BPE);
    // What the volume says an SSD failure would lose is the same set.
    let said = vol.ssd_only_ranges(0, vol.size(), usize::MAX);
    let said: BTreeSet<u64> = said
        .runs
        .iter()
        .flat_map(|&(at, n)| at / BLK..(at + n) / BLK)
        .collect();
    assert_eq!(said, lost, "the SSD-only ranges before the loss");
    (model, lost)
}

/// Open the bed's volume with the SSD lost (a [`LostDevice`] in its place).
fn open_lost(bed: &Bed, store: Arc<dyn MetaStore>) -> tierd::volume::VolumeResult<Volume> {
    let devices = Devices {
        ssd: Arc::new(LostDevice::new("dead-ssd")) as Arc<dyn BlockDevice>,
        hdd: bed.hdd.clone() as Arc<dyn BlockDevice>,
    };
    let opts = VolumeOptions {
        heat: bed.heat,
        clock: bed.clock.clone(),
        ssd_lost: true,
        ..Default::default()
    };
    Volume::open_with(devices, store, opts)
}

/// A bed with [`layout`]'s data, flushed, then a power cut with the SSD
/// gone and the volume opened without it: the bed, the volume, the model
/// and the lost blocks.
fn lost_after_layout() -> (Bed, Volume, Vec<u8>, BTreeSet<u64>) {
    let bed = Bed::new(8, 32, 2);
    let vol = bed.open();
    let (model, lost) = layout(&bed, &vol);
    drop(vol);
    bed.power_cut();
    let vol = open_lost(&bed, bed.store.clone()).expect("open without the SSD");
    (bed, vol, model, lost)
}

/// Every block reads its model's bytes, or an I/O error exactly where it
/// is lost; the volume lists exactly those blocks as lost.
fn assert_lost_reads(vol: &Volume, model: &[u8], lost: &BTreeSet<u64>, what: &str) {
    let mut buf = vec![0u8; BLK as usize];
    for b in 0..vol.size() / BLK {
        let r = vol.read(b * BLK, &mut buf);
        if lost.contains(&b) {
            let e = r.expect_err(&format!("{what}: block {b} is lost, yet it reads"));
            assert!(
                e.to_string().contains("lost with the SSD"),
                "{what}: block {b}: {e}"
            );
        } else {
            r.unwrap_or_else(|e| panic!("{what}: block {b} (extent {}): {e}", b / BPE));
            let want = &model[(b * BLK) as usize..((b + 1) * BLK) as usize];
            assert!(
                buf == want,
                "{what}: block {b} (extent {}) reads other bytes than its newest write",
                b / BPE
            );
        }
    }
    let (runs, more) = vol.lost_ranges(0, vol.size(), usize::MAX);
    assert!(!more);
    let listed: BTreeSet<u64> = runs
        .iter()
        .flat_map(|&(at, n)| at / BLK..(at + n) / BLK)
        .collect();
    assert_eq!(&listed, lost, "{what}: the lost ranges");
    assert_eq!(vol.lost_bytes(), lost.len() as u64 * BLK, "{what}");
}

#[test]
fn the_lost_ssd_keeps_every_copy_errors_the_rest_and_is_replaced() {
    let bed = Bed::new(8, 32, 2);
    let vol = bed.open();
    let (mut model, mut lost) = layout(&bed, &vol);
    drop(vol);
    // The SSD dies and the machine with it.
    bed.power_cut();
    let vol = open_lost(&bed, bed.store.clone()).expect("open without the SSD");
    assert!(vol.ssd_lost());
    assert_eq!(vol.evacuating(), Some(Tier::Ssd), "drained from the start");
    let u = vol.usage();
    assert_eq!(
        u.mapped[Tier::Ssd.index()],
        0,
        "nothing left on the SSD: {u:?}"
    );
    assert_eq!(u.log.segments, 0, "no write-log segment left: {u:?}");
    assert_eq!(vol.exposure().bytes, 0);
    assert_accounting(&vol, SLOTS);
    // Extents 4 and 6 read from their copies; 5 from its copy but for its
    // stale blocks; 2 from the HDD but for its logged blocks.
    assert_lost_reads(&vol, &model, &lost, "after the salvage");
    assert!(lost.len() as u64 > 3 * BPE, "the test loses something");

    // A whole-block write brings a lost block back; a write of part of
    // one fails (the rest is not known); a discard makes one read zeros.
    let b = 8 * BPE + 1;
    put(&vol, &mut model, b * BLK, &pattern(70, BLK as usize));
    lost.remove(&b);
    let part = vol.write((8 * BPE + 2) * BLK + 512, &[9u8; 512], false);
    assert!(part.is_err(), "a write of part of a lost block: {part:?}");
    let z = 9 * BPE + 4;
    vol.discard(z * BLK, 2 * BLK, true, false, false)
        .expect("write zeroes");
    model[(z * BLK) as usize..((z + 2) * BLK) as usize].fill(0);
    lost.remove(&z);
    lost.remove(&(z + 1));
    // New data goes to the HDD.
    put(&vol, &mut model, 12 * EXTENT, &pattern(71, EXTENT as usize));
    assert_eq!(tier_of(&vol, 12), Some(Tier::Hdd));
    assert_lost_reads(&vol, &model, &lost, "after writes and a discard");
    vol.flush().expect("flush");
    drop(vol);

    // A power cut, and the volume opens without the SSD again: nothing
    // more to salvage, the marks and the new data as they were flushed.
    bed.power_cut();
    let vol = open_lost(&bed, bed.store.clone()).expect("reopen without the SSD");
    assert_lost_reads(&vol, &model, &lost, "after a power cut");
    assert_accounting(&vol, SLOTS);

    // A new SSD comes in; the drain ends, new data lands on it.
    let new_ssd = Arc::new(MemDevice::with_power_model(bed.ssd.size()));
    vol.replace_ssd(new_ssd.clone(), "new-ssd", false)
        .expect("replace the lost SSD");
    assert!(!vol.ssd_lost());
    vol.set_evacuating(None).expect("set draining");
    put(&vol, &mut model, 13 * EXTENT, &pattern(72, EXTENT as usize));
    assert_eq!(tier_of(&vol, 13), Some(Tier::Ssd));
    vol.flush().expect("flush");
    drop(vol);
    new_ssd.power_cut();
    bed.power_cut();
    let devices = Devices {
        ssd: new_ssd as Arc<dyn BlockDevice>,
        hdd: bed.hdd.clone() as Arc<dyn BlockDevice>,
    };
    let opts = VolumeOptions {
        heat: bed.heat,
        clock: bed.clock.clone(),
        ..Default::default()
    };
    let store: Arc<dyn MetaStore> = bed.store.clone();
    let vol = Volume::open_with(devices, store, opts).expect("open with the new SSD");
    assert!(!vol.ssd_lost());
    assert_lost_reads(&vol, &model, &lost, "with the new SSD");
    assert_accounting(&vol, SLOTS);
}

/// A store that fails every change from its `n`-th on, as a process that
/// dies there: what was put before stays (a kill) or only what was flushed
/// (a power cut, [`MemStore::power_cut`]).
struct DiesAfter {
    inner: Arc<MemStore>,
    left: AtomicU64,
}

impl DiesAfter {
    fn step(&self) -> StoreResult<()> {
        self.left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .map(|_| ())
            .map_err(|_| StoreError::Io(std::io::Error::other("the process died here")))
    }
}

impl MetaStore for DiesAfter {
    fn get(&self, key: &str) -> StoreResult<Option<Vec<u8>>> {
        self.inner.get(key)
    }
    fn put(&self, key: &str, value: &[u8]) -> StoreResult<()> {
        self.step()?;
        self.inner.put(key, value)
    }
    fn load_extents(&self) -> StoreResult<Vec<(u64, Vec<u8>)>> {
        self.inner.load_extents()
    }
    fn put_extent(&self, index: u64, record: &[u8]) -> StoreResult<()> {
        self.step()?;
        self.inner.put_extent(index, record)
    }
    fn remove_extent(&self, index: u64) -> StoreResult<()> {
        self.step()?;
        self.inner.remove_extent(index)
    }
    fn flush(&self) -> StoreResult<()> {
        self.step()?;
        self.inner.flush()
    }
    fn clear(&self) -> StoreResult<()> {
        self.step()?;
        self.inner.clear()
    }
}

#[test]
fn a_crash_at_each_step_of_the_salvage_ends_the_same_once_taken_up() {
    let mut steps_seen = 0;
    for power_cut in [false, true] {
        for n in 0.. {
            let bed = Bed::new(8, 32, 2);
            let vol = bed.open();
            let (model, lost) = layout(&bed, &vol);
            drop(vol);
            bed.power_cut();
            let dying = Arc::new(DiesAfter {
                inner: bed.store.clone(),
                left: AtomicU64::new(n),
            });
            let what = format!("crash at store change {n}, power cut {power_cut}");
            match open_lost(&bed, dying) {
                Ok(vol) => {
                    // The salvage ran to its end before the n-th change.
                    assert_lost_reads(&vol, &model, &lost, &what);
                    steps_seen = steps_seen.max(n);
                    break;
                }
                Err(e) => assert!(e.to_string().contains("died here"), "{what}: {e}"),
            }
            if power_cut {
                bed.power_cut();
            }
            let vol = open_lost(&bed, bed.store.clone())
                .unwrap_or_else(|e| panic!("{what}: taking the salvage up: {e}"));
            assert_lost_reads(&vol, &model, &lost, &what);
            assert_accounting(&vol, SLOTS);
            assert_eq!(vol.usage().mapped[Tier::Ssd.index()], 0, "{what}");
        }
    }
    // The marks, a flush, a record per touched extent, a flush: the loop
    // went through all of them.
    assert!(
        steps_seen >= 8,
        "only {steps_seen} store changes were crashed at"
    );
}

#[test]
fn a_volume_with_nothing_only_on_the_ssd_loses_nothing() {
    let bed = Bed::new(8, 32, 2);
    let vol = bed.open();
    let mut model = model_of(&vol);
    for e in 0..3 {
        hdd_extent(&vol, &mut model, e, 0, &pattern(e, EXTENT as usize));
        assert!(matches!(
            migrate(&vol, e, Tier::Ssd),
            tierd::volume::MoveOutcome::Moved(_)
        ));
    }
    vol.flush().expect("flush");
    vol.close().expect("clean close");
    drop(vol);
    let vol = open_lost(&bed, bed.store.clone()).expect("open without the SSD");
    assert_lost_reads(&vol, &model, &BTreeSet::new(), "all copies clean");
    assert_eq!(vol.lost_bytes(), 0);
}

#[test]
fn a_rewrite_of_a_lost_block_reads_back_once_flushed_and_never_as_zeros() {
    let (bed, vol, mut model, mut lost) = lost_after_layout();
    // Not flushed, then a power cut: the rewrite may be lost, and then
    // the block is lost again, never zeros.
    let b = 9 * BPE;
    vol.write(b * BLK, &pattern(80, BLK as usize), false)
        .expect("rewrite");
    drop(vol);
    bed.power_cut();
    let vol = open_lost(&bed, bed.store.clone()).expect("reopen");
    assert_lost_reads(&vol, &model, &lost, "an unflushed rewrite, power cut");
    // Flushed once: the write's record is durable, its mark is cleared in
    // memory and put in the store, but not flushed; a power cut then
    // keeps the data (a mark speaks only for unwritten blocks).
    put(&vol, &mut model, b * BLK, &pattern(81, BLK as usize));
    lost.remove(&b);
    vol.flush().expect("flush");
    drop(vol);
    bed.power_cut();
    let vol = open_lost(&bed, bed.store.clone()).expect("reopen");
    assert_lost_reads(&vol, &model, &lost, "a flushed rewrite, power cut");
    // And a discard of it now reads zeros, not the lost mark.
    vol.discard(b * BLK, BLK, false, false, true)
        .expect("trim with FUA");
    model[(b * BLK) as usize..((b + 1) * BLK) as usize].fill(0);
    drop(vol);
    bed.power_cut();
    let vol = open_lost(&bed, bed.store.clone()).expect("reopen");
    assert_lost_reads(&vol, &model, &lost, "a trimmed rewrite, power cut");
}

/// The store may make a write's mapping durable before the data is synced
/// (sled flushes on its own): a kill then leaves the data in the OS cache
/// only. The next open forgets the block's mark (it is written), and must
/// sync the data before that is recorded: a power cut after the open
/// would otherwise bring back the block's older bytes in place of its
/// error.
#[test]
fn an_open_that_forgets_a_mark_syncs_the_rewrite_first() {
    let (bed, vol, mut model, mut lost) = lost_after_layout();
    let b = 9 * BPE + 1;
    assert!(lost.contains(&b), "block {b} is one the loss marked");
    put(&vol, &mut model, b * BLK, &pattern(90, BLK as usize));
    lost.remove(&b);
    // The store's own flush, no device sync; then a kill (the HDD keeps
    // the unsynced write, as the OS cache does).
    bed.store.flush().expect("store flush");
    drop(vol);
    let vol = open_lost(&bed, bed.store.clone()).expect("reopen after the kill");
    assert_lost_reads(&vol, &model, &lost, "after the kill");
    drop(vol);
    bed.power_cut();
    let vol = open_lost(&bed, bed.store.clone()).expect("reopen after a power cut");
    assert_lost_reads(&vol, &model, &lost, "a power cut after the open");
}

/// Without its SSD the volume keeps the SSD drained and closed: draining
/// cannot be cancelled or moved to the HDD, and once the HDD is full a
/// write of new data answers "no space", never an I/O error of the dead
/// device.
#[test]
fn the_lost_ssd_stays_closed_and_a_full_hdd_says_no_space() {
    let (_bed, vol, mut model, mut lost) = lost_after_layout();
    for tier in [None, Some(Tier::Hdd)] {
        let e = vol
            .set_evacuating(tier)
            .expect_err("draining changed while the SSD is lost");
        assert!(matches!(e, VolumeError::SsdGone), "{e}");
        assert_eq!(vol.evacuating(), Some(Tier::Ssd));
    }
    vol.set_evacuating(Some(Tier::Ssd))
        .expect("the SSD stays drained");
    let mut full = 0;
    for e in 0..vol.size() / EXTENT {
        if tier_of(&vol, e).is_some() {
            continue;
        }
        let at = e * EXTENT;
        match vol.write(at, &pattern(100 + e, BLK as usize), false) {
            Ok(()) => {
                model[at as usize..(at + BLK) as usize]
                    .copy_from_slice(&pattern(100 + e, BLK as usize));
                // A whole-block write makes a lost block usable again.
                lost.remove(&(at / BLK));
                assert_eq!(tier_of(&vol, e), Some(Tier::Hdd), "extent {e}");
            }
            Err(err) => {
                assert!(
                    matches!(err, VolumeError::NoSpace),
                    "extent {e}: a write of new data failed with {err}, not \"no space\""
                );
                full += 1;
            }
        }
    }
    assert!(
        full > 0,
        "the HDD never filled: the test did not reach a full HDD"
    );
    vol.flush().expect("flush");
    assert_lost_reads(&vol, &model, &lost, "a full HDD");
}

/// Zeros written over part of a lost block are refused as a partial write
/// is (the rest of the block is not known); zeros over whole lost blocks
/// make them usable, as a discard does. Both in an extent the salvage
/// unmapped and in ones it kept (on a copy, and logged blocks of an HDD
/// extent).
#[test]
fn zeros_over_part_of_a_lost_block_are_refused_and_whole_blocks_come_back() {
    let (_bed, vol, mut model, mut lost) = lost_after_layout();
    for b in [9 * BPE + 7, 5 * BPE + 4, 2 * BPE + 3] {
        assert!(lost.contains(&b), "block {b} is lost");
        for (at, len) in [
            (b * BLK + 512, 1024),
            (b * BLK, 2048),
            (b * BLK + 2048, 2048),
        ] {
            let e = vol
                .discard(at, len, true, false, false)
                .expect_err("zeros over part of a lost block");
            assert!(matches!(e, VolumeError::Lost { .. }), "{e}");
        }
        // A plain discard of part of it is a no-op, not an error.
        vol.discard(b * BLK + 512, 1024, false, false, false)
            .expect("a discard of part of a lost block");
        assert_lost_reads(&vol, &model, &lost, "after refused zeros");
        vol.discard(b * BLK, BLK, true, false, false)
            .expect("zeros over the whole lost block");
        model[(b * BLK) as usize..((b + 1) * BLK) as usize].fill(0);
        lost.remove(&b);
        assert_lost_reads(&vol, &model, &lost, "after zeros over the whole block");
    }
}

#[test]
fn the_ssd_in_use_is_known_by_its_superblock() {
    // `tierd serve --ssd-lost` is refused while the SSD's path reads as
    // the SSD in use: this is its check.
    let bed = Bed::new(8, 32, 2);
    drop(bed.open());
    let read_sb = |dev: &MemDevice| {
        let mut b = vec![0u8; tierd::volume::PROBE_SIZE];
        dev.read_at(&mut b, 0).expect("read");
        tierd::volume::Superblock::decode(&b).expect("superblock")
    };
    let store = bed.store.as_ref();
    assert!(tierd::volume::is_ssd_in_use(store, &read_sb(&bed.ssd)).expect("check"));
    assert!(!tierd::volume::is_ssd_in_use(store, &read_sb(&bed.hdd)).expect("check"));
    // Another volume's SSD is not this one's.
    let other = Bed::new(8, 32, 2);
    assert!(!tierd::volume::is_ssd_in_use(store, &read_sb(&other.ssd)).expect("check"));
}
