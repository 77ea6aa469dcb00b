//! Power loss in process: a volume on in-memory devices with the power-cut
//! model (`MemDevice::with_power_model`, `MemStore::power_cut`) runs a
//! seeded random workload — writes, FUA writes, trims, zeroing, flushes,
//! reads, heat and migration rounds on a manual clock, and now and then a
//! migration stopped after one step of its copy protocol — and the power is
//! cut at a random point. After each cut the volume reopens and every block
//! must hold its last flushed value or a value written after that flush;
//! slot accounting must be whole.

mod durability_model;
mod support;

use rand::{Rng, SeedableRng};
use tierd::units::Reason;
use tierd::volume::{MoveStep, Tier, Volume};

use durability_model::{block_bytes, block_id, Model, BLOCK};
use support::{assert_accounting, heat_up, Bed, EXTENT};

const SSD_SLOTS: u64 = 16;
const HDD_SLOTS: u64 = 64;
const RESERVE: u64 = 4;
const EXTENTS: u64 = SSD_SLOTS + HDD_SLOTS - RESERVE;
const BPE: u64 = EXTENT / BLOCK;
const BLOCKS: u64 = EXTENTS * BPE;

#[derive(Default, Debug)]
struct Figures {
    cuts: u64,
    ops: u64,
    moved: usize,
    stopped_moves: u64,
    blocks_checked: u64,
    lost_unflushed: u64,
}

fn check_all(vol: &Volume, model: &mut Model, fig: &mut Figures, cut: u64, seed: u64) {
    let mut buf = vec![0u8; EXTENT as usize];
    for e in 0..EXTENTS {
        vol.read(e * EXTENT, &mut buf)
            .unwrap_or_else(|err| panic!("seed {seed} cut {cut}: reading extent {e}: {err}"));
        for (k, chunk) in buf.chunks_exact(BLOCK as usize).enumerate() {
            let b = e * BPE + k as u64;
            let allowed = model.allowed(b);
            match block_id(b, chunk) {
                Some(id) if allowed.contains(&id) => {
                    if model.pending.contains_key(&b) && Some(&id) != allowed.last() {
                        fig.lost_unflushed += 1;
                    }
                    model.durable_now(b, id);
                }
                got => panic!(
                    "seed {seed} cut {cut}: block {b} (extent {e}) holds {got:?} (None: no write's bytes); allowed {allowed:?}"
                ),
            }
            fig.blocks_checked += 1;
        }
    }
}

fn run(seed: u64, cuts: u64) -> Figures {
    let bed = Bed::new(SSD_SLOTS, HDD_SLOTS, RESERVE);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut model = Model::default();
    let mut fig = Figures::default();
    let mut next_id = 1u64;
    let mut buf = vec![0u8; 8 * BLOCK as usize];
    for cut in 0..cuts {
        let vol = bed.open();
        let m = bed.migrator(&vol);
        let ops = rng.gen_range(10..150);
        for _ in 0..ops {
            fig.ops += 1;
            let b = rng.gen_range(0..BLOCKS);
            match rng.gen_range(0..100) {
                0..=39 => {
                    let n = rng.gen_range(1..=8u64).min(BLOCKS - b);
                    let fua = rng.gen_bool(0.1);
                    let id = next_id;
                    next_id += 1;
                    let data = &mut buf[..(n * BLOCK) as usize];
                    for k in 0..n {
                        let s = (k * BLOCK) as usize;
                        block_bytes(id, b + k, &mut data[s..s + BLOCK as usize]);
                        model.wrote(b + k, id);
                    }
                    vol.write(b * BLOCK, data, fua).expect("write");
                    if fua {
                        for k in 0..n {
                            model.durable_now(b + k, id);
                        }
                    }
                }
                40..=47 => {
                    let whole = rng.gen_bool(0.4);
                    let (start, n) = if whole {
                        (b / BPE * BPE, BPE)
                    } else {
                        (b, rng.gen_range(1..=8u64).min(BLOCKS - b))
                    };
                    let zero = rng.gen_bool(0.3);
                    let fua = rng.gen_bool(0.1);
                    for k in start..start + n {
                        model.wrote(k, 0);
                    }
                    vol.discard(
                        start * BLOCK,
                        n * BLOCK,
                        zero,
                        zero && rng.gen_bool(0.5),
                        fua,
                    )
                    .expect("discard");
                    if fua {
                        for k in start..start + n {
                            model.durable_now(k, 0);
                        }
                    }
                }
                48..=55 => {
                    vol.flush().expect("flush");
                    model.flushed();
                }
                56..=63 => {
                    // Heat an extent and let the migrator act on it.
                    let e = b / BPE;
                    heat_up(&vol, e, rng.gen_range(1..4));
                    fig.moved += bed.round(&m, rng.gen_range(0..5)).moved;
                }
                64..=67 => {
                    // A migration cut short after one step of the copy
                    // protocol, as by a crash (the cut follows at once).
                    let e = b / BPE;
                    let to = match vol.mapping(e).map(|m| m.loc.tier) {
                        Some(Tier::Ssd) => Tier::Hdd,
                        _ => Tier::Ssd,
                    };
                    let steps = [
                        MoveStep::Allocated,
                        MoveStep::Copied,
                        MoveStep::Synced,
                        MoveStep::Committed,
                        MoveStep::Flushed,
                    ];
                    let step = steps[rng.gen_range(0..steps.len())];
                    tierd::migrate::arm_crash_after(step);
                    let _ =
                        tierd::migrate::migrate_extent(&vol, e, to, Reason::Manual, &mut |_| {});
                    fig.stopped_moves += 1;
                    break;
                }
                68..=71 => {
                    fig.moved += bed.round(&m, rng.gen_range(1..20)).moved;
                }
                _ => {
                    let n = rng.gen_range(1..=8u64).min(BLOCKS - b);
                    let data = &mut buf[..(n * BLOCK) as usize];
                    vol.read(b * BLOCK, data).expect("read");
                    for k in 0..n {
                        let s = (k * BLOCK) as usize;
                        let want = model.current(b + k);
                        assert_eq!(
                            block_id(b + k, &data[s..s + BLOCK as usize]),
                            Some(want),
                            "seed {seed} cut {cut}: live read of block {} misses its last write",
                            b + k
                        );
                    }
                }
            }
        }
        drop(m);
        drop(vol);
        bed.power_cut();
        fig.cuts += 1;
        let vol = bed.open();
        check_all(&vol, &mut model, &mut fig, cut, seed);
        assert_accounting(&vol, SSD_SLOTS + HDD_SLOTS);
    }
    fig
}

#[test]
fn power_cuts_at_random_points_keep_flushed_data() {
    let seeds: u64 = std::env::var("TIERD_POWER_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(16);
    let mut total = Figures::default();
    for seed in 1..=seeds {
        let f = run(seed, 40);
        total.cuts += f.cuts;
        total.ops += f.ops;
        total.moved += f.moved;
        total.stopped_moves += f.stopped_moves;
        total.blocks_checked += f.blocks_checked;
        total.lost_unflushed += f.lost_unflushed;
    }
    eprintln!("power loss: {total:?}");
    assert_eq!(total.cuts, seeds * 40);
    assert!(total.moved > 0, "no migration ran: {total:?}");
    assert!(
        total.stopped_moves > 0,
        "no migration was cut short: {total:?}"
    );
    assert!(
        total.lost_unflushed > 0,
        "no unflushed write was ever lost: the power model is not exercised: {total:?}"
    );
}
