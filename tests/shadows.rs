//! Clean shadows: a promotion keeps the extent's HDD slot as a shadow while
//! the HDD has room to spare; demoting an extent whose shadow is clean
//! writes nothing to the HDD, and one with stale blocks writes those (with
//! the clean blocks around them where that saves a write);
//! a clean close keeps the shadows, an unclean stop drops them at the next
//! open (the SSD's data wins); and under HDD pressure shadows give way, so
//! writes to new extents never fail while logical space remains.

mod support;

use rand::{Rng, SeedableRng};
use support::*;
use tierd::volume::{MoveOutcome, Stats, Tier, Volume};

const BLK: u64 = 4096;

fn at(extent: u64, block: u64) -> u64 {
    extent * EXTENT + block * BLK
}

/// Extent 0 fully written and extent 1 with blocks 4..=9, both moved to the
/// HDD and promoted back: two SSD extents with clean shadows. Returns their
/// shadow slots.
fn two_shadows(vol: &Volume, model: &mut [u8]) -> [u32; 2] {
    hdd_extent(vol, model, 0, 0, &pattern(1, EXTENT as usize));
    hdd_extent(vol, model, 1, 4 * BLK, &pattern(2, 6 * BLK as usize));
    let slots = [0, 1].map(|e| vol.mapping(e).expect("mapped").loc.slot);
    for e in 0..2 {
        assert!(
            matches!(migrate(vol, e, Tier::Ssd), MoveOutcome::Moved(_)),
            "promoting {e}"
        );
    }
    vol.flush().expect("flush");
    slots
}

fn stale_blocks(vol: &Volume, extent: u64) -> Vec<u32> {
    let m = vol.mapping(extent).expect("mapped");
    let s = m.shadow.expect("a shadow");
    (0..16)
        .filter(|b| m.written.get(*b) && s.stale.get(*b))
        .collect()
}

/// The HDD slot of `extent` holds the model's data for every written block.
fn assert_home(bed: &Bed, vol: &Volume, model: &[u8], extent: u64, what: &str) {
    let m = vol.mapping(extent).expect("mapped");
    assert_eq!(m.loc.tier, Tier::Hdd, "{what}");
    let hdd = bed.hdd.snapshot();
    let base = vol.geometry().slot_offset(m.loc.slot) as usize;
    for b in 0..16u64 {
        if m.written.get(b as u32) {
            assert!(
                hdd[base + (b * BLK) as usize..base + ((b + 1) * BLK) as usize]
                    == model[at(extent, b) as usize..at(extent, b + 1) as usize],
                "{what}: extent {extent} block {b} on the HDD"
            );
        }
    }
}

#[test]
fn a_promotion_keeps_the_hdd_slot_as_a_clean_shadow() {
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    let mut model = model_of(&vol);
    hdd_extent(&vol, &mut model, 0, 0, &pattern(1, EXTENT as usize));
    hdd_extent(&vol, &mut model, 1, 4 * BLK, &pattern(2, 6 * BLK as usize));
    let slots = [0, 1].map(|e| vol.mapping(e).expect("mapped").loc.slot);
    let hdd_free = vol.free_slots(Tier::Hdd);
    let slots_now = two_shadows_again(&vol);
    assert_eq!(slots_now, slots);
    assert_eq!(
        vol.free_slots(Tier::Hdd),
        hdd_free,
        "the HDD slots stay taken"
    );
    for e in 0..2 {
        let m = vol.mapping(e).expect("mapped");
        assert_eq!(m.loc.tier, Tier::Ssd);
        let s = m.shadow.expect("a shadow");
        assert_eq!(s.slot, slots[e as usize]);
        assert!(s.stale.is_empty(), "a fresh shadow is clean: {s:?}");
    }
    let u = vol.usage();
    assert_eq!(
        (u.shadows, u.shadow_clean_blocks, u.shadow_stale_blocks),
        (2, 16 + 6, 0),
        "{u:?}"
    );
    assert_reads(&vol, &model, "promoted with shadows");
    assert_accounting(&vol, 24);

    // With shadows off the HDD slot is freed.
    vol.set_shadows(false);
    hdd_extent(&vol, &mut model, 2, 0, &pattern(3, EXTENT as usize));
    let hdd_free = vol.free_slots(Tier::Hdd);
    assert!(matches!(migrate(&vol, 2, Tier::Ssd), MoveOutcome::Moved(_)));
    assert_eq!(vol.mapping(2).expect("mapped").shadow, None);
    assert_eq!(vol.free_slots(Tier::Hdd), hdd_free + 1);
    assert_reads(&vol, &model, "promoted without a shadow");
    assert_accounting(&vol, 24);
}

/// Promote extents 0 and 1 (already on the HDD); their old slots.
fn two_shadows_again(vol: &Volume) -> [u32; 2] {
    for e in 0..2 {
        assert!(matches!(migrate(vol, e, Tier::Ssd), MoveOutcome::Moved(_)));
    }
    [0, 1].map(|e| vol.mapping(e).expect("mapped").shadow.expect("shadow").slot)
}

#[test]
fn no_shadow_is_kept_when_the_hdd_has_no_room_to_spare() {
    // 8 HDD slots, reserve 2: with 6 HDD extents, 2 free = the reserve.
    let bed = Bed::new(8, 8, 2);
    let vol = bed.open();
    let mut model = model_of(&vol);
    for e in 0..6 {
        hdd_extent(&vol, &mut model, e, 0, &pattern(e, EXTENT as usize));
    }
    assert_eq!(vol.free_slots(Tier::Hdd), 2);
    assert!(matches!(migrate(&vol, 0, Tier::Ssd), MoveOutcome::Moved(_)));
    assert_eq!(vol.mapping(0).expect("mapped").shadow, None);
    assert_eq!(vol.free_slots(Tier::Hdd), 3);
    // One more free than the reserve: the next promotion keeps one.
    assert!(matches!(migrate(&vol, 1, Tier::Ssd), MoveOutcome::Moved(_)));
    assert!(vol.mapping(1).expect("mapped").shadow.is_some());
    assert_eq!(vol.free_slots(Tier::Hdd), 3);
    assert_reads(&vol, &model, "promotions near the reserve");
    assert_accounting(&vol, 16);
}

#[test]
fn demoting_an_extent_with_a_clean_shadow_writes_nothing_to_the_hdd() {
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    let mut model = model_of(&vol);
    let slots = two_shadows(&vol, &mut model);
    let hdd_image = bed.hdd.snapshot();
    let hdd0 = dev_written(&vol, Tier::Hdd);
    let ssd_free = vol.free_slots(Tier::Ssd);
    for e in 0..2u64 {
        assert_eq!(
            migrate(&vol, e, Tier::Hdd),
            MoveOutcome::Moved(0),
            "extent {e}"
        );
        let m = vol.mapping(e).expect("mapped");
        assert_eq!((m.loc.tier, m.loc.slot), (Tier::Hdd, slots[e as usize]));
        assert_eq!(m.shadow, None);
    }
    assert_eq!(dev_written(&vol, Tier::Hdd), hdd0, "HDD write bytes grew");
    assert!(bed.hdd.snapshot() == hdd_image, "the HDD changed");
    assert_eq!(Stats::get(&vol.stats().free_demotions), 2);
    assert_eq!(Stats::get(&vol.stats().shadow_saved_blocks), 16 + 6);
    assert_eq!(vol.free_slots(Tier::Ssd), ssd_free + 2);
    assert_eq!(vol.usage().shadows, 0);
    // Reads come from the HDD now.
    let ssd_reads = dev_read(&vol, Tier::Ssd);
    assert_reads(&vol, &model, "after free demotions");
    assert_eq!(dev_read(&vol, Tier::Ssd), ssd_reads);
    for e in 0..2 {
        assert_home(&bed, &vol, &model, e, "free demotion");
    }
    power_cycle(&bed, vol, &model, "after a power cut", 24);
}

/// A demotion into a stale shadow writes each stretch of written blocks
/// that holds a stale one whole, in one HDD write (a disk's write waits
/// half a turn; a clean block costs only its transfer), and nothing of a
/// stretch with no stale block.
#[test]
fn the_written_stretches_around_stale_blocks_are_written_when_demoting() {
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    let mut model = model_of(&vol);
    two_shadows(&vol, &mut model);
    // Extent 0: block 2 whole, then again in place (already stale), block
    // 7 partly, block 13 trimmed, block 15 whole.
    put(&vol, &mut model, at(0, 2), &pattern(3, BLK as usize));
    let hint = tierd::units::IoHint::default();
    let inline = pattern(4, 500);
    match vol.write_nowait(at(0, 2) + 9, &inline, hint) {
        Some(r) => r.expect("inline write"),
        None => panic!("a write into a stale block of an SSD extent could not go inline"),
    }
    model[(at(0, 2) + 9) as usize..(at(0, 2) + 509) as usize].copy_from_slice(&inline);
    put(&vol, &mut model, at(0, 7) + 100, &pattern(5, 100));
    vol.discard(at(0, 13), BLK, false, false, false)
        .expect("trim");
    model[at(0, 13) as usize..at(0, 14) as usize].fill(0);
    put(&vol, &mut model, at(0, 15), &pattern(7, BLK as usize));
    // Extent 1: a block never written before (it has data only in 4..=9).
    put(&vol, &mut model, at(1, 12) + 1, &pattern(6, 10));
    assert_eq!(stale_blocks(&vol, 0), vec![2, 7, 15]);
    assert_eq!(stale_blocks(&vol, 1), vec![12]);
    let u = vol.usage();
    assert_eq!(
        (u.shadows, u.shadow_stale_blocks, u.shadow_clean_blocks),
        (2, 4, 12 + 6),
        "{u:?}"
    );
    vol.flush().expect("flush");
    let hdd0 = dev_written(&vol, Tier::Hdd);
    let writes0 = Stats::get(&vol.stats().dev_writes[Tier::Hdd.index()]);
    // Extent 0: blocks 0..=12 in one write (the stretch holding 2 and 7),
    // 14..=15 in another (13 is not written since the trim); extent 1:
    // block 12 alone (10 and 11 unwritten, 4..=9 clean).
    assert_eq!(migrate(&vol, 0, Tier::Hdd), MoveOutcome::Moved(15 * BLK));
    assert_eq!(migrate(&vol, 1, Tier::Hdd), MoveOutcome::Moved(BLK));
    assert_eq!(dev_written(&vol, Tier::Hdd) - hdd0, 16 * BLK);
    assert_eq!(
        Stats::get(&vol.stats().dev_writes[Tier::Hdd.index()]) - writes0,
        3,
        "one HDD write per stretch"
    );
    assert_eq!(Stats::get(&vol.stats().free_demotions), 0);
    assert_eq!(Stats::get(&vol.stats().shadow_saved_blocks), 6);
    assert_reads(&vol, &model, "after demotions into stale shadows");
    for e in 0..2 {
        assert_home(&bed, &vol, &model, e, "stale demotion");
    }
    assert!(!vol.mapping(0).expect("mapped").written.get(13));
    vol.close().expect("close");
    power_cycle(&bed, vol, &model, "after a close and a power cut", 24);
}

/// Writes into clean blocks of a shadowed extent mark them stale first and
/// then write in place beside each other (the sequential-stream case: four
/// writes in flight into one extent): from four threads at once, every
/// block written ends stale and no other, and a demotion afterwards carries
/// every one of them to the HDD.
#[test]
fn concurrent_writes_into_a_shadowed_extent_all_reach_the_hdd_when_it_leaves() {
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    let mut model = model_of(&vol);
    two_shadows(&vol, &mut model);
    let vol = std::sync::Arc::new(vol);
    let writers: Vec<_> = (0..4u64)
        .map(|t| {
            let vol = std::sync::Arc::clone(&vol);
            std::thread::spawn(move || {
                // Thread t writes blocks t, t + 4 and t + 8, twice each.
                let mut wrote = Vec::new();
                for round in 0..2u64 {
                    for b in [t, t + 4, t + 8] {
                        let data = pattern(40 + round * 16 + b, BLK as usize);
                        vol.write(at(0, b), &data, false).expect("write");
                        wrote.push((b, data));
                    }
                }
                wrote
            })
        })
        .collect();
    for w in writers {
        for (b, data) in w.join().expect("writer") {
            model[at(0, b) as usize..at(0, b + 1) as usize].copy_from_slice(&data);
        }
    }
    assert_eq!(stale_blocks(&vol, 0), (0..12).collect::<Vec<u32>>());
    assert_reads(&vol, &model, "after the concurrent writes");
    vol.flush().expect("flush");
    let hdd0 = dev_written(&vol, Tier::Hdd);
    // The stale blocks, and the clean rest of the extent with them (a
    // 64 KiB extent is within what a copy rewrites to save a write).
    assert_eq!(migrate(&vol, 0, Tier::Hdd), MoveOutcome::Moved(EXTENT));
    assert_eq!(dev_written(&vol, Tier::Hdd) - hdd0, EXTENT);
    assert_home(&bed, &vol, &model, 0, "after the demotion");
    assert_reads(&vol, &model, "after the demotion");
}

#[test]
fn a_clean_close_keeps_the_shadows() {
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    let mut model = model_of(&vol);
    two_shadows(&vol, &mut model);
    put(&vol, &mut model, at(0, 5), &pattern(3, BLK as usize));
    let before: Vec<_> = (0..2).map(|e| vol.mapping(e)).collect();
    vol.close().expect("close");
    assert_eq!(
        tierd::store::MetaStore::get(bed.store.as_ref(), "clean-shutdown").expect("get"),
        Some(b"1".to_vec())
    );
    drop(vol);
    let vol = bed.open();
    assert_eq!(
        tierd::store::MetaStore::get(bed.store.as_ref(), "clean-shutdown").expect("get"),
        Some(b"0".to_vec()),
        "an open volume is marked unclean until it closes"
    );
    let after: Vec<_> = (0..2).map(|e| vol.mapping(e)).collect();
    assert_eq!(
        after, before,
        "shadows and stale marks across a clean close"
    );
    assert_eq!(vol.usage().shadows, 2);
    assert_reads(&vol, &model, "after a clean close");
    let hdd0 = dev_written(&vol, Tier::Hdd);
    // Extent 0 has a stale block: it goes in one write with the rest of
    // its (64 KiB) extent; extent 1 is clean and leaves for free.
    assert_eq!(migrate(&vol, 0, Tier::Hdd), MoveOutcome::Moved(EXTENT));
    assert_eq!(migrate(&vol, 1, Tier::Hdd), MoveOutcome::Moved(0));
    assert_eq!(dev_written(&vol, Tier::Hdd) - hdd0, EXTENT);
    assert_reads(&vol, &model, "demoted after a clean close");
    assert_accounting(&vol, 24);
}

#[test]
fn an_unclean_stop_drops_the_shadows_and_the_ssd_data_wins() {
    for power_cut in [false, true] {
        let bed = Bed::new(8, 16, 2);
        let vol = bed.open();
        let mut model = model_of(&vol);
        two_shadows(&vol, &mut model);
        put(&vol, &mut model, at(0, 5), &pattern(3, BLK as usize));
        put(&vol, &mut model, at(1, 6) + 10, &pattern(4, 10));
        vol.flush().expect("flush");
        let hdd_free = vol.free_slots(Tier::Hdd);
        drop(vol);
        if power_cut {
            bed.power_cut();
        }
        let vol = bed.open();
        let what = format!("power cut {power_cut}");
        assert_eq!(vol.usage().shadows, 0, "{what}: shadows kept after a crash");
        assert!((0..2).all(|e| vol.mapping(e).expect("mapped").shadow.is_none()));
        assert_eq!(
            vol.free_slots(Tier::Hdd),
            hdd_free + 2,
            "{what}: slots back"
        );
        assert_reads(&vol, &model, &what);
        assert_accounting(&vol, 24);
        // Demotions now copy every written block.
        assert_eq!(migrate(&vol, 0, Tier::Hdd), MoveOutcome::Moved(16 * BLK));
        assert_eq!(migrate(&vol, 1, Tier::Hdd), MoveOutcome::Moved(6 * BLK));
        assert_eq!(Stats::get(&vol.stats().free_demotions), 0);
        assert_reads(&vol, &model, &format!("{what}: demoted"));
        drop(vol);
        bed.power_cut();
        let vol = bed.open();
        assert_reads(&vol, &model, &format!("{what}: demoted, power cut"));
        assert_accounting(&vol, 24);
    }
}

#[test]
fn a_stale_mark_lost_in_a_crash_never_brings_old_data_back() {
    // The case the rule is for: a write reached the SSD, but the record
    // with its stale mark did not reach the store before the crash.
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    let mut model = model_of(&vol);
    two_shadows(&vol, &mut model);
    vol.close().expect("close");
    drop(vol);
    let vol = bed.open();
    assert_eq!(vol.usage().shadows, 2);
    put(&vol, &mut model, at(0, 3), &pattern(9, BLK as usize));
    // The device has the data (synced by the OS, say); the store loses the
    // record with the stale mark.
    tierd::device::BlockDevice::sync(bed.ssd.as_ref()).expect("sync");
    drop(vol);
    bed.store.power_cut();
    let vol = bed.open();
    let m = vol.mapping(0).expect("mapped");
    assert_eq!(
        m.shadow, None,
        "a shadow that may miss a stale mark was kept"
    );
    assert_reads(&vol, &model, "the SSD's data after the crash");
    assert_eq!(migrate(&vol, 0, Tier::Hdd), MoveOutcome::Moved(16 * BLK));
    assert_reads(&vol, &model, "still the SSD's data after a demotion");
    assert_accounting(&vol, 24);
}

#[test]
fn under_hdd_pressure_shadows_give_way_and_new_extents_never_run_out_of_space() {
    // 8 + 16 slots, reserve 2: 22 logical extents.
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    let mut model = model_of(&vol);
    let extents = vol.size() / EXTENT;
    assert_eq!(extents, 22);
    for e in 0..6 {
        hdd_extent(&vol, &mut model, e, 0, &pattern(e, EXTENT as usize));
    }
    for e in 0..6 {
        assert!(matches!(migrate(&vol, e, Tier::Ssd), MoveOutcome::Moved(_)));
    }
    assert_eq!(vol.usage().shadows, 6);
    // Write the rest of the volume in a seeded random order, in pieces of
    // random size, with rewrites (of shadowed and of HDD extents, which the
    // log takes) in between: every write must succeed.
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5ad0);
    let mut todo: Vec<u64> = (6..extents).collect();
    let mut seed = 100;
    while !todo.is_empty() {
        let e = todo.swap_remove(rng.gen_range(0..todo.len()));
        let mut off = 0;
        while off < EXTENT {
            let len = (rng.gen_range(1..=8u64) * BLK).min(EXTENT - off);
            seed += 1;
            let data = pattern(seed, len as usize);
            vol.write(at(e, 0) + off, &data, false)
                .unwrap_or_else(|err| {
                    panic!("writing extent {e} at {off}: {err} ({:?})", vol.usage())
                });
            model[(at(e, 0) + off) as usize..(at(e, 0) + off + len) as usize]
                .copy_from_slice(&data);
            off += len;
            if rng.gen_bool(0.3) {
                let r = rng.gen_range(0..extents) * EXTENT + rng.gen_range(0..16) * BLK;
                if vol.mapping(r / EXTENT).is_some() {
                    seed += 1;
                    put(&vol, &mut model, r + 5, &pattern(seed, 3000));
                }
            }
        }
        assert_accounting(&vol, 24);
    }
    // Every logical extent is written: with 22 of 24 slots mapped, at least
    // four of the six shadows had to give way (dropped, or their extents
    // demoted into them), and no write failed on the way.
    let u = vol.usage();
    assert_eq!(u.mapped[0] + u.mapped[1], extents, "{u:?}");
    assert!(
        u.shadows + u64::from(u.log.segments) <= 24 - extents,
        "more second copies than spare slots: {u:?}"
    );
    assert_reads(&vol, &model, "the volume written full");
    vol.close().expect("close");
    drop(vol);
    let vol = bed.open();
    assert_reads(&vol, &model, "full, after a restart");
    assert_accounting(&vol, 24);
}

#[test]
fn the_migrator_drops_shadows_when_the_hdd_runs_short() {
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    // New extents fill the SSD, then the HDD down to its reserve.
    let model = shadows_then_new_data(&bed, &vol, 2);
    assert_eq!(vol.usage().shadows, 6);
    vol.flush().expect("flush");
    let m = bed.migrator(&vol);
    // A round drops as many shadows as the HDD is short of one more free
    // slot than its reserve (here 1); its demotions may take slots again,
    // so the rounds after go on until the HDD has room to spare.
    let r = bed.round(&m, 1);
    assert_eq!(r.shadows_dropped, 1, "{r:?}");
    assert_eq!(Stats::get(&vol.stats().shadows_dropped), 1);
    let mut rounds = 1;
    loop {
        vol.flush().expect("flush");
        if vol.free_slots(Tier::Hdd) > 2 {
            break;
        }
        assert!(
            rounds < 4,
            "the HDD still has no room to spare: {:?}",
            vol.usage()
        );
        let r = bed.round(&m, 1);
        assert!(r.shadows_dropped >= 1, "{r:?}");
        rounds += 1;
    }
    assert!(vol.usage().shadows < 6);
    assert_reads(&vol, &model, "after the round");
    assert_accounting(&vol, 24);
}

#[test]
fn a_demotion_never_writes_into_a_shadow_slot_given_away_during_its_copy() {
    // While the stale blocks of extent 0 are being copied into its shadow,
    // a foreground write to a new extent finds no room, drops shadows and
    // takes the freed slot (which is what `allocate` does when the volume
    // is full; here the steps are taken by hand in the copy's pace
    // callback, between the move's snapshot and its copy).
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    let mut model = model_of(&vol);
    hdd_extent(&vol, &mut model, 0, 0, &pattern(1, EXTENT as usize));
    assert!(matches!(migrate(&vol, 0, Tier::Ssd), MoveOutcome::Moved(_)));
    put(&vol, &mut model, at(0, 2), &pattern(2, BLK as usize));
    vol.flush().expect("flush");
    let shadow = vol
        .mapping(0)
        .expect("mapped")
        .shadow
        .expect("a shadow")
        .slot;
    // Extent 5 is pinned to the HDD: its first write takes an HDD slot, the
    // one freed last.
    vol.pin(5 * EXTENT, EXTENT, Some(Tier::Hdd)).expect("pin");
    let y = pattern(3, EXTENT as usize);
    let mut meddled = None;
    let mut pace = |_n: u64| {
        if meddled.is_some() {
            return;
        }
        let dropped = vol.drop_shadows(1, None).expect("drop shadows");
        vol.flush().expect("flush");
        vol.write(5 * EXTENT, &y, false).expect("write extent 5");
        meddled = Some((dropped, vol.mapping(5).expect("mapped").loc));
    };
    let out =
        tierd::migrate::migrate_extent(&vol, 0, Tier::Hdd, tierd::units::Reason::Manual, &mut pace)
            .expect("demote");
    let (dropped, y_loc) = meddled.expect("the copy paced at least once");
    model[5 * EXTENT as usize..6 * EXTENT as usize].copy_from_slice(&y);
    let what = format!(
        "demotion {out:?}; shadow slot {shadow}, {dropped} shadow(s) dropped during the copy, \
         extent 5 then took {y_loc:?}"
    );
    let mut buf = vec![0u8; EXTENT as usize];
    vol.read(5 * EXTENT, &mut buf).expect("read 5");
    assert!(buf == y, "{what}: extent 5 lost its write");
    assert_reads(&vol, &model, &what);
    assert_eq!(tier_of(&vol, 0), Some(Tier::Hdd), "{what}");
    vol.flush().expect("flush");
    drop(vol);
    bed.power_cut();
    let vol = bed.open();
    assert_reads(&vol, &model, &format!("{what}; after a power cut"));
    assert_accounting(&vol, 24);
}

/// Write new extents from `first` on until the SSD has no free slot (each
/// lands there); returns the next unwritten extent.
fn fill_ssd(vol: &Volume, model: &mut [u8], first: u64) -> u64 {
    let mut e = first;
    while vol.free_slots(Tier::Ssd) > 0 {
        put(vol, model, e * EXTENT, &pattern(10 + e, EXTENT as usize));
        assert_eq!(tier_of(vol, e), Some(Tier::Ssd), "extent {e}");
        e += 1;
    }
    e
}

/// The reserve lent to promotions comes back for new data at once: with the
/// SSD full and two idle extents there holding clean shadows, a write to a
/// new extent demotes one by a mapping change and lands on the SSD, not on
/// the HDD; nothing is written to the HDD, every byte reads back, also after
/// a power cut. Clean extents in use are never pushed out for new data.
#[test]
fn new_data_takes_the_ssd_back_from_clean_shadows_at_once() {
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    let mut model = model_of(&vol);
    let slots = two_shadows(&vol, &mut model);
    let e = fill_ssd(&vol, &mut model, 2);
    vol.flush().expect("flush");
    // Extent 1 is in use, extent 0 (like the rest) idle: every write so far
    // was more than `idle-after` ago.
    let now = || tierd::clock::Clock::now(bed.clock.as_ref());
    vol.heat().tick(now());
    bed.clock.advance(std::time::Duration::from_secs(11));
    heat_up(&vol, 1, 1);
    vol.heat().tick(now());
    let spills = Stats::get(&vol.stats().spills);
    let hdd0 = dev_written(&vol, Tier::Hdd);
    // A new extent: the idle shadowed one gives its slot.
    put(&vol, &mut model, e * EXTENT, &pattern(99, EXTENT as usize));
    assert_eq!(tier_of(&vol, e), Some(Tier::Ssd), "the new extent");
    assert_eq!(
        Stats::get(&vol.stats().spills),
        spills,
        "spilled to the HDD"
    );
    assert_eq!(dev_written(&vol, Tier::Hdd), hdd0, "HDD write bytes grew");
    let home: Vec<u64> = (0..2)
        .filter(|x| tier_of(&vol, *x) == Some(Tier::Hdd))
        .collect();
    assert_eq!(
        home,
        vec![0],
        "the idle shadowed extent, and only it, gave way"
    );
    for x in &home {
        let m = vol.mapping(*x).expect("mapped");
        assert_eq!(m.loc.slot, slots[*x as usize], "extent {x} went home");
        assert_home(&bed, &vol, &model, *x, "taken back for new data");
    }
    assert!(Stats::get(&vol.stats().free_demotions) >= 1);
    assert_reads(&vol, &model, "after the new write");
    // The clean extent in use stays: fill the SSD again; the next new
    // extent spills to the HDD instead.
    let kept = [1u64];
    let e = fill_ssd(&vol, &mut model, e + 1);
    let spills = Stats::get(&vol.stats().spills);
    put(&vol, &mut model, e * EXTENT, &pattern(7, EXTENT as usize));
    assert_eq!(
        tier_of(&vol, e),
        Some(Tier::Hdd),
        "new data pushed out data in use"
    );
    assert_eq!(Stats::get(&vol.stats().spills), spills + 1);
    for x in &kept {
        assert_eq!(
            tier_of(&vol, *x),
            Some(Tier::Ssd),
            "extent {x} in use stays"
        );
    }
    vol.flush().expect("flush");
    power_cycle(&bed, vol, &model, "after a power cut", 24);
}

#[test]
fn cleaning_a_stale_shadow_keeps_the_extent_on_the_ssd_and_makes_leaving_free() {
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    let mut model = model_of(&vol);
    hdd_extent(&vol, &mut model, 0, 0, &pattern(1, EXTENT as usize));
    assert!(matches!(migrate(&vol, 0, Tier::Ssd), MoveOutcome::Moved(_)));
    put(&vol, &mut model, 4096, &pattern(2, 8192));
    put(&vol, &mut model, 5 * 4096, &pattern(3, 4096));
    let blocks = vol.geometry().blocks_per_extent();
    assert!(!vol.mapping(0).expect("mapped").shadow_clean(blocks));
    let hdd0 = dev_written(&vol, Tier::Hdd);
    let out = tierd::migrate::clean_batch(&vol, &[(0, tierd::units::Reason::Reserve)], &mut |_| {})
        .expect("clean");
    // Blocks 1, 2 and 5 are stale: the extent's one stretch of written
    // blocks goes whole, in one write; the extent stayed.
    assert_eq!(out, vec![(0, MoveOutcome::Moved(EXTENT))]);
    assert_eq!(dev_written(&vol, Tier::Hdd) - hdd0, EXTENT);
    let m = vol.mapping(0).expect("mapped");
    assert_eq!(m.loc.tier, Tier::Ssd);
    assert!(m.shadow_clean(blocks), "{m:?}");
    assert_reads(&vol, &model, "cleaned");
    // Leaving now costs nothing.
    assert_eq!(migrate(&vol, 0, Tier::Hdd), MoveOutcome::Moved(0));
    assert_reads(&vol, &model, "left for free");
    vol.flush().expect("flush");
    assert_accounting(&vol, 24);
}
