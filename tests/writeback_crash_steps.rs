//! A crash after every step of the copy protocol for the moves of the new
//! mapping states: a write-back of logged blocks, a demotion into a clean
//! shadow, a demotion into a shadow with stale blocks, a promotion of a
//! partly logged HDD extent, a pre-clean (SSD extents given an HDD copy)
//! and a refresh (stale shadows brought up to date in place, the extents
//! staying on the SSD). Each is crashed as a process kill (every write
//! the OS has survives: the volume is dropped without a flush) and as a
//! power cut (only synced data and flushed metadata survive). After the
//! restart every block holds its last flushed value or a later write (after
//! a kill: exactly its last write), no shadow survives the unclean stop,
//! and slot accounting is whole. The reads then stay the same after a
//! further restart, after finishing the interrupted move, after moving the
//! extents the other way and back, and after a flush and a power cut.

mod durability_model;
mod support;

use std::sync::Arc;

use durability_model::{block_bytes, block_id, Model, BLOCK};
use support::*;
use tierd::units::Reason;
use tierd::volume::{MoveOutcome, MoveStep, Tier, Volume};

const BPE: u64 = EXTENT / BLOCK;
/// The extents that move: neighbours, so their copies may be merged.
const MOVING: [u64; 3] = [0, 1, 2];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    /// Logged blocks of three HDD extents written back.
    WriteBack,
    /// Three SSD extents with clean shadows demoted.
    DemoteClean,
    /// The same with stale blocks, some written after the last flush.
    DemoteStale,
    /// Three HDD extents with logged blocks promoted.
    PromoteLogged,
    /// Three SSD extents with no HDD copy pre-cleaned, some of their
    /// blocks written after the last flush.
    Preclean,
    /// Three SSD extents with stale shadows cleaned where they are (the
    /// stale blocks written into the shadows), some written after the last
    /// flush.
    Refresh,
}

const CASES: [Case; 6] = [
    Case::WriteBack,
    Case::DemoteClean,
    Case::DemoteStale,
    Case::PromoteLogged,
    Case::Preclean,
    Case::Refresh,
];

struct Writer {
    model: Model,
    next: u64,
}

impl Writer {
    /// Write blocks `first..first + n` of `extent` with a new write id.
    fn write(&mut self, vol: &Volume, extent: u64, first: u64, n: u64) {
        let id = self.next;
        self.next += 1;
        let b0 = extent * BPE + first;
        let mut data = vec![0u8; (n * BLOCK) as usize];
        for k in 0..n {
            let s = (k * BLOCK) as usize;
            block_bytes(id, b0 + k, &mut data[s..s + BLOCK as usize]);
            self.model.wrote(b0 + k, id);
        }
        vol.write(b0 * BLOCK, &data, false)
            .unwrap_or_else(|e| panic!("write {extent}:{first}+{n}: {e}"));
    }

    fn flush(&mut self, vol: &Volume) {
        vol.flush().expect("flush");
        self.model.flushed();
    }
}

fn moved(out: MoveOutcome) -> bool {
    matches!(out, MoveOutcome::Moved(_))
}

fn all_to(vol: &Volume, to: Tier) {
    for e in MOVING {
        let out = migrate(vol, e, to);
        assert!(
            moved(out) || out == MoveOutcome::Skipped,
            "{e} to {to:?}: {out:?}"
        );
    }
}

/// The state before the interrupted move, on a fresh bed.
fn prepare(case: Case) -> (Bed, Arc<Volume>, Writer) {
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    let mut w = Writer {
        model: Model::default(),
        next: 1,
    };
    // Extent 0 and 2 fully written, extent 1 only in blocks 4..=9.
    w.write(&vol, 0, 0, BPE);
    w.write(&vol, 1, 4, 6);
    w.write(&vol, 2, 0, BPE);
    w.flush(&vol);
    if case != Case::Preclean {
        all_to(&vol, Tier::Hdd);
    }
    match case {
        Case::Preclean => {
            let on_ssd = MOVING.iter().all(|e| tier_of(&vol, *e) == Some(Tier::Ssd));
            assert!(
                on_ssd && vol.usage().shadows == 0,
                "new data lands on the SSD"
            );
            // Not flushed.
            w.write(&vol, 0, 3, 1);
            w.write(&vol, 2, 5, 2);
        }
        Case::WriteBack | Case::PromoteLogged => {
            w.write(&vol, 0, 2, 3);
            w.write(&vol, 0, 9, 1);
            w.write(&vol, 1, 1, 1); // never written before
            w.write(&vol, 1, 12, 1);
            w.write(&vol, 2, 5, 3);
            w.flush(&vol);
            // Not flushed: a logged block again, new places in the log.
            w.write(&vol, 0, 3, 1);
            w.write(&vol, 0, 14, 1);
            w.write(&vol, 1, 5, 1);
            assert_eq!(vol.usage().logged_blocks, 11);
        }
        Case::DemoteClean | Case::DemoteStale | Case::Refresh => {
            all_to(&vol, Tier::Ssd);
            assert_eq!(vol.usage().shadows, 3);
            w.flush(&vol);
            if case != Case::DemoteClean {
                w.write(&vol, 0, 2, 1);
                w.write(&vol, 1, 12, 1); // never written before
                w.flush(&vol);
                // Not flushed.
                w.write(&vol, 0, 7, 1);
                w.write(&vol, 2, 0, 2);
                w.write(&vol, 0, 2, 1);
                assert_eq!(vol.usage().shadow_stale_blocks, 5);
            }
        }
    }
    (bed, vol, w)
}

/// The interrupted move (or the whole one).
fn the_move(case: Case, vol: &Volume) -> Vec<(u64, MoveOutcome)> {
    let batch: Vec<(u64, Reason)> = MOVING.iter().map(|e| (*e, Reason::Manual)).collect();
    let r = match case {
        Case::WriteBack => tierd::migrate::write_back_batch(vol, &MOVING, &mut |_| {}),
        Case::DemoteClean | Case::DemoteStale => {
            tierd::migrate::migrate_batch(vol, &batch, Tier::Hdd, &mut |_| {})
        }
        Case::PromoteLogged => tierd::migrate::migrate_batch(vol, &batch, Tier::Ssd, &mut |_| {}),
        Case::Preclean => tierd::migrate::preclean_batch(vol, &MOVING, &mut |_| {}),
        Case::Refresh => tierd::migrate::clean_batch(vol, &batch, &mut |_| {}),
    };
    r.unwrap_or_else(|e| panic!("{case:?}: {e}"))
}

/// Read every block, check it against the model (exactly its last write
/// with `exact`) and settle the model on what was read. Returns the image.
/// Counts blocks that lost an unflushed write in `lost`.
fn check(vol: &Volume, w: &mut Writer, exact: bool, what: &str, lost: &mut u64) -> Vec<u8> {
    let mut image = vec![0u8; vol.size() as usize];
    vol.read(0, &mut image)
        .unwrap_or_else(|e| panic!("{what}: read: {e}"));
    for (b, chunk) in image.chunks_exact(BLOCK as usize).enumerate() {
        let b = b as u64;
        let allowed = w.model.allowed(b);
        let got = block_id(b, chunk);
        match got {
            Some(id) if allowed.contains(&id) => {
                let last = w.model.current(b);
                if exact {
                    assert_eq!(
                        id, last,
                        "{what}: block {b} lost write {last} in a process kill"
                    );
                }
                if id != last {
                    *lost += 1;
                }
                w.model.settle(b, id);
            }
            _ => panic!(
                "{what}: block {b} (extent {}) holds {got:?} (None: no write's bytes); allowed {allowed:?}",
                b / BPE
            ),
        }
    }
    image
}

fn assert_same(vol: &Volume, image: &[u8], what: &str) {
    let mut now = vec![0u8; image.len()];
    vol.read(0, &mut now)
        .unwrap_or_else(|e| panic!("{what}: read: {e}"));
    if now != image {
        let at = now.iter().zip(image).position(|(a, b)| a != b).unwrap_or(0) as u64;
        panic!(
            "{what}: reads changed at block {} (extent {}): {:?}, was {:?}",
            at / BLOCK,
            at / EXTENT,
            block_id(
                at / BLOCK,
                &now[(at / BLOCK * BLOCK) as usize..][..BLOCK as usize]
            ),
            block_id(
                at / BLOCK,
                &image[(at / BLOCK * BLOCK) as usize..][..BLOCK as usize]
            )
        );
    }
}

fn run(case: Case, step: Option<MoveStep>, power_cut: bool) -> u64 {
    let what = format!("{case:?} stopped after {step:?}, power cut {power_cut}");
    let (bed, vol, mut w) = prepare(case);
    if let Some(s) = step {
        tierd::migrate::arm_crash_after(s);
    }
    let mut out = the_move(case, &vol);
    out.sort_by_key(|(e, _)| *e);
    assert_eq!(
        out.iter().map(|(e, _)| *e).collect::<Vec<_>>(),
        MOVING,
        "{what}: {out:?}"
    );
    for (e, o) in &out {
        match (step, case) {
            (Some(s), _) => assert_eq!(*o, MoveOutcome::Stopped(s), "{what}: extent {e}"),
            (None, Case::DemoteClean) => assert_eq!(*o, MoveOutcome::Moved(0), "{what}"),
            (None, _) => assert!(moved(*o), "{what}: extent {e}: {o:?}"),
        }
    }
    drop(vol);
    if power_cut {
        bed.power_cut();
    }
    let mut lost = 0;
    let vol = bed.open();
    let image = check(&vol, &mut w, !power_cut, &what, &mut lost);
    let u = vol.usage();
    assert_eq!(
        u.shadows, 0,
        "{what}: a shadow survived an unclean stop: {u:?}"
    );
    assert_accounting(&vol, 24);
    if step.is_none() {
        let on = |t: Tier| MOVING.iter().all(|e| tier_of(&vol, *e) == Some(t));
        match case {
            Case::WriteBack => assert_eq!(u.logged_blocks, 0, "{what}"),
            Case::DemoteClean | Case::DemoteStale => assert!(on(Tier::Hdd), "{what}"),
            Case::PromoteLogged => assert!(on(Tier::Ssd) && u.logged_blocks == 0, "{what}"),
            Case::Preclean => assert!(on(Tier::Ssd), "{what}"),
            Case::Refresh => assert!(on(Tier::Ssd), "{what}"),
        }
    }

    // A further restart changes nothing.
    drop(vol);
    let vol = bed.open();
    assert_same(&vol, &image, &format!("{what}: restarted again"));
    assert_accounting(&vol, 24);
    // Finish the move, then move the extents the other way and back.
    let out = the_move(case, &vol);
    assert!(
        out.iter()
            .all(|(_, o)| moved(*o) || *o == MoveOutcome::Skipped),
        "{what}: finishing: {out:?}"
    );
    assert_same(&vol, &image, &format!("{what}: move finished"));
    if matches!(case, Case::Preclean | Case::Refresh) {
        // The unclean stop dropped the shadows: cleaning again gives each
        // extent a new clean copy.
        assert_eq!(vol.usage().shadows, 3, "{what}: cleaned again");
        assert_eq!(vol.usage().shadow_stale_blocks, 0, "{what}: cleaned again");
    }
    let (there, back) = match case {
        Case::PromoteLogged => (Tier::Hdd, Tier::Ssd),
        _ => (Tier::Ssd, Tier::Hdd),
    };
    all_to(&vol, there);
    assert_same(&vol, &image, &format!("{what}: moved to the {there:?}"));
    all_to(&vol, back);
    assert_same(&vol, &image, &format!("{what}: and back to the {back:?}"));
    assert_accounting(&vol, 24);
    vol.flush().expect("flush");
    drop(vol);
    bed.power_cut();
    let vol = bed.open();
    assert_same(&vol, &image, &format!("{what}: flushed, power cut"));
    assert_accounting(&vol, 24);
    lost
}

#[test]
fn every_step_of_the_new_moves_as_a_process_kill() {
    for case in CASES {
        for step in crash_steps() {
            run(case, step, false);
        }
    }
}

#[test]
fn every_step_of_the_new_moves_as_a_power_cut() {
    let mut lost = 0;
    for case in CASES {
        for step in crash_steps() {
            lost += run(case, step, true);
        }
    }
    assert!(
        lost > 0,
        "no unflushed write was ever lost: the power cut model was not exercised"
    );
}
