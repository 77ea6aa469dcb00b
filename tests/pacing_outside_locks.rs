//! A migration's pacing wait never holds an extent's lock: a copy that
//! writes into a slot the extent owns (a write-back into its HDD slot, a
//! demotion into its shadow) runs under the extent's read lock, and its
//! `pace` call comes before that lock is taken. A foreground write that
//! needs the extent's write lock, issued from inside the pacing wait,
//! completes while the migration waits. (Before, the wait was taken under
//! the lock: the writer stalled for the whole wait, and on the bench's
//! virtual clock, where the blocked writer kept the turn the wait needed,
//! the run deadlocked.)

mod support;

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use support::*;
use tierd::volume::{MoveOutcome, Tier, Volume};

const BLK: u64 = 4096;

/// From inside `pace`, write block `block` of extent 0 on another thread
/// and wait up to 10 s for it; true if every such write completed.
fn pace_writing(vol: &Arc<Volume>, block: u64) -> impl FnMut(u64) + '_ {
    let mut all = true;
    move |_| {
        if !all {
            return;
        }
        let (tx, rx) = mpsc::channel();
        let v = vol.clone();
        std::thread::spawn(move || {
            let r = v.write(block * BLK, &pattern(99, BLK as usize), false);
            let _ = tx.send(r.is_ok());
        });
        all = rx.recv_timeout(Duration::from_secs(10)) == Ok(true);
        assert!(all, "a foreground write waited on the migration's pacing");
    }
}

#[test]
fn a_span_write_back_paces_before_it_locks_the_extent() {
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    let mut model = vec![0u8; vol.size() as usize];
    // Extent 0 on the HDD with blocks 0..=7 written, then ten blocks in the
    // write log: a span write-back.
    hdd_extent(&vol, &mut model, 0, 0, &pattern(1, 8 * BLK as usize));
    for b in 0..10u64 {
        put(&vol, &mut model, b * BLK, &pattern(10 + b, BLK as usize));
    }
    assert_eq!(logged_blocks(&vol, 0).len(), 10);
    // Block 14 was never written: writing it takes the extent's write lock.
    let mut pace = pace_writing(&vol, 14);
    let out = tierd::migrate::write_back_batch(&vol, &[0], &mut pace).expect("write-back");
    assert_eq!(out.len(), 1, "{out:?}");
}

#[test]
fn a_demotion_into_a_stale_shadow_paces_before_it_locks_the_extent() {
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    let mut model = vec![0u8; vol.size() as usize];
    hdd_extent(&vol, &mut model, 0, 0, &pattern(1, 8 * BLK as usize));
    assert!(matches!(migrate(&vol, 0, Tier::Ssd), MoveOutcome::Moved(_)));
    assert!(vol.mapping(0).is_some_and(|m| m.shadow.is_some()));
    put(&vol, &mut model, 2 * BLK, &pattern(5, BLK as usize));
    let mut pace = pace_writing(&vol, 12);
    let out = tierd::migrate::migrate_batch(
        &vol,
        &[(0, tierd::units::Reason::Manual)],
        Tier::Hdd,
        &mut pace,
    )
    .expect("demotion");
    assert_eq!(out.len(), 1, "{out:?}");
}

#[test]
fn a_span_write_back_is_paced_for_the_blocks_it_copies_not_the_span() {
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    let mut model = vec![0u8; vol.size() as usize];
    // Ten of extent 0's 16 blocks in the log, from its first to its last:
    // a span write-back reads and rewrites all 16 of the HDD to write 10.
    hdd_extent(&vol, &mut model, 0, 0, &pattern(1, 8 * BLK as usize));
    const LOGGED: [u64; 10] = [0, 1, 2, 4, 6, 8, 10, 12, 14, 15];
    for b in LOGGED {
        put(&vol, &mut model, b * BLK, &pattern(10 + b, BLK as usize));
    }
    assert_eq!(logged_blocks(&vol, 0).len(), 10);
    let mut paced = 0u64;
    let out =
        tierd::migrate::write_back_batch(&vol, &[0], &mut |n| paced += n).expect("write-back");
    assert!(matches!(out[..], [(0, MoveOutcome::Moved(_))]), "{out:?}");
    // The bucket caps bytes copied between the tiers: the ten blocks, as
    // writing them one by one would be charged (the span's 16 blocks
    // charged 1.6 times as much; with 1 MiB extents up to 32 times).
    assert_eq!(paced, 10 * BLK);
    assert!(logged_blocks(&vol, 0).is_empty());
    for b in 0..16u64 {
        let mut got = vec![0u8; BLK as usize];
        vol.read(b * BLK, &mut got).expect("read");
        assert_eq!(
            got[..],
            model[(b * BLK) as usize..((b + 1) * BLK) as usize],
            "block {b}"
        );
    }
}
