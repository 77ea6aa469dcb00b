//! Model-based test of the mapping states of the write log and the clean
//! shadows, with restarts: seeded random writes (partial blocks, long
//! streams, inline), reads, trims, zeroes and flushes, mixed with
//! promotions, demotions, batches, write-backs, dropped shadows,
//! pre-cleans (SSD extents given an HDD copy), pins,
//! migrator rounds and restarts of every kind: a clean close, a drop
//! without a flush (a process kill: the memory devices and store keep
//! everything), and a flush followed by a power cut. Odd seeds keep to two
//! thirds of the volume (shadows are kept), even seeds use all of it
//! (shadows must give way). After every step the
//! whole volume reads exactly as a flat byte model says, slot accounting
//! is whole, and every mapping is well formed (logged blocks only on HDD
//! extents, written and in order; shadows only on SSD extents). Across a
//! clean close the mappings are unchanged; across an unclean stop only the
//! shadows go.

mod support;

use rand::{Rng, SeedableRng};
use support::*;
use tierd::units::{IoHint, Reason};
use tierd::volume::{Mapping, MoveOutcome, Stats, Tier, Volume};

const SSD: u64 = 8;
const HDD: u64 = 16;
const RESERVE: u64 = 2;
const SLOTS: u64 = SSD + HDD;
const BLK: u64 = 4096;

#[derive(Default, Debug)]
struct Figures {
    steps: u64,
    log_writes: u64,
    log_full: u64,
    written_back_blocks: u64,
    promotions_with_shadow: u64,
    free_demotions: u64,
    shadow_saved_blocks: u64,
    shadows_dropped: u64,
    precleaned: u64,
    moves: u64,
    closes: u64,
    kills: u64,
    power_cuts: u64,
    shadows_at_close: u64,
    logged_at_restart: u64,
}

impl Figures {
    /// Add the counters of a volume about to be dropped.
    fn take(&mut self, vol: &Volume) {
        let s = vol.stats();
        self.log_writes += Stats::get(&s.log_writes);
        self.log_full += Stats::get(&s.log_full);
        self.written_back_blocks += Stats::get(&s.written_back_blocks);
        self.free_demotions += Stats::get(&s.free_demotions);
        self.shadow_saved_blocks += Stats::get(&s.shadow_saved_blocks);
        self.shadows_dropped += Stats::get(&s.shadows_dropped);
        self.precleaned += Stats::get(&s.precleaned);
    }
}

/// A range biased towards sector, block and extent boundaries, at most 3
/// extents.
fn range(rng: &mut impl Rng, size: u64) -> (u64, u64) {
    // Sector-aligned ranges too (as recorded block traces write): parts
    // of blocks the write log takes by their sectors.
    let sectors = rng.gen_bool(0.25);
    let offset = match rng.gen_range(0..3) {
        0 if sectors => rng.gen_range(0..size / 512) * 512,
        0 => rng.gen_range(0..size),
        1 => rng.gen_range(0..size / BLK) * BLK,
        _ => rng.gen_range(0..size / EXTENT) * EXTENT,
    };
    let max = (size - offset).min(3 * EXTENT);
    let len = match rng.gen_range(0..3) {
        0 => rng.gen_range(1..=max.min(9000)),
        1 => rng.gen_range(1..=max),
        _ => (max / BLK).max(1).min(rng.gen_range(1..=20)) * BLK,
    };
    let len = len.min(max).max(1);
    if sectors && len >= 512 {
        return (offset, len / 512 * 512);
    }
    (offset, len)
}

fn mappings(vol: &Volume, extents: u64) -> Vec<Option<Mapping>> {
    (0..extents).map(|e| vol.mapping(e)).collect()
}

fn check_invariants(vol: &Volume, extents: u64, what: &str) {
    assert_accounting(vol, SLOTS);
    let blocks = vol.geometry().blocks_per_extent();
    let mut logged = 0u64;
    // What the volume's kept counts must say, counted here by a scan.
    let (mut mapped, mut shadows, mut clean, mut stale) = ([0u64; 2], 0u64, 0u64, 0u64);
    for e in 0..extents {
        let Some(m) = vol.mapping(e) else { continue };
        mapped[m.loc.tier.index()] += 1;
        if let Some(s) = &m.shadow {
            shadows += 1;
            for b in (0..blocks).filter(|b| m.written.get(*b)) {
                if s.stale.get(b) {
                    stale += 1;
                } else {
                    clean += 1;
                }
            }
        }
        if !m.logged.is_empty() {
            assert_eq!(
                m.loc.tier,
                Tier::Hdd,
                "{what}: extent {e} logged on the SSD"
            );
        }
        if m.shadow.is_some() {
            assert_eq!(
                m.loc.tier,
                Tier::Ssd,
                "{what}: extent {e} shadowed on the HDD"
            );
        }
        assert!(
            m.logged.windows(2).all(|w| w[0].block < w[1].block),
            "{what}: extent {e}: logged blocks out of order: {m:?}"
        );
        for l in &m.logged {
            assert!(
                l.block < blocks && m.written.get(l.block),
                "{what}: extent {e}: logged block {} not written",
                l.block
            );
        }
        logged += m.logged.len() as u64;
    }
    let u = vol.usage();
    assert_eq!(u.logged_blocks, logged, "{what}: {u:?}");
    assert_eq!(u.mapped, mapped, "{what}: {u:?}");
    assert_eq!(
        (u.shadows, u.shadow_clean_blocks, u.shadow_stale_blocks),
        (shadows, clean, stale),
        "{what}: {u:?}"
    );
    assert!(u.log.segments <= u.log.cap, "{what}: {u:?}");
    assert!(u.log.used <= u.log.places, "{what}: {u:?}");
}

fn run(seed: u64, steps: u64) -> Figures {
    let bed = Bed::new(SSD, HDD, RESERVE);
    let mut vol = bed.open();
    let size = vol.size();
    let extents = size / EXTENT;
    assert_eq!(extents, SSD + HDD - RESERVE);
    let mut model = vec![0u8; size as usize];
    // Odd seeds work in two thirds of the volume: the HDD keeps room to
    // spare, so promotions keep shadows; even seeds fill it all, so
    // shadows must give way.
    let area = if seed % 2 == 1 {
        extents * 2 / 3
    } else {
        extents
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut fig = Figures::default();
    let mut m = bed.migrator(&vol);
    let long = IoHint {
        seq_run: 4 * EXTENT + 1,
    };
    for step in 0..steps {
        let what = format!("seed {seed} step {step}");
        let (offset, len) = range(&mut rng, area * EXTENT);
        let (o, l) = (offset as usize, len as usize);
        let e = rng.gen_range(0..area);
        match rng.gen_range(0..100) {
            0..=29 => {
                let data: Vec<u8> = (0..len).map(|_| rng.gen::<u8>() | 1).collect();
                let hint = if rng.gen_bool(0.1) {
                    long
                } else {
                    IoHint::default()
                };
                let inline = rng
                    .gen_bool(0.2)
                    .then(|| vol.write_nowait(offset, &data, hint))
                    .flatten();
                match inline {
                    Some(r) => r.unwrap_or_else(|err| panic!("{what}: inline write: {err}")),
                    None => vol
                        .write_hinted(offset, &data, rng.gen_bool(0.05), hint)
                        .unwrap_or_else(|err| panic!("{what}: write {offset}+{len}: {err}")),
                }
                model[o..o + l].copy_from_slice(&data);
            }
            30..=39 => {
                let mut buf = vec![0xAAu8; l];
                if rng.gen_bool(0.5) {
                    vol.read(offset, &mut buf).expect("read");
                } else {
                    vol.read_nowait(offset, &mut buf, IoHint::default())
                        .expect("memory devices never wait")
                        .expect("read");
                }
                assert!(
                    buf == model[o..o + l],
                    "{what}: read {offset}+{len} differs"
                );
            }
            40..=44 => {
                vol.discard(offset, len, false, false, false).expect("trim");
                let first = offset.div_ceil(BLK) * BLK;
                let end = (offset + len) / BLK * BLK;
                if first < end {
                    model[first as usize..end as usize].fill(0);
                }
            }
            45..=47 => {
                vol.discard(offset, len, true, rng.gen_bool(0.5), false)
                    .expect("zero");
                model[o..o + l].fill(0);
            }
            48..=52 => vol.flush().expect("flush"),
            53..=59 => {
                let promoted = tier_of(&vol, e) == Some(Tier::Hdd);
                let out = migrate(&vol, e, Tier::Ssd);
                if promoted && matches!(out, MoveOutcome::Moved(_)) {
                    fig.moves += 1;
                    if vol.mapping(e).is_some_and(|m| m.shadow.is_some()) {
                        fig.promotions_with_shadow += 1;
                    }
                }
            }
            60..=66 => {
                if matches!(migrate(&vol, e, Tier::Hdd), MoveOutcome::Moved(_)) {
                    fig.moves += 1;
                }
            }
            67..=71 => {
                let logged: Vec<u64> = vol
                    .logged_extents()
                    .into_iter()
                    .map(|(e, _)| e)
                    .take(rng.gen_range(1..=4))
                    .collect();
                if !logged.is_empty() {
                    for (e, o) in write_back(&vol, &logged) {
                        assert!(
                            matches!(o, MoveOutcome::Moved(_)),
                            "{what}: write-back of {e}: {o:?}"
                        );
                        assert!(logged_blocks(&vol, e).is_empty(), "{what}: {e}");
                    }
                }
            }
            72..=74 => {
                let to = if rng.gen_bool(0.5) {
                    Tier::Ssd
                } else {
                    Tier::Hdd
                };
                let first = e.min(area - 3);
                let batch: Vec<(u64, Reason)> =
                    (first..first + 3).map(|e| (e, Reason::Manual)).collect();
                let out = tierd::migrate::migrate_batch(&vol, &batch, to, &mut |_| {})
                    .unwrap_or_else(|err| panic!("{what}: batch: {err}"));
                fig.moves += out
                    .iter()
                    .filter(|(_, o)| matches!(o, MoveOutcome::Moved(_)))
                    .count() as u64;
            }
            75 => {
                vol.drop_shadows(rng.gen_range(1..=3), None)
                    .expect("drop shadows");
            }
            76 => {
                let first = e.min(area - 3);
                let batch: Vec<u64> = (first..first + 3).collect();
                tierd::migrate::preclean_batch(&vol, &batch, &mut |_| {})
                    .unwrap_or_else(|err| panic!("{what}: pre-clean: {err}"));
            }
            77 => {
                // Pins to the HDD (which the write log must bypass) or none.
                let tier = rng.gen_bool(0.5).then_some(Tier::Hdd);
                vol.pin(e * EXTENT, EXTENT, tier).expect("pin");
            }
            78 => vol.set_write_log(rng.gen_bool(0.7)),
            79 => vol.set_shadows(rng.gen_bool(0.7)),
            80..=84 => {
                heat_up(&vol, e, rng.gen_range(1..3));
                let r = bed.round(&m, rng.gen_range(0..5));
                assert_eq!(r.errors, 0, "{what}: {r:?}");
                fig.moves += r.moved as u64;
            }
            85..=91 => {
                let before = mappings(&vol, extents);
                let kind = rng.gen_range(0..3);
                fig.take(&vol);
                fig.logged_at_restart += vol.usage().logged_blocks;
                match kind {
                    0 => {
                        fig.closes += 1;
                        fig.shadows_at_close += vol.usage().shadows;
                        vol.close().expect("close");
                    }
                    1 => fig.kills += 1,
                    _ => {
                        fig.power_cuts += 1;
                        vol.flush().expect("flush");
                    }
                }
                drop(m);
                drop(vol);
                if kind == 2 {
                    bed.power_cut();
                }
                vol = bed.open();
                m = bed.migrator(&vol);
                let after = mappings(&vol, extents);
                let want: Vec<Option<Mapping>> = if kind == 0 {
                    before
                } else {
                    before
                        .into_iter()
                        .map(|m| {
                            m.map(|mut m| {
                                m.shadow = None;
                                m
                            })
                        })
                        .collect()
                };
                assert_eq!(after, want, "{what}: mappings across restart kind {kind}");
            }
            _ => {
                let runs = vol.block_status(offset, len, 16).expect("block status");
                let mut pos = o;
                for r in &runs {
                    if r.zero {
                        assert!(
                            model[pos..pos + r.len as usize].iter().all(|b| *b == 0),
                            "{what}: block status says zero at {pos}"
                        );
                    }
                    pos += r.len as usize;
                }
                assert!(pos <= o + l, "{what}");
            }
        }
        assert_reads(&vol, &model, &what);
        check_invariants(&vol, extents, &what);
        fig.steps += 1;
    }
    fig.take(&vol);
    fig
}

#[test]
fn random_ops_moves_and_restarts_match_the_model() {
    let seeds: u64 = std::env::var("TIERD_MODEL_SEEDS")
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|e| panic!("TIERD_MODEL_SEEDS={v:?}: {e}"))
        })
        .unwrap_or(3);
    let mut total = Figures::default();
    for seed in 1..=seeds {
        let f = run(seed, 1500);
        total.steps += f.steps;
        total.log_writes += f.log_writes;
        total.log_full += f.log_full;
        total.written_back_blocks += f.written_back_blocks;
        total.promotions_with_shadow += f.promotions_with_shadow;
        total.free_demotions += f.free_demotions;
        total.shadow_saved_blocks += f.shadow_saved_blocks;
        total.shadows_dropped += f.shadows_dropped;
        total.precleaned += f.precleaned;
        total.moves += f.moves;
        total.closes += f.closes;
        total.kills += f.kills;
        total.power_cuts += f.power_cuts;
        total.shadows_at_close += f.shadows_at_close;
        total.logged_at_restart += f.logged_at_restart;
    }
    eprintln!("states model: {total:?}");
    // The workload reached every state it is meant to cover.
    assert!(total.log_writes > 0, "{total:?}");
    assert!(total.log_full > 0, "{total:?}");
    assert!(total.written_back_blocks > 0, "{total:?}");
    assert!(total.promotions_with_shadow > 0, "{total:?}");
    assert!(total.shadow_saved_blocks > 0, "{total:?}");
    assert!(total.free_demotions > 0, "{total:?}");
    assert!(total.shadows_dropped > 0, "{total:?}");
    assert!(total.precleaned > 0, "{total:?}");
    assert!(
        total.closes > 0 && total.kills > 0 && total.power_cuts > 0,
        "{total:?}"
    );
    assert!(
        total.shadows_at_close > 0,
        "no shadow lived through a clean close: {total:?}"
    );
    assert!(
        total.logged_at_restart > 0,
        "no logged block lived through a restart: {total:?}"
    );
}
