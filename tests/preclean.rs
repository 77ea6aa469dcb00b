//! Pre-cleaning: an SSD extent with no HDD copy is given one (a clean
//! shadow) in idle time, so its later demotion writes nothing. The copy
//! holds exactly the extent's data; a write after it marks its blocks stale
//! and the demotion writes those alone; pre-cleaning stops while the HDD has
//! no slots to spare beyond the reserve and with shadows switched off; the
//! migrator pre-cleans only while the HDD has no user (reads served by the
//! SSD alone do not hold it).

mod support;

use support::*;
use tierd::volume::{MoveOutcome, Stats, Tier, Volume};

const BLK: u64 = 4096;

/// Extents 0 (fully) and 1 (blocks 4..=9) written: both land on the SSD,
/// with no HDD copy.
fn two_ssd_extents(vol: &Volume, model: &mut [u8]) {
    put(vol, model, 0, &pattern(1, EXTENT as usize));
    put(vol, model, EXTENT + 4 * BLK, &pattern(2, 6 * BLK as usize));
    vol.flush().expect("flush");
    for e in 0..2 {
        let m = vol.mapping(e).expect("mapped");
        assert_eq!(m.loc.tier, Tier::Ssd, "extent {e} landed on the SSD");
        assert!(m.shadow.is_none(), "extent {e}: {m:?}");
    }
}

fn preclean(vol: &Volume, extents: &[u64]) -> Vec<(u64, MoveOutcome)> {
    let mut out = tierd::migrate::preclean_batch(vol, extents, &mut |_| {}).expect("pre-clean");
    out.sort_by_key(|(e, _)| *e);
    out
}

#[test]
fn a_preclean_copies_the_written_blocks_and_the_demotion_after_it_writes_nothing() {
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    let mut model = model_of(&vol);
    two_ssd_extents(&vol, &mut model);
    let before = dev_written(&vol, Tier::Hdd);
    let out = preclean(&vol, &[0, 1]);
    assert_eq!(
        out,
        vec![
            (0, MoveOutcome::Moved(EXTENT)),
            (1, MoveOutcome::Moved(6 * BLK))
        ],
        "only written blocks are copied"
    );
    assert_eq!(dev_written(&vol, Tier::Hdd) - before, EXTENT + 6 * BLK);
    assert_eq!(Stats::get(&vol.stats().precleaned), 2);
    for e in 0..2 {
        let m = vol.mapping(e).expect("mapped");
        assert_eq!(m.loc.tier, Tier::Ssd, "a pre-clean does not move {e}");
        let s = m.shadow.expect("a shadow");
        assert_eq!(s.stale.count(16), 0, "extent {e}: the copy is clean");
    }
    assert_reads(&vol, &model, "after the pre-clean");
    assert_accounting(&vol, 24);
    // Nothing to do twice.
    assert_eq!(
        preclean(&vol, &[0, 1]),
        vec![(0, MoveOutcome::Skipped), (1, MoveOutcome::Skipped)]
    );
    let before = dev_written(&vol, Tier::Hdd);
    for e in 0..2 {
        assert_eq!(migrate(&vol, e, Tier::Hdd), MoveOutcome::Moved(0), "{e}");
    }
    assert_eq!(dev_written(&vol, Tier::Hdd), before, "free demotions");
    assert_eq!(Stats::get(&vol.stats().free_demotions), 2);
    assert_reads(&vol, &model, "demoted into the pre-cleaned copies");
    vol.flush().expect("flush");
    power_cycle(&bed, vol, &model, "after a flush and a power cut", 24);
}

#[test]
fn only_what_was_written_after_the_preclean_is_brought_down_again() {
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    let mut model = model_of(&vol);
    two_ssd_extents(&vol, &mut model);
    preclean(&vol, &[0, 1]);
    put(&vol, &mut model, 2 * BLK, &pattern(7, BLK as usize));
    put(
        &vol,
        &mut model,
        EXTENT + 12 * BLK,
        &pattern(8, 2 * BLK as usize),
    );
    let stale = |e| {
        vol.mapping(e)
            .and_then(|m| m.shadow)
            .map(|s| s.stale.count(16))
    };
    assert_eq!((stale(0), stale(1)), (Some(1), Some(2)));
    let before = dev_written(&vol, Tier::Hdd);
    for e in 0..2 {
        assert!(matches!(migrate(&vol, e, Tier::Hdd), MoveOutcome::Moved(_)));
    }
    // Extent 0 whole (its one stretch of written blocks holds the stale
    // block, and the rest of a 64 KiB extent is within what a copy
    // rewrites to save a write); extent 1 its new stretch, blocks 12 and
    // 13, and not 4..=9 (a stretch of its own, clean).
    assert_eq!(dev_written(&vol, Tier::Hdd) - before, EXTENT + 2 * BLK);
    assert_reads(&vol, &model, "demoted with stale blocks");
}

#[test]
fn no_preclean_without_hdd_room_to_spare_or_with_shadows_off() {
    // 4 HDD slots, reserve 2: two extents on the HDD leave 2 free, not more
    // than the reserve.
    let bed = Bed::new(8, 4, 2);
    let vol = bed.open();
    let mut model = model_of(&vol);
    hdd_extent(&vol, &mut model, 2, 0, &pattern(3, EXTENT as usize));
    hdd_extent(&vol, &mut model, 3, 0, &pattern(4, EXTENT as usize));
    two_ssd_extents(&vol, &mut model);
    assert_eq!(
        preclean(&vol, &[0, 1]),
        vec![(0, MoveOutcome::NoRoom), (1, MoveOutcome::NoRoom)]
    );
    assert_eq!(vol.usage().shadows, 0);

    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    let mut model = model_of(&vol);
    two_ssd_extents(&vol, &mut model);
    vol.set_shadows(false);
    assert_eq!(
        preclean(&vol, &[0, 1]),
        vec![(0, MoveOutcome::NoRoom), (1, MoveOutcome::NoRoom)]
    );
    assert_reads(&vol, &model, "nothing changed");
}

#[test]
fn the_migrator_precleans_only_while_the_hdd_has_no_user() {
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    let mut model = model_of(&vol);
    for e in 3..8 {
        hdd_extent(&vol, &mut model, e, 0, &pattern(e, EXTENT as usize));
    }
    two_ssd_extents(&vol, &mut model);
    let m = bed.migrator(&vol);
    // A user reads the HDD just before every round (another extent each
    // time, so none earns a promotion): no copy is written.
    let mut buf = vec![0u8; BLK as usize];
    for e in 3..8u64 {
        bed.clock.advance(std::time::Duration::from_secs(2));
        vol.read(e * EXTENT, &mut buf).expect("read");
        let r = m.run_round();
        assert_eq!((r.precleaned, r.moved), (0, 0), "{r:?}");
        assert_eq!(tier_of(&vol, e), Some(Tier::Hdd), "extent {e} stays put");
    }
    assert_eq!(vol.usage().shadows, 0);
    // Users reading the SSD alone leave the HDD idle: the next rounds give
    // both SSD extents an HDD copy while the reads go on.
    let mut done = 0;
    for _ in 0..4 {
        vol.read(0, &mut buf).expect("read");
        done += bed.round(&m, 2).precleaned;
    }
    assert_eq!(done, 2);
    assert_eq!(vol.usage().shadows, 2);
    assert_reads(&vol, &model, "after the migrator pre-cleaned");
}
