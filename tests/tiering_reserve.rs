//! The SSD reserve: a burst of new writes lands on flash and consumes the
//! reserve; the migrator restores it by demoting the coldest extents; with
//! the SSD full, new extents spill to the HDD without an error.

mod support;

use support::*;
use tierd::units::Reason;
use tierd::volume::{Stats, Tier};

#[test]
fn burst_consumes_the_reserve_and_the_worker_restores_it() {
    // 8 SSD slots, 2 of them reserve; 32 HDD slots.
    let bed = Bed::new(8, 32, 2);
    let vol = bed.open();
    let m = bed.migrator(&vol);
    // Extents 0..5 are old data on the SSD; make 0..3 warm.
    for e in 0..6 {
        vol.write(e * EXTENT, &pattern(e, EXTENT as usize), false)
            .expect("write");
    }
    for e in 0..4 {
        heat_up(&vol, e, 2);
    }
    bed.round(&m, 1);
    assert_eq!(vol.free_slots(Tier::Ssd), 2, "the reserve is intact");
    // A burst of 4 new extents: 2 land in the reserve, 2 spill to the HDD.
    for e in 10..14 {
        vol.write(e * EXTENT, &pattern(e, EXTENT as usize), false)
            .expect("burst write");
    }
    assert_eq!(tier_of(&vol, 10), Some(Tier::Ssd));
    assert_eq!(tier_of(&vol, 11), Some(Tier::Ssd));
    assert_eq!(tier_of(&vol, 12), Some(Tier::Hdd));
    assert_eq!(Stats::get(&vol.stats().spills), 2);
    assert_eq!(vol.free_slots(Tier::Ssd), 0);
    // The worker demotes the two coldest SSD extents to refill the reserve.
    let r = bed.round(&m, 1);
    assert_eq!(vol.free_slots(Tier::Ssd), 2, "{r:?}");
    assert_eq!(vol.stats().migrations_to(Tier::Hdd, Reason::Reserve), 2);
    for e in 0..4 {
        assert_eq!(
            tier_of(&vol, e),
            Some(Tier::Ssd),
            "warm extent {e} stays on the SSD"
        );
    }
    for e in (0..6).chain(10..14) {
        let mut buf = vec![0u8; EXTENT as usize];
        vol.read(e * EXTENT, &mut buf).expect("read");
        assert!(buf == pattern(e, EXTENT as usize), "extent {e} data");
    }
    let placement = vol.explain(4).expect("explain");
    let last = placement.last_move.expect("moved");
    assert_eq!(
        (last.from, last.to, last.reason),
        (Tier::Ssd, Tier::Hdd, Reason::Reserve)
    );
    assert_accounting(&vol, 40);
}
