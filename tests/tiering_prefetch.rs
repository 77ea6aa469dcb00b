//! Neighbourhood prefetch: scattered activity in a zone brings its other
//! extents up (reason `near`) in place of extents of idle zones; warm data is
//! never displaced; a sequential stream (whose first extents earn heat before
//! it is recognised) does not make its zone busy; data stays intact.

mod support;

use support::*;
use tierd::migrate::{MigrateConfig, Migrator};
use tierd::units::IoHint;
use tierd::units::Reason;
use tierd::volume::Tier;

/// A migrator with zones of 8 extents, busy at 3 separate runs.
fn migrator(bed: &Bed, vol: &std::sync::Arc<tierd::volume::Volume>) -> Migrator {
    let mut cfg = MigrateConfig {
        bandwidth: tierd::units::ByteSize(0),
        ..MigrateConfig::default()
    };
    cfg.policy.zone_extents = 8;
    cfg.policy.zone_min_active = 3;
    let _ = bed;
    Migrator::new(vol.clone(), vol.heat(), cfg)
}

/// One 4 KiB read of block `block` of `extent`: a stray hit, far below the
/// promotion score.
fn touch(vol: &tierd::volume::Volume, extent: u64, block: u64) {
    let mut buf = vec![0u8; 4096];
    vol.read_hinted(extent * EXTENT + block * 4096, &mut buf, IoHint::default())
        .expect("read");
}

#[test]
fn a_busy_zone_comes_up_in_place_of_idle_data_and_warm_data_stays() {
    let bed = Bed::new(16, 64, 2);
    let vol = bed.open();
    let m = migrator(&bed, &vol);
    let n = 78u64;
    for e in 0..n {
        vol.write(e * EXTENT, &pattern(e, EXTENT as usize), false)
            .expect("write");
    }
    // The first 16 extents landed on the SSD; the rounds restore the
    // reserve while the writes' own heat and coverage age out.
    for _ in 0..4 {
        bed.round(&m, 15);
    }
    assert_eq!(vol.free_slots(Tier::Ssd), 2);
    // Zone 1 (extents 8..16) is warm: one extent read densely, every round.
    // Zone 5 (40..48, on the HDD) sees stray hits in three separate places.
    // Zone 7 (56..64) sees the start of a sequential stream: four
    // neighbouring extents.
    let warm: Vec<u64> = (8..16)
        .filter(|e| tier_of(&vol, *e) == Some(Tier::Ssd))
        .collect();
    assert!(!warm.is_empty());
    for _ in 0..6 {
        heat_up(&vol, 9, 1);
        for e in [40u64, 43, 46] {
            touch(&vol, e, 3);
        }
        for e in 56u64..60 {
            touch(&vol, e, 0);
        }
        bed.round(&m, 1);
    }
    // Zone 0 (extents 2..8 on the SSD; 0 and 1 went for the reserve) is the
    // only idle zone with SSD extents: six of zone 5 come up, the three
    // touched ones first.
    let up: Vec<u64> = (40u64..48)
        .filter(|e| tier_of(&vol, *e) == Some(Tier::Ssd))
        .collect();
    assert_eq!(up.len(), 6, "{up:?}");
    for e in [40u64, 43, 46] {
        assert!(up.contains(&e), "touched extent {e} first: {up:?}");
    }
    for e in up {
        let last = vol.explain(e).and_then(|p| p.last_move).expect("moved");
        assert_eq!(last.reason, Reason::Near, "extent {e}: {last:?}");
    }
    for e in 56u64..64 {
        assert_eq!(
            tier_of(&vol, e),
            Some(Tier::Hdd),
            "stream zone's extent {e}"
        );
    }
    for e in &warm {
        assert_eq!(tier_of(&vol, *e), Some(Tier::Ssd), "warm extent {e} kept");
    }
    // What made way came from the idle zone 0.
    let demoted: Vec<u64> = (0..n)
        .filter(|e| {
            vol.explain(*e)
                .and_then(|p| p.last_move)
                .is_some_and(|l| l.to == Tier::Hdd && l.reason != Reason::Reserve)
        })
        .collect();
    assert!(!demoted.is_empty());
    assert!(demoted.iter().all(|e| *e < 8), "{demoted:?}");
    // Settled: the same activity moves nothing more.
    heat_up(&vol, 9, 1);
    for e in [40u64, 43, 46] {
        touch(&vol, e, 3);
    }
    let r = bed.round(&m, 1);
    assert_eq!(r.moved, 0, "churn: {r:?}");
    assert_eq!(vol.free_slots(Tier::Ssd), 2, "reserve restored");
    for e in 0..n {
        let mut buf = vec![0u8; EXTENT as usize];
        vol.read(e * EXTENT, &mut buf).expect("read");
        assert!(buf == pattern(e, EXTENT as usize), "extent {e} data");
    }
    assert_accounting(&vol, 16 + 64);
}
