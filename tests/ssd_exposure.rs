//! Exposure: how much data has its only copy on the SSD, and how long ago
//! the oldest of it was written (`Volume::exposure`, which `tierctl status`
//! and the metrics show). A fresh volume has none; new data on the SSD and
//! writes into the write log (by the sectors it holds) are exposed from
//! their first write, the age growing with the clock; a clean HDD copy
//! (pre-cleaning, a shadow refreshed, write-back, demotion) ends it. Across a restart the bytes
//! come back from the mapping and the age counts from the open, flagged as
//! such; an unclean restart that drops shadows exposes their extents.

mod support;

use std::time::Duration;

use support::*;
use tierd::migrate::{clean_batch, preclean_batch};
use tierd::units::Reason;
use tierd::volume::{Exposure, MoveOutcome, Tier, Volume};

const BLK: u64 = 4096;

fn secs(s: u64) -> Option<Duration> {
    Some(Duration::from_secs(s))
}

fn exposure(vol: &Volume) -> Exposure {
    vol.exposure()
}

const NONE: Exposure = Exposure {
    bytes: 0,
    oldest: None,
    oldest_at_open: false,
};

#[test]
fn a_fresh_volume_has_nothing_only_on_the_ssd() {
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    assert_eq!(exposure(&vol), NONE);
    bed.clock.advance(Duration::from_secs(30));
    assert_eq!(exposure(&vol), NONE);
}

#[test]
fn new_data_on_the_ssd_is_exposed_until_a_clean_hdd_copy_covers_it() {
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    let mut model = model_of(&vol);
    // Three blocks of new data: they land on the SSD, with no HDD copy.
    bed.clock.advance(Duration::from_secs(100));
    put(&vol, &mut model, 2 * BLK, &pattern(1, 3 * BLK as usize));
    assert_eq!(tier_of(&vol, 0), Some(Tier::Ssd));
    assert_eq!(
        exposure(&vol),
        Exposure {
            bytes: 3 * BLK,
            oldest: secs(0),
            oldest_at_open: false
        }
    );
    // The age grows with the clock; more writes add bytes, not youth.
    bed.clock.advance(Duration::from_secs(41));
    assert_eq!(exposure(&vol).oldest, secs(41));
    put(&vol, &mut model, 8 * BLK, &pattern(2, BLK as usize));
    put(&vol, &mut model, EXTENT, &pattern(3, EXTENT as usize));
    assert_eq!(tier_of(&vol, 1), Some(Tier::Ssd));
    bed.clock.advance(Duration::from_secs(9));
    let e = exposure(&vol);
    assert_eq!((e.bytes, e.oldest), (4 * BLK + EXTENT, secs(50)), "{e:?}");
    vol.flush().expect("flush");

    // A pre-clean gives extent 0 a clean HDD copy: only extent 1 is left,
    // exposed since its own first write.
    let out = preclean_batch(&vol, &[0], &mut |_| {}).expect("pre-clean");
    assert_eq!(out, vec![(0, MoveOutcome::Moved(4 * BLK))]);
    assert_eq!(
        exposure(&vol),
        Exposure {
            bytes: EXTENT,
            oldest: secs(9),
            oldest_at_open: false
        }
    );
    // A write to one block marks it stale in the copy: that block alone is
    // exposed again, from now.
    bed.clock.advance(Duration::from_secs(5));
    put(&vol, &mut model, 3 * BLK, &pattern(4, 100));
    let e = exposure(&vol);
    assert_eq!((e.bytes, e.oldest), (EXTENT + BLK, secs(14)), "{e:?}");
    // The copy brought up to date (a refresh) covers it again (the stale
    // block written with the clean ones of its stretch of written blocks,
    // in one write).
    vol.flush().expect("flush");
    bed.clock.advance(Duration::from_secs(1));
    let out = clean_batch(&vol, &[(0, Reason::Manual)], &mut |_| {}).expect("refresh");
    assert_eq!(out, vec![(0, MoveOutcome::Moved(3 * BLK))]);
    assert_eq!(
        (exposure(&vol).bytes, exposure(&vol).oldest),
        (EXTENT, secs(15))
    );

    // Demotion: extent 1 leaves the SSD, nothing is exposed.
    assert!(matches!(migrate(&vol, 1, Tier::Hdd), MoveOutcome::Moved(_)));
    vol.flush().expect("flush");
    assert_eq!(exposure(&vol), NONE);
    assert_reads(&vol, &model, "after cleaning");
    assert_accounting(&vol, 24);
}

#[test]
fn write_log_data_is_exposed_until_it_is_written_back() {
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    let mut model = model_of(&vol);
    hdd_extent(&vol, &mut model, 0, 0, &pattern(1, EXTENT as usize));
    hdd_extent(&vol, &mut model, 1, 0, &pattern(2, EXTENT as usize));
    assert_eq!(exposure(&vol), NONE, "extents on the HDD, nothing logged");

    bed.clock.advance(Duration::from_secs(7));
    put(&vol, &mut model, 3 * BLK, &pattern(3, 2 * BLK as usize));
    assert_eq!(logged_blocks(&vol, 0), vec![3, 4]);
    bed.clock.advance(Duration::from_secs(3));
    put(
        &vol,
        &mut model,
        EXTENT + 9 * BLK,
        &pattern(4, BLK as usize),
    );
    assert_eq!(logged_blocks(&vol, 1), vec![9]);
    // Part of a logged block counts its sectors the log holds: the block
    // already logged in full stays 4 KiB.
    put(&vol, &mut model, 3 * BLK + 512, &pattern(5, 1024));
    // Whole sectors of a block whose data is on the HDD: the log holds
    // those two sectors only, and only they are exposed.
    put(
        &vol,
        &mut model,
        EXTENT + 12 * BLK + 1024,
        &pattern(6, 1024),
    );
    let part = vol
        .mapping(1)
        .and_then(|m| m.logged_entry(12).copied())
        .expect("block 12 logged");
    assert_eq!(part.sectors.count_ones(), 2, "{part:?}");
    bed.clock.advance(Duration::from_secs(2));
    assert_eq!(
        exposure(&vol),
        Exposure {
            bytes: 3 * BLK + 1024,
            oldest: secs(5),
            oldest_at_open: false
        }
    );
    vol.flush().expect("flush");

    // Extent 0 written back: what is left is extent 1's block, younger.
    let out = write_back(&vol, &[0]);
    assert_eq!(out, vec![(0, MoveOutcome::Moved(2 * BLK))]);
    vol.flush().expect("flush");
    assert_eq!(
        (exposure(&vol).bytes, exposure(&vol).oldest),
        (BLK + 1024, secs(2))
    );
    write_back(&vol, &[1]);
    vol.flush().expect("flush");
    assert_eq!(exposure(&vol), NONE);
    assert_reads(&vol, &model, "after write-back");
}

#[test]
fn a_promotion_with_a_clean_copy_exposes_nothing_until_a_write() {
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    let mut model = model_of(&vol);
    hdd_extent(&vol, &mut model, 0, 0, &pattern(1, EXTENT as usize));
    assert!(matches!(migrate(&vol, 0, Tier::Ssd), MoveOutcome::Moved(_)));
    let m = vol.mapping(0).expect("mapped");
    assert_eq!(m.loc.tier, Tier::Ssd);
    assert!(m.shadow.is_some(), "the HDD slot is kept as a copy: {m:?}");
    assert_eq!(exposure(&vol), NONE);
    put(&vol, &mut model, 5 * BLK, &pattern(2, BLK as usize));
    assert_eq!(exposure(&vol).bytes, BLK);
    // Demoting it writes the stale block into the copy: covered.
    assert!(matches!(migrate(&vol, 0, Tier::Hdd), MoveOutcome::Moved(_)));
    vol.flush().expect("flush");
    assert_eq!(exposure(&vol), NONE);
    assert_reads(&vol, &model, "after the demotion");
}

#[test]
fn after_a_restart_the_bytes_come_back_and_the_age_counts_from_the_open() {
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    let mut model = model_of(&vol);
    hdd_extent(&vol, &mut model, 1, 0, &pattern(1, EXTENT as usize));
    put(&vol, &mut model, 0, &pattern(2, 5 * BLK as usize));
    put(
        &vol,
        &mut model,
        EXTENT + 2 * BLK,
        &pattern(3, BLK as usize),
    );
    assert_eq!(logged_blocks(&vol, 1), vec![2]);
    bed.clock.advance(Duration::from_secs(60));
    let before = exposure(&vol);
    assert_eq!((before.bytes, before.oldest), (6 * BLK, secs(60)));
    vol.close().expect("close");
    drop(vol);

    bed.clock.advance(Duration::from_secs(20));
    let vol = bed.open();
    let e = exposure(&vol);
    assert_eq!(
        e,
        Exposure {
            bytes: 6 * BLK,
            oldest: secs(0),
            oldest_at_open: true
        },
        "counted from the open, and said so"
    );
    bed.clock.advance(Duration::from_secs(4));
    assert_eq!(exposure(&vol).oldest, secs(4));
    // A new exposure after the open is younger: the open's stays oldest.
    put(&vol, &mut model, 2 * EXTENT, &pattern(4, BLK as usize));
    let e = exposure(&vol);
    assert_eq!(
        (e.bytes, e.oldest, e.oldest_at_open),
        (7 * BLK, secs(4), true)
    );
    // Once the data from before the open is covered, the age is known.
    write_back(&vol, &[1]);
    assert!(matches!(migrate(&vol, 0, Tier::Hdd), MoveOutcome::Moved(_)));
    vol.flush().expect("flush");
    bed.clock.advance(Duration::from_secs(1));
    assert_eq!(
        exposure(&vol),
        Exposure {
            bytes: BLK,
            oldest: secs(1),
            oldest_at_open: false
        }
    );
    assert_reads(&vol, &model, "after the restart");
}

#[test]
fn an_unclean_restart_drops_the_copies_and_exposes_their_extents() {
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    let mut model = model_of(&vol);
    put(&vol, &mut model, 0, &pattern(1, EXTENT as usize));
    vol.flush().expect("flush");
    let out = preclean_batch(&vol, &[0], &mut |_| {}).expect("pre-clean");
    assert_eq!(out, vec![(0, MoveOutcome::Moved(EXTENT))]);
    assert_eq!(exposure(&vol), NONE);
    // A power cut: the shadow is not trusted after it.
    let vol = power_cycle(&bed, vol, &model, "after the power cut", 24);
    assert!(vol.mapping(0).is_some_and(|m| m.shadow.is_none()));
    assert_eq!(
        exposure(&vol),
        Exposure {
            bytes: EXTENT,
            oldest: secs(0),
            oldest_at_open: true
        }
    );
}
