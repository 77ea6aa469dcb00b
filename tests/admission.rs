//! Admission at the miss: a read that misses flash brings its extent up
//! once answered, keeping the HDD slot as a clean shadow; making room
//! evicts in S3-FIFO order (a clean victim by a mapping change, a dirty one
//! with a copy); a write racing the copy is never lost; a crash after any
//! step of an admission (process kill or power cut) leaves every extent
//! reading its latest acknowledged data with the slots accounted for.

mod support;

use support::*;
use tierd::migrate::admit_pending;
use tierd::volume::{MoveStep, Tier};

/// Slots in the bed: 8 SSD + 16 HDD.
const SLOTS: u64 = 24;

/// A bed of 8 SSD slots (2 reserved) and 16 HDD slots, its volume with
/// admission on, and a byte model of the volume.
fn admitting_bed() -> (Bed, std::sync::Arc<tierd::volume::Volume>, Vec<u8>) {
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    vol.set_admission(true);
    let model = model_of(&vol);
    (bed, vol, model)
}

#[test]
fn a_read_miss_brings_its_extent_up_with_a_clean_shadow() {
    let (bed, vol, mut model) = admitting_bed();
    hdd_extent(&vol, &mut model, 3, 0, &pattern(3, EXTENT as usize));
    // Off: a miss notes nothing.
    vol.set_admission(false);
    let mut buf = vec![0u8; 4096];
    vol.read(3 * EXTENT + 8192, &mut buf).expect("read");
    assert_eq!(vol.admissions_waiting(), 0);
    vol.set_admission(true);
    vol.read(3 * EXTENT + 8192, &mut buf).expect("read");
    assert_eq!(buf[..], model[(3 * EXTENT + 8192) as usize..][..4096]);
    assert_eq!(vol.admissions_waiting(), 1);
    // The read was answered from the HDD; the copy comes after it.
    assert_eq!(tier_of(&vol, 3), Some(Tier::Hdd));
    let done = admit_pending(&vol).expect("admit");
    assert_eq!(done.moved, 1, "{done:?}");
    let m = vol.mapping(3).expect("mapped");
    assert_eq!(m.loc.tier, Tier::Ssd);
    assert!(m.shadow_clean(vol.geometry().blocks_per_extent()), "{m:?}");
    assert_reads(&vol, &model, "after admission");
    assert_accounting(&vol, SLOTS);
    // Read again: from the SSD, nothing noted.
    vol.read(3 * EXTENT, &mut buf).expect("read");
    assert_eq!(vol.admissions_waiting(), 0);
    drop(vol);
    bed.power_cut();
    let vol = bed.open();
    assert_reads(&vol, &model, "after a power cut");
    assert_accounting(&vol, SLOTS);
}

#[test]
fn a_full_ssd_makes_room_in_fifo_order_and_never_loses_data() {
    // 6 SSD slots for data.
    let (bed, vol, mut model) = admitting_bed();
    for e in 0..10u64 {
        hdd_extent(&vol, &mut model, e, 0, &pattern(100 + e, EXTENT as usize));
    }
    let mut buf = vec![0u8; 4096];
    // Read each extent twice, admitting after every read, then write into
    // a few admitted ones (their shadows go stale: they leave with a copy).
    for round in 0..2 {
        for e in 0..10u64 {
            vol.read(e * EXTENT, &mut buf).expect("read");
            admit_pending(&vol).expect("admit");
            assert_reads(&vol, &model, &format!("round {round}, extent {e}"));
            assert_accounting(&vol, SLOTS);
        }
        for e in [7u64, 9] {
            put(&vol, &mut model, e * EXTENT + 4096, &pattern(200 + e, 5000));
        }
    }
    let on_ssd = (0..10u64)
        .filter(|e| tier_of(&vol, *e) == Some(Tier::Ssd))
        .count();
    assert!(on_ssd >= 4, "{on_ssd} extents on the SSD");
    // With room on the HDD for the admitted extents' copies, admissions
    // may fill the reserve: clean copies cover it (each leaves by a mapping
    // change the moment a write needs its slot).
    let blocks = vol.geometry().blocks_per_extent();
    let clean = (0..10u64)
        .filter(|e| {
            vol.mapping(*e)
                .is_some_and(|m| m.loc.tier == Tier::Ssd && m.shadow_clean(blocks))
        })
        .count() as u32;
    assert!(
        vol.free_slots(Tier::Ssd) + clean >= 2,
        "the reserve is covered: {} free, {clean} clean",
        vol.free_slots(Tier::Ssd)
    );
    let s = vol.stats();
    assert!(tierd::volume::Stats::get(&s.admissions) >= 10);
    drop(vol);
    bed.power_cut();
    let vol = bed.open();
    vol.flush().expect("flush");
    assert_accounting(&vol, SLOTS);
    // Everything acknowledged before the cut was flushed by the moves.
    let mut whole = vec![0u8; EXTENT as usize];
    for e in 0..10u64 {
        vol.read(e * EXTENT, &mut whole).expect("read");
        if ![7u64, 9].contains(&e) {
            assert!(whole == pattern(100 + e, EXTENT as usize), "extent {e}");
        }
    }
}

#[test]
fn on_a_full_hdd_admission_stands_aside_for_heat() {
    // 8 SSD slots (2 reserved) + 16 HDD: fill every logical extent, so the
    // HDD has no room for an admitted extent's copy and every admission
    // would swap with a victim written down: misses note nothing, the
    // migrator's heat decides.
    let (bed, vol, mut model) = admitting_bed();
    let n = vol.geometry().logical_extents();
    for e in 0..n {
        put(
            &vol,
            &mut model,
            e * EXTENT,
            &pattern(300 + e, EXTENT as usize),
        );
    }
    vol.flush().expect("flush");
    assert!(!vol.admission_keeps_copies());
    // The fill's own writes to HDD extents were noted while the HDD still
    // had room; they are not what this test is about.
    vol.take_admissions();
    let hdd = (0..n)
        .find(|e| tier_of(&vol, *e) == Some(Tier::Hdd))
        .expect("an HDD extent");
    let mut buf = vec![0u8; 4096];
    for _ in 0..3 {
        vol.read(hdd * EXTENT, &mut buf).expect("read");
    }
    assert_eq!(vol.admissions_waiting(), 0, "a full HDD admits nothing");
    assert_reads(&vol, &model, "reads");
    assert_accounting(&vol, SLOTS);
    drop(vol);
    bed.power_cut();
    let vol = bed.open();
    assert_reads(&vol, &model, "after a power cut");
    assert_accounting(&vol, SLOTS);
}

#[test]
fn a_write_during_an_admission_is_kept() {
    let (bed, vol, mut model) = admitting_bed();
    hdd_extent(&vol, &mut model, 2, 0, &pattern(2, EXTENT as usize));
    let mut buf = vec![0u8; 4096];
    vol.read(2 * EXTENT, &mut buf).expect("read");
    // Written after the miss was noted, before the copy: the copy's
    // snapshot sees the new data (the write log holds it) or its commit
    // re-copies it; either way it is there after.
    put(&vol, &mut model, 2 * EXTENT + 12288, &pattern(9, 3000));
    admit_pending(&vol).expect("admit");
    assert_eq!(tier_of(&vol, 2), Some(Tier::Ssd));
    assert_reads(&vol, &model, "after the admission");
    vol.flush().expect("flush");
    drop(vol);
    bed.power_cut();
    let vol = bed.open();
    assert_reads(&vol, &model, "after a power cut");
    assert_accounting(&vol, SLOTS);
}

fn crash_during_admission(step: MoveStep, power_cut: bool) {
    let (bed, vol, mut model) = admitting_bed();
    hdd_extent(&vol, &mut model, 5, 0, &pattern(5, EXTENT as usize));
    // A logged write too: the admission takes it along.
    put(&vol, &mut model, 5 * EXTENT + 4096, &pattern(6, 4096));
    vol.flush().expect("flush");
    let mut buf = vec![0u8; 4096];
    vol.read(5 * EXTENT, &mut buf).expect("read");
    tierd::migrate::arm_crash_after(step);
    admit_pending(&vol).expect("admit");
    drop(vol);
    if power_cut {
        bed.power_cut();
    }
    let vol = bed.open();
    let what = format!("{step:?}, power cut {power_cut}");
    assert_reads(&vol, &model, &what);
    vol.flush().expect("flush");
    assert_accounting(&vol, SLOTS);
    // Admitted again after the restart, and intact.
    vol.set_admission(true);
    vol.read(5 * EXTENT, &mut buf).expect("read");
    admit_pending(&vol).expect("admit again");
    assert_eq!(tier_of(&vol, 5), Some(Tier::Ssd), "{what}");
    assert_reads(&vol, &model, &what);
    vol.flush().expect("flush");
    drop(vol);
    bed.power_cut();
    let vol = bed.open();
    assert_reads(&vol, &model, &what);
    assert_accounting(&vol, SLOTS);
}

#[test]
fn a_crash_after_each_step_of_an_admission_as_a_process_kill() {
    for step in MoveStep::ALL {
        crash_during_admission(step, false);
    }
}

#[test]
fn a_crash_after_each_step_of_an_admission_as_a_power_cut() {
    for step in MoveStep::ALL {
        crash_during_admission(step, true);
    }
}

#[test]
fn a_scan_is_remembered_on_its_first_pass_and_admitted_on_its_second() {
    use tierd::units::IoHint;
    let (_bed, vol, mut model) = admitting_bed();
    for e in 0..3u64 {
        hdd_extent(&vol, &mut model, e, 0, &pattern(40 + e, EXTENT as usize));
    }
    // Past any sequential cutoff.
    let scan = IoHint { seq_run: 1 << 40 };
    let mut buf = vec![0u8; 4096];
    for e in 0..3u64 {
        vol.read_hinted(e * EXTENT, &mut buf, scan).expect("read");
    }
    assert_eq!(vol.admissions_waiting(), 0, "a first pass copies nothing");
    assert_eq!(
        tierd::volume::Stats::get(&vol.stats().admissions_scanned),
        3
    );
    // The second pass over the same extents: reuse seen, admitted.
    for e in 0..3u64 {
        vol.read_hinted(e * EXTENT + 4096, &mut buf, scan)
            .expect("read");
    }
    assert_eq!(vol.admissions_waiting(), 3);
    let done = admit_pending(&vol).expect("admit");
    assert_eq!(done.moved, 3, "{done:?}");
    assert!((0..3u64).all(|e| tier_of(&vol, e) == Some(Tier::Ssd)));
    assert_reads(&vol, &model, "after the second pass");
    assert_accounting(&vol, SLOTS);
}

#[test]
fn admissions_left_for_later_while_the_budget_is_spent_come_up_on_a_later_miss() {
    use std::time::Duration;
    let (bed, vol, mut model) = admitting_bed();
    hdd_extent(&vol, &mut model, 0, 0, &pattern(60, EXTENT as usize));
    vol.ledger().set_shares(Some(0.0), 1.0);
    // Spend the burst the bucket starts with.
    assert!(vol.ledger().may_admit());
    vol.ledger()
        .admitted(Duration::from_secs(1), Duration::from_secs(1), false);
    let mut buf = vec![0u8; 4096];
    vol.read(0, &mut buf).expect("read");
    let done = admit_pending(&vol).expect("admit");
    assert_eq!((done.moved, done.paced), (0, 1), "{done:?}");
    assert_eq!(tier_of(&vol, 0), Some(Tier::Hdd));
    assert_eq!(tierd::volume::Stats::get(&vol.stats().admissions_paced), 1);
    // Two quiet seconds pay the debt back and more.
    bed.clock.advance(Duration::from_secs(2));
    vol.read(0, &mut buf).expect("read");
    let done = admit_pending(&vol).expect("admit");
    assert_eq!(done.moved, 1, "{done:?}");
    assert_eq!(tier_of(&vol, 0), Some(Tier::Ssd));
    assert_reads(&vol, &model, "after a paced admission");
    assert_accounting(&vol, SLOTS);
}

#[test]
fn while_the_data_fits_the_hdd_the_reserve_is_covered_by_cleaning_not_emptied() {
    // 8 SSD slots (2 reserved) + 16 HDD: six extents of data, all fitting
    // the HDD with room to spare. Admissions fill the SSD, reserve and
    // all; then writes make their copies stale, and the migrator covers
    // the reserve again by cleaning them where they are (the stale blocks
    // written into their copies), not by moving them out.
    let (bed, vol, mut model) = admitting_bed();
    for e in 0..6u64 {
        hdd_extent(&vol, &mut model, e, 0, &pattern(400 + e, EXTENT as usize));
    }
    assert!(vol.admission_keeps_copies());
    let mut buf = vec![0u8; 4096];
    for e in 0..6u64 {
        vol.read(e * EXTENT, &mut buf).expect("read");
        admit_pending(&vol).expect("admit");
    }
    let on_ssd = |vol: &tierd::volume::Volume| {
        (0..6u64)
            .filter(|e| tier_of(vol, *e) == Some(Tier::Ssd))
            .count()
    };
    assert_eq!(on_ssd(&vol), 6, "admissions may fill the reserve");
    assert_eq!(vol.usage().clean_extents, 6);
    for e in 0..6u64 {
        put(&vol, &mut model, e * EXTENT + 8192, &pattern(500 + e, 4096));
    }
    assert_eq!(
        vol.usage().clean_extents,
        0,
        "written: the copies are stale"
    );
    let cfg = tierd::migrate::MigrateConfig {
        bandwidth: tierd::units::ByteSize(0),
        ..tierd::migrate::MigrateConfig::default()
    };
    assert!(cfg.admission, "admission is on by default");
    let m = tierd::migrate::Migrator::new(vol.clone(), vol.heat(), cfg);
    for _ in 0..5 {
        bed.round(&m, 2);
    }
    let u = vol.usage();
    assert_eq!(on_ssd(&vol), 6, "nothing was moved out: {u:?}");
    assert!(
        u64::from(u.free[0]) + u.clean_extents >= 2,
        "the reserve is covered: {u:?}"
    );
    assert_reads(&vol, &model, "covered");
    vol.flush().expect("flush");
    assert_accounting(&vol, SLOTS);
    drop(vol);
    bed.power_cut();
    let vol = bed.open();
    assert_reads(&vol, &model, "after a power cut");
    assert_accounting(&vol, SLOTS);
}

/// An admission snapshots an HDD extent with a logged block; before its
/// copy reads the block from the write log, a write-back of the same
/// extent (the migrator's thread, here a hook between the steps) commits,
/// gives the log place back, and a write to another extent takes it. The
/// admission's commit must not install a copy of that other write: found
/// by the 10,000-cycle kill soak as a live read of bytes no write put
/// there.
#[test]
fn an_admission_racing_a_write_back_does_not_copy_a_reused_log_place() {
    let (_bed, vol, mut model) = admitting_bed();
    hdd_extent(&vol, &mut model, 2, 0, &pattern(2, EXTENT as usize));
    hdd_extent(&vol, &mut model, 3, 0, &pattern(3, EXTENT as usize));
    // Block 12 of extent 2 in the write log.
    let at = 2 * EXTENT + 12 * 4096;
    put(&vol, &mut model, at, &pattern(20, 4096));
    assert_eq!(logged_blocks(&vol, 2), vec![12]);
    vol.flush().expect("flush");
    let mut buf = vec![0u8; 4096];
    vol.read(2 * EXTENT, &mut buf).expect("read");
    assert_eq!(vol.admissions_waiting(), 1);
    let other = 3 * EXTENT + 5 * 4096;
    let theirs = pattern(30, 4096);
    {
        let vol = vol.clone();
        let theirs = theirs.clone();
        tierd::migrate::run_after(
            MoveStep::Allocated,
            Box::new(move || {
                let done =
                    tierd::migrate::write_back_batch(&vol, &[2], &mut |_| {}).expect("write-back");
                assert!(
                    matches!(
                        done.first(),
                        Some((2, tierd::volume::MoveOutcome::Moved(_)))
                    ),
                    "the write-back of extent 2 commits: {done:?}"
                );
                assert!(logged_blocks(&vol, 2).is_empty());
                vol.write(other, &theirs, false).expect("write to extent 3");
                assert_eq!(logged_blocks(&vol, 3), vec![5], "extent 3 logs it");
            }),
        );
    }
    admit_pending(&vol).expect("admit");
    model[other as usize..(other + 4096) as usize].copy_from_slice(&theirs);
    assert_reads(&vol, &model, "after the admission");
    vol.flush().expect("flush");
    assert_accounting(&vol, SLOTS);
}

#[test]
fn an_admission_names_each_extent_it_brought_up() {
    let (_bed, vol, mut model) = admitting_bed();
    hdd_extent(&vol, &mut model, 0, 0, &pattern(61, EXTENT as usize));
    hdd_extent(&vol, &mut model, 1, 1, &pattern(62, EXTENT as usize));
    let mut buf = vec![0u8; 4096];
    vol.read(EXTENT, &mut buf).expect("read");
    let mut landed = Vec::new();
    let done = tierd::migrate::admit_pending_noting(&vol, &mut |e| landed.push(e)).expect("admit");
    assert_eq!(done.moved, 1, "{done:?}");
    assert_eq!(landed, vec![1]);
    assert_eq!(tier_of(&vol, 1), Some(Tier::Ssd));
    assert_reads(&vol, &model, "after the admission");
}
