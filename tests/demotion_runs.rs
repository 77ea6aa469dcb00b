//! A batch of moves to the HDD takes a run of neighbouring free slots, in
//! the volume's order, and its copies go down in merged writes: slots given
//! back one by one (a trim, swaps) are scattered over the disk, and
//! demotions written to them cost the drive one positioning each.

mod support;

use support::{Bed, EXTENT};
use tierd::units::Reason;
use tierd::volume::{MoveOutcome, Stats, Tier, Volume};

fn loc(vol: &Volume, extent: u64) -> (Tier, u32) {
    let m = vol.mapping(extent).expect("mapped");
    (m.loc.tier, m.loc.slot)
}

fn whole(extent: u64) -> Vec<u8> {
    vec![extent as u8 + 1; EXTENT as usize]
}

#[test]
fn a_batch_of_demotions_lands_in_a_run_and_goes_down_in_one_write() {
    // 8 SSD slots (one of them the reserve) and 64 HDD slots.
    let vol = Bed::new(8, 64, 1).open();
    // Extents 0..8 land on the SSD (its reserve too; in reverse, so their
    // SSD slots run against the volume's order); 10..40 spill to HDD slots
    // 0..30.
    for e in (0..8).rev() {
        vol.write(e * EXTENT, &whole(e), false).expect("write");
        assert_eq!(loc(&vol, e).0, Tier::Ssd, "extent {e}");
    }
    for e in 10..40 {
        vol.write(e * EXTENT, &whole(e), false).expect("write");
        assert_eq!(loc(&vol, e).0, Tier::Hdd, "extent {e}");
    }
    // Every other spilled extent trimmed: their slots, given back last,
    // are scattered (one free, one taken).
    for e in (10..30).step_by(2) {
        vol.discard(e * EXTENT, EXTENT, false, false, false)
            .expect("trim");
    }
    vol.flush().expect("flush");
    let writes0 = Stats::get(&vol.stats().dev_writes[Tier::Hdd.index()]);
    let batch: Vec<(u64, Reason)> = [5, 1, 3, 0, 4].map(|e| (e, Reason::Cold)).to_vec();
    let out = tierd::migrate::migrate_batch(&vol, &batch, Tier::Hdd, &mut |_| {}).expect("demote");
    assert!(
        out.iter().all(|(_, o)| *o == MoveOutcome::Moved(EXTENT)),
        "{out:?}"
    );
    let slots: Vec<u32> = [0, 1, 3, 4, 5]
        .iter()
        .map(|&e| {
            let (tier, slot) = loc(&vol, e);
            assert_eq!(tier, Tier::Hdd, "extent {e}");
            slot
        })
        .collect();
    assert!(
        slots.windows(2).all(|w| w[1] == w[0] + 1),
        "not one run in the volume's order: {slots:?}"
    );
    assert!(
        slots[0] >= 30,
        "the run is past the spilled extents: {slots:?}"
    );
    assert_eq!(
        Stats::get(&vol.stats().dev_writes[Tier::Hdd.index()]) - writes0,
        1,
        "the batch goes down in one write"
    );
    for e in [0, 1, 3, 4, 5, 2, 6, 7] {
        let mut buf = vec![0u8; EXTENT as usize];
        vol.read(e * EXTENT, &mut buf).expect("read");
        assert_eq!(buf, whole(e), "extent {e}");
    }
    // A lone demotion still takes the slot given back last (where a
    // swapped extent left, next to the data around it).
    let lone = [(2, Reason::Cold)];
    tierd::migrate::migrate_batch(&vol, &lone, Tier::Hdd, &mut |_| {}).expect("demote");
    assert_eq!(loc(&vol, 2), (Tier::Hdd, 18), "extent 28's, trimmed last");
}
