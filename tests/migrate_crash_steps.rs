//! A crash injected after every step of the migration copy protocol, both
//! as a process kill (writes the OS already has survive) and as a power cut
//! (only synced data and flushed metadata survive): after reopening, every
//! extent reads its latest acknowledged data, no slot is owned twice or
//! leaked, and the move can be completed afterwards. The same for a batch
//! whose neighbouring extents are copied with one merged read and write, and
//! for a promotion read from the HDD in one read through a gap and written to
//! SSD slots that do not continue each other, for a demotion from SSD
//! slots that do not continue each other written to the HDD in one write,
//! and for a demotion of extents into neighbouring shadows in one write.

mod support;

use std::sync::Arc;
use support::*;
use tierd::units::Reason;

use tierd::volume::{MoveOutcome, MoveStep, Tier, Volume};

fn run(step: Option<MoveStep>, power_cut: bool) {
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    // Extent 0: fully written; extent 1: a few blocks only.
    vol.write(0, &pattern(1, EXTENT as usize), false)
        .expect("write 0");
    vol.write(EXTENT + 8192, &pattern(2, 5000), false)
        .expect("write 1");
    vol.flush().expect("flush");
    assert_eq!(tier_of(&vol, 0), Some(Tier::Ssd));
    for extent in [0u64, 1] {
        if let Some(s) = step {
            tierd::migrate::arm_crash_after(s);
        }
        let out =
            tierd::migrate::migrate_extent(&vol, extent, Tier::Hdd, Reason::Manual, &mut |_| {})
                .expect("migrate");
        match step {
            Some(s) => assert_eq!(out, MoveOutcome::Stopped(s)),
            None => assert!(matches!(out, MoveOutcome::Moved(_)), "{out:?}"),
        }
    }
    drop(vol);
    if power_cut {
        bed.power_cut();
    }
    let vol = bed.open();
    let check = |vol: &Volume| {
        let mut buf = vec![0u8; EXTENT as usize];
        vol.read(0, &mut buf).expect("read 0");
        assert!(
            buf == pattern(1, EXTENT as usize),
            "{step:?}/{power_cut}: extent 0 differs"
        );
        vol.read(EXTENT, &mut buf).expect("read 1");
        assert!(
            buf[..8192].iter().all(|b| *b == 0),
            "{step:?}: head of extent 1"
        );
        assert!(
            buf[8192..8192 + 5000] == pattern(2, 5000)[..],
            "{step:?}: data of extent 1"
        );
        assert!(
            buf[8192 + 5000..].iter().all(|b| *b == 0),
            "{step:?}: tail of extent 1"
        );
        assert_accounting(vol, 24);
    };
    check(&vol);
    if step.is_none() {
        assert_eq!(tier_of(&vol, 0), Some(Tier::Hdd));
    }
    // The interrupted move can be finished after the restart.
    finish(&bed, vol, Tier::Hdd, &check, &|vol| {
        [0u64, 1]
            .into_iter()
            .map(|e| {
                let o =
                    tierd::migrate::migrate_extent(vol, e, Tier::Hdd, Reason::Manual, &mut |_| {})
                        .expect("migrate again");
                (e, o)
            })
            .collect()
    });
}

/// After the restart: finish the interrupted moves with `again` (each ends
/// on tier `to`), check, then check again after a flush and a power cut.
fn finish(
    bed: &Bed,
    vol: Arc<Volume>,
    to: Tier,
    check: &dyn Fn(&Volume),
    again: &dyn Fn(&Volume) -> Vec<(u64, MoveOutcome)>,
) {
    for (e, o) in again(&vol) {
        assert!(
            matches!(o, MoveOutcome::Moved(_) | MoveOutcome::Skipped),
            "{o:?}"
        );
        assert_eq!(tier_of(&vol, e), Some(to));
    }
    check(&vol);
    vol.flush().expect("flush");
    drop(vol);
    bed.power_cut();
    check(&bed.open());
}

/// `run` interrupted after each step of the protocol in turn, and once
/// run to the end; as a kill, or as a power cut.
fn every_step(run: fn(Option<MoveStep>, bool), power_cut: bool) {
    for step in crash_steps() {
        run(step, power_cut);
    }
}

/// Which HDD requests a batch is counted by.
#[derive(Clone, Copy)]
enum HddOps {
    Reads,
    Writes,
}

/// Run `batch` to `to`, interrupted after `step` (`None`: to the end):
/// every outcome is that step's stop (or a move); once destinations are
/// taken, the batch made exactly one HDD request of `ops`; `done` looks at
/// the volume when it ran to the end. Then a kill (and a power cut if
/// asked), `check` after reopening, and the batch finished (`finish`).
#[allow(clippy::too_many_arguments)]
fn interrupted_batch(
    bed: &Bed,
    vol: Arc<Volume>,
    batch: &[(u64, Reason)],
    to: Tier,
    step: Option<MoveStep>,
    power_cut: bool,
    ops: HddOps,
    done: &dyn Fn(&Volume),
    check: &dyn Fn(&Volume),
) {
    let count = |v: &Volume| {
        let st = v.stats();
        let c = match ops {
            HddOps::Reads => &st.dev_reads[Tier::Hdd.index()],
            HddOps::Writes => &st.dev_writes[Tier::Hdd.index()],
        };
        tierd::volume::Stats::get(c)
    };
    let before = count(&vol);
    if let Some(s) = step {
        tierd::migrate::arm_crash_after(s);
    }
    let out = tierd::migrate::migrate_batch(&vol, batch, to, &mut |_| {}).expect("the batch");
    for (_, o) in &out {
        match step {
            Some(s) => assert_eq!(*o, MoveOutcome::Stopped(s)),
            None => assert!(matches!(o, MoveOutcome::Moved(_)), "{o:?}"),
        }
    }
    if step != Some(MoveStep::Allocated) {
        assert_eq!(count(&vol) - before, 1, "{step:?}: not one HDD request");
    }
    if step.is_none() {
        done(&vol);
    }
    drop(vol);
    if power_cut {
        bed.power_cut();
    }
    let vol = bed.open();
    check(&vol);
    finish(bed, vol, to, check, &|vol| {
        tierd::migrate::migrate_batch(vol, batch, to, &mut |_| {}).expect("the batch again")
    });
}

#[test]
fn crash_after_each_step_as_a_process_kill() {
    every_step(run, false);
}

#[test]
fn crash_after_each_step_as_a_power_cut() {
    every_step(run, true);
}

/// A batch: four full extents in neighbouring slots (one merged copy) and a
/// partly written one, interrupted after each step.
fn run_batch(step: Option<MoveStep>, power_cut: bool) {
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    for e in 0..4u64 {
        vol.write(e * EXTENT, &pattern(10 + e, EXTENT as usize), false)
            .expect("write");
    }
    vol.write(4 * EXTENT + 4096, &pattern(20, 9000), false)
        .expect("write 4");
    vol.flush().expect("flush");
    let batch: Vec<(u64, Reason)> = (0..5).map(|e| (e, Reason::Manual)).collect();
    let reads = |v: &Volume| tierd::volume::Stats::get(&v.stats().dev_reads[Tier::Ssd.index()]);
    let before = reads(&vol);
    if let Some(s) = step {
        tierd::migrate::arm_crash_after(s);
    }
    let out = tierd::migrate::migrate_batch(&vol, &batch, Tier::Hdd, &mut |_| {}).expect("migrate");
    assert_eq!(out.len(), 5, "{out:?}");
    for (_, o) in &out {
        match step {
            Some(s) => assert_eq!(*o, MoveOutcome::Stopped(s)),
            None => assert!(matches!(o, MoveOutcome::Moved(_)), "{o:?}"),
        }
    }
    if step != Some(MoveStep::Allocated) {
        // One merged read for extents 0..4, one run for extent 4.
        assert_eq!(reads(&vol) - before, 2, "{step:?}: copies were not merged");
    }
    drop(vol);
    if power_cut {
        bed.power_cut();
    }
    let check = |vol: &Volume| {
        let mut buf = vec![0u8; EXTENT as usize];
        for e in 0..4u64 {
            vol.read(e * EXTENT, &mut buf).expect("read");
            assert!(
                buf == pattern(10 + e, EXTENT as usize),
                "{step:?}/{power_cut}: extent {e} differs"
            );
        }
        vol.read(4 * EXTENT, &mut buf).expect("read 4");
        let mut want = vec![0u8; EXTENT as usize];
        want[4096..4096 + 9000].copy_from_slice(&pattern(20, 9000));
        assert!(buf == want, "{step:?}/{power_cut}: extent 4 differs");
        assert_accounting(vol, 24);
    };
    let vol = bed.open();
    check(&vol);
    finish(&bed, vol, Tier::Hdd, &check, &|vol| {
        tierd::migrate::migrate_batch(vol, &batch, Tier::Hdd, &mut |_| {}).expect("migrate again")
    });
}

#[test]
fn batch_crash_after_each_step_as_a_process_kill() {
    every_step(run_batch, false);
}

#[test]
fn batch_crash_after_each_step_as_a_power_cut() {
    every_step(run_batch, true);
}

/// A promotion batch read from the HDD in one read: extents 0, 1, 3 and 4
/// sit in neighbouring HDD slots with extent 2's between them (read through
/// and dropped), while their SSD destinations need not continue each other
/// (each piece is written where it belongs). Interrupted after each step.
fn run_gather(step: Option<MoveStep>, power_cut: bool) {
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    for e in 0..5u64 {
        vol.write(e * EXTENT, &pattern(30 + e, EXTENT as usize), false)
            .expect("write");
    }
    vol.flush().expect("flush");
    let down: Vec<(u64, Reason)> = (0..5).map(|e| (e, Reason::Manual)).collect();
    tierd::migrate::migrate_batch(&vol, &down, Tier::Hdd, &mut |_| {}).expect("demote");
    let hdd_slot = |v: &Volume, e: u64| v.loc_of(e).map(|l| (l.tier, l.slot));
    let first = hdd_slot(&vol, 0).expect("mapped").1;
    for e in 0..5u64 {
        assert_eq!(
            hdd_slot(&vol, e),
            Some((Tier::Hdd, first + e as u32)),
            "extent {e}"
        );
    }
    // New data takes SSD slots among those the demoted extents left, and
    // the middle one leaves again: the free SSD slots have a hole.
    for e in [6u64, 7, 8] {
        vol.write(e * EXTENT, &pattern(40 + e, EXTENT as usize), false)
            .expect("write new");
    }
    assert!(matches!(migrate(&vol, 7, Tier::Hdd), MoveOutcome::Moved(_)));
    vol.flush().expect("flush");
    let up: Vec<(u64, Reason)> = [0u64, 1, 3, 4].iter().map(|&e| (e, Reason::Near)).collect();
    let done = |vol: &Volume| {
        let dst: Vec<u32> = [0u64, 1, 3, 4]
            .iter()
            .map(|&e| vol.loc_of(e).expect("mapped").slot)
            .collect();
        assert!(
            dst.windows(2).any(|w| w[1] != w[0] + 1),
            "the destinations continue each other ({dst:?}): the test shows no gather"
        );
    };
    let check = |vol: &Volume| {
        let mut buf = vec![0u8; EXTENT as usize];
        for e in 0..5u64 {
            vol.read(e * EXTENT, &mut buf).expect("read");
            assert!(
                buf == pattern(30 + e, EXTENT as usize),
                "{step:?}/{power_cut}: extent {e} differs"
            );
        }
        for e in [6u64, 7, 8] {
            vol.read(e * EXTENT, &mut buf).expect("read new");
            assert!(
                buf == pattern(40 + e, EXTENT as usize),
                "{step:?}/{power_cut}: extent {e} differs"
            );
        }
        assert_accounting(vol, 24);
    };
    let ops = HddOps::Reads;
    interrupted_batch(
        &bed,
        vol,
        &up,
        Tier::Ssd,
        step,
        power_cut,
        ops,
        &done,
        &check,
    );
}

#[test]
fn gathered_promotion_crash_after_each_step_as_a_process_kill() {
    every_step(run_gather, false);
}

#[test]
fn gathered_promotion_crash_after_each_step_as_a_power_cut() {
    every_step(run_gather, true);
}

/// A demotion batch whose SSD sources do not continue each other (extents
/// 0, 2 and 4 of six in neighbouring SSD slots) into HDD slots that do: one
/// HDD write for the three. Interrupted after each step.
fn run_scatter(step: Option<MoveStep>, power_cut: bool) {
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    for e in 0..6u64 {
        vol.write(e * EXTENT, &pattern(50 + e, EXTENT as usize), false)
            .expect("write");
    }
    vol.flush().expect("flush");
    let down: Vec<(u64, Reason)> = [0u64, 2, 4].iter().map(|&e| (e, Reason::Idle)).collect();
    let done = |vol: &Volume| {
        let dst: Vec<u32> = [0u64, 2, 4]
            .iter()
            .map(|&e| vol.loc_of(e).expect("mapped").slot)
            .collect();
        assert!(dst.windows(2).all(|w| w[1] == w[0] + 1), "{dst:?}");
    };
    let check = |vol: &Volume| {
        let mut buf = vec![0u8; EXTENT as usize];
        for e in 0..6u64 {
            vol.read(e * EXTENT, &mut buf).expect("read");
            assert!(
                buf == pattern(50 + e, EXTENT as usize),
                "{step:?}/{power_cut}: extent {e} differs"
            );
        }
        assert_accounting(vol, 24);
    };
    let ops = HddOps::Writes;
    interrupted_batch(
        &bed,
        vol,
        &down,
        Tier::Hdd,
        step,
        power_cut,
        ops,
        &done,
        &check,
    );
}

#[test]
fn scattered_demotion_crash_after_each_step_as_a_process_kill() {
    every_step(run_scatter, false);
}

#[test]
fn scattered_demotion_crash_after_each_step_as_a_power_cut() {
    every_step(run_scatter, true);
}

/// A demotion batch of four SSD extents whose shadows neighbour each other,
/// each with a stale block: their copies into the shadows go in one HDD
/// write (each extent's stale block with the clean rest of it). Interrupted
/// after each step; an unclean stop drops the shadows, so finishing copies
/// the extents whole to new slots.
fn run_shadow_group(step: Option<MoveStep>, power_cut: bool) {
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    let all: Vec<(u64, Reason)> = (0..4u64).map(|e| (e, Reason::Manual)).collect();
    let mut model = vec![0u8; 4 * EXTENT as usize];
    for e in 0..4u64 {
        let data = pattern(60 + e, EXTENT as usize);
        vol.write(e * EXTENT, &data, false).expect("write");
        model[(e * EXTENT) as usize..((e + 1) * EXTENT) as usize].copy_from_slice(&data);
    }
    // Down (into new HDD slots, in order) and up again: shadows.
    for to in [Tier::Hdd, Tier::Ssd] {
        let out = tierd::migrate::migrate_batch(&vol, &all, to, &mut |_| {}).expect("move");
        assert!(
            out.iter().all(|(_, o)| matches!(o, MoveOutcome::Moved(_))),
            "{out:?}"
        );
    }
    let shadows: Vec<u32> = (0..4u64)
        .map(|e| {
            vol.mapping(e)
                .expect("mapped")
                .shadow
                .expect("a shadow")
                .slot
        })
        .collect();
    assert!(shadows.windows(2).all(|w| w[1] == w[0] + 1), "{shadows:?}");
    for e in 0..4u64 {
        let at = e * EXTENT + (e + 3) * 4096;
        let data = pattern(70 + e, 4096);
        vol.write(at, &data, false).expect("write a stale block");
        model[at as usize..at as usize + 4096].copy_from_slice(&data);
    }
    vol.flush().expect("flush");
    let check = |vol: &Volume| {
        let mut buf = vec![0u8; 4 * EXTENT as usize];
        vol.read(0, &mut buf).expect("read");
        assert!(buf == model, "{step:?}/{power_cut}: the extents differ");
        assert_accounting(vol, 24);
    };
    let ops = HddOps::Writes;
    interrupted_batch(
        &bed,
        vol,
        &all,
        Tier::Hdd,
        step,
        power_cut,
        ops,
        &|_| {},
        &check,
    );
}

#[test]
fn shadow_group_demotion_crash_after_each_step_as_a_process_kill() {
    every_step(run_shadow_group, false);
}

#[test]
fn shadow_group_demotion_crash_after_each_step_as_a_power_cut() {
    every_step(run_shadow_group, true);
}
