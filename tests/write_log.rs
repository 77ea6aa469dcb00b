//! The SSD write log: a write to an extent living on the HDD lands in 4 KiB
//! places of log segments on the SSD (the HDD is not touched), reads take
//! each block from its newest place (partial-block writes merged with the
//! logged data; part of a block whose data is on the HDD is written there
//! in place, never read first), with the log full new blocks go to the HDD
//! in place, TRIM and WRITE_ZEROES over logged blocks read as zeros and give
//! their places back, write-back copies logged blocks home and frees the
//! segments, logged data survives restarts (clean or not), long sequential
//! streams and HDD-pinned extents bypass the log (but never leave a logged
//! block stale) — a stream only while users' reads are not queueing on the
//! HDD — and a promotion takes every block from its newest place.

mod support;

use support::*;
use tierd::units::IoHint;
use tierd::volume::{MoveOutcome, Stats, Tier};

const BLK: u64 = 4096;

fn at(extent: u64, block: u64) -> u64 {
    extent * EXTENT + block * BLK
}

#[test]
fn writes_to_an_hdd_extent_land_in_the_log_not_on_the_hdd() {
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    let mut model = model_of(&vol);
    hdd_extent(&vol, &mut model, 0, 0, &pattern(1, EXTENT as usize));
    assert_eq!(vol.usage().log.segments, 0);
    let hdd_image = bed.hdd.snapshot();
    let (ssd0, hdd0) = (dev_written(&vol, Tier::Ssd), dev_written(&vol, Tier::Hdd));

    put(&vol, &mut model, at(0, 3), &pattern(2, BLK as usize));
    put(&vol, &mut model, at(0, 7), &pattern(3, 2 * BLK as usize));
    put(&vol, &mut model, at(0, 15), &pattern(4, BLK as usize));

    assert!(
        bed.hdd.snapshot() == hdd_image,
        "a write to an HDD extent touched the HDD"
    );
    assert_eq!(dev_written(&vol, Tier::Hdd), hdd0, "HDD write bytes grew");
    assert_eq!(
        dev_written(&vol, Tier::Ssd) - ssd0,
        4 * BLK,
        "the log takes exactly the blocks written"
    );
    assert_eq!(logged_blocks(&vol, 0), vec![3, 7, 8, 15]);
    let u = vol.usage();
    assert_eq!(u.logged_blocks, 4, "{u:?}");
    assert_eq!((u.log.segments, u.log.used), (1, 4), "{u:?}");
    assert_eq!(Stats::get(&vol.stats().log_writes), 3);
    assert_eq!(Stats::get(&vol.stats().log_write_bytes), 4 * BLK);
    assert_eq!(
        tier_of(&vol, 0),
        Some(Tier::Hdd),
        "the extent stays on the HDD"
    );
    assert_eq!(vol.logged_extents(), vec![(0, 4)]);
    assert_reads(&vol, &model, "after logging");
    vol.flush().expect("flush");
    assert_reads(&vol, &model, "after a flush");
    assert_accounting(&vol, 24);
}

#[test]
fn partial_block_writes_over_hdd_data_go_in_place_and_merge_with_logged_data() {
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    let mut model = model_of(&vol);
    hdd_extent(&vol, &mut model, 0, 0, &pattern(1, EXTENT as usize));
    // Extent 1: only blocks 2..=4 written.
    hdd_extent(&vol, &mut model, 1, 2 * BLK, &pattern(2, 3 * BLK as usize));
    let hdd_written = dev_written(&vol, Tier::Hdd);

    // Part of a block whose data is on the HDD: in place on the HDD, the
    // exact bytes, without reading the rest of the block first (logging it
    // would).
    let hdd_read = dev_read(&vol, Tier::Hdd);
    put(&vol, &mut model, at(0, 5) + 10, &pattern(3, 100));
    assert_eq!(logged_blocks(&vol, 0), Vec::<u32>::new());
    assert_eq!(dev_written(&vol, Tier::Hdd) - hdd_written, 100);
    assert_eq!(dev_read(&vol, Tier::Hdd), hdd_read, "read the HDD to write");
    assert_reads(&vol, &model, "100 bytes over HDD data");
    // A whole block is logged; then part of it goes to the same place.
    put(&vol, &mut model, at(0, 5), &pattern(9, BLK as usize));
    assert_eq!(logged_blocks(&vol, 0), vec![5]);
    let place = vol.mapping(0).expect("mapped").logged_at(5);
    put(&vol, &mut model, at(0, 5) + 2000, &pattern(4, 3000));
    assert_eq!(vol.mapping(0).expect("mapped").logged_at(5), place);
    assert_reads(&vol, &model, "3000 bytes over logged data");
    // Straddling a logged block and part of one only on the HDD: the
    // logged part to its place, the rest in place on the HDD, nothing
    // stale either way.
    put(&vol, &mut model, at(0, 5) + 4000, &pattern(5, 300));
    assert_eq!(logged_blocks(&vol, 0), vec![5]);
    assert_reads(&vol, &model, "across a logged and an HDD block");
    // Unwritten blocks of an HDD extent: logged, zeros around the data.
    let hdd_written = dev_written(&vol, Tier::Hdd);
    put(&vol, &mut model, at(1, 0) + 7, &pattern(6, 50));
    put(&vol, &mut model, at(1, 9) + 4000, &pattern(7, 200));
    assert_eq!(logged_blocks(&vol, 1), vec![0, 9, 10]);
    assert_eq!(dev_written(&vol, Tier::Hdd), hdd_written);
    // Written HDD blocks 3 and 4, both partly: in place.
    let hdd_read = dev_read(&vol, Tier::Hdd);
    put(&vol, &mut model, at(1, 3) + 4090, &pattern(8, 10));
    assert_eq!(logged_blocks(&vol, 1), vec![0, 9, 10]);
    assert_eq!(dev_written(&vol, Tier::Hdd) - hdd_written, 10);
    assert_eq!(dev_read(&vol, Tier::Hdd), hdd_read, "read the HDD to write");
    assert_reads(&vol, &model, "partial writes into an HDD extent");
    // The unwritten blocks of extent 1 still report as zero.
    let runs = vol.block_status(EXTENT, EXTENT, 64).expect("block status");
    let zero: Vec<(u64, bool)> = runs.iter().map(|r| (r.len / BLK, r.zero)).collect();
    assert_eq!(
        zero,
        vec![
            (1, false),
            (1, true),
            (3, false),
            (4, true),
            (2, false),
            (5, true)
        ]
    );
    vol.close().expect("close");
    drop(vol);
    let vol = bed.open();
    assert_reads(&vol, &model, "after a restart");
    assert_accounting(&vol, 24);
}

#[test]
fn with_the_log_full_new_blocks_go_to_the_hdd_in_place() {
    // One reserve slot: the log holds one segment of 16 places.
    let bed = Bed::new(8, 16, 1);
    let vol = bed.open();
    let mut model = model_of(&vol);
    hdd_extent(&vol, &mut model, 0, 0, &pattern(1, EXTENT as usize));
    hdd_extent(&vol, &mut model, 1, 0, &pattern(2, EXTENT as usize));
    // Ten blocks of extent 0 and six of extent 1 fill the log.
    put(&vol, &mut model, at(0, 0), &pattern(3, 10 * BLK as usize));
    put(&vol, &mut model, at(1, 0), &pattern(4, 6 * BLK as usize));
    let u = vol.usage();
    assert_eq!(
        (u.log.segments, u.log.used, u.log.places),
        (1, 16, 16),
        "{u:?}"
    );
    assert_eq!(Stats::get(&vol.stats().log_full), 0);

    // A new block: in place on the HDD.
    let (ssd0, hdd0) = (dev_written(&vol, Tier::Ssd), dev_written(&vol, Tier::Hdd));
    put(&vol, &mut model, at(1, 12), &pattern(5, BLK as usize));
    assert_eq!(Stats::get(&vol.stats().log_full), 1);
    assert_eq!(dev_written(&vol, Tier::Hdd) - hdd0, BLK);
    assert_eq!(dev_written(&vol, Tier::Ssd), ssd0);
    assert_eq!(vol.usage().logged_blocks, 16);
    // A partial block in place: merged with its HDD data.
    put(&vol, &mut model, at(1, 13) + 333, &pattern(6, 1000));
    assert_eq!(Stats::get(&vol.stats().log_full), 2);
    assert_reads(&vol, &model, "in-place writes with the log full");
    // Logged blocks are still rewritten in the log, never on the HDD.
    let (ssd0, hdd0) = (dev_written(&vol, Tier::Ssd), dev_written(&vol, Tier::Hdd));
    put(&vol, &mut model, at(0, 4) + 100, &pattern(7, 2000));
    assert_eq!(
        dev_written(&vol, Tier::Hdd),
        hdd0,
        "a logged block went home"
    );
    assert_eq!(dev_written(&vol, Tier::Ssd) - ssd0, 2000);
    assert_eq!(Stats::get(&vol.stats().log_full), 2, "the log took it");
    // A write over logged blocks 4, 5 and new blocks 6..=9 of extent 1:
    // split between the log and the HDD.
    let (ssd0, hdd0) = (dev_written(&vol, Tier::Ssd), dev_written(&vol, Tier::Hdd));
    put(&vol, &mut model, at(1, 4), &pattern(8, 6 * BLK as usize));
    assert_eq!(dev_written(&vol, Tier::Ssd) - ssd0, 2 * BLK);
    assert_eq!(dev_written(&vol, Tier::Hdd) - hdd0, 4 * BLK);
    assert_eq!(logged_blocks(&vol, 1), vec![0, 1, 2, 3, 4, 5]);
    assert_eq!(Stats::get(&vol.stats().log_full), 3);
    assert_reads(&vol, &model, "a write split between the log and the HDD");

    // Write-back of extent 0 frees ten places: the log takes blocks again.
    let out = write_back(&vol, &[0]);
    assert_eq!(out, vec![(0, MoveOutcome::Moved(10 * BLK))]);
    assert_eq!(vol.usage().log.used, 6);
    let full = Stats::get(&vol.stats().log_full);
    put(&vol, &mut model, at(1, 10), &pattern(9, BLK as usize));
    assert_eq!(Stats::get(&vol.stats().log_full), full);
    assert_eq!(logged_blocks(&vol, 1), vec![0, 1, 2, 3, 4, 5, 10]);
    assert_reads(&vol, &model, "after a write-back made room");
    vol.flush().expect("flush");
    power_cycle(&bed, vol, &model, "after a power cut", 24);
}

#[test]
fn trim_and_write_zeroes_over_logged_blocks() {
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    let mut model = model_of(&vol);
    for e in 0..3 {
        hdd_extent(&vol, &mut model, e, 0, &pattern(10 + e, EXTENT as usize));
    }
    let ssd_free = vol.free_slots(Tier::Ssd);
    put(&vol, &mut model, at(0, 2), &pattern(1, 5 * BLK as usize));
    put(&vol, &mut model, at(1, 0), &pattern(2, 4 * BLK as usize));
    put(&vol, &mut model, at(2, 8), &pattern(3, 3 * BLK as usize));
    assert_eq!(vol.usage().logged_blocks, 12);
    let hdd_image = bed.hdd.snapshot();

    // TRIM of logged blocks 3 and 4: zeros, no longer logged; their places
    // are free after the next flush.
    vol.discard(at(0, 3), 2 * BLK, false, false, false)
        .expect("trim");
    model[at(0, 3) as usize..at(0, 5) as usize].fill(0);
    assert_eq!(logged_blocks(&vol, 0), vec![2, 5, 6]);
    assert_eq!(vol.usage().log.used, 12, "places reused before a flush");
    vol.flush().expect("flush");
    assert_eq!(vol.usage().log.used, 10);
    // WRITE_ZEROES of part of logged block 5: zeros into its log place.
    vol.discard(at(0, 5) + 100, 200, true, false, false)
        .expect("zero");
    model[(at(0, 5) + 100) as usize..(at(0, 5) + 300) as usize].fill(0);
    assert_eq!(logged_blocks(&vol, 0), vec![2, 5, 6]);
    assert!(
        bed.hdd.snapshot() == hdd_image,
        "zeroing logged blocks touched the HDD"
    );
    // Zeroes straddling logged block 6 and HDD block 7.
    vol.discard(at(0, 6) + 4000, 500, true, false, false)
        .expect("zero");
    model[(at(0, 6) + 4000) as usize..(at(0, 6) + 4500) as usize].fill(0);
    assert_reads(&vol, &model, "trim and zeroes over logged blocks");

    // Extent 1 zeroed whole, allocation kept: nothing logged, all zeros.
    vol.discard(EXTENT, EXTENT, true, true, false)
        .expect("zero extent 1");
    model[EXTENT as usize..2 * EXTENT as usize].fill(0);
    let m = vol.mapping(1).expect("still allocated");
    assert!(m.logged.is_empty() && m.written.is_empty(), "{m:?}");
    // Extent 2 trimmed whole: unmapped, its places given back.
    vol.discard(2 * EXTENT, EXTENT, false, false, false)
        .expect("trim extent 2");
    model[2 * EXTENT as usize..3 * EXTENT as usize].fill(0);
    assert_eq!(vol.mapping(2), None);
    assert_reads(&vol, &model, "whole extents zeroed and trimmed");
    vol.flush().expect("flush");
    let u = vol.usage();
    assert_eq!(
        (u.logged_blocks, u.log.used, u.log.segments),
        (3, 3, 1),
        "{u:?}"
    );
    assert_accounting(&vol, 24);

    // Trimmed blocks written again land in the log anew.
    put(&vol, &mut model, at(0, 3), &pattern(4, BLK as usize));
    put(&vol, &mut model, at(1, 8) + 5, &pattern(5, 10));
    assert_eq!(logged_blocks(&vol, 0), vec![2, 3, 5, 6]);
    assert_eq!(logged_blocks(&vol, 1), vec![8]);
    assert_reads(&vol, &model, "rewritten after trim");
    // Once everything logged is gone the segment goes back to the SSD.
    vol.discard(0, 2 * EXTENT, false, false, false)
        .expect("trim 0 and 1");
    model[..2 * EXTENT as usize].fill(0);
    vol.flush().expect("flush");
    assert_eq!(vol.usage().log.segments, 0);
    assert_eq!(vol.free_slots(Tier::Ssd), ssd_free);
    vol.close().expect("close");
    drop(vol);
    let vol = bed.open();
    assert_reads(&vol, &model, "after a restart");
    assert_accounting(&vol, 24);
}

#[test]
fn write_back_empties_the_log_and_gives_its_segments_back() {
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    let mut model = model_of(&vol);
    hdd_extent(&vol, &mut model, 0, 0, &pattern(1, EXTENT as usize));
    hdd_extent(&vol, &mut model, 1, BLK, &pattern(2, 2 * BLK as usize));
    hdd_extent(&vol, &mut model, 2, 0, &pattern(3, EXTENT as usize));
    let ssd_free = vol.free_slots(Tier::Ssd);
    // 4 neighbouring blocks in one write, a partial block into an
    // unwritten one, 11 blocks of extent 2, then one more: two segments.
    put(&vol, &mut model, at(0, 4), &pattern(4, 4 * BLK as usize));
    put(&vol, &mut model, at(1, 9) + 17, &pattern(5, 99));
    put(&vol, &mut model, at(2, 0), &pattern(6, 11 * BLK as usize));
    put(&vol, &mut model, at(0, 12), &pattern(7, BLK as usize));
    let u = vol.usage();
    assert_eq!((u.logged_blocks, u.log.segments), (17, 2), "{u:?}");
    assert_eq!(vol.free_slots(Tier::Ssd), ssd_free - 2);
    // Logged extents come in HDD slot order (the elevator order).
    let order = vol.logged_extents();
    let slots: Vec<u32> = order
        .iter()
        .map(|(e, _)| vol.mapping(*e).expect("mapped").loc.slot)
        .collect();
    assert!(
        slots.windows(2).all(|w| w[0] < w[1]),
        "{order:?} at {slots:?}"
    );
    assert_eq!(order.iter().map(|(_, n)| n).sum::<u32>(), 17);
    vol.flush().expect("flush");

    let (hdd0, writes0) = (
        dev_written(&vol, Tier::Hdd),
        Stats::get(&vol.stats().dev_writes[Tier::Hdd.index()]),
    );
    let mut out = write_back(&vol, &[0, 1, 2]);
    out.sort_by_key(|(e, _)| *e);
    assert_eq!(
        out,
        vec![
            (0, MoveOutcome::Moved(5 * BLK)),
            (1, MoveOutcome::Moved(BLK)),
            (2, MoveOutcome::Moved(11 * BLK))
        ]
    );
    assert_eq!(dev_written(&vol, Tier::Hdd) - hdd0, 17 * BLK);
    // Extent 0's blocks 4..=7 sit in neighbouring places: one write; the
    // blocks of extent 2 likewise; block 12 and extent 1's block alone.
    assert_eq!(
        Stats::get(&vol.stats().dev_writes[Tier::Hdd.index()]) - writes0,
        4
    );
    let u = vol.usage();
    assert_eq!(
        (u.logged_blocks, u.log.segments, u.log.used),
        (0, 0, 0),
        "{u:?}"
    );
    assert_eq!(vol.free_slots(Tier::Ssd), ssd_free, "segments given back");
    assert_eq!(Stats::get(&vol.stats().written_back_blocks), 17);
    assert!(vol.logged_extents().is_empty());
    // The data is home: the HDD slots hold it, and reads no longer touch
    // the SSD.
    let hdd = bed.hdd.snapshot();
    for e in 0..3u64 {
        let m = vol.mapping(e).expect("mapped");
        assert_eq!(m.loc.tier, Tier::Hdd);
        let base = vol.geometry().slot_offset(m.loc.slot) as usize;
        for b in 0..16u64 {
            if m.written.get(b as u32) {
                let want = &model[at(e, b) as usize..at(e, b + 1) as usize];
                assert!(
                    &hdd[base + (b * BLK) as usize..base + ((b + 1) * BLK) as usize] == want,
                    "extent {e} block {b} is not home on the HDD"
                );
            }
        }
    }
    let ssd_reads = dev_read(&vol, Tier::Ssd);
    assert_reads(&vol, &model, "after write-back");
    assert_eq!(
        dev_read(&vol, Tier::Ssd),
        ssd_reads,
        "a read went to the SSD"
    );
    assert_eq!(write_back(&vol, &[0, 1, 2]).len(), 3);
    assert!(write_back(&vol, &[0, 1, 2])
        .iter()
        .all(|(_, o)| *o == MoveOutcome::Skipped));
    assert_accounting(&vol, 24);
    // Durable without another flush: write-back flushed its mappings.
    drop(vol);
    bed.power_cut();
    let vol = bed.open();
    assert_eq!(vol.usage().logged_blocks, 0);
    assert_reads(&vol, &model, "after a power cut");
    assert_accounting(&vol, 24);
}

#[derive(Debug, Clone, Copy)]
enum Stop {
    Close,
    Drop,
    DropAndPowerCut,
}

#[test]
fn logged_data_survives_restarts_clean_or_not() {
    for stop in [Stop::Close, Stop::Drop, Stop::DropAndPowerCut] {
        let bed = Bed::new(8, 16, 2);
        let vol = bed.open();
        let mut model = model_of(&vol);
        hdd_extent(&vol, &mut model, 0, 0, &pattern(1, EXTENT as usize));
        hdd_extent(&vol, &mut model, 1, 0, &pattern(2, 5 * BLK as usize));
        put(&vol, &mut model, at(0, 1), &pattern(3, 3 * BLK as usize));
        put(&vol, &mut model, at(1, 2) + 7, &pattern(4, 5000));
        put(&vol, &mut model, at(1, 10), &pattern(5, BLK as usize));
        put(&vol, &mut model, at(0, 2) + 1, &pattern(6, 10));
        let before: Vec<_> = (0..2).map(|e| vol.mapping(e)).collect();
        let usage = vol.usage();
        match stop {
            Stop::Close => vol.close().expect("close"),
            Stop::Drop | Stop::DropAndPowerCut => vol.flush().expect("flush"),
        }
        drop(vol);
        if let Stop::DropAndPowerCut = stop {
            bed.power_cut();
        }
        let vol = bed.open();
        let what = format!("{stop:?}");
        assert_reads(&vol, &model, &what);
        let after: Vec<_> = (0..2).map(|e| vol.mapping(e)).collect();
        assert_eq!(after, before, "{what}: mappings changed across the restart");
        let u = vol.usage();
        assert_eq!(
            (u.logged_blocks, u.log.segments, u.log.used),
            (usage.logged_blocks, usage.log.segments, usage.log.used),
            "{what}: {u:?}"
        );
        assert_accounting(&vol, 24);

        // After the restart: a logged block keeps its place, a new block
        // gets a place nobody else holds.
        let place = vol.mapping(0).expect("mapped").logged_at(2);
        put(&vol, &mut model, at(0, 2), &pattern(7, BLK as usize));
        assert_eq!(
            vol.mapping(0).expect("mapped").logged_at(2),
            place,
            "{what}"
        );
        put(&vol, &mut model, at(0, 9), &pattern(8, 2 * BLK as usize));
        put(&vol, &mut model, at(1, 14) + 3, &pattern(9, 4));
        let mut places: Vec<_> = (0..2)
            .flat_map(|e| vol.mapping(e).expect("mapped").logged)
            .map(|l| l.at)
            .collect();
        let n = places.len();
        places.sort();
        places.dedup();
        assert_eq!(places.len(), n, "{what}: a log place is used twice");
        assert_reads(&vol, &model, &format!("{what}: written after the restart"));
        let out = write_back(&vol, &[0, 1]);
        assert!(
            out.iter().all(|(_, o)| matches!(o, MoveOutcome::Moved(_))),
            "{what}: {out:?}"
        );
        assert_eq!(vol.usage().log.segments, 0, "{what}");
        assert_reads(&vol, &model, &format!("{what}: after write-back"));
        drop(vol);
        bed.power_cut();
        let vol = bed.open();
        assert_reads(
            &vol,
            &model,
            &format!("{what}: after write-back and a power cut"),
        );
        assert_accounting(&vol, 24);
    }
}

#[test]
fn sequential_streams_and_hdd_pinned_extents_bypass_the_log() {
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    let mut model = model_of(&vol);
    hdd_extent(&vol, &mut model, 0, 0, &pattern(1, EXTENT as usize));
    hdd_extent(&vol, &mut model, 1, 0, &pattern(2, EXTENT as usize));
    // The test heat config calls a stream sequential past 4 extents.
    let seq = IoHint {
        seq_run: 4 * EXTENT + 1,
    };
    let not_seq = IoHint {
        seq_run: 4 * EXTENT,
    };
    let write = |model: &mut Vec<u8>, off: u64, data: &[u8], hint: IoHint| {
        vol.write_hinted(off, data, false, hint).expect("write");
        model[off as usize..off as usize + data.len()].copy_from_slice(data);
    };

    let ssd0 = dev_written(&vol, Tier::Ssd);
    write(&mut model, at(0, 0), &pattern(3, 4 * BLK as usize), seq);
    assert!(
        logged_blocks(&vol, 0).is_empty(),
        "a long stream was logged"
    );
    assert_eq!(dev_written(&vol, Tier::Ssd), ssd0);
    write(&mut model, at(0, 4), &pattern(4, BLK as usize), not_seq);
    assert_eq!(
        logged_blocks(&vol, 0),
        vec![4],
        "a short stream bypassed the log"
    );
    // A stream over a logged block: the logged block is written in the log
    // (its HDD copy is older), its neighbours on the HDD.
    let hdd0 = dev_written(&vol, Tier::Hdd);
    write(
        &mut model,
        at(0, 3) + 100,
        &pattern(5, 2 * BLK as usize),
        seq,
    );
    assert_eq!(logged_blocks(&vol, 0), vec![4]);
    // Blocks 3 and 5 take 3996 + 100 bytes in place; block 4 the log.
    assert_eq!(dev_written(&vol, Tier::Hdd) - hdd0, BLK);
    assert_reads(&vol, &model, "a stream over a logged block");

    // Extent 1: one block logged, then pinned to the HDD.
    put(&vol, &mut model, at(1, 6), &pattern(6, BLK as usize));
    vol.pin(EXTENT, EXTENT, Some(Tier::Hdd)).expect("pin");
    let ssd0 = dev_written(&vol, Tier::Ssd);
    put(&vol, &mut model, at(1, 0), &pattern(7, 2 * BLK as usize));
    assert_eq!(
        logged_blocks(&vol, 1),
        vec![6],
        "a pinned extent was logged"
    );
    assert_eq!(dev_written(&vol, Tier::Ssd), ssd0);
    put(
        &vol,
        &mut model,
        at(1, 5) + 1,
        &pattern(8, 2 * BLK as usize),
    );
    assert_eq!(logged_blocks(&vol, 1), vec![6]);
    assert_reads(&vol, &model, "writes to a pinned extent");
    // Unpinned, it takes the log again.
    vol.pin(EXTENT, EXTENT, None).expect("unpin");
    put(&vol, &mut model, at(1, 9), &pattern(9, BLK as usize));
    assert_eq!(logged_blocks(&vol, 1), vec![6, 9]);
    vol.close().expect("close");
    drop(vol);
    let vol = bed.open();
    assert_reads(&vol, &model, "after a restart");
    assert_accounting(&vol, 24);
}

#[test]
fn promotion_of_a_partly_logged_extent_has_every_block_right() {
    for shadows in [true, false] {
        let bed = Bed::new(8, 16, 2);
        let vol = bed.open();
        vol.set_shadows(shadows);
        let mut model = model_of(&vol);
        // Blocks 0..=9 written on the HDD, 10..=15 never written.
        hdd_extent(&vol, &mut model, 0, 0, &pattern(1, 10 * BLK as usize));
        let hdd_slot = vol.mapping(0).expect("mapped").loc.slot;
        put(&vol, &mut model, at(0, 2), &pattern(2, BLK as usize));
        put(&vol, &mut model, at(0, 5) + 1000, &pattern(3, 10));
        put(&vol, &mut model, at(0, 9) + 4000, &pattern(4, 500));
        put(&vol, &mut model, at(0, 12) + 3, &pattern(5, 100));
        // Blocks 5 and 9 (partly written over HDD data, 9 with the start
        // of never-written 10) went to the HDD in place; 2 and 12 are
        // logged.
        assert_eq!(logged_blocks(&vol, 0), vec![2, 12]);
        vol.flush().expect("flush");
        let ssd_free = vol.free_slots(Tier::Ssd);
        let hdd_free = vol.free_slots(Tier::Hdd);
        let what = format!("shadows {shadows}");

        let out = migrate(&vol, 0, Tier::Ssd);
        // 12 written blocks copied (the logged ones from the log).
        assert_eq!(out, MoveOutcome::Moved(12 * BLK), "{what}");
        let m = vol.mapping(0).expect("mapped");
        assert_eq!(m.loc.tier, Tier::Ssd, "{what}");
        assert!(m.logged.is_empty(), "{what}: {m:?}");
        let u = vol.usage();
        assert_eq!(
            (u.log.segments, u.log.used, u.logged_blocks),
            (0, 0, 0),
            "{what}"
        );
        // The log's segment came back, the new slot went: even.
        assert_eq!(vol.free_slots(Tier::Ssd), ssd_free, "{what}");
        let written: Vec<u32> = (0..16).filter(|b| m.written.get(*b)).collect();
        assert_eq!(
            written,
            vec![0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12],
            "{what}"
        );
        match &m.shadow {
            Some(s) => {
                assert!(shadows, "a shadow with shadows off");
                assert_eq!(s.slot, hdd_slot);
                let stale: Vec<u32> = (0..16).filter(|b| s.stale.get(*b)).collect();
                assert_eq!(stale, vec![2, 12], "the logged blocks are stale");
                assert_eq!(vol.free_slots(Tier::Hdd), hdd_free);
            }
            None => {
                assert!(!shadows, "no shadow kept");
                assert_eq!(vol.free_slots(Tier::Hdd), hdd_free + 1);
            }
        }
        assert_reads(&vol, &model, &format!("{what}: promoted"));
        vol.close().expect("close");
        drop(vol);
        let vol = bed.open();
        assert_eq!(
            vol.mapping(0),
            Some(m),
            "{what}: the mapping after a restart"
        );
        assert_reads(&vol, &model, &format!("{what}: promoted, restarted"));

        // Back to the HDD: with the shadow, the stretches of written blocks
        // that hold stale ones (0..=10 holds 2, 12 is one), each in one
        // write with its clean blocks (a 64 KiB extent is within what a
        // copy rewrites to save a write): here every written block, as
        // without one.
        let hdd0 = dev_written(&vol, Tier::Hdd);
        let out = migrate(&vol, 0, Tier::Hdd);
        let copied = 12;
        assert_eq!(out, MoveOutcome::Moved(copied * BLK), "{what}");
        assert_eq!(dev_written(&vol, Tier::Hdd) - hdd0, copied * BLK, "{what}");
        assert_reads(&vol, &model, &format!("{what}: demoted again"));
        let m = vol.mapping(0).expect("mapped");
        let base = vol.geometry().slot_offset(m.loc.slot) as usize;
        let hdd = bed.hdd.snapshot();
        for b in written {
            let b = u64::from(b);
            assert!(
                hdd[base + (b * BLK) as usize..base + ((b + 1) * BLK) as usize]
                    == model[at(0, b) as usize..at(0, b + 1) as usize],
                "{what}: block {b} on the HDD"
            );
        }
        assert_accounting(&vol, 24);
    }
}

/// Two neighbouring HDD extents with logged blocks (whole, and sectors of
/// one) promoted in one batch: the HDD is read once for both, the logged
/// blocks copied from the log after it (a logged block between two runs
/// from the HDD no longer splits the read), every block right, before and
/// after a restart.
#[test]
fn a_promotion_reads_the_hdd_once_around_logged_blocks() {
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    let mut model = model_of(&vol);
    hdd_extent(&vol, &mut model, 0, 0, &pattern(1, EXTENT as usize));
    hdd_extent(&vol, &mut model, 1, 0, &pattern(2, EXTENT as usize));
    let slots: Vec<u32> = (0..2)
        .map(|e| vol.mapping(e).expect("mapped").loc.slot)
        .collect();
    assert_eq!(slots[1], slots[0] + 1, "neighbouring HDD slots");
    put(&vol, &mut model, at(0, 3), &pattern(3, BLK as usize));
    put(&vol, &mut model, at(1, 7), &pattern(4, BLK as usize));
    put(&vol, &mut model, at(1, 12) + 512, &pattern(5, 1024));
    assert_eq!(logged_blocks(&vol, 0), vec![3]);
    assert_eq!(logged_blocks(&vol, 1), vec![7, 12]);
    vol.flush().expect("flush");
    let reads = |v: &tierd::volume::Volume| {
        tierd::volume::Stats::get(&v.stats().dev_reads[Tier::Hdd.index()])
    };
    let before = reads(&vol);
    let both = [
        (0, tierd::units::Reason::Manual),
        (1, tierd::units::Reason::Manual),
    ];
    let out = tierd::migrate::migrate_batch(&vol, &both, Tier::Ssd, &mut |_| {}).expect("promote");
    assert!(
        out.iter().all(|(_, o)| matches!(o, MoveOutcome::Moved(_))),
        "{out:?}"
    );
    assert_eq!(reads(&vol) - before, 1, "one HDD read for both extents");
    for e in 0..2 {
        let m = vol.mapping(e).expect("mapped");
        assert_eq!((m.loc.tier, m.logged.len()), (Tier::Ssd, 0), "extent {e}");
    }
    assert_reads(&vol, &model, "promoted around logged blocks");
    vol.close().expect("close");
    drop(vol);
    let vol = bed.open();
    assert_reads(&vol, &model, "promoted, restarted");
    assert_accounting(&vol, 24);
}

#[test]
fn sector_aligned_parts_of_blocks_over_hdd_data_land_in_the_log_by_their_sectors() {
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    let mut model = model_of(&vol);
    hdd_extent(&vol, &mut model, 0, 0, &pattern(1, EXTENT as usize));
    let hdd_image = bed.hdd.snapshot();
    let hdd_read = dev_read(&vol, Tier::Hdd);
    // 3 KiB from sector 1 of block 3 (recorded traces write 512-byte
    // sectors), and 1.5 KiB from the last two sectors of block 4 into the
    // first of block 5: on flash, the HDD neither written nor read.
    put(&vol, &mut model, at(0, 3) + 512, &pattern(2, 3072));
    put(&vol, &mut model, at(0, 4) + 3072, &pattern(3, 1536));
    assert!(
        bed.hdd.snapshot() == hdd_image,
        "a logged write touched the HDD"
    );
    assert_eq!(dev_read(&vol, Tier::Hdd), hdd_read, "read the HDD to write");
    let masks = |vol: &tierd::volume::Volume| -> Vec<(u32, u8)> {
        vol.mapping(0)
            .expect("mapped")
            .logged
            .iter()
            .map(|l| (l.block, l.sectors))
            .collect()
    };
    assert_eq!(
        masks(&vol),
        vec![(3, 0b0111_1110), (4, 0b1100_0000), (5, 0b0000_0001)]
    );
    assert_reads(&vol, &model, "parts of blocks over HDD data");
    // More sectors of block 3 go to its place; with the last one the log
    // holds the whole block.
    let place = vol.mapping(0).expect("mapped").logged_at(3);
    put(&vol, &mut model, at(0, 3) + 3584, &pattern(4, 512));
    assert_eq!(masks(&vol)[0], (3, 0b1111_1110));
    put(&vol, &mut model, at(0, 3), &pattern(5, 512));
    assert_eq!(masks(&vol)[0], (3, 0xff));
    assert_eq!(vol.mapping(0).expect("mapped").logged_at(3), place);
    // A write of part of a sector into a block logged in part: the block
    // is completed from the HDD and logged whole.
    put(&vol, &mut model, at(0, 4) + 100, &pattern(6, 200));
    assert_eq!(masks(&vol)[1], (4, 0xff));
    assert_reads(&vol, &model, "merged");
    // Zeros over part of block 5 (logged in part): both halves read zeros.
    vol.discard(at(0, 5) + 256, 1024, true, false, false)
        .expect("write zeroes");
    model[at(0, 5) as usize + 256..at(0, 5) as usize + 1280].fill(0);
    assert_reads(&vol, &model, "zeros over part of a block logged in part");
    // Durable: after a flush and a power cut, and after a clean restart.
    vol.flush().expect("flush");
    let kept = masks(&vol);
    drop(vol);
    bed.power_cut();
    let vol = bed.open();
    assert_eq!(masks(&vol), kept, "the masks after a power cut");
    assert_reads(&vol, &model, "after a power cut");
    vol.close().expect("close");
    drop(vol);
    let vol = bed.open();
    assert_reads(&vol, &model, "after a restart");
    // Write-back sends the sectors home: the HDD slot then holds the model.
    let out = write_back(&vol, &[0]);
    assert!(matches!(out[0].1, MoveOutcome::Moved(_)), "{out:?}");
    assert_eq!(logged_blocks(&vol, 0), Vec::<u32>::new());
    let slot = vol.mapping(0).expect("mapped").loc.slot;
    let base = vol.geometry().slot_offset(slot) as usize;
    assert!(
        bed.hdd.snapshot()[base..base + EXTENT as usize] == model[..EXTENT as usize],
        "written back"
    );
    // Parts logged again, then a promotion: the SSD copy has every sector
    // right, and so does the HDD after the way back.
    put(&vol, &mut model, at(0, 7) + 1024, &pattern(7, 2048));
    put(&vol, &mut model, at(0, 9) + 3584, &pattern(8, 1024));
    assert_eq!(
        masks(&vol),
        vec![(7, 0b0011_1100), (9, 0b1000_0000), (10, 1)]
    );
    assert_eq!(
        migrate(&vol, 0, Tier::Ssd),
        MoveOutcome::Moved(EXTENT + 3072)
    );
    assert_eq!(tier_of(&vol, 0), Some(Tier::Ssd));
    assert_reads(&vol, &model, "promoted");
    assert!(matches!(migrate(&vol, 0, Tier::Hdd), MoveOutcome::Moved(_)));
    assert_reads(&vol, &model, "demoted again");
    let m = vol.mapping(0).expect("mapped");
    let base = vol.geometry().slot_offset(m.loc.slot) as usize;
    assert!(
        bed.hdd.snapshot()[base..base + EXTENT as usize] == model[..EXTENT as usize],
        "on the HDD after the round trip"
    );
    vol.flush().expect("flush");
    assert_accounting(&vol, 24);
}

/// The bed's volume with its HDD given a 5400 rpm drive's timing on the
/// bed's manual clock: an HDD read moves the clock on by its service time.
fn open_timed(bed: &Bed) -> std::sync::Arc<tierd::volume::Volume> {
    use std::sync::Arc;
    use tierd::device::model::ModelKind;
    use tierd::device::{BlockDevice, TimedDevice};
    let hdd: Arc<dyn BlockDevice> = bed.hdd.clone();
    let size = hdd.size();
    let devices = tierd::volume::Devices {
        ssd: bed.ssd.clone(),
        hdd: Arc::new(TimedDevice::new(
            hdd,
            ModelKind::Hdd5400.build(size),
            bed.clock.clone(),
        )),
    };
    let opts = tierd::volume::VolumeOptions {
        heat: bed.heat,
        clock: bed.clock.clone(),
        ..Default::default()
    };
    let store: Arc<dyn tierd::store::MetaStore> = bed.store.clone();
    Arc::new(tierd::volume::Volume::open_with(devices, store, opts).expect("open"))
}

#[test]
fn a_sequential_stream_takes_the_log_while_users_reads_queue_on_the_hdd() {
    let bed = Bed::new(8, 16, 2);
    let vol = open_timed(&bed);
    let mut model = model_of(&vol);
    hdd_extent(&vol, &mut model, 0, 0, &pattern(1, EXTENT as usize));
    hdd_extent(&vol, &mut model, 1, 0, &pattern(2, EXTENT as usize));
    let seq = IoHint {
        seq_run: 4 * EXTENT + 1,
    };
    let write = |model: &mut Vec<u8>, off: u64, data: &[u8]| {
        vol.write_hinted(off, data, false, seq).expect("write");
        model[off as usize..off as usize + data.len()].copy_from_slice(data);
    };
    let read_hdd = || {
        let mut buf = vec![0u8; BLK as usize];
        vol.read(at(1, 9), &mut buf).expect("read");
    };
    // Any modelled HDD read takes longer than a microsecond: with that
    // threshold, one read makes the HDD count as busy with users.
    vol.set_busy_latency(std::time::Duration::from_micros(1));
    read_hdd();
    let hdd0 = dev_written(&vol, Tier::Hdd);
    write(&mut model, at(0, 0), &pattern(3, 2 * BLK as usize));
    assert_eq!(
        logged_blocks(&vol, 0),
        vec![0, 1],
        "a stream beside queueing reads went to the HDD"
    );
    assert_eq!(dev_written(&vol, Tier::Hdd), hdd0);

    // The last read is older than a second: the HDD streams again.
    bed.clock.advance(std::time::Duration::from_secs(2));
    write(&mut model, at(0, 4), &pattern(4, 2 * BLK as usize));
    assert_eq!(
        logged_blocks(&vol, 0),
        vec![0, 1],
        "a stream on a free HDD was logged"
    );
    assert_eq!(dev_written(&vol, Tier::Hdd) - hdd0, 2 * BLK);

    // Threshold zero: the HDD never counts as busy.
    vol.set_busy_latency(std::time::Duration::ZERO);
    read_hdd();
    write(&mut model, at(0, 8), &pattern(5, BLK as usize));
    assert_eq!(logged_blocks(&vol, 0), vec![0, 1]);

    // The 100 ms default: a lone read on an idle disk is far below it.
    vol.set_busy_latency(std::time::Duration::from_millis(100));
    read_hdd();
    write(&mut model, at(0, 10), &pattern(6, BLK as usize));
    assert_eq!(logged_blocks(&vol, 0), vec![0, 1]);
    assert_reads(&vol, &model, "streams beside reads and without");
    vol.close().expect("close");
    drop(vol);
    let vol = bed.open();
    assert_reads(&vol, &model, "after a restart");
    assert_accounting(&vol, 24);
}
