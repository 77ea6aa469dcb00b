//! Promotions pay their way (`volume::budget`, `migrate::pay`): while users
//! keep the HDD busy, promotions that show no payback wait for HDD time the
//! budget holds (`migrate.promote-share`, the SSD's savings); once the HDD
//! is free of users they go, a run at a time; with the share at 1 nothing
//! waits. Data stays intact throughout.

mod support;

use std::time::Duration;

use support::*;
use tierd::migrate::{MigrateConfig, Migrator};
use tierd::volume::{Tier, Volume};

/// Scattered HDD extents (no two neighbours, so each is a run of its own).
const HOT: [u64; 4] = [20, 24, 28, 32];

fn migrator(vol: &std::sync::Arc<Volume>, share: f64) -> Migrator {
    let mut cfg = MigrateConfig {
        bandwidth: tierd::units::ByteSize(0),
        promote_share: share,
        // The heat migrator's promotions, which the budget paces.
        admission: false,
        ..MigrateConfig::default()
    };
    // Promotions only: no neighbourhood prefetch.
    cfg.policy.zone_extents = 0;
    Migrator::new(vol.clone(), vol.heat(), cfg)
}

/// A volume whose SSD holds its first extents and whose `HOT` extents (on
/// the HDD) were read densely in three separate seconds, each followed at
/// once by a round: promotions the policy wants, with users on the HDD.
fn setup(bed: &Bed, vol: &Volume, m: &Migrator) -> usize {
    for e in 0..40u64 {
        vol.write(e * EXTENT, &pattern(e, EXTENT as usize), false)
            .expect("write");
    }
    for _ in 0..4 {
        bed.round(m, 15);
    }
    for e in HOT {
        assert_eq!(tier_of(vol, e), Some(Tier::Hdd), "extent {e}");
    }
    let mut paced = 0;
    for _ in 0..3 {
        bed.clock.advance(Duration::from_secs(1));
        for e in HOT {
            heat_up(vol, e, 2);
        }
        paced += m.run_round().paced;
    }
    paced
}

fn up(vol: &Volume) -> usize {
    HOT.iter()
        .filter(|e| tier_of(vol, **e) == Some(Tier::Ssd))
        .count()
}

#[test]
fn promotions_wait_while_users_keep_the_hdd_busy_and_go_once_it_is_free() {
    let bed = Bed::new(16, 64, 2);
    let vol = bed.open();
    let m = migrator(&vol, 0.0);
    // Users just read the HDD; this volume's devices take no time, so the
    // SSD has saved nothing and no promotion shows payback: they wait.
    let paced = setup(&bed, &vol, &m);
    assert_eq!(up(&vol), 0);
    assert!(paced >= HOT.len(), "promotions paced: {paced}");
    // The metric counts them too.
    assert_eq!(
        tierd::volume::Stats::get(&vol.stats().promotions_paced),
        paced as u64
    );
    // Still busy a moment later.
    bed.clock.advance(Duration::from_millis(100));
    for e in HOT {
        heat_up(&vol, e, 1);
    }
    let r = m.run_round();
    assert_eq!(up(&vol), 0, "{r:?}");
    // The HDD free of users (no request for longer than
    // `migrate.speculative-idle`): they come up, a run at a time.
    let r = bed.round(&m, 1);
    assert_eq!(up(&vol), HOT.len(), "{r:?}");
    assert_eq!(r.paced, 0, "{r:?}");
    for e in 0..40u64 {
        let mut buf = vec![0u8; EXTENT as usize];
        vol.read(e * EXTENT, &mut buf).expect("read");
        assert!(buf == pattern(e, EXTENT as usize), "extent {e} intact");
    }
}

#[test]
fn with_the_share_at_one_promotions_never_wait() {
    let bed = Bed::new(16, 64, 2);
    let vol = bed.open();
    let m = migrator(&vol, 1.0);
    assert_eq!(setup(&bed, &vol, &m), 0);
    assert_eq!(up(&vol), HOT.len());
}
