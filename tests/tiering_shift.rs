//! Hot-set shift: after the workload moves to another region, the new hot
//! set is promoted and the old one demoted, each move explained.

mod support;

use support::*;
use tierd::units::Reason;
use tierd::volume::Tier;

#[test]
fn a_new_hot_set_replaces_the_old_one() {
    let bed = Bed::new(8, 32, 2);
    let vol = bed.open();
    let m = bed.migrator(&vol);
    for e in 0..30 {
        vol.write(e * EXTENT, &pattern(e, EXTENT as usize), false)
            .expect("write");
    }
    let old = [10u64, 11, 12, 13, 14, 15];
    let new = [24u64, 25, 26, 27, 28, 29];
    for _ in 0..5 {
        for e in old {
            heat_up(&vol, e, 2);
        }
        bed.round(&m, 1);
    }
    for e in old {
        assert_eq!(
            tier_of(&vol, e),
            Some(Tier::Ssd),
            "old hot extent {e} promoted"
        );
    }
    // The workload moves. Count rounds until the new set is on the SSD.
    let mut rounds = 0;
    while new.iter().any(|e| tier_of(&vol, *e) != Some(Tier::Ssd)) {
        rounds += 1;
        assert!(rounds <= 30, "new hot set not promoted after 30 rounds");
        for e in new {
            heat_up(&vol, e, 2);
        }
        bed.round(&m, 1);
    }
    // The old set made way (demoted, reason cold, idle or reserve), or
    // stays on the SSD while extents with a clean HDD copy cover the
    // reserve (new data takes them back at once).
    for e in old {
        if tier_of(&vol, e) == Some(Tier::Hdd) {
            let last = vol.explain(e).and_then(|p| p.last_move).expect("old moved");
            assert!(
                matches!(last.reason, Reason::Cold | Reason::Idle | Reason::Reserve),
                "{last:?}"
            );
        }
    }
    let blocks = vol.geometry().blocks_per_extent();
    let covering = (0..30u64)
        .filter(|e| tier_of(&vol, *e) == Some(Tier::Ssd))
        .filter(|e| vol.mapping(*e).is_some_and(|m| m.shadow_clean(blocks)))
        .count() as u64;
    assert!(
        u64::from(vol.free_slots(Tier::Ssd)) + covering >= 2,
        "the reserve is neither free nor covered"
    );
    for e in new {
        let p = vol.explain(e).expect("explain");
        assert_eq!(p.last_move.map(|l| l.reason), Some(Reason::Hot));
        assert!(p.score > 0.0 && p.coverage == 16, "{p:?}");
    }
    // Settled: further rounds with the same workload move nothing.
    for e in new {
        heat_up(&vol, e, 2);
    }
    let r = bed.round(&m, 1);
    assert_eq!(r.moved, 0, "ping-pong: {r:?}");
    for e in 0..30 {
        let mut buf = vec![0u8; EXTENT as usize];
        vol.read(e * EXTENT, &mut buf).expect("read");
        assert!(buf == pattern(e, EXTENT as usize), "extent {e} data");
    }
}
