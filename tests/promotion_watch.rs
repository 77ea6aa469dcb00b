//! A promotion whose extent is written during its copy: the commit copies
//! the written blocks again, under the extent's lock, instead of failing
//! the move — so an extent that keeps being written still comes up — and no
//! write is lost, whether it rewrote a block already in the SSD write log
//! (the shared-lock path) or gave a block a new log place (the write-lock
//! path). The interleaving is made certain with a device that holds the
//! promotion's copy while the test writes.

mod support;

use std::sync::Arc;
use std::thread;

use support::*;
use tierd::device::BlockDevice;
use tierd::store::MetaStore;
use tierd::units::Reason;
use tierd::volume::{Devices, MoveOutcome, Stats, Tier, Volume, VolumeOptions};

#[test]
fn writes_during_a_promotion_are_copied_again_not_lost() {
    let bed = Bed::new(8, 16, 2);
    // The first write of at least half an extent once armed: the
    // promotion's copy into its new SSD slot (foreground writes are 4 KiB).
    let gate = Gate::new(bed.ssd.clone(), |len, _| len >= (EXTENT / 2) as usize);
    let devices = Devices {
        ssd: gate.clone() as Arc<dyn BlockDevice>,
        hdd: bed.hdd.clone() as Arc<dyn BlockDevice>,
    };
    let store: Arc<dyn MetaStore> = bed.store.clone();
    let opts = VolumeOptions {
        heat: bed.heat,
        clock: bed.clock.clone(),
        ..Default::default()
    };
    let vol = Arc::new(Volume::open_with(devices.clone(), store.clone(), opts).expect("open"));
    let mut model = pattern(1, EXTENT as usize);
    vol.write(0, &model, false).expect("fill");
    let out = tierd::migrate::migrate_batch(&vol, &[(0, Reason::Manual)], Tier::Hdd, &mut |_| {})
        .expect("demote");
    assert!(matches!(out[0].1, MoveOutcome::Moved(_)), "{out:?}");
    // Block 1 goes to the write log.
    let w = pattern(2, 4096);
    vol.write(4096, &w, false).expect("log write");
    model[4096..8192].copy_from_slice(&w);
    let m = vol.mapping(0).expect("mapped");
    assert_eq!(m.loc.tier, Tier::Hdd);
    assert_eq!(m.logged.len(), 1, "{m:?}");
    vol.flush().expect("flush");

    gate.arm();
    let mover = {
        let vol = vol.clone();
        thread::spawn(move || {
            tierd::migrate::migrate_batch(&vol, &[(0, Reason::Manual)], Tier::Ssd, &mut |_| {})
        })
    };
    gate.wait_held();
    // The copy is held (it read the old data): rewrite the logged block in
    // its place, and write a block that takes a new log place.
    let a = pattern(3, 4096);
    let b = pattern(4, 4096);
    vol.write(4096, &a, false).expect("rewrite logged block");
    vol.write(9 * 4096, &b, false).expect("write a new block");
    model[4096..8192].copy_from_slice(&a);
    model[9 * 4096..10 * 4096].copy_from_slice(&b);
    gate.release();
    let out = mover.join().expect("mover").expect("promote");
    assert!(
        matches!(out[..], [(0, MoveOutcome::Moved(_))]),
        "the promotion should survive the writes: {out:?}"
    );
    let m = vol.mapping(0).expect("mapped");
    assert_eq!(m.loc.tier, Tier::Ssd, "{m:?}");
    assert!(m.logged.is_empty(), "{m:?}");
    assert!(
        Stats::get(&vol.stats().recopied_blocks) >= 2,
        "recopied {}",
        Stats::get(&vol.stats().recopied_blocks)
    );
    let mut all = vec![0u8; EXTENT as usize];
    vol.read(0, &mut all).expect("read");
    assert!(all == model, "a write during the promotion was lost");
    assert_accounting(&vol, 24);
    // The promotion's flush made the copies durable: a crash now keeps them.
    drop(vol);
    let opts = VolumeOptions {
        heat: bed.heat,
        clock: bed.clock.clone(),
        ..Default::default()
    };
    let vol = Volume::open_with(devices, store, opts).expect("reopen");
    let mut all = vec![0u8; EXTENT as usize];
    vol.read(0, &mut all).expect("read after reopen");
    assert!(all == model, "lost after a reopen");
    assert_eq!(vol.mapping(0).map(|m| m.loc.tier), Some(Tier::Ssd));
}
