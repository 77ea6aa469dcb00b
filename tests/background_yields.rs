//! Work that can wait waits for the HDD to be free of users: a refill of
//! the reserve above its floor and the write-back of the SSD write log are
//! left for a later round while the HDD served a user within
//! `migrate.speculative-idle`, and run once it has been free that long; and
//! the write log never takes the last few reserve slots, so a promotion can
//! still start a swap while the log is full. A user's stream of writes sent
//! to the HDD in place is noted (`Volume::hdd_stream_idle`), and
//! pre-cleaning that such a stream meets halfway waits for it between its
//! copies (as do the reserve's refills and the exposure bound's copies).

mod support;

use std::sync::Arc;
use std::time::Duration;

use support::*;
use tierd::device::BlockDevice;
use tierd::units::{IoHint, Reason};
use tierd::volume::{Devices, Tier};

const BLK: u64 = 4096;

/// A read of one block of `extent` (on the HDD), a user of the HDD now.
fn user_reads(vol: &tierd::volume::Volume, extent: u64) {
    let mut buf = vec![0u8; BLK as usize];
    vol.read(extent * EXTENT, &mut buf).expect("read");
}

#[test]
fn a_reserve_refill_waits_while_users_read_the_hdd() {
    // 8 SSD slots, 2 of them reserve; 32 HDD slots.
    let bed = Bed::new(8, 32, 2);
    let vol = bed.open();
    // No part of the reserve protected for the recent write rate: the
    // refill never has a floor to restore at once, so it may wait.
    let m = tierd::migrate::Migrator::new(
        vol.clone(),
        vol.heat(),
        tierd::migrate::MigrateConfig {
            bandwidth: tierd::units::ByteSize(0),
            reserve_horizon: Duration::ZERO,
            // The heat migrator's refill (with admission, this bed's
            // reserve would be covered by cleaning: tests/admission.rs).
            admission: false,
            ..tierd::migrate::MigrateConfig::default()
        },
    );
    for e in 0..6 {
        vol.write(e * EXTENT, &pattern(e, EXTENT as usize), false)
            .expect("write");
    }
    bed.round(&m, 1);
    // Two new extents take the reserve; two more spill to the HDD.
    for e in 10..14 {
        vol.write(e * EXTENT, &pattern(e, EXTENT as usize), false)
            .expect("burst write");
    }
    assert_eq!(vol.free_slots(Tier::Ssd), 0);
    bed.clock.advance(Duration::from_secs(2));
    // A user reads the HDD, and the round comes right after it.
    user_reads(&vol, 12);
    let r = m.run_round();
    assert!(r.deferred > 0, "the refill was not deferred: {r:?}");
    assert_eq!(vol.free_slots(Tier::Ssd), 0, "{r:?}");
    assert_eq!(vol.stats().migrations_to(Tier::Hdd, Reason::Reserve), 0);
    // Users keep reading within the window: still waiting.
    bed.clock.advance(Duration::from_millis(200));
    user_reads(&vol, 13);
    bed.clock.advance(Duration::from_millis(200));
    let r = m.run_round();
    assert!(r.deferred > 0, "{r:?}");
    assert_eq!(vol.free_slots(Tier::Ssd), 0);
    // Free of users for longer than speculative-idle: the reserve is back.
    let r = bed.round(&m, 1);
    assert_eq!(r.deferred, 0, "{r:?}");
    assert_eq!(vol.free_slots(Tier::Ssd), 2, "{r:?}");
    assert_eq!(vol.stats().migrations_to(Tier::Hdd, Reason::Reserve), 2);
    for e in (0..6).chain(10..14) {
        let mut buf = vec![0u8; EXTENT as usize];
        vol.read(e * EXTENT, &mut buf).expect("read");
        assert!(buf == pattern(e, EXTENT as usize), "extent {e} data");
    }
    assert_accounting(&vol, 40);
}

#[test]
fn a_users_read_waiting_on_the_hdd_keeps_it_busy_with_users() {
    let bed = Bed::new(8, 32, 2);
    let hdd = Gate::on_reads(bed.hdd.clone(), |len, _| len == BLK as usize);
    let vol = bed.open_on(Devices {
        ssd: bed.ssd.clone() as Arc<dyn BlockDevice>,
        hdd: hdd.clone() as Arc<dyn BlockDevice>,
    });
    for e in 0..12 {
        vol.write(e * EXTENT, &pattern(e, EXTENT as usize), false)
            .expect("write");
    }
    assert_eq!(tier_of(&vol, 11), Some(Tier::Hdd));
    bed.clock.advance(Duration::from_secs(2));
    assert!(vol.hdd_foreground_idle() >= Duration::from_secs(2));
    // A user's read of the HDD, held by the disk (queued behind copies).
    hdd.arm();
    let reader = {
        let vol = vol.clone();
        std::thread::spawn(move || user_reads(&vol, 11))
    };
    hdd.wait_held();
    bed.clock.advance(Duration::from_secs(1));
    assert_eq!(vol.hdd_foreground_idle(), Duration::ZERO, "a read waits");
    assert_eq!(vol.hdd_reads_idle(), Duration::ZERO, "a read waits");
    hdd.release();
    reader.join().expect("the reader");
    bed.clock.advance(Duration::from_millis(300));
    assert_eq!(vol.hdd_foreground_idle(), Duration::from_millis(300));
    assert_eq!(vol.hdd_reads_idle(), Duration::from_millis(300));
}

#[test]
fn the_write_log_goes_back_only_while_the_hdd_is_free_of_users() {
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    let m = bed.migrator(&vol);
    let mut model = model_of(&vol);
    hdd_extent(&vol, &mut model, 0, 0, &pattern(1, EXTENT as usize));
    for e in 1..4 {
        hdd_extent(&vol, &mut model, e, 0, &pattern(1 + e, EXTENT as usize));
    }
    put(&vol, &mut model, 3 * BLK, &pattern(3, BLK as usize));
    assert_eq!(logged_blocks(&vol, 0), vec![3]);
    // The rounds after the write see no user of the HDD but one that reads
    // another extent each time just before the round (one read each: no
    // extent earns a promotion and takes the reads off the HDD).
    for k in 0..3 {
        bed.clock.advance(Duration::from_secs(1));
        user_reads(&vol, 1 + k);
        let r = m.run_round();
        assert_eq!(r.written_back, 0, "{r:?}");
        assert_eq!(logged_blocks(&vol, 0), vec![3]);
    }
    let r = bed.round(&m, 1);
    assert_eq!(r.written_back, 1, "{r:?}");
    assert!(logged_blocks(&vol, 0).is_empty());
    assert_reads(&vol, &model, "after the write-back");
}

#[test]
fn the_write_log_leaves_the_last_reserve_slots_alone() {
    // A reserve of 16 slots: the log takes at most 14 (an eighth kept).
    let bed = Bed::new(24, 64, 16);
    let vol = bed.open();
    let mut model = model_of(&vol);
    for e in 0..32 {
        hdd_extent(&vol, &mut model, e, 0, &pattern(e, EXTENT as usize));
    }
    assert_eq!(vol.log_usage().cap, 14);
    // One block in each of 32 extents, eight rounds: 256 blocks, more
    // than 14 segments of 16 places hold.
    for round in 0..8u64 {
        for e in 0..32u64 {
            let b = (round * 2 + e % 2) % (EXTENT / BLK);
            put(
                &vol,
                &mut model,
                e * EXTENT + b * BLK,
                &pattern(100 + e, BLK as usize),
            );
        }
    }
    let u = vol.log_usage();
    assert_eq!(u.segments, 14, "{u:?}");
    assert!(
        vol.free_slots(Tier::Ssd) >= 2,
        "the log took the last slots: {u:?}"
    );
    assert!(tierd::volume::Stats::get(&vol.stats().log_full) > 0);
    assert_reads(&vol, &model, "with the log full");
}

/// A write hint past the test beds' sequential cutoff (4 extents).
const STREAM: IoHint = IoHint {
    seq_run: 4 * EXTENT + 1,
};

#[test]
fn a_stream_sent_to_the_hdd_in_place_is_noted_and_nothing_else_is() {
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    let mut model = model_of(&vol);
    for e in 0..3 {
        hdd_extent(&vol, &mut model, e, 0, &pattern(e, EXTENT as usize));
    }
    // The SSD extent, written after the HDD ones were moved down.
    vol.write(5 * EXTENT, &pattern(5, EXTENT as usize), false)
        .expect("write");
    assert_eq!(tier_of(&vol, 5), Some(Tier::Ssd));
    assert_eq!(vol.hdd_stream_idle(), Duration::MAX);
    // A random write to HDD data (the log takes it), a read of it, and a
    // stream into the SSD extent: none of them is a stream on the HDD.
    vol.write(EXTENT, &pattern(9, BLK as usize), false)
        .expect("random write");
    assert_eq!(logged_blocks(&vol, 1), vec![0]);
    let mut buf = vec![0u8; BLK as usize];
    vol.read(2 * EXTENT, &mut buf).expect("read");
    vol.write_hinted(5 * EXTENT, &pattern(10, 4 * BLK as usize), false, STREAM)
        .expect("stream to the SSD");
    assert_eq!(vol.hdd_stream_idle(), Duration::MAX);
    // A stream's write into HDD data goes there in place: noted now, and
    // its age grows with the clock until the next one.
    vol.write_hinted(2 * EXTENT, &pattern(11, 4 * BLK as usize), false, STREAM)
        .expect("stream to the HDD");
    assert!(logged_blocks(&vol, 2).is_empty());
    assert_eq!(vol.hdd_stream_idle(), Duration::ZERO);
    bed.clock.advance(Duration::from_millis(300));
    assert_eq!(vol.hdd_stream_idle(), Duration::from_millis(300));
    vol.write_hinted(
        2 * EXTENT + 4 * BLK,
        &pattern(12, 4 * BLK as usize),
        false,
        STREAM,
    )
    .expect("stream to the HDD");
    assert_eq!(vol.hdd_stream_idle(), Duration::ZERO);
}

/// A pre-cleaning batch of two SSD extents (not neighbours on the SSD,
/// so two copies), started with the HDD free of users; the test holds its
/// first write to the HDD and, with `stream`, sends a user's stream write
/// to the HDD meanwhile. Returns the round's report and the seconds the
/// migrator backed off.
fn preclean_met_by(stream: bool) -> (tierd::migrate::RoundReport, f64) {
    let bed = Bed::new(8, 16, 2);
    // The first extent-sized write to the HDD once armed: a copy.
    let gate = Gate::new(bed.hdd.clone(), |len, _| len == EXTENT as usize);
    let devices = Devices {
        ssd: bed.ssd.clone() as Arc<dyn BlockDevice>,
        hdd: gate.clone() as Arc<dyn BlockDevice>,
    };
    let vol = bed.open_on(devices);
    let mut model = model_of(&vol);
    for e in 0..3 {
        put(&vol, &mut model, e * EXTENT, &pattern(e, EXTENT as usize));
    }
    vol.flush().expect("flush");
    // Extent 1 goes down: 0 and 2 stay on the SSD, a slot apart.
    migrate(&vol, 1, Tier::Hdd);
    assert_eq!(tier_of(&vol, 0), Some(Tier::Ssd));
    assert_eq!(tier_of(&vol, 2), Some(Tier::Ssd));
    // Extent 3, new data pinned to the HDD, lands two slots past extent
    // 1's: the pre-clean's new slots (the lowest free ones) then do not
    // continue each other, so its two copies stay two writes (copies into
    // neighbouring slots would go as one).
    vol.pin(3 * EXTENT, EXTENT, Some(Tier::Hdd)).expect("pin");
    put(&vol, &mut model, 3 * EXTENT, &pattern(3, EXTENT as usize));
    vol.flush().expect("flush");
    let slot = |e: u64| vol.mapping(e).expect("mapped").loc;
    assert_eq!(slot(3).tier, Tier::Hdd);
    assert_eq!(slot(3).slot, slot(1).slot + 2, "extent 3's slot");
    // The rest of the HDD filled, then every other slot from 4 on given
    // back: no two free slots neighbour each other, so a batch of moves
    // finds no run to take (`Allocator::alloc_run`) and the two copies
    // land apart.
    for e in 4..18 {
        vol.pin(e * EXTENT, EXTENT, Some(Tier::Hdd)).expect("pin");
        put(&vol, &mut model, e * EXTENT, &pattern(e, EXTENT as usize));
        assert_eq!(slot(e).tier, Tier::Hdd, "extent {e}");
    }
    for e in 4..18 {
        if slot(e).slot >= 4 && slot(e).slot % 2 == 0 {
            vol.discard(e * EXTENT, EXTENT, false, false, false)
                .expect("trim");
            model[(e * EXTENT) as usize..][..EXTENT as usize].fill(0);
        }
    }
    vol.flush().expect("flush");
    assert!(vol.free_slots(Tier::Hdd) >= 4, "room for pre-cleaning");
    let m = Arc::new(bed.migrator(&vol));
    bed.clock.advance(Duration::from_secs(1));
    gate.arm();
    let round = {
        let m = m.clone();
        std::thread::spawn(move || m.run_round())
    };
    gate.wait_held();
    if stream {
        // Extent 1's blocks, in place on the HDD.
        let data = pattern(30, 4 * BLK as usize);
        vol.write_hinted(EXTENT, &data, false, STREAM)
            .expect("stream write");
        model[EXTENT as usize..][..data.len()].copy_from_slice(&data);
        assert!(logged_blocks(&vol, 1).is_empty());
    }
    gate.release();
    let r = round.join().expect("round");
    assert_reads(&vol, &model, "after pre-cleaning");
    (r, m.progress().backoff_secs)
}

#[test]
fn pre_cleaning_waits_between_its_copies_for_a_users_stream_on_the_hdd() {
    // Alone, the batch goes at once.
    let (r, waited) = preclean_met_by(false);
    assert_eq!(r.precleaned, 2, "{r:?}");
    assert_eq!(waited, 0.0);
    // A stream comes while the first copy is under way: the second copy
    // waits until the stream has been quiet for `speculative-idle`.
    let (r, waited) = preclean_met_by(true);
    assert_eq!(r.precleaned, 2, "{r:?}");
    let idle = tierd::migrate::MigrateConfig::default()
        .speculative_idle
        .as_secs_f64();
    assert!(
        waited >= idle - 1e-9 && waited < idle + 0.05,
        "backed off {waited} s, the window is {idle} s"
    );
}
