//! The reserve is one value while the volume runs: the target the migrator
//! keeps free on the SSD, which starts at the reserve fixed at format and
//! moves with `tierctl config set reserve` (`Migrator::set_reserve_extents`).
//! Everything that keeps that room follows it: the policy's demotions, the
//! HDD room that clean shadows leave for the demotions that restore it, and
//! the write log, which lives in it (never past the reserve fixed at
//! format: the only room a full volume has).

mod support;

use support::*;
use tierd::volume::Tier;

/// Segments the write log may hold with a reserve of `r` slots (all but an
/// eighth, at most 32).
fn log_cap(r: u32) -> u32 {
    r - (r / 8).min(32)
}

#[test]
fn the_write_log_follows_the_target_up_to_the_reserve_fixed_at_format() {
    let bed = Bed::new(64, 128, 16);
    let vol = bed.open();
    let m = bed.migrator(&vol);
    assert_eq!(m.reserve_extents(), 16, "the target starts at the format's");
    assert_eq!(vol.log_usage().cap, log_cap(16));
    m.set_reserve_extents(8);
    assert_eq!(vol.log_usage().cap, log_cap(8), "a lower target: less log");
    m.set_reserve_extents(0);
    assert_eq!(vol.log_usage().cap, 0, "no reserve: no room for a log");
    m.set_reserve_extents(40);
    assert_eq!(m.reserve_extents(), 40);
    assert_eq!(
        vol.log_usage().cap,
        log_cap(16),
        "never past the reserve fixed at format"
    );
    m.set_reserve_extents(16);
    assert_eq!(vol.log_usage().cap, log_cap(16));
}

/// Six promoted extents keep clean shadows on the HDD; new data then
/// leaves the HDD with 4 free slots: more than the reserve fixed at format
/// (2), as many as the target (4). A round drops shadows to leave the HDD
/// more free than the target (it kept them while it followed the format's
/// reserve).
#[test]
fn shadows_leave_the_hdd_more_room_than_the_target() {
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    let model = shadows_then_new_data(&bed, &vol, 4);
    assert_eq!(vol.usage().shadows, 6);
    vol.flush().expect("flush");
    let m = bed.migrator(&vol);
    m.set_reserve_extents(4);
    let r = bed.round(&m, 1);
    assert!(r.shadows_dropped >= 1, "{r:?}");
    assert!(vol.usage().shadows < 6);
    assert_reads(&vol, &model, "after the round");
    assert_accounting(&vol, 24);
}

/// Pins to the SSD may take the SSD less the reserve in force.
#[test]
fn pins_leave_the_target_free() {
    let bed = Bed::new(16, 64, 4);
    let vol = bed.open();
    let m = bed.migrator(&vol);
    m.set_reserve_extents(8);
    let e = vol
        .pin(0, 10 * EXTENT, Some(Tier::Ssd))
        .expect_err("10 extents do not fit beside a reserve of 8");
    assert!(e.to_string().contains("room for 8"), "{e}");
    m.set_reserve_extents(4);
    vol.pin(0, 10 * EXTENT, Some(Tier::Ssd))
        .expect("10 extents fit beside a reserve of 4");
}
