//! Foreground writes racing the migration of their extent: while extents are
//! moved back and forth between the tiers, writer threads keep overwriting
//! their own blocks; afterwards every block holds its writer's last value —
//! no write lost, none torn. A second test makes certain the interleaving
//! that the random one hits only now and then.

mod support;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use support::*;
use tierd::device::BlockDevice;
use tierd::units::Reason;
use tierd::volume::{Devices, MoveOutcome, Tier};

#[test]
fn no_write_is_lost_or_torn_while_its_extent_moves() {
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    // Three extents, fully written first.
    vol.write(0, &vec![0u8; 3 * EXTENT as usize], false)
        .expect("fill");
    let blocks = 3 * EXTENT / 4096;
    let writers = 4u64;
    let done = Arc::new(AtomicBool::new(false));
    // Moves that landed while the writers were running. The writers keep
    // going past their 400 rounds until one has (bounded in time), so a run
    // in which every move happened to race still tests something.
    let landed = Arc::new(AtomicU32::new(0));
    let start = Instant::now();
    let handles: Vec<_> = (0..writers)
        .map(|w| {
            let vol = vol.clone();
            let landed = landed.clone();
            thread::spawn(move || {
                // Writer w owns blocks b with b % writers == w.
                let mut last = vec![0u32; blocks as usize];
                let mut round = 0u32;
                loop {
                    round += 1;
                    if round > 400
                        && (landed.load(Ordering::Relaxed) > 0
                            || start.elapsed() > Duration::from_secs(60))
                    {
                        break;
                    }
                    for b in (w..blocks).step_by(writers as usize) {
                        if (b + u64::from(round)) % 3 != 0 {
                            continue;
                        }
                        let mut data = vec![0u8; 4096];
                        for chunk in data.chunks_mut(4) {
                            chunk.copy_from_slice(&round.to_le_bytes());
                        }
                        vol.write(b * 4096, &data, false).expect("write");
                        last[b as usize] = round;
                    }
                }
                last
            })
        })
        .collect();
    let mover = {
        let vol = vol.clone();
        let done = done.clone();
        let landed = landed.clone();
        thread::spawn(move || {
            let (mut moved, mut raced) = (0u32, 0u32);
            let mut to = Tier::Hdd;
            while !done.load(Ordering::Relaxed) {
                for e in 0..3 {
                    match tierd::migrate::migrate_extent(&vol, e, to, Reason::Manual, &mut |_| {})
                        .expect("migrate")
                    {
                        MoveOutcome::Moved(_) => {
                            moved += 1;
                            landed.fetch_add(1, Ordering::Relaxed);
                        }
                        MoveOutcome::Raced => raced += 1,
                        _ => {}
                    }
                }
                to = if to == Tier::Hdd {
                    Tier::Ssd
                } else {
                    Tier::Hdd
                };
            }
            (moved, raced)
        })
    };
    let lasts: Vec<Vec<u32>> = handles
        .into_iter()
        .map(|h| h.join().expect("writer"))
        .collect();
    done.store(true, Ordering::Relaxed);
    let (moved, raced) = mover.join().expect("mover");
    assert!(
        moved > 0,
        "no migration completed (raced {raced}): the test proved nothing"
    );
    let mut buf = vec![0u8; (3 * EXTENT) as usize];
    vol.read(0, &mut buf).expect("read");
    for b in 0..blocks as usize {
        let want = lasts[b % writers as usize][b];
        let block = &buf[b * 4096..(b + 1) * 4096];
        for chunk in block.chunks(4) {
            let got = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
            assert_eq!(
                got, want,
                "block {b}: lost or torn write (moved {moved}, raced {raced})"
            );
        }
    }
    assert_accounting(&vol, 24);
}

/// The interleaving the random test above hits only now and then, made
/// certain: a write to an already written block is held after its first
/// generation bump, before its data reaches the device; meanwhile a
/// migration of its extent snapshots the generation and starts copying.
/// The write then completes on the old slot, and the migration must not
/// commit a copy without it.
#[test]
fn a_write_held_after_its_first_bump_is_not_lost_by_a_migration() {
    let bed = Bed::new(8, 16, 2);
    // The first write at or past 1 MiB once armed (past the superblock
    // area: data slots only): a foreground write stays between its first
    // generation bump and its data reaching the device while the test
    // moves its extent.
    let gate = Gate::new(bed.ssd.clone(), |_, offset| offset >= 1 << 20);
    let devices = Devices {
        ssd: gate.clone() as Arc<dyn BlockDevice>,
        hdd: bed.hdd.clone() as Arc<dyn BlockDevice>,
    };
    let vol = bed.open_on(devices);
    vol.write(0, &pattern(1, EXTENT as usize), false)
        .expect("fill");
    vol.flush().expect("flush");
    assert_eq!(vol.mapping(0).map(|m| m.loc.tier), Some(Tier::Ssd));
    // The overwrite: every block already written, so the shared-lock path.
    gate.arm();
    let writer = {
        let vol = vol.clone();
        thread::spawn(move || vol.write(4096, &pattern(2, 4096), false))
    };
    gate.wait_held();
    // The writer holds the extent's read lock, bumped once, data not yet
    // written. The migration snapshots and copies now, then waits for the
    // write lock to commit.
    let mover = {
        let vol = vol.clone();
        thread::spawn(move || {
            tierd::migrate::migrate_batch(&vol, &[(0, Reason::Manual)], Tier::Hdd, &mut |_| {})
        })
    };
    thread::sleep(std::time::Duration::from_millis(200));
    gate.release();
    writer.join().expect("writer").expect("write");
    let out = mover.join().expect("mover").expect("migrate");
    assert_eq!(out.len(), 1, "{out:?}");
    let mut buf = vec![0u8; 4096];
    vol.read(4096, &mut buf).expect("read");
    assert!(
        buf == pattern(2, 4096),
        "the held write was lost by the migration (outcome {:?}, extent on {:?})",
        out[0].1,
        vol.mapping(0).map(|m| m.loc.tier)
    );
}
