//! Blocks logged in part (a write of whole 512-byte sectors of a block whose
//! other sectors live on the HDD): a crash after every step of the moves
//! that carry them — their write-back home and the promotion of their
//! extents — as a process kill (every write the OS has survives) and as a
//! power cut (only synced data and flushed metadata survive). After the
//! restart every *sector* holds its last flushed value or a later write
//! (after a kill: exactly its last write), and the reads stay the same
//! after a further restart, after finishing the move, after moving the
//! extents the other way and back, and after a flush and a power cut.

mod durability_model;
mod support;

use std::collections::HashMap;
use std::sync::Arc;

use durability_model::block_bytes;
use support::*;
use tierd::units::Reason;
use tierd::volume::{MoveOutcome, MoveStep, Tier, Volume};

const SECTOR: u64 = 512;
const MOVING: [u64; 3] = [0, 1, 2];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    WriteBack,
    Promote,
}

/// Per sector: the last flushed write and those since.
#[derive(Default)]
struct Sectors {
    durable: HashMap<u64, u64>,
    pending: HashMap<u64, Vec<u64>>,
    next: u64,
}

fn sector_bytes(id: u64, s: u64) -> Vec<u8> {
    let mut out = vec![0u8; SECTOR as usize];
    block_bytes(id, s, &mut out);
    out
}

impl Sectors {
    /// Write sectors `first..first + n` (volume sectors) with a new id.
    fn write(&mut self, vol: &Volume, first: u64, n: u64) {
        self.next += 1;
        let id = self.next;
        let mut data = Vec::with_capacity((n * SECTOR) as usize);
        for s in first..first + n {
            data.extend(sector_bytes(id, s));
            self.pending.entry(s).or_default().push(id);
        }
        vol.write(first * SECTOR, &data, false)
            .unwrap_or_else(|e| panic!("write sectors {first}+{n}: {e}"));
    }

    fn flush(&mut self, vol: &Volume) {
        vol.flush().expect("flush");
        for (s, ids) in self.pending.drain() {
            if let Some(last) = ids.last() {
                self.durable.insert(s, *last);
            }
        }
    }

    fn current(&self, s: u64) -> u64 {
        self.pending
            .get(&s)
            .and_then(|v| v.last().copied())
            .unwrap_or_else(|| self.durable.get(&s).copied().unwrap_or(0))
    }

    /// Check every sector of the moving extents; settle the model on what
    /// was read. Returns the sectors that lost an unflushed write.
    fn check(&mut self, vol: &Volume, exact: bool, what: &str) -> u64 {
        let len = MOVING.len() as u64 * EXTENT;
        let mut image = vec![0u8; len as usize];
        vol.read(0, &mut image)
            .unwrap_or_else(|e| panic!("{what}: read: {e}"));
        let mut lost = 0;
        for (s, got) in image.chunks_exact(SECTOR as usize).enumerate() {
            let s = s as u64;
            let durable = self.durable.get(&s).copied().unwrap_or(0);
            let later = self.pending.get(&s).cloned().unwrap_or_default();
            let current = self.current(s);
            let id = std::iter::once(durable)
                .chain(later.iter().copied())
                .find(|id| sector_bytes(*id, s) == got)
                .unwrap_or_else(|| {
                    panic!(
                        "{what}: sector {s} (extent {}, block {}) holds no allowed write (durable {durable}, later {later:?})",
                        s * SECTOR / EXTENT,
                        s * SECTOR % EXTENT / 4096
                    )
                });
            if exact {
                assert_eq!(id, current, "{what}: sector {s} lost a write in a kill");
            }
            if id != current {
                lost += 1;
            }
            self.pending.remove(&s);
            self.durable.insert(s, id);
        }
        lost
    }
}

fn image(vol: &Volume) -> Vec<u8> {
    let mut out = vec![0u8; (MOVING.len() as u64 * EXTENT) as usize];
    vol.read(0, &mut out).expect("read");
    out
}

/// Three HDD extents, each with blocks logged in part (some flushed, some
/// not) beside whole logged blocks.
fn prepare() -> (Bed, Arc<Volume>, Sectors) {
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    let mut w = Sectors::default();
    let spe = EXTENT / SECTOR;
    for e in MOVING {
        w.write(&vol, e * spe, spe);
    }
    w.flush(&vol);
    for e in MOVING {
        let out = migrate(&vol, e, Tier::Hdd);
        assert!(matches!(out, MoveOutcome::Moved(_)), "{e}: {out:?}");
    }
    vol.flush().expect("flush");
    // Sector 1..=6 of block 2, the last two of block 5 and the first of 6,
    // a whole block 9 of each extent; flushed.
    for e in MOVING {
        let s0 = e * spe;
        w.write(&vol, s0 + 2 * 8 + 1, 6);
        w.write(&vol, s0 + 5 * 8 + 6, 3);
        w.write(&vol, s0 + 9 * 8, 8);
    }
    w.flush(&vol);
    // Not flushed: more sectors of a block logged in part, a new part.
    w.write(&vol, 7, 1); // extent 0, block 0, sector 7
    w.write(&vol, 2 * 8 + 7, 1); // block 2's last sector: now whole
    w.write(&vol, spe + 12 * 8 + 3, 2);
    let parts = MOVING
        .iter()
        .flat_map(|e| vol.mapping(*e).expect("mapped").logged)
        .filter(|l| !l.is_whole())
        .count();
    assert!(parts >= 6, "blocks logged in part: {parts}");
    (bed, vol, w)
}

fn the_move(case: Case, vol: &Volume) -> Vec<(u64, MoveOutcome)> {
    let r = match case {
        Case::WriteBack => tierd::migrate::write_back_batch(vol, &MOVING, &mut |_| {}),
        Case::Promote => {
            let batch: Vec<(u64, Reason)> = MOVING.iter().map(|e| (*e, Reason::Manual)).collect();
            tierd::migrate::migrate_batch(vol, &batch, Tier::Ssd, &mut |_| {})
        }
    };
    r.unwrap_or_else(|e| panic!("{case:?}: {e}"))
}

fn run(case: Case, step: Option<MoveStep>, power_cut: bool) -> u64 {
    let what = format!("{case:?} stopped after {step:?}, power cut {power_cut}");
    let (bed, vol, mut w) = prepare();
    if let Some(s) = step {
        tierd::migrate::arm_crash_after(s);
    }
    let out = the_move(case, &vol);
    for (e, o) in &out {
        match step {
            Some(s) => assert_eq!(*o, MoveOutcome::Stopped(s), "{what}: extent {e}"),
            None => assert!(matches!(o, MoveOutcome::Moved(_)), "{what}: {e}: {o:?}"),
        }
    }
    drop(vol);
    if power_cut {
        bed.power_cut();
    }
    let vol = bed.open();
    let lost = w.check(&vol, !power_cut, &what);
    assert_accounting(&vol, 24);
    let img = image(&vol);
    drop(vol);
    let vol = bed.open();
    assert!(
        image(&vol) == img,
        "{what}: a further restart changed reads"
    );
    let out = the_move(case, &vol);
    assert!(
        out.iter()
            .all(|(_, o)| matches!(o, MoveOutcome::Moved(_) | MoveOutcome::Skipped)),
        "{what}: finishing: {out:?}"
    );
    assert!(
        image(&vol) == img,
        "{what}: the finished move changed reads"
    );
    let (there, back) = match case {
        Case::Promote => (Tier::Hdd, Tier::Ssd),
        Case::WriteBack => (Tier::Ssd, Tier::Hdd),
    };
    for to in [there, back] {
        for e in MOVING {
            let o = migrate(&vol, e, to);
            assert!(
                matches!(o, MoveOutcome::Moved(_) | MoveOutcome::Skipped),
                "{what}: {e} to {to:?}: {o:?}"
            );
        }
        assert!(image(&vol) == img, "{what}: moved to the {to:?}");
    }
    vol.flush().expect("flush");
    drop(vol);
    bed.power_cut();
    let vol = bed.open();
    assert!(image(&vol) == img, "{what}: flushed, power cut");
    assert_accounting(&vol, 24);
    lost
}

#[test]
fn every_step_of_moving_blocks_logged_in_part_as_a_process_kill() {
    for case in [Case::WriteBack, Case::Promote] {
        for step in crash_steps() {
            run(case, step, false);
        }
    }
}

#[test]
fn every_step_of_moving_blocks_logged_in_part_as_a_power_cut() {
    let mut lost = 0;
    for case in [Case::WriteBack, Case::Promote] {
        for step in crash_steps() {
            lost += run(case, step, true);
        }
    }
    assert!(
        lost > 0,
        "no unflushed write was ever lost: the power cut model was not exercised"
    );
}
