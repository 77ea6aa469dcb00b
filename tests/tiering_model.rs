//! Model-based test of the tiered volume: random reads, writes, trims,
//! zeroes, flushes, pins, single migrations and whole migration rounds,
//! interleaved with restarts (process kills, and power cuts right after a
//! flush), checked byte-exact against a flat in-memory model.

mod support;

use rand::{Rng, SeedableRng};
use support::*;
use tierd::units::Reason;
use tierd::volume::Tier;

#[test]
fn random_ops_with_migrations_match_the_model() {
    let bed = Bed::new(8, 24, 2);
    let mut vol = bed.open();
    let mut mig = bed.migrator(&vol);
    let size = vol.size();
    assert_eq!(size, 30 * EXTENT);
    let mut model = vec![0u8; size as usize];
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x7e1d);
    let (mut moved, mut rounds_moved) = (0, 0);
    for step in 0..3000 {
        // Byte, sector (as recorded block traces write) and block aligned.
        let (offset, unit) = match rng.gen_range(0..3) {
            0 => (rng.gen_range(0..size), 1),
            1 => (rng.gen_range(0..size / 512) * 512, 512),
            _ => (rng.gen_range(0..size / 4096) * 4096, 1),
        };
        let len = rng.gen_range(1..=(size - offset).min(2 * EXTENT));
        let len = if unit > 1 && len >= unit {
            len / unit * unit
        } else {
            len
        };
        let (o, l) = (offset as usize, len as usize);
        match rng.gen_range(0..100) {
            0..=29 => {
                let data: Vec<u8> = (0..l).map(|_| rng.gen::<u8>() | 1).collect();
                vol.write(offset, &data, rng.gen_bool(0.05)).expect("write");
                model[o..o + l].copy_from_slice(&data);
            }
            30..=54 => {
                let mut buf = vec![0u8; l];
                vol.read(offset, &mut buf).expect("read");
                assert!(
                    buf == model[o..o + l],
                    "step {step}: read {offset}+{len} differs"
                );
            }
            55..=59 => {
                vol.discard(offset, len, true, rng.gen_bool(0.5), false)
                    .expect("zero");
                model[o..o + l].fill(0);
            }
            60..=64 => {
                vol.discard(offset, len, false, false, false).expect("trim");
                let first = offset.div_ceil(4096) * 4096;
                let end = (offset + len) / 4096 * 4096;
                if first < end {
                    model[first as usize..end as usize].fill(0);
                }
            }
            65..=69 => vol.flush().expect("flush"),
            70..=79 => {
                let e = rng.gen_range(0..30);
                let to = if rng.gen_bool(0.5) {
                    Tier::Ssd
                } else {
                    Tier::Hdd
                };
                let out = tierd::migrate::migrate_extent(&vol, e, to, Reason::Manual, &mut |_| {})
                    .expect("migrate");
                if matches!(out, tierd::volume::MoveOutcome::Moved(_)) {
                    moved += 1;
                }
            }
            80..=87 => {
                let e = rng.gen_range(0..30);
                heat_up(&vol, e, rng.gen_range(1..4));
                let r = bed.round(&mig, rng.gen_range(0..5));
                assert_eq!(r.errors, 0, "step {step}: {r:?}");
                rounds_moved += r.moved;
            }
            88..=91 => {
                let tier = match rng.gen_range(0..3) {
                    0 => Some(Tier::Ssd),
                    1 => Some(Tier::Hdd),
                    _ => None,
                };
                // Pins may be refused (too much pinned to the SSD): that is fine.
                let _ = vol.pin(offset, len.min(3 * EXTENT), tier);
            }
            92..=95 => {
                drop(mig);
                drop(vol);
                vol = bed.open();
                mig = bed.migrator(&vol);
            }
            _ => {
                vol.flush().expect("flush before power cut");
                drop(mig);
                drop(vol);
                bed.power_cut();
                vol = bed.open();
                mig = bed.migrator(&vol);
            }
        }
        assert_accounting(&vol, 32);
    }
    let mut all = vec![0u8; size as usize];
    vol.read(0, &mut all).expect("read all");
    assert!(all == model, "final contents differ");
    assert!(moved > 50, "only {moved} single migrations happened");
    assert!(rounds_moved > 0, "no migration round moved anything");
}
